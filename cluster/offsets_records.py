"""The records of the internal topic ``__consumer_offsets``, and which shard owns a group.

``__consumer_offsets`` is compacted: only the newest record per key survives, and a record
with no value (a tombstone) deletes the key. Two kinds of key as in Kafka, and a third::

    offset commit   key [1, group id, topic, partition]
                    value {"offset", "leader_epoch", "metadata", "commit_ms"}
    group metadata  key [2, group id]
                    value {"protocol_type", "generation", "protocol", "leader", "members": [
                           {"member_id", "group_instance_id", "client_id", "client_host",
                            "session_timeout_ms", "rebalance_timeout_ms", "subscription",
                            "assignment"}, ...]}
    pending offset  key [4, group id, topic, partition, producer id]
                    value as an offset commit's, plus "producer_epoch" (the epoch that
                    wrote it): committed inside a transaction of that producer and not
                    visible until it ends (``transactional_offsets``); deleted (a
                    tombstone) once it has
    epoch marker    key [3, shard]
                    value {"producer_id", "epoch", "token"}: written by each incarnation of
                    the shard's coordinator as it loads, to fence earlier ones
                    (``rafka.cluster.coordinator_fencing``); one key per shard, so
                    compaction keeps the newest marker, which has the highest epoch

Keys and values are msgpack. The first element of a key is its kind; unknown kinds are
skipped on load, so a newer coordinator may add kinds an older one ignores.

A group lives on shard ``coordinator_shard(group_id, shards)``: the partition of
``__consumer_offsets`` its records go to, and the coordinator actor that serves it. The hash
is Java's ``String.hashCode`` as in Kafka, so a group maps to the partition number a Kafka
cluster with as many offsets partitions would use.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack

OFFSET_COMMIT = 1
GROUP_METADATA = 2
EPOCH_MARKER = 3
PENDING_OFFSET = 4


class OffsetKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group_id: str


class EpochMarkerKey(NamedTuple):
    shard: int


class PendingOffsetKey(NamedTuple):
    group_id: str
    topic: str
    partition: int
    producer_id: int


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(text: str):
    for ch in text:
        code = ord(ch)
        if code < 0x10000:
            yield code
        else:
            code -= 0x10000
            yield 0xD800 + (code >> 10)
            yield 0xDC00 + (code & 0x3FF)


def coordinator_shard(group_id: str, shards: int) -> int:
    """The ``__consumer_offsets`` partition (and coordinator shard) of ``group_id``: Kafka's
    ``Utils.abs(groupId.hashCode) % partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % shards


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return msgpack.packb([OFFSET_COMMIT, group_id, topic, partition])


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int) -> bytes:
    return msgpack.packb(
        {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata,
         "commit_ms": commit_ms}
    )  # fmt: skip


def pending_offset_key(group_id: str, topic: str, partition: int, producer_id: int) -> bytes:
    return msgpack.packb([PENDING_OFFSET, group_id, topic, partition, producer_id])


def pending_offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int,
                         producer_epoch: int) -> bytes:  # fmt: skip
    return msgpack.packb(
        {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata,
         "commit_ms": commit_ms, "producer_epoch": producer_epoch}
    )  # fmt: skip


def group_key(group_id: str) -> bytes:
    return msgpack.packb([GROUP_METADATA, group_id])


def group_value(metadata: dict[str, Any]) -> bytes:
    return msgpack.packb(metadata)


def epoch_marker_key(shard: int) -> bytes:
    return msgpack.packb([EPOCH_MARKER, shard])


def epoch_marker_value(producer_id: int, epoch: int, token: str) -> bytes:
    return msgpack.packb({"producer_id": producer_id, "epoch": epoch, "token": token})


def decode_key(key: bytes) -> OffsetKey | GroupKey | EpochMarkerKey | PendingOffsetKey | None:
    """The key's fields, or None for a kind this version does not know."""
    fields = msgpack.unpackb(key)
    if fields[0] == OFFSET_COMMIT:
        return OffsetKey(fields[1], fields[2], fields[3])
    if fields[0] == GROUP_METADATA:
        return GroupKey(fields[1])
    if fields[0] == EPOCH_MARKER:
        return EpochMarkerKey(fields[1])
    if fields[0] == PENDING_OFFSET:
        return PendingOffsetKey(fields[1], fields[2], fields[3], fields[4])
    return None


def decode_value(value: bytes | None) -> dict[str, Any] | None:
    """The value's fields; None for a tombstone."""
    return None if value is None else msgpack.unpackb(value)
