"""Which replicas may have lost their unflushed tail with their node and not yet said so.

When a node loses power, its node agent and its replica actors all come back on a new Ray
node, in no particular order. The agent's first heartbeat makes the broker live again, but
each replica may have lost records and only its check-in says so (clean or not, how far its
log reaches). Until then the controller must not elect that replica, or a replica that kept
more would truncate to it (KRaft avoids the same by having a broker register with its
clean-shutdown state before it is unfenced, KIP-966).

The rule is order-free: the controller notes the Ray node of each broker's agent (from its
heartbeats) and the node each replica last checked in from (or was created on). A replica is
held back only while both are known and differ: its node restarted after it last spoke.
Plain Python, in memory: a controller restart starts it afresh, and until a replica checks in
again the controller then knows nothing to hold it back for (see the README).
"""

from __future__ import annotations

ReplicaKey = tuple[str, int, int]  # (topic id, partition, broker id)


class NodeRestarts:
    """Agent and replica node ids as last heard, and who may be elected because of them."""

    def __init__(self) -> None:
        self._agent_node: dict[int, str] = {}
        self._replica_node: dict[ReplicaKey, str] = {}

    def agent_seen(self, broker_id: int, node_id: str | None) -> bool:
        """A heartbeat from ``broker_id``'s agent on ``node_id``; True when the agent moved
        to another node since the last one (its node restarted)."""
        if node_id is None:
            return False
        previous = self._agent_node.get(broker_id)
        self._agent_node[broker_id] = node_id
        return previous is not None and previous != node_id

    def replica_seen(self, key: ReplicaKey, node_id: str | None) -> None:
        """The replica checked in from ``node_id``."""
        if node_id is not None:
            self._replica_node[key] = node_id

    def replica_created(self, key: ReplicaKey) -> None:
        """The replica is being created with an empty log by its broker's current agent."""
        node = self._agent_node.get(key[2])
        if node is not None:
            self._replica_node[key] = node

    def forget_topic(self, topic_id: str) -> None:
        for key in [k for k in self._replica_node if k[0] == topic_id]:
            del self._replica_node[key]

    def may_elect(self, key: ReplicaKey) -> bool:
        """False while the replica's node restarted after it last checked in."""
        agent = self._agent_node.get(key[2])
        replica = self._replica_node.get(key)
        return agent is None or replica is None or replica == agent
