"""The controller's decisions: given the metadata image and a request, the records to append.

Plain Python, no Ray and no I/O: the Controller actor validates a request here, appends the
records this returns to the metadata log, then applies them to the image. A function that
raises leaves the image untouched.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from rafka.cluster.metadata import MetadataImage, PartitionState
from rafka.cluster.placement import RACK_LABEL, assign_replicas
from rafka.cluster.topics import collision_key, is_internal, validate_topic_name
from rafka.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from rafka.storage.config import LogConfig

MAX_PARTITIONS = 100_000
PRODUCER_ID_BLOCK = 1000

Records = list[dict[str, Any]]


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Kafka-named topic overrides, checked (InvalidConfig names the bad one) and normalised
    to the values ``LogConfig`` parsed, so the log stores exactly what will be used."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfig(f"topic config must be a dict of Kafka property names, got {config!r}")
    parsed = LogConfig.from_dict(config).to_dict()
    return {name: parsed[name] for name in config}


def register_broker(
    image: MetadataImage, disk: str, broker_id: int | None, rack: str | None = None
) -> tuple[int, Records]:
    """The broker id for ``disk``: the one its ``meta.properties`` holds, the one the
    metadata already knows, or a new one. ``rack`` is the disk node's rack (its
    ``rafka-rack`` label; None or "" for none). A record is returned when the broker is new
    or its rack changed, none when the metadata already says exactly this."""
    if rack is not None and not isinstance(rack, str):
        raise InvalidConfig(
            f"rack of disk {disk!r} must be a string (the node label {RACK_LABEL!r}), "
            f"got {rack!r}"
        )
    rack = rack or None
    if disk in image.retired_brokers.values():
        raise InvalidConfig(
            f"disk {disk!r} belonged to a broker that was drained and retired (its node given "
            "back to Ray); a retired disk does not rejoin: give the node a new disk name"
        )
    known = image.broker_for_disk(disk)
    if broker_id is None:
        used = [*image.brokers, *image.retired_brokers]
        broker_id = known.broker_id if known else max(used, default=-1) + 1
    elif broker_id in image.retired_brokers:
        raise InvalidConfig(
            f"disk {disk!r} claims broker id {broker_id}, which was retired; a retired broker "
            "does not rejoin: clear the disk's data directory to join as a new broker"
        )
    holder = image.brokers.get(broker_id)
    if holder is not None and holder.disk != disk:
        raise InvalidConfig(
            f"disk {disk!r} claims broker id {broker_id}, which belongs to disk {holder.disk!r}; "
            "two disks were given the same data (copied meta.properties?): give each disk its "
            "own data directory"
        )
    if known is not None and known.broker_id == broker_id and known.rack == rack:
        return broker_id, []
    return broker_id, [{"type": "broker", "broker_id": broker_id, "disk": disk, "rack": rack}]


def broker_racks(image: MetadataImage, brokers: list[int]) -> dict[int, str | None]:
    """The rack of each of ``brokers`` as the metadata knows it (None: no rack, or a broker
    the metadata does not know)."""
    return {b: (image.brokers[b].rack if b in image.brokers else None) for b in brokers}


def create_topic(
    image: MetadataImage,
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, Any] | None,
    brokers: list[int],
    internal: bool = False,
) -> tuple[str, Records]:
    """Records that create topic ``name`` on ``brokers`` (the live ones)."""
    validate_topic_name(name)
    if is_internal(name) and not internal:
        raise InvalidTopic(f"{name!r} is an internal topic; rafka creates it itself")
    if name in image.topic_ids:
        raise TopicAlreadyExists(f"topic {name!r} already exists; describe it or pick a new name")
    key = collision_key(name)
    for other in image.topic_ids:
        if collision_key(other) == key:
            raise InvalidTopic(
                f"topic {name!r} collides with existing topic {other!r}: names that differ "
                "only in '.' and '_' are not allowed"
            )
    _check_partition_count(partitions)
    overrides = validate_config(config)
    topic_id = uuid.uuid4().hex
    plan = assign_replicas(
        topic_id, 0, partitions, replication_factor, brokers, broker_racks(image, brokers)
    )
    records: Records = [
        {"type": "topic", "topic_id": topic_id, "name": name, "config": overrides,
         "internal": internal, "created_at": image.offset + 1},
    ]  # fmt: skip
    records += [
        PartitionState(p, replicas, list(replicas), replicas[0], 0).to_record(topic_id)
        for p, replicas in plan.items()
    ]
    return topic_id, records


def create_partitions(
    image: MetadataImage, name: str, total: int, brokers: list[int]
) -> Records:
    """Records that grow topic ``name`` to ``total`` partitions (Kafka never shrinks)."""
    topic = image.topic(name)
    _check_user_may_change(topic.name, topic.internal)
    _check_partition_count(total)
    current = len(topic.partitions)
    if total <= current:
        raise InvalidPartitions(
            f"topic {name!r} has {current} partitions; the new count must be larger "
            f"(got {total}): partitions can be added, never removed"
        )
    # The factor partition 0 will have once a reassignment in progress completes.
    replication_factor = len(topic.partitions[0].target_replicas)
    plan = assign_replicas(
        topic.topic_id, current, total - current, replication_factor, brokers,
        broker_racks(image, brokers),
    )  # fmt: skip
    return [
        PartitionState(p, replicas, list(replicas), replicas[0], 0).to_record(topic.topic_id)
        for p, replicas in plan.items()
    ]


def alter_config(
    image: MetadataImage, name: str, changes: Mapping[str, Any]
) -> Records:
    """Records that set (value) or reset to default (value None) topic properties."""
    topic = image.topic(name)
    _check_user_may_change(topic.name, topic.internal)
    merged = dict(topic.config)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return [{"type": "config", "topic_id": topic.topic_id, "config": validate_config(merged)}]


def delete_topic(image: MetadataImage, name: str) -> tuple[str, Records]:
    topic = image.topic(name)
    _check_user_may_change(topic.name, topic.internal)
    return topic.topic_id, [{"type": "delete", "topic_id": topic.topic_id}]


def allocate_producer_ids(image: MetadataImage) -> tuple[range, Records]:
    """A block of fresh producer ids; the record makes them unusable after a restart."""
    start = image.next_producer_id
    block = range(start, start + PRODUCER_ID_BLOCK)
    return block, [{"type": "producer_ids", "next": block.stop}]


def start_replica(
    image: MetadataImage, topic_id: str, partition: int, broker_id: int,
    node: str | None = None,
) -> tuple[int, Records]:  # fmt: skip
    """The replica epoch of a replica that (re)started and checked in (from Ray node
    ``node``): the next value of the cluster's counter, recorded so that it survives a
    controller restart."""
    epoch = image.next_replica_epoch
    return epoch, [{"type": "replica_epoch", "topic_id": topic_id, "partition": partition,
                    "broker_id": broker_id, "epoch": epoch, "node": node}]  # fmt: skip


def reserve_replica_epoch(image: MetadataImage) -> tuple[int, Records]:
    """One replica epoch for replicas created together (new topics, partitions or
    reassignment targets): a created replica starts with an empty log, so all may share it;
    it is above the epoch of any earlier life of the same replica."""
    epoch = image.next_replica_epoch
    return epoch, [{"type": "replica_epochs", "next": epoch + 1}]


def replica_epochs_of(image: MetadataImage, topic_id: str, partition: int) -> dict[int, int]:
    """Broker -> current replica epoch, for the replicas of one partition that checked in."""
    return dict(image.replica_epochs.get((topic_id, partition), {}))


def _check_partition_count(count: object) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"partition count {count!r} is invalid; give an integer in [1, {MAX_PARTITIONS}]"
        )


def _check_user_may_change(name: str, internal: bool) -> None:
    if internal:
        raise InvalidTopic(f"{name!r} is an internal topic; it cannot be changed or deleted")


def check_known(image: MetadataImage, name: str, partition: int) -> PartitionState:
    topic = image.topic(name)
    state = topic.partitions.get(partition)
    if state is None:
        raise UnknownTopicOrPartition(
            f"topic {name!r} has partitions 0..{len(topic.partitions) - 1}, not {partition}"
        )
    return state
