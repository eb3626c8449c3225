"""The records of the internal topic ``__transaction_state``, and which shard owns an id.

``__transaction_state`` is compacted: the newest record per key survives, and a record with
no value (a tombstone) deletes the key. One record per transactional id, msgpack::

    key    [KEY_VERSION, transactional id]
    value  [VALUE_VERSION, {
              "producer_id":          int, the producer id the transaction's writes use
              "producer_epoch":       int, its epoch (Prepare*: the bumped one of the markers)
              "last_producer_epoch":  int, the producer's epoch before the last bump made on
                                      its behalf, or -1
              "previous_producer_id": int, the id before the last move to a new one, or -1
              "next_producer_id":     int, Prepare* only: the id the producer moves to, or -1
              "timeout_ms":           int, transaction.timeout.ms of the producer
              "state":                int, Kafka's state id (Empty 0 .. PrepareEpochFence 7)
              "partitions":           {topic: [partition, ...]}, sorted, of the transaction
              "start_ms":             int, when the transaction began, or -1
              "last_update_ms":       int, the time of the record's change
              "transaction_version":  int, 1 when a Kafka client of transaction version 1
                                      ended the transaction without an epoch bump (its
                                      markers carry its own epoch); absent means 2
           }]
    Dead   a tombstone (no value)

A decoder refuses a version it does not know rather than guess at the fields: an older
coordinator must not load (and then overwrite) state a newer one wrote. Keys of a version
it does not know are refused the same way. A transient PrepareEpochFence is never written.

An id lives on shard ``shard_of(transactional_id, shards)``: the partition of
``__transaction_state`` its record goes to and the coordinator that serves it. The hash is
Kafka's ``Utils.abs(transactionalId.hashCode) % partitions`` (Java's String.hashCode, shared
with ``__consumer_offsets``): stable across processes, unlike Python's salted ``hash()``, and
the partition a Kafka cluster with as many partitions would use.
"""

from __future__ import annotations

from typing import Any

import msgpack

from rafka.cluster.offsets_records import coordinator_shard
from rafka.cluster.transaction_state import TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 1

# Kafka's TransactionState ids, so a dump reads like Kafka's.
STATE_IDS: dict[TxnState, int] = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
    TxnState.DEAD: 6,
    TxnState.PREPARE_EPOCH_FENCE: 7,
}
_STATES_BY_ID = {number: state for state, number in STATE_IDS.items()}


def shard_of(transactional_id: str, shards: int) -> int:
    """The ``__transaction_state`` partition (and coordinator shard) of the id."""
    return coordinator_shard(transactional_id, shards)


def encode_key(transactional_id: str) -> bytes:
    return msgpack.packb([KEY_VERSION, transactional_id])


def encode_value(meta: TxnMetadata | None) -> bytes | None:
    """The record's value; None (a tombstone) for a Dead id or None."""
    if meta is None or meta.state == TxnState.DEAD:
        return None
    if meta.state == TxnState.PREPARE_EPOCH_FENCE:
        raise ValueError(
            f"{meta.transactional_id!r}: PrepareEpochFence is passed through, never written"
        )
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        topics.setdefault(topic, []).append(partition)
    extra = {} if meta.transaction_version == 2 else {
        "transaction_version": meta.transaction_version}
    return msgpack.packb([VALUE_VERSION, {
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "last_producer_epoch": meta.last_producer_epoch,
        "previous_producer_id": meta.previous_producer_id,
        "next_producer_id": meta.next_producer_id,
        "timeout_ms": meta.timeout_ms,
        "state": STATE_IDS[meta.state],
        "partitions": topics,
        "start_ms": meta.start_ms,
        "last_update_ms": meta.last_update_ms,
        **extra,
    }])  # fmt: skip


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    """The transactional id and its metadata (None for a tombstone). Raises ValueError for
    a record this version cannot read."""
    fields = msgpack.unpackb(key)
    if not isinstance(fields, list) or len(fields) != 2 or fields[0] != KEY_VERSION:
        raise ValueError(
            f"__transaction_state key {key!r} is not of version {KEY_VERSION}, the one this "
            f"rafka reads: upgrade the coordinator before it loads this shard"
        )
    transactional_id = fields[1]
    if value is None:
        return transactional_id, None
    record = _value_fields(msgpack.unpackb(value), transactional_id)
    state = _STATES_BY_ID.get(record["state"])
    if state is None:
        raise ValueError(f"{transactional_id!r}: unknown transaction state id {record['state']}")
    partitions = frozenset(
        (topic, partition) for topic, numbers in record["partitions"].items()
        for partition in numbers
    )  # fmt: skip
    return transactional_id, TxnMetadata(
        transactional_id=transactional_id,
        producer_id=record["producer_id"],
        producer_epoch=record["producer_epoch"],
        last_producer_epoch=record["last_producer_epoch"],
        previous_producer_id=record["previous_producer_id"],
        timeout_ms=record["timeout_ms"],
        state=state,
        partitions=partitions,
        start_ms=record["start_ms"],
        last_update_ms=record["last_update_ms"],
        next_producer_id=record["next_producer_id"],
        transaction_version=record.get("transaction_version", 2),
    )


def _value_fields(fields: Any, transactional_id: str) -> dict[str, Any]:
    if not isinstance(fields, list) or len(fields) != 2 or not isinstance(fields[1], dict):
        raise ValueError(f"{transactional_id!r}: not a __transaction_state value")
    if fields[0] != VALUE_VERSION:
        raise ValueError(
            f"{transactional_id!r}: __transaction_state value version {fields[0]} is not "
            f"{VALUE_VERSION}, the one this rafka reads: upgrade the coordinator before it "
            f"loads this shard"
        )
    return fields[1]
