"""A replica whose node restarted is not elected until it has checked in from the new node,
whatever order the node's agent and the replica come back in (no Ray)."""

from __future__ import annotations

from rafka.cluster.node_restarts import NodeRestarts

KEY = ("t", 0, 1)


def test_a_replica_is_not_elected_between_its_agents_return_and_its_check_in():
    """The agent's first heartbeat from a new node comes first: the replica waits."""
    n = NodeRestarts()
    assert not n.agent_seen(1, "node-a")
    n.replica_created(KEY)
    assert n.may_elect(KEY)
    assert n.agent_seen(1, "node-b")
    assert not n.may_elect(KEY)
    n.replica_seen(KEY, "node-b")
    assert n.may_elect(KEY)


def test_a_replica_that_checks_in_before_its_agent_is_heard_is_elected_once_it_is():
    """The other order: the check-in from the new node counts as soon as the agent is there."""
    n = NodeRestarts()
    n.agent_seen(1, "node-a")
    n.replica_seen(KEY, "node-b")
    assert not n.may_elect(KEY)  # the controller still places the agent on the old node
    n.agent_seen(1, "node-b")
    assert n.may_elect(KEY)


def test_a_replica_created_on_the_agents_node_may_be_elected():
    """A new replica has an empty log: nothing to lose."""
    n = NodeRestarts()
    n.agent_seen(1, "node-a")
    n.agent_seen(1, "node-b")
    n.replica_created(KEY)
    assert n.may_elect(KEY)


def test_replicas_never_heard_from_are_not_held_back():
    """After a controller restart nothing is known yet: liveness alone decides."""
    n = NodeRestarts()
    assert n.may_elect(KEY)
    n.agent_seen(1, "node-a")
    n.agent_seen(1, "node-b")
    assert n.may_elect(KEY)
