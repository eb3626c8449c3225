"""A replica whose node restarted is not elected until it has checked in from the new node,
whatever order the node's agent and the replica come back in, and across a controller
restart (the nodes are in the metadata log). No Ray."""

from __future__ import annotations

from rafka.cluster import controller as decisions
from rafka.cluster.metadata import MetadataImage, PartitionState
from rafka.cluster.node_restarts import (
    FIRST,
    MOVED,
    SAME,
    broker_seen_on,
    may_elect,
    replicas_seen_on,
)

KEY = ("t", 0, 1)


class Image:
    """A metadata image with one topic whose partition 0 lives on brokers 1 and 2, fed the
    records the decisions return, as the controller appends them."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0
        self.apply([{"type": "topic", "topic_id": "t", "name": "a", "config": {},
                     "internal": False},
                    PartitionState(0, [1, 2], [1, 2], 1, 0).to_record("t")])  # fmt: skip

    def apply(self, records) -> None:
        for record in records:
            self.image.apply(record, self.offset)
            self.offset += 1

    def seen(self, broker: int, node: str) -> str:
        kind, records = broker_seen_on(self.image, broker, node)
        self.apply(records)
        return kind

    def check_in(self, key, node: str) -> None:
        self.apply(decisions.start_replica(self.image, *key, node)[1])

    def replayed(self) -> MetadataImage:
        image = MetadataImage()
        for i, record in enumerate(self.image.to_records()):
            image.apply(record, i)
        return image


def test_a_replica_is_not_elected_between_its_agents_return_and_its_check_in():
    """The agent's heartbeat from a new node comes first: the replica waits for its own."""
    m = Image()
    assert m.seen(1, "node-a") == FIRST and may_elect(m.image, KEY)
    assert m.seen(1, "node-a") == SAME
    assert m.seen(1, "node-b") == MOVED and not may_elect(m.image, KEY)
    m.check_in(KEY, "node-b")
    assert may_elect(m.image, KEY)


def test_a_check_in_from_a_new_node_moves_the_broker_and_holds_its_other_replicas():
    """The replica first: its check-in says the broker moved, so its siblings wait."""
    m = Image()
    m.apply([PartitionState(1, [1, 2], [1, 2], 1, 0).to_record("t")])
    m.seen(1, "node-a")
    assert m.seen(1, "node-b") == MOVED  # what the controller does for the check-in
    m.check_in(KEY, "node-b")
    assert may_elect(m.image, KEY) and not may_elect(m.image, ("t", 1, 1))
    assert m.seen(1, "node-b") == SAME  # the agent's heartbeat then changes nothing


def test_the_hold_survives_a_controller_restart():
    """A controller rebuilt from the log still holds a replica whose node moved."""
    m = Image()
    m.seen(1, "node-a")
    m.seen(1, "node-b")
    replayed = m.replayed()
    assert not may_elect(replayed, KEY)
    assert replayed.broker_nodes == m.image.broker_nodes
    assert replayed.replica_nodes == m.image.replica_nodes


def test_replicas_found_running_on_the_agents_node_may_be_elected():
    """A replica created with an empty log (or found running after its check-in) on the new
    node is recorded there."""
    m = Image()
    m.seen(1, "node-a")
    m.seen(1, "node-b")
    m.apply(replicas_seen_on(m.image, "node-b", [KEY]))
    assert may_elect(m.image, KEY)
    assert replicas_seen_on(m.image, "node-b", [KEY]) == []  # nothing new to record


def test_brokers_never_seen_on_a_node_are_not_held_back():
    """Before any heartbeat names a node, liveness alone decides."""
    assert may_elect(Image().image, KEY)
