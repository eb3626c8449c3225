"""Which replicas may have lost their unflushed tail with their node and not yet said so.

When a node loses power, its node agent and its replica actors all come back on a new Ray
node, in no particular order. The agent's heartbeat makes the broker live again, but each
replica may have lost records, and only its check-in says so (clean or not, how far its log
reaches). Until then the controller must not elect that replica, or a replica that kept more
would truncate to it. KRaft does the same by fencing a broker that registers after an
unclean shutdown until it has caught up (KIP-966).

The rule, order-free and durable (the metadata log records both nodes, so a controller
restart forgets nothing): each broker's agent runs on a Ray node, and each replica was last
seen on one (at its check-in, or running with its log when its agent created or found it).
A replica may be elected only when it was last seen on its agent's node. When a broker shows
up on a new node (its agent's heartbeat, or one of its replicas' check-ins, whichever comes
first), the controller records the node and fences the broker's replicas: they leave every
ISR and are not elected until each checks in from the new node. Plain Python, no I/O: the
Controller appends the records these functions return.
"""

from __future__ import annotations

from typing import Any, Iterable

from rafka.cluster.metadata import MetadataImage

Records = list[dict[str, Any]]
ReplicaKey = tuple[str, int, int]  # (topic id, partition, broker id)

SAME = "same"  #: the broker is where it was
FIRST = "first"  #: the first node ever recorded for the broker
MOVED = "moved"  #: the broker is on another node: its node restarted


def may_elect(image: MetadataImage, key: ReplicaKey) -> bool:
    """False while the replica's broker is on a node the replica has not been seen on."""
    node = image.broker_nodes.get(key[2])
    return node is None or image.replica_nodes.get(key) == node


def broker_seen_on(image: MetadataImage, broker_id: int, node: str) -> tuple[str, Records]:
    """The broker's agent (or one of its replicas) runs on ``node``: SAME, FIRST or MOVED,
    and the records to append. The first node recorded for a broker also records its
    replicas there: they were running before any node was known (created by an earlier
    version, or the broker's first start)."""
    known = image.broker_nodes.get(broker_id)
    if known == node:
        return SAME, []
    records: Records = [{"type": "broker_node", "broker_id": broker_id, "node": node}]
    if known is not None:
        return MOVED, records
    hosted = [[t.topic_id, p.partition, broker_id] for t, p in image.replicas_on(broker_id)]
    if hosted:
        records.append({"type": "replica_nodes", "node": node, "replicas": hosted})
    return FIRST, records


def replicas_seen_on(image: MetadataImage, node: str, keys: Iterable[ReplicaKey]) -> Records:
    """Replicas found running with their logs on ``node`` (created there, or already checked
    in: a replica still waiting to check in is never reported here); only the ones not
    already recorded there, and of topics that still exist (one may have been deleted while
    its replicas were being created)."""
    replicas = [
        list(k) for k in keys if k[0] in image.topics and image.replica_nodes.get(k) != node
    ]
    return [{"type": "replica_nodes", "node": node, "replicas": replicas}] if replicas else []
