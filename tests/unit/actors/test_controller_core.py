"""A broker whose node agent restarted (its node may have lost power) is not elected for a
partition until its replica of it has spoken: it may have lost its unflushed tail, and only
its check-in says so. Runs the controller's shared state without Ray."""

from __future__ import annotations

import logging

from rafka.actors.controller_core import ControllerCore
from rafka.cluster import elections
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import MetadataImage, PartitionState


class Store:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.image.apply({"type": "topic", "topic_id": "t", "name": "a", "config": {},
                          "internal": False}, 0)  # fmt: skip
        self.image.apply(PartitionState(0, [1, 2, 3], [1], -1, 4, 9, [], [], [2]).to_record("t"), 1)


def core() -> ControllerCore:
    liveness = BrokerLiveness()
    liveness.track([1, 2, 3], 0)
    return ControllerCore(Store(), {}, "ns", liveness, logging.getLogger("test"))


def test_a_restarted_broker_is_not_elected_before_its_replica_checks_in():
    """Broker 1 lost power with 2: its agent's first heartbeat must not make it the clean
    leader ahead of replica 2, which kept more and has not reported yet."""
    c = core()
    for broker in (1, 2):
        assert not c.agent_started(broker, "first-life")  # first sight: nothing to compare
        assert c.agent_started(broker, "second-life")
    p = c.image.topics["t"].partitions[0]
    assert c.electable("t", 0) == {3}
    assert elections.elect_if_leaderless(p, c.electable("t", 0), unclean=False,
                                         min_isr=2) is None  # fmt: skip


def test_a_replica_that_speaks_again_may_be_elected():
    """The check-in (or a state pull from a replica that never stopped) lifts the wait."""
    c = core()
    c.agent_started(1, "a")
    c.agent_started(1, "b")
    c.awaiting_check_in.discard(("t", 0, 1))
    assert c.electable("t", 0) == {1, 2, 3}
