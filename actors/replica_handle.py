"""How every caller reaches a replica: its host actor, plus the replica's topic id and partition.

A replica lives in a ``ReplicaHost`` actor (``rafka.cluster.hosting`` says which); whether
that host holds one replica or a thousand, a call to a replica is the host's method of the
same name with the topic id and partition first. ``ReplicaHandle`` makes that the only path:
``handle.produce.remote(batch, ...)`` is ``host.produce.remote(topic_id, partition, batch,
...)``, so clients, followers, coordinators, Spark exports and the controller call replicas
as if each were an actor of its own.
"""

from __future__ import annotations

from typing import Any

import ray

from rafka.cluster.hosting import NO_HOST, host_name

#: The replica methods a host serves (``ReplicaHost``'s per-replica methods).
REPLICA_METHODS = frozenset({
    "produce", "fetch", "fetch_committed", "write_marker", "describe_producers", "replicate",
    "export_block", "list_offset", "describe", "update_state", "confirm_replica_epoch",
    "maintain_now", "close", "delete",
})  # fmt: skip


class _ReplicaMethod:
    __slots__ = ("_method", "_topic_id", "_partition")

    def __init__(self, method, topic_id: str, partition: int) -> None:
        self._method, self._topic_id, self._partition = method, topic_id, partition

    def remote(self, *args: Any):
        return self._method.remote(self._topic_id, self._partition, *args)


class ReplicaHandle:
    """One replica: ``host`` (a Ray actor handle), ``topic_id`` and ``partition``. Equal
    handles reach the same replica through the same host actor."""

    __slots__ = ("host", "topic_id", "partition")

    def __init__(self, host, topic_id: str, partition: int) -> None:
        self.host = host
        self.topic_id = topic_id
        self.partition = partition

    def __getattr__(self, method: str) -> _ReplicaMethod:
        if method not in REPLICA_METHODS:
            raise AttributeError(f"a partition replica has no method {method!r}")
        return _ReplicaMethod(getattr(self.host, method), self.topic_id, self.partition)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaHandle) and (
            (self.host, self.topic_id, self.partition)
            == (other.host, other.topic_id, other.partition)
        )

    def __hash__(self) -> int:
        return hash((self.topic_id, self.partition))

    def __reduce__(self):
        return (ReplicaHandle, (self.host, self.topic_id, self.partition))

    def __repr__(self) -> str:
        return f"ReplicaHandle({self.topic_id}-{self.partition} in {self.host!r})"


def find_host(broker_id: int, slot: int, namespace: str):
    """The host actor of ``slot`` on ``broker_id``; None when it does not run (yet)."""
    if slot == NO_HOST:
        return None
    try:
        return ray.get_actor(host_name(broker_id, slot), namespace=namespace)
    except ValueError:
        return None


def find_replica(
    topic_id: str, partition: int, broker_id: int, slot: int, namespace: str
) -> ReplicaHandle | None:
    """The replica of ``partition`` on ``broker_id`` in host ``slot``; None when that host
    does not run (the replica is starting, or its disk's node is down)."""
    host = find_host(broker_id, slot, namespace)
    return None if host is None else ReplicaHandle(host, topic_id, partition)


def leader_host(described: dict) -> int:
    """The host slot of a described partition's leader (the controller's ``metadata``
    answer); NO_HOST when it has no leader or no host yet."""
    leader, hosts = described["leader"], described.get("hosts") or []
    replicas = described.get("replicas") or []
    return hosts[replicas.index(leader)] if leader in replicas and hosts else NO_HOST
