"""The records of __transaction_state (rafka.cluster.transaction_records): exact bytes,
round trips of every persisted state, tombstones, version checks and the stable mapping of
a transactional id to its shard."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.offsets_records import java_string_hash
from rafka.cluster.transaction_records import (
    KEY_VERSION,
    STATE_IDS,
    VALUE_VERSION,
    decode,
    encode_key,
    encode_value,
    shard_of,
)
from rafka.cluster.transaction_state import MAX_EPOCH, TxnMetadata, TxnState

S = TxnState
ONGOING = TxnMetadata(
    "tx", 7, 3, 2, -1, 60_000, S.ONGOING, frozenset({("b", 1), ("a", 0), ("b", 0)}), 1000, 2000
)


def test_key_bytes_are_the_version_and_the_transactional_id():
    """Pinned: msgpack [0, "tx"]."""
    assert encode_key("tx") == b"\x92\x00\xa2tx"


def test_value_bytes_are_pinned_with_partitions_grouped_by_topic_and_sorted():
    """Pinned: [1, {fields in a fixed order}], partitions as {topic: [sorted partitions]}."""
    assert encode_value(ONGOING) == (
        b"\x92\x01\x8a\xabproducer_id\x07\xaeproducer_epoch\x03\xb3last_producer_epoch\x02"
        b"\xb4previous_producer_id\xff\xb0next_producer_id\xff\xaatimeout_ms\xcd\xea`"
        b"\xa5state\x01\xaapartitions\x82\xa1a\x91\x00\xa1b\x92\x00\x01"
        b"\xa8start_ms\xcd\x03\xe8\xaelast_update_ms\xcd\x07\xd0"
    )


def test_state_ids_are_kafka_s():
    """Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3, CompleteCommit 4, CompleteAbort 5,
    Dead 6, PrepareEpochFence 7."""
    assert [STATE_IDS[s] for s in (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                   S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.DEAD,
                                   S.PREPARE_EPOCH_FENCE)] == list(range(8))  # fmt: skip


_PERSISTED = [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT,
              S.COMPLETE_ABORT]  # fmt: skip
_PARTITIONS = st.frozensets(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 10_000)), max_size=8
)


@st.composite
def _metadata(draw) -> TxnMetadata:
    state = draw(st.sampled_from(_PERSISTED))
    busy = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
    preparing = state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
    return TxnMetadata(
        transactional_id=draw(st.text(min_size=1, max_size=40)),
        producer_id=draw(st.integers(0, 2**63 - 1)),
        producer_epoch=draw(st.integers(0, MAX_EPOCH)),
        last_producer_epoch=draw(st.integers(-1, MAX_EPOCH)),
        previous_producer_id=draw(st.integers(-1, 2**63 - 1)),
        timeout_ms=draw(st.integers(1, 2**31 - 1)),
        state=state,
        partitions=draw(_PARTITIONS) if busy else frozenset(),
        start_ms=draw(st.integers(-1, 2**50)),
        last_update_ms=draw(st.integers(0, 2**50)),
        next_producer_id=draw(st.integers(-1, 2**63 - 1)) if preparing else -1,
    )


@given(meta=_metadata())
def test_every_persisted_record_round_trips(meta):
    """decode(encode) gives back the transactional id and every field, in every state a
    coordinator writes."""
    assert decode(encode_key(meta.transactional_id), encode_value(meta)) == (
        meta.transactional_id, meta
    )


@pytest.mark.parametrize("state", _PERSISTED)
def test_each_persisted_state_round_trips(state):
    """One record per state, including the Prepare* fields a failover needs."""
    busy = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
    meta = TxnMetadata(
        "t", 1, 4, 3, 0, 10, state, ONGOING.partitions if busy else frozenset(),
        5 if busy else -1, 6, next_producer_id=9 if state in (S.PREPARE_COMMIT,
                                                                S.PREPARE_ABORT) else -1,
    )  # fmt: skip
    assert decode(encode_key("t"), encode_value(meta))[1] == meta


def test_a_dead_id_is_written_and_read_as_a_tombstone():
    """Dead encodes to no value; no value decodes to None."""
    dead = TxnMetadata("tx", 7, 3, -1, -1, 60_000, S.DEAD, frozenset(), -1, 2000)
    assert encode_value(dead) is None and encode_value(None) is None
    assert decode(encode_key("tx"), None) == ("tx", None)


def test_the_transient_epoch_fence_state_is_never_written():
    """PrepareEpochFence is passed through on the way to PrepareAbort."""
    fence = TxnMetadata("tx", 7, 3, -1, -1, 60_000, S.PREPARE_EPOCH_FENCE, frozenset(), 1, 2)
    with pytest.raises(ValueError, match="never written"):
        encode_value(fence)


def test_a_value_of_another_version_is_refused_not_guessed_at():
    """A newer coordinator's record stops the load with a message saying to upgrade."""
    fields = msgpack.unpackb(encode_value(ONGOING))
    newer = msgpack.packb([VALUE_VERSION + 1, fields[1]])
    with pytest.raises(ValueError, match=f"version {VALUE_VERSION + 1}.*upgrade"):
        decode(encode_key("tx"), newer)
    with pytest.raises(ValueError, match="not a __transaction_state value"):
        decode(encode_key("tx"), msgpack.packb({"producer_id": 7}))


def test_a_key_of_another_version_is_refused():
    """Keys carry their own version, checked before the value is read."""
    with pytest.raises(ValueError, match="upgrade"):
        decode(msgpack.packb([KEY_VERSION + 1, "tx"]), None)


def test_an_unknown_state_id_is_refused():
    """A state this version does not know is not mapped to one it does."""
    fields = msgpack.unpackb(encode_value(ONGOING))
    fields[1]["state"] = 42
    with pytest.raises(ValueError, match="unknown transaction state id 42"):
        decode(encode_key("tx"), msgpack.packb(fields))


@pytest.mark.parametrize("tid, shards, expected",
                         [("tx", 50, 16), ("hello", 50, 22), ("my-group", 50, 12),
                          ("my-group", 3, 1906497762 % 3), ("", 50, 0)])  # fmt: skip
def test_shard_of_is_kafka_s_abs_hash_code_modulo_the_partitions(tid, shards, expected):
    """Utils.abs(String.hashCode) % partitions: the partition Kafka would use."""
    h = java_string_hash(tid)
    assert shard_of(tid, shards) == expected == abs(h) % shards


def test_shard_of_is_the_same_in_every_process():
    """Unlike Python's salted hash(), the mapping does not change with PYTHONHASHSEED."""
    code = (
        "from rafka.cluster.transaction_records import shard_of\n"
        "print([shard_of(f'txn-{i}', 50) for i in range(100)])\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout  # fmt: skip
        for seed in ("1", "2")
    }
    assert outputs == {str([shard_of(f"txn-{i}", 50) for i in range(100)]) + "\n"}
