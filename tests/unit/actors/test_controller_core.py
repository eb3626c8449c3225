"""A broker whose node restarted (it may have lost power) is not elected for a partition
until its replica of it has checked in from the new node: it may have lost its unflushed
tail, and only its check-in says so. Runs the controller's shared state without Ray."""

from __future__ import annotations

import logging

from rafka.actors.controller_core import ControllerCore
from rafka.cluster import controller as decisions
from rafka.cluster import elections, node_restarts
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import MetadataImage, PartitionState


class Store:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 2
        self.image.apply({"type": "topic", "topic_id": "t", "name": "a", "config": {},
                          "internal": False}, 0)  # fmt: skip
        self.image.apply(PartitionState(0, [1, 2, 3], [1], -1, 4, 9, [], [], [2]).to_record("t"), 1)

    def apply(self, records) -> None:
        for record in records:
            self.image.apply(record, self.offset)
            self.offset += 1


def core() -> ControllerCore:
    liveness = BrokerLiveness()
    liveness.track([1, 2, 3], 0)
    c = ControllerCore(Store(), {}, "ns", liveness, logging.getLogger("test"))
    c.heard.update({1, 2, 3})
    return c


def seen(c: ControllerCore, broker: int, node: str) -> None:
    c.store.apply(node_restarts.broker_seen_on(c.image, broker, node)[1])


def test_a_restarted_broker_is_not_elected_before_its_replica_checks_in():
    """Brokers 1 and 2 lost power: their agents' first heartbeats from new nodes must not
    make broker 1 the clean leader before either replica has reported."""
    c = core()
    for broker in (1, 2):
        seen(c, broker, f"old-{broker}")
        seen(c, broker, f"new-{broker}")
    p = c.image.topics["t"].partitions[0]
    assert c.electable("t", 0) == {3}
    assert elections.elect_if_leaderless(p, c.electable("t", 0), unclean=False,
                                         min_isr=2) is None  # fmt: skip
    c.store.apply(decisions.start_replica(c.image, "t", 0, 2, "new-2")[1])
    assert c.electable("t", 0) == {2, 3}


def test_a_broker_not_heard_since_the_controller_started_is_not_elected():
    """A new controller counts every broker live, but one it has not heard may be on a node
    it has not reported yet."""
    c = core()
    c.heard.discard(1)
    assert c.electable("t", 0) == {2, 3}
