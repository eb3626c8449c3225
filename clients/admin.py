"""Admin: topics, leadership, reassignments and cluster status, through the controller;
consumer groups and their offsets through the group coordinators (``GroupAdmin``, in
``rafka.clients.admin_groups``); transactions and the producers of partitions through the
transaction coordinators and partition leaders (``TransactionAdmin``, in
``rafka.clients.admin_transactions``); drains and rebalances through the controller's
balancer (``BalancerAdmin``, in ``rafka.clients.admin_balancer``); users and ACLs through
the controller (``SecurityAdmin``, in ``rafka.clients.admin_security``).

Arguments are checked here before anything is sent (TypeError or ValueError saying what was
wrong); the controller's answers are dicts, read with defaults for the fields an older
controller does not send.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterable, Mapping

from rafka.clients.admin_balancer import BalancerAdmin
from rafka.clients.admin_groups import GroupAdmin
from rafka.clients.admin_security import SecurityAdmin
from rafka.clients.admin_transactions import TransactionAdmin
from rafka.errors import LeaderNotAvailable, RequestTimedOut, error_class
from rafka.types import (
    BrokerDescription,
    ElectionResult,
    PartitionDescription,
    TopicDescription,
)

#: Leader elections ``Admin.elect_leaders`` asks for: "preferred" moves leadership back to
#: each partition's first replica when it is alive and in sync; "unclean" elects a leader
#: for a partition without one even from outside the ISR (records may be lost).
ELECTION_TYPES = ("preferred", "unclean")


def _partition(p: dict[str, Any]) -> PartitionDescription:
    leader = p["leader"]
    return PartitionDescription(
        p["partition"], leader, p["leader_epoch"], list(p["replicas"]), list(p["isr"]),
        list(p.get("adding", ())), list(p.get("removing", ())),
        bool(p.get("offline", leader is None or leader < 0)), tuple(p.get("starting", ())),
    )  # fmt: skip


def _description(d: dict[str, Any]) -> TopicDescription:
    return TopicDescription(
        d["name"], d["topic_id"], d["internal"], [_partition(p) for p in d["partitions"]],
        d["config"],
    )  # fmt: skip


def _election_result(answer: dict[str, Any]) -> ElectionResult:
    errno = answer.get("errno", 0)
    error = None if not errno else error_class(errno)(answer.get("message", ""))
    return ElectionResult(answer["topic"], answer["partition"], answer["leader"], error)


def _non_negative_int(value: Any, what: str, digits_ok: bool = False) -> int:
    """``value`` as an int id >= 0 (a decimal string too when ``digits_ok``: JSON object
    keys are strings)."""
    if digits_ok and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{what} must be 0 or more, got {value}")
    return value


def _partition_ids(partitions: Any) -> list[int]:
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise TypeError(f"partitions must be a list of partition numbers, got {partitions!r}")
    ids = list(dict.fromkeys(_non_negative_int(p, "a partition") for p in partitions))
    if not ids:
        raise ValueError(
            "partitions is empty: name at least one, or leave it out (None) for every "
            "partition of the topic"
        )
    return ids


def _request_id() -> str:
    """A new id for one metadata change, sent unchanged on every retry of that call so the
    controller answers a retry of a change it already made as it answered the first time."""
    return uuid.uuid4().hex


def check_assignment(assignment: Any) -> dict[int, list[int]]:
    """A reassignment ``{partition: [broker ids, preferred leader first]}`` checked and
    normalised (partition keys may be decimal strings, as in a dict read from JSON)."""
    if not isinstance(assignment, Mapping):
        raise TypeError(
            "assignment must be a dict {partition: [broker ids, preferred leader first]}, "
            f"got {type(assignment).__name__}"
        )
    if not assignment:
        raise ValueError("assignment is empty: give at least one partition, e.g. {0: [1, 2]}")
    plan: dict[int, list[int]] = {}
    for key, replicas in assignment.items():
        partition = _non_negative_int(key, "a partition number", digits_ok=True)
        if partition in plan:
            raise ValueError(f"partition {partition} is given twice ({key!r})")
        if isinstance(replicas, (str, bytes, Mapping)) or not isinstance(replicas, Iterable):
            raise TypeError(
                f"the replicas of partition {partition} must be a list of broker ids, "
                f"got {replicas!r}"
            )
        ids = [_non_negative_int(b, f"a broker id of partition {partition}") for b in replicas]
        if not ids:
            raise ValueError(f"partition {partition} has no replicas: give at least one broker id")
        twice = sorted({b for b in ids if ids.count(b) > 1})
        if twice:
            raise ValueError(
                f"partition {partition} names broker(s) {', '.join(map(str, twice))} more "
                "than once: each replica must be on a different broker"
            )
        plan[partition] = ids
    return plan


class Admin(GroupAdmin, TransactionAdmin, BalancerAdmin, SecurityAdmin):
    def __init__(self, gateway, metadata) -> None:
        self._gateway = gateway
        self._metadata = metadata

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: dict[str, Any] | None = None,
    ) -> TopicDescription:
        """Create a topic; raises InvalidTopic, TopicAlreadyExists, InvalidPartitions,
        InvalidReplicationFactor or InvalidConfig naming the rule broken. The call carries
        one request id: when the controller restarts during it and the call is sent again,
        the controller answers as it did the first time (the topic's description, not
        TopicAlreadyExists for the topic this call created)."""
        return _description(self._gateway.call_controller(
            "create_topic", name, partitions, replication_factor, config, False, _request_id()
        ))  # fmt: skip

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data on every disk. Sent again after a controller restart,
        the call succeeds as its first attempt did (not UnknownTopicOrPartition for the
        topic it deleted): it carries one request id."""
        self._gateway.call_controller("delete_topic", name, _request_id())
        self._metadata.invalidate(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._gateway.call_controller("list_topics", include_internal)

    def describe_topic(self, name: str) -> TopicDescription:
        return _description(self._gateway.call_controller("describe_topics", [name])[0])

    def wait_for_topic(self, name: str, timeout_s: float = 60.0) -> TopicDescription:
        """Wait until every partition of ``name`` has a leader whose replica runs (none
        starting, none offline) and return the description. ``create_topic`` answers once
        the topic is recorded, as Kafka's does, and its replicas start in the background;
        producers and consumers wait for them on their own, this is for scripts and tests
        that want them running first. RequestTimedOut after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            described = self.describe_topic(name)
            waiting = [p.partition for p in described.partitions
                       if p.offline or p.leader in p.starting]  # fmt: skip
            if not waiting:
                return described
            if time.monotonic() >= deadline:
                raise RequestTimedOut(
                    f"{len(waiting)} partition(s) of {name!r} (first: {waiting[0]}) have no "
                    f"running leader after {timeout_s:g} s; `rafka topics describe {name}` "
                    "shows which replicas are starting or offline"
                )
            time.sleep(0.05)

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        return [_description(d) for d in self._gateway.call_controller("describe_topics", names)]

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow topic ``name`` to ``total`` partitions (never shrinks: InvalidPartitions).
        Sent again after a controller restart, the call is answered as its first attempt
        was (not InvalidPartitions because it already grew the topic): it carries one
        request id."""
        described = self._gateway.call_controller("create_partitions", name, total, _request_id())
        self._metadata.invalidate(name)
        return _description(described)

    def alter_topic_config(self, name: str, changes: dict[str, Any]) -> TopicDescription:
        """Set topic properties (Kafka names); a value of None resets one to its default."""
        return _description(self._gateway.call_controller("alter_topic_config", name, changes))

    def describe_cluster(self) -> dict[str, Any]:
        """The controller's disk, the brokers (one per data disk) and topic counts."""
        return self._gateway.call_controller("describe_cluster")

    def brokers(self) -> list[BrokerDescription]:
        return [
            BrokerDescription(
                b["broker_id"], b["disk"], b["alive"], b.get("rack"), bool(b.get("fenced"))
            )
            for b in self.describe_cluster()["brokers"]
        ]

    def under_replicated_partitions(
        self, topics: list[str] | None = None
    ) -> list[tuple[str, PartitionDescription]]:
        """(topic, partition) for every partition of ``topics`` (default: every topic,
        internal ones included) with fewer in-sync replicas than its replication factor
        (``PartitionDescription.under_replicated``), as kafka-topics.sh
        --under-replicated-partitions lists them."""
        if isinstance(topics, str):
            raise TypeError(f"topics must be a list of names, got the string {topics!r}")
        return [
            (d.name, p)
            for d in self.describe_topics(None if topics is None else list(topics))
            for p in d.partitions
            if p.under_replicated
        ]

    def elect_leaders(
        self,
        topic: str | None = None,
        partitions: list[int] | None = None,
        election_type: str = "preferred",
    ) -> list[ElectionResult]:
        """Run a leader election (Kafka's electLeaders) for ``partitions`` of ``topic``
        (default: all of them; no topic: every partition of every topic). One result per
        partition: ``error`` None when a leader was elected, ElectionNotNeeded when the
        preferred replica leads already, PreferredLeaderNotAvailable when it is not alive
        and in sync. "unclean" elects a leader only for partitions without one, from any
        live replica when none in sync is alive: records it never had are lost."""
        if election_type not in ELECTION_TYPES:
            raise ValueError(
                f"election_type {election_type!r} is unknown: give 'preferred' (leadership "
                "back to the first replica) or 'unclean' (a leader for leaderless partitions, "
                "even out of sync)"
            )
        if topic is not None and not isinstance(topic, str):
            raise TypeError(f"topic must be a topic name or None, got {topic!r}")
        if partitions is not None:
            if topic is None:
                raise ValueError(
                    "partitions were given without a topic: give topic= too, or leave "
                    "partitions out to elect for every topic"
                )
            partitions = _partition_ids(partitions)
        answers = self._gateway.call_controller("elect_leaders", election_type, topic, partitions)
        results = [_election_result(a) for a in answers]
        for name in {r.topic for r in results if r.error is None}:
            self._metadata.invalidate(name)  # clients look the new leaders up
        return results

    def reassign_partitions(
        self, topic: str, assignment: dict[int, list[int]]
    ) -> TopicDescription:
        """Move partitions of ``topic`` to new replica sets, ``{partition: [broker ids]}``
        with the preferred leader first (Kafka's alterPartitionReassignments). The call
        returns once the controller has accepted the plan; the new replicas catch up in the
        background, and ``describe_topic`` shows them in ``adding``/``removing`` until they
        are in sync and the old ones are gone. Raises InvalidReplicaAssignment for brokers
        that do not exist, UnknownTopicOrPartition for partitions that do not."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a topic name, got {topic!r}")
        plan = check_assignment(assignment)
        described = self._gateway.call_controller("reassign_partitions", topic, plan)
        self._metadata.invalidate(topic)
        return _description(described)

    def cancel_reassignment(
        self, topic: str, partitions: list[int] | None = None
    ) -> TopicDescription:
        """Cancel the reassignment of ``partitions`` of ``topic`` (default: every partition
        of it being reassigned), as Kafka's alterPartitionReassignments with no target: each
        goes back to its original replicas, and the replicas the reassignment added are
        deleted. Raises NoReassignmentInProgress when a named partition is not being
        reassigned, UnknownTopicOrPartition for a topic or partition that does not exist."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a topic name, got {topic!r}")
        if partitions is not None:
            partitions = _partition_ids(partitions)
        described = self._gateway.call_controller("cancel_reassignment", topic, partitions)
        self._metadata.invalidate(topic)
        return _description(described)

    def partition_offsets(self, name: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Per partition: log start offset, high watermark, log end offset and size on disk,
        from each leader. Partitions whose leader is still starting are waited for, up to
        ``timeout_s`` in all (0: left out of the answer instead); LeaderNotAvailable after
        that."""
        deadline = time.monotonic() + timeout_s
        while True:
            meta = self._metadata.refresh([name])[name]
            found, missing = {}, None
            for p in range(len(meta)):
                try:
                    found[p] = self._gateway.describe(self._metadata.replica(meta, p))
                except LeaderNotAvailable as e:
                    missing = e
            if missing is None or timeout_s == 0:
                answers = self._gateway.get(list(found.values()), 60.0)
                return answers
            if time.monotonic() >= deadline:
                raise missing
            time.sleep(0.1)
