"""The cluster's metadata image and the records that change it.

The controller never edits the image directly: every change is a record, appended to the
metadata log first and then applied here, so replaying the log (after a snapshot) rebuilds
exactly the same image. Records are plain dicts (msgpack-friendly) with a ``type`` field:

    broker      {broker_id, disk, rack}                a disk joined (or re-joined)
    topic       {topic_id, name, config, internal}     a topic was created
    partition   {topic_id, partition, replicas, isr,   a partition was created or its
                 leader, leader_epoch,                 leadership, ISR or replica set
                 partition_epoch, adding, removing}    changed (whole state)
    config      {topic_id, config}                     a topic's overrides were replaced
    delete      {topic_id}                             a topic was deleted
    producer_ids {next}                                ids below ``next`` are handed out
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rafka.errors import UnknownTopicOrPartition

NO_LEADER = -1


@dataclass
class PartitionState:
    """Leadership of one partition. Invariants: ``isr`` is a non-empty subset of ``replicas``;
    ``leader`` is in ``isr`` or is NO_LEADER; ``leader_epoch`` grows by one per election (so
    a log's epochs say which leader wrote what); ``partition_epoch`` grows by one per change
    of any kind, so a stale ISR proposal can be refused. ``adding`` and ``removing`` are
    the replicas a reassignment brings in and takes out; both are in ``replicas`` until it
    completes. ``replicas[0]`` is the preferred leader."""

    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    def to_record(self, topic_id: str) -> dict[str, Any]:
        return {
            "type": "partition", "topic_id": topic_id, "partition": self.partition,
            "replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
            "adding": list(self.adding), "removing": list(self.removing),
        }  # fmt: skip

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "PartitionState":
        return cls(
            record["partition"], list(record["replicas"]), list(record["isr"]),
            record["leader"], record["leader_epoch"], record.get("partition_epoch", 0),
            list(record.get("adding", ())), list(record.get("removing", ())),
        )  # fmt: skip

    @property
    def target_replicas(self) -> list[int]:
        """The replica set once any reassignment in progress completes."""
        return [b for b in self.replicas if b not in self.removing]


@dataclass
class TopicState:
    topic_id: str
    name: str
    config: dict[str, Any]  # overrides only; defaults come from LogConfig
    internal: bool
    partitions: dict[int, PartitionState] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerState:
    """A data disk known to the cluster. The broker id belongs to the disk, not to a Ray node."""

    broker_id: int
    disk: str
    rack: str | None = None


class MetadataImage:
    """Everything the controller knows, rebuilt from records. ``offset`` is the metadata-log
    offset of the last record applied (-1 for an empty image)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}  # by topic id
        self.topic_ids: dict[str, str] = {}  # name -> topic id
        self.brokers: dict[int, BrokerState] = {}
        self.next_producer_id = 0
        self.offset = -1

    # -- reading -------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicState:
        topic_id = self.topic_ids.get(name)
        if topic_id is None:
            raise UnknownTopicOrPartition(
                f"topic {name!r} does not exist; create it with admin.create_topic({name!r}, "
                "partitions=...) or `rafka topics create`"
            )
        return self.topics[topic_id]

    def broker_for_disk(self, disk: str) -> BrokerState | None:
        for broker in self.brokers.values():
            if broker.disk == disk:
                return broker
        return None

    def replicas_on(self, broker_id: int) -> list[tuple[TopicState, PartitionState]]:
        return [
            (topic, p)
            for topic in self.topics.values()
            for p in topic.partitions.values()
            if broker_id in p.replicas
        ]

    # -- changing ------------------------------------------------------------------------------

    def apply(self, record: dict[str, Any], offset: int) -> None:
        kind = record["type"]
        if kind == "broker":
            self.brokers[record["broker_id"]] = BrokerState(
                record["broker_id"], record["disk"], record.get("rack")
            )
        elif kind == "topic":
            topic = TopicState(
                record["topic_id"], record["name"], dict(record["config"]), record["internal"]
            )
            self.topics[topic.topic_id] = topic
            self.topic_ids[topic.name] = topic.topic_id
        elif kind == "partition":
            topic = self.topics[record["topic_id"]]
            topic.partitions[record["partition"]] = PartitionState.from_record(record)
        elif kind == "config":
            self.topics[record["topic_id"]].config = dict(record["config"])
        elif kind == "delete":
            topic = self.topics.pop(record["topic_id"])
            del self.topic_ids[topic.name]
        elif kind == "producer_ids":
            self.next_producer_id = max(self.next_producer_id, record["next"])
        else:
            raise ValueError(f"unknown metadata record type {kind!r} at offset {offset}")
        self.offset = offset

    # -- snapshots -----------------------------------------------------------------------------

    def to_records(self) -> list[dict[str, Any]]:
        """Records that rebuild this image from empty (the body of a snapshot)."""
        out: list[dict[str, Any]] = [
            {"type": "broker", "broker_id": b.broker_id, "disk": b.disk, "rack": b.rack}
            for b in self.brokers.values()
        ]
        for topic in self.topics.values():
            out.append({
                "type": "topic", "topic_id": topic.topic_id, "name": topic.name,
                "config": topic.config, "internal": topic.internal,
            })  # fmt: skip
            out.extend(p.to_record(topic.topic_id) for p in topic.partitions.values())
        out.append({"type": "producer_ids", "next": self.next_producer_id})
        return out
