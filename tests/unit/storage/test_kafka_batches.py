"""Kafka clients' batches are stored as they come (marked with attributes bit 7), read by
every rafka reader, and handed back to Kafka clients byte for byte; rafka's own batches are
translated to Kafka's v2 format."""

import struct

import pytest
from kafka.record.default_records import ControlRecord

from rafka.clients import arrow_blocks, columnar
from rafka.clients.consumer_buffer import BufferReader, PartitionState
from rafka.errors import (
    CorruptRecord,
    InvalidRecord,
    UnsupportedCompressionType,
    UnsupportedForMessageFormat,
)
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb
from rafka.storage.compaction import compact
from rafka.storage.kafka_batches import accept_kafka_records, to_kafka_wire
from rafka.types import TopicPartition

from .kafka_oracle import GZIP, LZ4, NONE, SNAPPY, ZSTD, kafka_batch, read_kafka, rows_of
from .kafka_oracle import use_arrow_snappy
from .support import ABORT, COMMIT, FakeClock, marker, read_all

T0 = 1_700_000_000_000
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
ROWS = [
    (T0, b"k0", b"v" * 100, []),
    (T0 + 5, None, b"no key", [("trace", b"abc"), ("empty", None)]),
    (T0 + 3, b"k2", None, []),  # a tombstone
    (T0 + 900_000, b"", b"", [("\u00e9t\u00e9", b"\x00\xff")]),  # empty key and value
    (T0 - 2, b"k4", b"x" * 5000, []),  # an earlier timestamp, and a 2-byte length
]


@pytest.fixture(autouse=True)
def _snappy(monkeypatch):
    use_arrow_snappy(monkeypatch)


def new_log(tmp_path, **config) -> Log:
    return Log(str(tmp_path / "t-0"), LogConfig.from_dict(config), FakeClock())


def stored(log: Log) -> bytes:
    return bytes(log.read(log.log_start_offset, 1 << 24).records)


def expected_rows(rows, base: int = 0) -> list[tuple]:
    return [(base + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(rows)]


def decoded_rows(data: bytes) -> list[tuple]:
    out = []
    for pos, _ in rb.iter_batches(data):
        r = rb.decode_records(data, pos)
        keys = r.keys or [None] * len(r)
        headers = r.headers or [None] * len(r)
        for row in zip(r.offsets, r.timestamps, keys, r.values, headers):
            out.append(row[:4] + (list(row[4] or ()),))
    return out


def with_crc(batch: bytearray) -> bytearray:
    """``batch`` (one whole batch) with its CRC32C made right again after an edit."""
    rb.CRC.pack_into(batch, rb.CRC_POS, rb.crc32c(memoryview(batch)[rb.ATTRIBUTES_POS :]))
    return batch


# -- accepting and reading ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_kafka_batch_is_stored_as_it_came_and_reads_back_through_rafka(tmp_path, codec):
    """accept_kafka_records marks the batch; the log takes it; decode_records, the columnar
    reader and the Arrow block reader all return the client's records."""
    original = kafka_batch(ROWS, codec, producer=(42, 3, 7))
    accepted = accept_kafka_records(original)
    header = rb.verify_batch(accepted)
    assert header.is_kafka_format and int(header.codec) == codec
    assert accepted[rb.HEADER_SIZE :] == original[rb.HEADER_SIZE :]  # records untouched
    log = new_log(tmp_path)
    info = log.append_as_leader(accepted, leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (0, 4)
    data = stored(log)
    assert decoded_rows(data) == expected_rows(ROWS)
    table = columnar.batch_to_arrow("t", 0, data, 0, 0)
    assert table.column("value").to_pylist() == [r[2] for r in ROWS]
    assert table.column("key").to_pylist() == [r[1] for r in ROWS]
    assert table.column("timestamp").to_pylist() == [r[0] for r in ROWS]
    rows = arrow_blocks.batch_rows("t", 0, data, 0)
    assert rows.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert rows.column("headers").to_pylist()[1] == [
        {"key": "trace", "value": b"abc"}, {"key": "empty", "value": None}
    ]  # fmt: skip


def test_the_python_consumer_returns_the_records_of_kafka_batches(tmp_path):
    """The consumer's buffer turns stored Kafka batches into Records like rafka's own."""
    log = new_log(tmp_path)
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS[:3], LZ4)), 0)
    log.append_as_leader(rb.encode_batch([b"own"], [b"k"], T0), 0)
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS[3:], NONE)), 0)
    state = PartitionState(TopicPartition("t", 0))
    state.position = 1
    state.chunks.append([stored(log), 0])
    out: list = []
    BufferReader(None, None, True).take_records(state, 100, out)
    assert [(r.offset, r.key, r.value) for r in out] == [
        (1, None, b"no key"), (2, b"k2", None), (3, b"k", b"own"),
        (4, b"", b""), (5, b"k4", b"x" * 5000),
    ]  # fmt: skip
    assert out[0].headers == [("trace", b"abc"), ("empty", None)]
    assert out[2].headers == ()


# -- back to Kafka clients ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_stored_kafka_batches_go_back_to_kafka_clients_byte_for_byte(tmp_path, codec):
    """to_kafka_wire gives back the client's bytes, with only the base offset and leader
    epoch the leader assigned (both outside the CRC)."""
    batches = [kafka_batch(ROWS[:2], codec, (9, 0, 0)), kafka_batch(ROWS[2:], codec, (9, 0, 2))]
    log = new_log(tmp_path)
    for batch in batches:
        log.append_as_leader(accept_kafka_records(batch), leader_epoch=6)
    expected = bytearray(b"".join(batches))
    rb.set_base_offset(expected, 0)
    rb.set_partition_leader_epoch(expected, 6)
    rb.set_base_offset(expected, 2, pos=len(batches[0]))
    rb.set_partition_leader_epoch(expected, 6, pos=len(batches[0]))
    wire = to_kafka_wire(stored(log))
    assert wire == bytes(expected)
    got = [row for _, records in read_kafka(wire) for row in rows_of(records)]
    assert got == expected_rows(ROWS)


def test_a_fetch_as_a_numpy_array_with_a_cut_last_batch_loses_only_that_batch(tmp_path):
    """A replica fetch's array converts too; a partial trailing batch is dropped."""
    import numpy as np

    log = new_log(tmp_path)
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS[:2])), 0)
    log.append_as_leader(rb.encode_batch([b"a", b"b"], None, T0), 0)
    data = stored(log)
    whole = to_kafka_wire(np.frombuffer(data, dtype=np.uint8))
    assert [len(r) for _, r in read_kafka(whole)] == [2, 2]
    cut = to_kafka_wire(np.frombuffer(data[:-3], dtype=np.uint8))
    assert cut == whole[: len(cut)] and [len(r) for _, r in read_kafka(cut)] == [2]
    assert to_kafka_wire(b"") == b"" and to_kafka_wire(data[:30]) == b""


def test_damage_to_a_stored_kafka_batch_still_fails_the_clients_crc(tmp_path):
    """The CRC handed back is the client's own, not one recomputed over damaged bytes."""
    log = new_log(tmp_path)
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS)), 0)
    data = bytearray(stored(log))
    data[-10] ^= 0x01
    wire = to_kafka_wire(bytes(data))
    from kafka.record.default_records import DefaultRecordBatch

    assert not DefaultRecordBatch(wire).validate_crc()
    assert struct.unpack_from(">I", wire, rb.CRC_POS) == struct.unpack_from(
        ">I", kafka_batch(ROWS), rb.CRC_POS
    )


@pytest.mark.parametrize("codec", list(rb.Codec))
def test_rafka_batches_translate_to_kafka_batches_kafka_python_reads(codec):
    """A batch of rafka's producer encoder comes out as a Kafka v2 batch with a valid CRC,
    the same header fields and the same records, keys, null values and headers included."""
    values = [b"v" * 100, None, b"", b"last"]
    keys = [b"a", None, b"c", b""]
    timestamps = [T0, T0 + 1, T0 - 40, T0 + 70_000]
    headers = [None, [("h", b"1"), ("n", None)], None, [("x", b"")]]
    batch = rb.encode_batch(
        values, keys, timestamps, headers, base_offset=1000, codec=codec, producer_id=5,
        producer_epoch=2, base_sequence=30, partition_leader_epoch=8, is_transactional=True,
    )  # fmt: skip
    [(facts, records)] = read_kafka(to_kafka_wire(batch))
    assert facts == dict(
        base_offset=1000, leader_epoch=8, attributes=int(codec) | rb.TRANSACTIONAL_BIT,
        last_offset_delta=3, first_timestamp=T0, max_timestamp=T0 + 70_000, producer_id=5,
        producer_epoch=2, base_sequence=30, is_control=False, is_transactional=True,
    )  # fmt: skip
    assert rows_of(records) == [
        (1000 + i, t, k, v, h or []) for i, (t, k, v, h) in
        enumerate(zip(timestamps, keys, values, headers))
    ]  # fmt: skip


def test_packed_and_compacted_rafka_batches_translate_with_their_offsets():
    """Packed columns (the bulk producer's) and explicit offset deltas (a cleaned batch)
    keep their values and offsets in Kafka's form."""
    lengths = struct.pack("<3i", 2, -1, 3)
    packed = rb.encode_batch(
        rb.packed_column(lengths, b"aabbb"), None, T0, count=3, base_offset=10
    )
    cleaned = rb.encode_batch(
        [b"x", b"z"], [b"1", b"3"], T0, offset_deltas=[0, 2], last_offset_delta=4,
        base_offset=20,
    )  # fmt: skip
    batches = read_kafka(to_kafka_wire(packed + cleaned))
    assert [(r.offset, r.value) for r in batches[0][1]] == [(10, b"aa"), (11, None), (12, b"bbb")]
    assert [(r.offset, r.key) for r in batches[1][1]] == [(20, b"1"), (22, b"3")]
    assert batches[1][0]["last_offset_delta"] == 4


@pytest.mark.parametrize("kind", [ABORT, COMMIT])
def test_transaction_markers_become_control_records_kafka_python_recognises(kind):
    """rafka's marker is a control batch whose record Kafka's clients read as a marker."""
    batch = marker(kind, pid=11, epoch=4, coordinator_epoch=9)
    [(facts, [record])] = read_kafka(to_kafka_wire(batch))
    assert facts["is_control"] and facts["is_transactional"] and facts["producer_id"] == 11
    assert isinstance(record, ControlRecord)
    assert record.type == int(kind) and record.version == 0
    assert (record.abort, record.commit) == (kind is ABORT, kind is COMMIT)
    assert struct.unpack(">hi", record.value) == (0, 9)


# -- refusing what a producer cannot send -------------------------------------------------------


def test_a_batch_of_another_magic_is_unsupported_for_its_format():
    """Magic 0 or 1 (Kafka's old message sets) is UnsupportedForMessageFormat."""
    batch = bytearray(kafka_batch(ROWS))
    batch[rb.MAGIC_POS] = 1
    with pytest.raises(UnsupportedForMessageFormat, match="magic 1"):
        accept_kafka_records(batch)


@pytest.mark.parametrize("cut", [1, 20, 200])
def test_a_partial_trailing_batch_is_corrupt(cut):
    """Bytes after the last whole batch, or a batch cut short, are a CorruptRecord."""
    batch = kafka_batch(ROWS)
    with pytest.raises(CorruptRecord):
        accept_kafka_records(batch + batch[:cut])
    with pytest.raises(CorruptRecord):
        accept_kafka_records(batch[:-cut])


def test_a_crc_mismatch_is_corrupt():
    """One flipped bit in the records fails the client's CRC32C."""
    batch = bytearray(kafka_batch(ROWS))
    batch[-1] ^= 0x10
    with pytest.raises(CorruptRecord, match="CRC32C mismatch"):
        accept_kafka_records(batch)


def test_an_unknown_codec_is_unsupported():
    """Codec 5 is not one of Kafka's."""
    batch = bytearray(kafka_batch(ROWS))
    rb.ATTRIBUTES.pack_into(batch, rb.ATTRIBUTES_POS, 5)
    with pytest.raises(UnsupportedCompressionType, match="codec 5"):
        accept_kafka_records(with_crc(batch))


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda b: struct.pack_into(">i", b, 57, 4), "declares 4 records"),  # record_count
        (lambda b: struct.pack_into(">i", b, 23, 3), "last offset delta 3"),
        (lambda b: struct.pack_into(">i", b, 57, 0), "at least one record"),
        (lambda b: rb.ATTRIBUTES.pack_into(b, 21, rb.CONTROL_BIT), "control batch"),
        (lambda b: rb.ATTRIBUTES.pack_into(b, 21, rb.KAFKA_FORMAT_BIT), "bit 7"),
    ],
)
def test_batches_no_producer_sends_are_invalid(edit, problem):
    """Counts that disagree, no records, a control batch or bit 7 set: InvalidRecord."""
    batch = bytearray(kafka_batch(ROWS))
    edit(batch)
    with pytest.raises(InvalidRecord, match=problem):
        accept_kafka_records(with_crc(batch))


def test_no_batch_at_all_is_invalid():
    """An empty records field is refused."""
    with pytest.raises(InvalidRecord):
        accept_kafka_records(b"")


def test_the_leader_refuses_a_kafka_section_that_does_not_hold_its_records(tmp_path):
    """A batch whose CRC is right but whose records do not add up is refused on append, so
    no consumer meets it."""
    batch = bytearray(kafka_batch(ROWS[:2]))
    batch += b"\x00"  # one byte too many inside the batch
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    log = new_log(tmp_path)
    with pytest.raises(InvalidRecord, match="runs past|holds|at least 6"):
        log.append_as_leader(accept_kafka_records(with_crc(batch)), 0)
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD, SNAPPY])
def test_the_leader_refuses_a_batch_that_decompresses_past_the_cap(tmp_path, monkeypatch, codec):
    """A small batch of very compressible records (a decompression bomb) is refused with
    InvalidRecord naming the cap, before it is expanded whole; nothing is appended."""
    from rafka.storage import compression

    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 64 * 1024)
    batch = kafka_batch([(T0, None, b"\x00" * 100_000, [])], codec)
    assert len(batch) < 16 * 1024
    log = new_log(tmp_path)
    with pytest.raises(InvalidRecord, match=f"more than {64 * 1024} bytes"):
        log.append_as_leader(accept_kafka_records(batch), 0)
    assert log.log_end_offset == 0


# -- topic settings and compaction --------------------------------------------------------------


def test_a_topic_codec_recompresses_a_kafka_batch_which_stays_in_kafkas_format(tmp_path):
    """compression.type=zstd recompresses a snappy batch's records, still Kafka's records."""
    log = new_log(tmp_path, **{"compression.type": "zstd"})
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS, SNAPPY)), 0)
    data = stored(log)
    header = rb.read_header(data)
    assert header.is_kafka_format and header.codec is rb.Codec.ZSTD
    [(facts, records)] = read_kafka(to_kafka_wire(data))
    assert facts["attributes"] == int(rb.Codec.ZSTD)
    assert rows_of(records) == expected_rows(ROWS)


def test_log_append_time_is_stamped_on_kafka_batches(tmp_path):
    """A LogAppendTime topic stamps the batch; Kafka clients see the type and the time."""
    log = new_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(accept_kafka_records(kafka_batch(ROWS)), 0)
    [(facts, records)] = read_kafka(to_kafka_wire(stored(log)))
    assert facts["attributes"] & rb.TIMESTAMP_TYPE_BIT
    assert {r.timestamp for r in records} == {facts["max_timestamp"]}


def test_a_compacted_topic_refuses_kafka_records_without_a_key(tmp_path):
    """cleanup.policy=compact reads every key of a Kafka batch and refuses a null one."""
    log = new_log(tmp_path, **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecord, match="without a key"):
        log.append_as_leader(accept_kafka_records(kafka_batch(ROWS[:2])), 0)


@pytest.mark.parametrize("codec", CODECS)
def test_compaction_of_kafka_batches_keeps_the_latest_value_per_key(tmp_path, codec):
    """The cleaner keeps the latest value of each key of Kafka batches; rewritten batches are
    in rafka's format, untouched ones keep Kafka's, and all read back and go to Kafka
    clients with their offsets."""
    clock = FakeClock()
    log = Log(str(tmp_path / "t-0"), LogConfig.from_dict(
        {"cleanup.policy": "compact", "segment.bytes": 400}), clock)  # fmt: skip
    writes = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4"), (b"d", b"5"), (b"d", b"6")]
    for i in range(0, len(writes), 2):
        rows = [(clock.now, k, v, []) for k, v in writes[i : i + 2]]
        log.append_as_leader(accept_kafka_records(kafka_batch(rows, codec)), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now, force=True)
    after = [(o, k, v) for o, k, v, _ in read_all(log)]
    assert after == [(1, b"b", b"2"), (2, b"a", b"3"), (3, b"c", b"4"), (5, b"d", b"6")]
    formats = [h.is_kafka_format for _, h in rb.iter_batches(stored(log))]
    assert formats == [False, True, False]  # batches that lost records were rewritten
    wire = to_kafka_wire(stored(log))
    assert [(r.offset, r.key, r.value) for _, rs in read_kafka(wire) for r in rs] == after
