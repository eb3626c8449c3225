"""Record batches as Arrow tables in Spark's Kafka-source schema, without Ray or Spark:
columns and types, headers (null when a record has none), slicing to [start, end), control
batches left out, packed columns and codecs, and the Arrow IPC stream round trip."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients import arrow_blocks as ab
from rafka.clients import columnar
from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb

CODECS = list(rb.Codec)
cells = st.one_of(st.none(), st.binary(max_size=30))
header_lists = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
             max_size=3),
)  # fmt: skip


def at(base_offset: int, batch: bytes) -> bytes:
    """``batch`` with its base offset set, as the leader does on append."""
    buf = bytearray(batch)
    rb.set_base_offset(buf, base_offset)
    return bytes(buf)


def packed(values: list[bytes | None]) -> msgpack.ExtType:
    return columnar.binary_column(values, "values").to_msgpack()


def utc_ms(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


def marker(base_offset: int, kind: rb.ControlType = rb.ControlType.COMMIT) -> bytes:
    return at(base_offset, rb.encode_control_batch(
        kind, producer_id=7, producer_epoch=0, coordinator_epoch=3, timestamp=99,
    ))  # fmt: skip


def read_all(chunks, start: int = 0, end: int = 2**62, topic: str = "t", partition: int = 0):
    table = ab.records_table(topic, partition, chunks, start, end)
    table.validate(full=True)
    assert table.schema == ab.KAFKA_SOURCE_SCHEMA
    return table


# -- schema ------------------------------------------------------------------------------------


def test_the_schema_is_sparks_kafka_source_schema_column_for_column():
    schema = ab.KAFKA_SOURCE_SCHEMA
    assert schema.names == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert [schema.field(n).type for n in schema.names] == [
        pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
        pa.timestamp("us", tz="UTC"), pa.int32(),
        pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
    ]  # fmt: skip


# -- records_table -----------------------------------------------------------------------------


def test_a_batch_becomes_one_row_per_record_with_every_kafka_source_column():
    batch = rb.encode_batch(
        [b"v0", b"v1", None], [b"k0", None, b"k2"], [1_700_000_000_123, 5, 1_700_000_000_000],
        [[("trace", b"abc"), ("empty", None)], None, [("h", b"")]], base_offset=40,
    )  # fmt: skip
    rows = read_all([batch], topic="orders", partition=3).to_pylist()
    assert rows == [
        {"key": b"k0", "value": b"v0", "topic": "orders", "partition": 3, "offset": 40,
         "timestamp": utc_ms(1_700_000_000_123), "timestampType": 0,
         "headers": [{"key": "trace", "value": b"abc"}, {"key": "empty", "value": None}]},
        {"key": None, "value": b"v1", "topic": "orders", "partition": 3, "offset": 41,
         "timestamp": utc_ms(5), "timestampType": 0, "headers": None},
        {"key": b"k2", "value": None, "topic": "orders", "partition": 3, "offset": 42,
         "timestamp": utc_ms(1_700_000_000_000), "timestampType": 0,
         "headers": [{"key": "h", "value": b""}]},
    ]  # fmt: skip


def test_timestamps_are_microseconds_utc_from_the_records_milliseconds():
    table = read_all([rb.encode_batch([b"a", b"b"], None, [1, 1_700_000_000_123])])
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [1000, 1_700_000_000_123_000]


def test_records_without_headers_have_null_headers_not_empty_lists():
    table = read_all([rb.encode_batch([b"a", b"b"]), rb.encode_batch([b"c"], headers=[[]],
                                                                      base_offset=2)])
    headers = table.column("headers")
    assert headers.null_count == 3
    assert headers.to_pylist() == [None, None, None]


def test_a_record_with_empty_headers_among_others_with_headers_has_null_headers():
    batch = rb.encode_batch([b"a", b"b", b"c"], headers=[[], [("k", b"v")], None])
    assert read_all([batch]).column("headers").to_pylist() == [
        None, [{"key": "k", "value": b"v"}], None,
    ]  # fmt: skip


def test_log_append_time_batches_give_the_batch_timestamp_and_timestamp_type_one():
    batch = rb.encode_batch([b"a", b"b"], None, [10, 20],
                            timestamp_type=rb.TimestampType.LOG_APPEND_TIME)  # fmt: skip
    table = read_all([batch])
    assert table.column("timestamp").to_pylist() == [utc_ms(20), utc_ms(20)]
    assert table.column("timestampType").to_pylist() == [1, 1]


def test_offset_gaps_left_by_compaction_are_kept_and_a_start_in_a_gap_skips_to_the_next():
    batch = rb.encode_batch([b"a", b"b", b"c"], [b"x", b"y", b"z"], 0,
                            offset_deltas=[0, 4, 7], base_offset=100)  # fmt: skip
    assert read_all([batch]).column("offset").to_pylist() == [100, 104, 107]
    table = read_all([batch], 101, 107)
    assert table.column("offset").to_pylist() == [104]
    assert table.column("value").to_pylist() == [b"b"]


def test_control_batches_are_no_rows():
    """A transaction's commit marker takes an offset but gives no row."""
    txn = at(0, rb.encode_batch([b"a", b"b"], producer_id=7, producer_epoch=0,
                                base_sequence=0, is_transactional=True))  # fmt: skip
    after = at(3, rb.encode_batch([b"c"]))
    table = read_all([txn + marker(2) + after])
    assert table.column("offset").to_pylist() == [0, 1, 3]
    assert table.column("value").to_pylist() == [b"a", b"b", b"c"]
    assert read_all([marker(0, rb.ControlType.ABORT)]).num_rows == 0


def test_batch_rows_is_none_for_a_control_batch_and_reads_the_batch_at_pos():
    first = rb.encode_batch([b"x"])
    second = at(1, rb.encode_batch([b"y", b"z"]))
    rows = ab.batch_rows("t", 5, first + second, len(first))
    assert rows.schema == ab.KAFKA_SOURCE_SCHEMA
    assert rows.column(1).to_pylist() == [b"y", b"z"]
    assert rows.column(4).to_pylist() == [1, 2]
    assert ab.batch_rows("t", 5, marker(0), 0) is None


def test_a_read_with_no_record_in_range_is_an_empty_table_of_the_schema():
    batch = at(10, rb.encode_batch([b"a", b"b"]))
    for chunks, start, end in [([], 0, 100), ([batch], 0, 10), ([batch], 12, 20),
                               ([batch], 11, 11), ([marker(5)], 0, 10)]:  # fmt: skip
        table = read_all(chunks, start, end)
        assert table.num_rows == 0


def test_an_empty_batch_gives_no_rows():
    assert read_all([rb.encode_batch([])]).num_rows == 0


def test_a_read_spans_chunks_and_batches_and_keeps_only_start_to_end():
    chunk1 = at(0, rb.encode_batch([b"0", b"1", b"2"])) + at(3, rb.encode_batch([b"3"]))
    chunk2 = at(4, rb.encode_batch([b"4", b"5"], codec=rb.Codec.GZIP))
    table = read_all([chunk1, chunk2], 2, 5)
    assert table.column("offset").to_pylist() == [2, 3, 4]
    assert table.column("value").to_pylist() == [b"2", b"3", b"4"]
    assert table.column("offset").num_chunks == 1  # one contiguous table


@st.composite
def logs(draw):
    """A log as chunks of consecutive batches (some control, some compacted, any codec,
    packed or plain columns), with every record's expected row."""
    chunks, expected, offset = [], [], draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(0, 4))):
        chunk = b""
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 5)) == 0:
                chunk += marker(offset)
                offset += 1
                continue
            n = draw(st.integers(1, 8))
            values = draw(st.lists(cells, min_size=n, max_size=n))
            keys = draw(st.one_of(st.none(), st.lists(cells, min_size=n, max_size=n)))
            headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n)))
            stamps = draw(st.lists(st.integers(0, 2**41), min_size=n, max_size=n))
            gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
            deltas = [sum(gaps[:i]) for i in range(n)]
            codec = draw(st.sampled_from(CODECS))
            if draw(st.booleans()):  # the bulk producer's packed columns
                column, count = packed(values), n
                key_column = None if keys is None else packed(keys)
            else:
                column, key_column, count = values, keys, None
            chunk += at(offset, rb.encode_batch(
                column, key_column, stamps, headers, offset_deltas=deltas, codec=codec,
                count=count,
            ))  # fmt: skip
            for i in range(n):
                expected.append({
                    "key": None if keys is None else keys[i], "value": values[i],
                    "offset": offset + deltas[i], "timestamp": stamps[i],
                    "headers": None if headers is None or not headers[i] else [
                        {"key": k, "value": v} for k, v in headers[i]
                    ],
                })  # fmt: skip
            offset += deltas[-1] + 1
        chunks.append(chunk)
    return chunks, expected, offset


@given(logs(), st.data())
def test_records_table_holds_exactly_the_records_with_offsets_in_start_to_end(log, data):
    """Whatever the codecs, column forms, gaps and markers, the table holds every record
    with start <= offset < end, in order, with its key, value, timestamp and headers."""
    chunks, expected, log_end = log
    start = data.draw(st.integers(0, log_end + 2))
    end = data.draw(st.integers(start, log_end + 3))
    table = read_all(chunks, start, end, topic="topic-a", partition=9)
    want = [r for r in expected if start <= r["offset"] < end]
    assert table.column("offset").to_pylist() == [r["offset"] for r in want]
    assert table.column("key").to_pylist() == [r["key"] for r in want]
    assert table.column("value").to_pylist() == [r["value"] for r in want]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        r["timestamp"] * 1000 for r in want
    ]
    assert table.column("headers").to_pylist() == [r["headers"] for r in want]
    assert set(table.column("topic").to_pylist()) <= {"topic-a"}
    assert set(table.column("partition").to_pylist()) <= {9}
    assert set(table.column("timestampType").to_pylist()) <= {0}


@pytest.mark.parametrize("codec", CODECS)
def test_packed_keys_and_values_through_every_codec_come_back_as_binary_columns(codec):
    values, keys = [b"v" * 300, None, b""], [None, b"k1", b"k2"]
    batch = rb.encode_batch(packed(values), packed(keys), 7, count=3, codec=codec)
    table = read_all([batch])
    assert table.column("value").to_pylist() == values
    assert table.column("key").to_pylist() == keys
    assert table.column("headers").null_count == 3


# -- corrupt batches ---------------------------------------------------------------------------


def raw_batch(columns: list, record_count: int) -> bytes:
    """A batch with a valid CRC around whatever records section ``columns`` packs to."""
    return rb.assemble_batch(
        msgpack.packb(columns, use_bin_type=True), base_offset=0, partition_leader_epoch=-1,
        attributes=0, last_offset_delta=max(record_count - 1, 0), first_timestamp=0,
        max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        record_count=record_count,
    )  # fmt: skip


def test_a_batch_whose_crc_does_not_match_is_corrupt_record():
    batch = bytearray(rb.encode_batch([b"abc"]))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC mismatch"):
        ab.records_table("t", 0, [bytes(batch)], 0, 10)


def test_a_headers_column_of_the_wrong_length_is_corrupt_record():
    batch = raw_batch([None, None, None, [b"a", b"b"], [[["h", b"v"]]]], 2)
    with pytest.raises(CorruptRecord, match="headers column holds 1 entries, the batch 2"):
        ab.records_table("t", 0, [batch], 0, 10)


def test_a_values_column_shorter_than_the_record_count_is_corrupt_record():
    batch = raw_batch([None, None, None, [b"a"], None], 2)
    with pytest.raises(CorruptRecord, match="declares 2 records but its columns disagree"):
        ab.records_table("t", 0, [batch], 0, 10)


def test_a_packed_column_of_the_wrong_length_is_corrupt_record():
    lengths = struct.pack("<3i", 1, 1, 1)
    ext = rb.packed_column(lengths, b"abc")
    batch = raw_batch([None, None, None, ext, None], 2)
    with pytest.raises(CorruptRecord, match="packed column holds 3 values, the batch 2"):
        ab.batch_rows("t", 0, batch, 0)


# -- Arrow IPC stream --------------------------------------------------------------------------


def test_a_table_round_trips_through_the_ipc_stream():
    batch = rb.encode_batch([b"a", None], [b"k", None], [1, 2], [[("h", b"v")], None])
    table = read_all([batch])
    data = ab.to_ipc_stream(table)
    assert isinstance(data, bytes)
    back = ab.from_ipc_stream(data)
    assert back.schema == ab.KAFKA_SOURCE_SCHEMA
    assert back.equals(table)
    assert ab.from_ipc_stream(memoryview(data)).equals(table)
    assert ab.from_ipc_stream(pa.py_buffer(data)).equals(table)


def test_an_empty_table_round_trips_with_its_schema():
    back = ab.from_ipc_stream(ab.to_ipc_stream(read_all([])))
    assert back.num_rows == 0 and back.schema == ab.KAFKA_SOURCE_SCHEMA


def test_the_ipc_stream_holds_record_batches_of_at_most_rows_per_arrow_batch(monkeypatch):
    monkeypatch.setattr(ab, "ROWS_PER_ARROW_BATCH", 3)
    table = read_all([rb.encode_batch([bytes([i]) for i in range(8)])])
    data = ab.to_ipc_stream(table)
    sizes = [b.num_rows for b in pa.ipc.open_stream(pa.BufferReader(data))]
    assert sizes == [3, 3, 2]
    assert ab.from_ipc_stream(data).equals(table)


@given(logs(), st.data())
def test_any_slice_of_a_log_round_trips_through_the_ipc_stream(log, data):
    chunks, _expected, log_end = log
    start = data.draw(st.integers(0, log_end + 1))
    table = read_all(chunks, start, data.draw(st.integers(start, log_end + 1)))
    back = ab.from_ipc_stream(ab.to_ipc_stream(table))
    assert back.equals(table)
    assert back.to_pylist() == table.to_pylist()
