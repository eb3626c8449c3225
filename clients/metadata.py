"""The clients' cache of topic metadata: partition counts and leaders, refreshed on demand."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from rafka.actors.replica_handle import leader_host
from rafka.errors import LeaderNotAvailable, error_class

NO_LEADER = -1
#: A request outstanding this long makes the client check whether the leader moved (a
#: dead node's actor calls fail only after seconds, or never while Ray waits for the node).
SUSPECT_AFTER_S = 0.5
#: The least time between two such checks of one topic.
RECHECK_INTERVAL_S = 0.2


class PartitionLeader(NamedTuple):
    leader: int
    leader_epoch: int
    host: int = -1  # the slot of the leader's host actor (-1: not placed yet)


class TopicMetadata(NamedTuple):
    name: str
    topic_id: str
    partitions: list  # PartitionLeader per partition number

    def __len__(self) -> int:
        return len(self.partitions)


class MetadataCache:
    """Thread-safe. ``topic`` answers from the cache; ``refresh`` asks the controller. As in
    Kafka, clients ask for a missing topic to be created and the cluster decides
    (``auto.create.topics.enable``, off by default)."""

    def __init__(self, gateway, allow_auto_create: bool = True) -> None:
        self.gateway = gateway
        self.allow_auto_create = allow_auto_create
        self._topics: dict[str, TopicMetadata] = {}
        self._checked: dict[str, float] = {}  # topic -> when leader_moved last asked
        self._lock = threading.Lock()

    def topic(self, name: str) -> TopicMetadata:
        found = self._topics.get(name)
        return found if found is not None else self.refresh([name])[name]

    def cached(self, name: str) -> TopicMetadata | None:
        """What the cache holds for ``name``, without asking the controller."""
        return self._topics.get(name)

    def refresh(self, names: list[str]) -> dict[str, TopicMetadata]:
        """Fetch ``names`` from the controller; raises the error for a topic that is missing."""
        answer = self.gateway.call_controller("metadata", list(names), self.allow_auto_create)
        out = {}
        for name in names:
            meta = self._store(name, answer[name])
            if not isinstance(meta, TopicMetadata):
                errno, message = meta
                raise error_class(errno)(message)
            out[name] = meta
        return out

    def _store(self, name: str, described) -> TopicMetadata | tuple:
        """Cache the controller's description of ``name``; an (errno, message) answer (no
        such topic) drops it from the cache and is returned as it is."""
        if isinstance(described, (list, tuple)):
            with self._lock:
                self._topics.pop(name, None)
            return tuple(described)
        meta = TopicMetadata(
            name,
            described["topic_id"],
            [PartitionLeader(p["leader"], p["leader_epoch"], leader_host(p))
             for p in described["partitions"]],
        )
        with self._lock:
            self._topics[name] = meta
        return meta

    def partition_counts(self, names: list[str], refresh: bool = False) -> dict[str, int]:
        """Partition counts of the topics of ``names`` that exist (missing ones are left
        out: a subscription may name topics not created yet); ``refresh`` asks the
        controller even for cached topics."""
        if not names:
            return {}
        counts = {}
        wanted = list(names) if refresh else [n for n in names if n not in self._topics]
        if wanted:
            answer = self.gateway.call_controller("metadata", wanted, False)
            for name in wanted:
                self._store(name, answer[name])
        for name in names:
            meta = self._topics.get(name)
            if meta is not None:
                counts[name] = len(meta)
        return counts

    def topic_names(self) -> list[str]:
        """Every topic the cluster has (internal ones left out)."""
        return self.gateway.call_controller("list_topics", False)

    def invalidate(self, name: str) -> None:
        """Forget ``name`` and its replicas' handles: the next use asks the controller again
        (a restarted replica actor needs a fresh handle)."""
        with self._lock:
            meta = self._topics.pop(name, None)
        if meta is not None:
            for partition, leader in enumerate(meta.partitions):
                self.gateway.forget_replica(meta.topic_id, partition, leader.leader)

    def replica(self, topic: TopicMetadata, partition: int):
        """The leader replica's handle for ``partition``; LeaderNotAvailable (retriable)
        while the partition has no leader, or its leader is still starting."""
        leader, _, host = topic.partitions[partition]
        if leader == NO_LEADER:
            raise LeaderNotAvailable(
                f"{topic.name}-{partition} has no leader right now (its in-sync replicas are "
                "down); retrying until one comes back"
            )
        return self.gateway.replica(topic.topic_id, partition, leader, host)

    def leader_moved(self, name: str, partition: int, sent_to: PartitionLeader) -> bool:
        """Whether ``partition``'s leader is no longer ``sent_to`` (asking the controller at
        most every RECHECK_INTERVAL_S per topic). A client whose request to ``sent_to`` is
        outstanding for long calls this, then resends to the new leader."""
        now = time.monotonic()
        if now - self._checked.get(name, 0.0) >= RECHECK_INTERVAL_S:
            self._checked[name] = now
            try:
                self.refresh([name])
            except Exception:  # the controller restarting: ask again next time
                return False
        current = self._topics.get(name)
        if current is None or partition >= len(current.partitions):
            return False
        return current.partitions[partition] != sent_to

