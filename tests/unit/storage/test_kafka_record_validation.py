"""A leader walks every record of a Kafka client's batch, as Kafka's LogValidator does.

Each bad batch here carries a valid CRC32C and a consistent header (record_count and
last_offset_delta agree), so only the records inside it are wrong. A Kafka consumer cannot
read past such a record (kafka-python raises CorruptRecordError, librdkafka stalls at its
offset), so the leader refuses the batch with InvalidRecord (INVALID_RECORD, not retried)
and writes nothing, whatever the topic's cleanup.policy."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.errors import CorruptRecordError

from rafka.errors import CorruptRecord, InvalidRecord
from rafka.storage import LogConfig
from rafka.storage import kafka_record_walk as walk
from rafka.storage import kafka_records as kr
from rafka.storage import log_validator
from rafka.storage import record_batch as rb
from rafka.storage.kafka_batches import accept_kafka_records, to_kafka_wire

from .kafka_oracle import GZIP, LZ4, NONE, SNAPPY, ZSTD, kafka_batch, read_kafka, use_arrow_snappy

T0 = 1_700_000_000_000
# Each codec as kafka-python's producer compresses a records section.
_ENCODE = {NONE: bytes, GZIP: kafka_codec.gzip_encode, SNAPPY: kafka_codec.snappy_encode,
           LZ4: kafka_codec.lz4_encode, ZSTD: kafka_codec.zstd_encode}  # fmt: skip
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
POLICIES = ["delete", "compact"]
v = kr.encode_varint


def record(i: int, key=b"k", value=b"value", headers=(), ts_delta: int = 0, *,
           edit: dict | None = None, trailing: bytes = b"", length: int | None = None,
           ) -> bytes:  # fmt: skip
    """Record ``i`` of a batch as Kafka writes it (offset delta ``i``), except that each field
    named in ``edit`` (attributes, timestamp_delta, offset_delta, key, value, headers: each
    its encoded bytes, length prefix included) is replaced, ``trailing`` bytes are added
    inside it and ``length`` overrides its declared length."""
    encoded = {
        "attributes": b"\x00",
        "timestamp_delta": v(ts_delta),
        "offset_delta": v(i),
        "key": v(-1) if key is None else v(len(key)) + key,
        "value": v(-1) if value is None else v(len(value)) + value,
        "headers": v(len(headers)) + b"".join(
            v(len(k.encode())) + k.encode() + (v(-1) if hv is None else v(len(hv)) + hv)
            for k, hv in headers
        ),
    }
    edit = edit or {}
    assert set(edit) <= set(encoded), f"unknown fields {set(edit) - set(encoded)}"
    encoded.update(edit)
    body = b"".join(encoded.values()) + trailing
    return v(len(body) if length is None else length) + body


def client_batch(records: list[bytes], count: int | None = None, codec: int = NONE,
                 max_timestamp: int = T0) -> bytes:  # fmt: skip
    """A Kafka client's batch (as it arrives in a ProduceRequest) around ``records``, with
    ``count`` records in its header (default: as many as given), first timestamp T0 and a
    valid CRC."""
    count = len(records) if count is None else count
    section = _ENCODE[codec](b"".join(records))
    return rb.assemble_batch(
        section, base_offset=0, partition_leader_epoch=-1, attributes=codec,
        last_offset_delta=count - 1, first_timestamp=T0, max_timestamp=max_timestamp,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=count,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _snappy(monkeypatch):
    use_arrow_snappy(monkeypatch)


@pytest.fixture(params=POLICIES)
def log(request, open_log):
    """A log of each cleanup.policy: a compacted topic reads every key of a batch, and must
    still check every other field the same way."""
    return open_log({"cleanup.policy": request.param})


def take(log, batch: bytes):
    """Append the client's ``batch`` as leader (its LogAppendInfo)."""
    return log.append_as_leader(accept_kafka_records(batch), leader_epoch=0)


def refused(log, batch: bytes, match: str) -> InvalidRecord:
    """Append the client's ``batch`` as leader, expect InvalidRecord matching ``match``, and
    check that nothing was written."""
    end, size = log.log_end_offset, log.active_segment.size
    with pytest.raises(InvalidRecord, match=match) as caught:
        take(log, batch)
    assert (log.log_end_offset, log.active_segment.size) == (end, size)
    return caught.value


# -- the test's own builder ---------------------------------------------------------------------


def test_the_record_builder_writes_kafka_pythons_bytes():
    """Unedited, ``record`` writes exactly what kafka-python writes, so every edit below is
    the only thing wrong with its batch."""
    rows = [(T0, b"k", b"value", []), (T0 + 3, None, b"v" * 200, [("h", None), ("\u00e9", b"x")])]
    expected = kafka_batch(rows)[rb.HEADER_SIZE :]
    built = record(0) + record(1, None, b"v" * 200, [("h", None), ("\u00e9", b"x")], 3)
    assert built == expected


def test_well_formed_batches_are_accepted(open_log):
    """Null, empty and 2-byte keys and values, headers with null values, negative timestamp
    deltas and more than 64 records (2-byte offset deltas) all pass."""
    log = open_log()
    records = [record(0, None, None), record(1, b"", b""), record(2, b"k" * 300, b"v" * 9000),
               record(3, headers=[("a", None), ("b", b"")], ts_delta=-50)]  # fmt: skip
    records += [record(i, ts_delta=i) for i in range(4, 200)]
    info = take(log, client_batch(records, max_timestamp=T0 + 199))
    assert (info.record_count, info.max_timestamp) == (200, T0 + 199)


# -- the fault this guards against --------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_leader_refuses_a_key_length_that_runs_past_its_record(log, codec):
    """The review's case: a key length varint pointing past the end of its record, under a
    valid CRC, is refused instead of stalling every consumer at that offset."""
    bad = client_batch([record(0), record(1, edit={"key": v(50) + b"k"}), record(2)], codec=codec)
    e = refused(log, bad, r"record 1 of 3: key length 50 runs \d+ bytes past the record's end")
    assert not e.retriable and e.errno == 87


def test_kafka_python_cannot_read_the_batch_the_leader_refuses():
    """Why the walk matters: the batch above, stored, raises CorruptRecordError in
    kafka-python's consumer."""
    bad = client_batch([record(0), record(1, edit={"key": v(50) + b"k"}), record(2)])
    with pytest.raises(CorruptRecordError):
        read_kafka(bad)


# -- one field at a time ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, problem",
    [
        ({"value": v(60) + b"value"}, r"value length 60 runs \d+ bytes past the record's end"),
        ({"key": v(-2)}, r"key length -2 is negative and not -1 \(null\)"),
        ({"value": v(-7)}, r"value length -7 is negative and not -1 \(null\)"),
        ({"headers": v(3) + v(1) + b"h" + v(-1)},
         r"header count 3 does not fit in the 3 bytes left"),
        ({"headers": v(-1)}, r"header count -1 is negative"),
        ({"headers": v(1) + v(-1) + v(-1)}, r"header 0 key length -1 is negative"),
        ({"headers": v(1) + v(40) + b"h" + v(-1)},
         r"header 0 key length 40 runs \d+ bytes past the record's end"),
        ({"headers": v(1) + v(1) + b"h" + v(-3)},
         r"header 0 value length -3 is negative and not -1 \(null\)"),
        ({"headers": v(1) + v(1) + b"h" + v(9) + b"x"},
         r"header 0 value length 9 runs \d+ bytes past the record's end"),
        ({"headers": v(1) + v(2) + b"\xff\xfe" + v(-1)}, r"header 0 key is not UTF-8"),
        ({"attributes": b"\x80"}, r"attributes 0x80; Kafka leaves them unused, 0"),
        ({"timestamp_delta": b"\xff" * 11}, r"timestamp delta varint exceeds 10 bytes"),
        ({"value": b"\x80", "headers": b""}, r"value length runs past the record's end"),
    ],
)  # fmt: skip
def test_a_leader_refuses_a_record_field_that_does_not_fit(log, edit, problem):
    """Each malformed field is refused with a message naming the record and the field."""
    refused(log, client_batch([record(0), record(1, edit=edit)]), r"record 1 of 2: " + problem)


def long_varint(value: int, size: int) -> bytes:
    """``value`` as a zigzag varint padded to ``size`` bytes with continuation bytes: a
    non-canonical encoding some writers could produce, valid up to Kafka's byte limit."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    for _ in range(size - 1):
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z & 0x7F)
    return bytes(out)


@pytest.mark.parametrize(
    "edit, problem",
    [
        ({"key": long_varint(1, 6) + b"k"}, r"key length varint exceeds 5 bytes"),
        ({"value": long_varint(5, 10) + b"value"}, r"value length varint exceeds 5 bytes"),
        ({"offset_delta": long_varint(0, 6)}, r"offset delta varint exceeds 5 bytes"),
        ({"headers": long_varint(0, 7)}, r"header count varint exceeds 5 bytes"),
    ],
)  # fmt: skip
def test_a_leader_refuses_a_32_bit_field_in_a_varint_longer_than_5_bytes(log, edit, problem):
    """Kafka reads every record field but the timestamp delta as a 32-bit varint of at
    most 5 bytes (ByteUtils.readVarint), so a longer one would stop a Java consumer."""
    refused(log, client_batch([record(0, edit=edit)]), problem)


def test_a_5_byte_varint_is_read_as_kafka_reads_it(open_log):
    """The longest encoding Kafka reads is accepted."""
    info = take(open_log(), client_batch([record(0, edit={"key": long_varint(1, 5) + b"k"})]))
    assert info.last_offset == 0


@pytest.mark.parametrize("deltas", [[0, 2, 1], [1, 0, 2], [0, 1, 1], [0, 1, 7]])
def test_a_leader_refuses_offset_deltas_other_than_0_to_n_minus_1(log, deltas):
    """Kafka's inner offset check: record i carries offset delta i, so every record gets the
    offset the header promises."""
    bad = client_batch([record(0, edit={"offset_delta": v(d)}) for d in deltas])
    first = next(i for i, d in enumerate(deltas) if d != i)
    refused(log, bad, rf"record {first} of 3 has offset delta {deltas[first]}, expected {first}")


def test_a_leader_refuses_a_record_with_bytes_after_its_last_field(log):
    """A record's fields must end exactly at its declared end."""
    bad = client_batch([record(0), record(1, trailing=b"\x00\x00")])
    refused(log, bad, r"record 1 of 2: its fields end 2 bytes before the record's declared end")


@pytest.mark.parametrize(
    "length, problem",
    [(3, r"declares a length of 3 bytes; a record needs at least 6"),
     (-4, r"declares a length of -4 bytes"),
     (500, r"declares 500 bytes but only \d+ remain in the records section")],
)  # fmt: skip
def test_a_leader_refuses_a_record_length_that_does_not_fit(log, length, problem):
    """A record's length must leave room for its six fixed fields and stay inside the section."""
    refused(log, client_batch([record(0), record(1, length=length)]), r"record 1 of 2 " + problem)


def test_a_leader_refuses_a_header_declaring_more_records_than_the_section_holds(log):
    """record_count 3 over two records: the section ends early."""
    refused(log, client_batch([record(0), record(1)], count=3),
            r"the records section ends after 2 records, but the header declares 3")  # fmt: skip


def test_a_leader_refuses_a_header_declaring_fewer_records_than_the_section_holds(log):
    """record_count 1 over two records: the second one is left over."""
    refused(log, client_batch([record(0), record(1)], count=1),
            r"holds \d+ bytes after the 1 records its header declares")  # fmt: skip


@pytest.mark.parametrize("header_max", [-1, T0, T0 + 3, T0 + 10_000])
def test_a_header_max_timestamp_that_is_not_the_records_largest_is_rewritten(log, header_max):
    """CreateTime: as Kafka's LogValidator, the leader sets the header's max timestamp (which
    feeds the time index, timestamp lookups and retention) to the records' largest, T0 + 7
    here, and the CRC with it; sarama, for one, always sends -1. A Kafka client fetching the
    batch gets the rewritten header under a CRC that matches it."""
    records = [record(0), record(1, ts_delta=7), record(2, ts_delta=3)]
    info = take(log, client_batch(records, max_timestamp=header_max))
    assert info.max_timestamp == T0 + 7
    stored = log.read(0, 1 << 20).records
    assert rb.read_header(stored).max_timestamp == T0 + 7
    wire = to_kafka_wire(stored)
    header = rb.read_header(wire)
    assert header.max_timestamp == T0 + 7 and not header.is_kafka_format
    assert header.crc == crc32c.crc32c(wire[rb.ATTRIBUTES_POS : header.size])


def test_a_leader_accepts_a_header_max_timestamp_equal_to_the_records_largest(open_log):
    """Negative deltas count too: here every record is older than first_timestamp."""
    log = open_log()
    records = [record(0, ts_delta=-5), record(1, ts_delta=-2), record(2, ts_delta=-9)]
    info = take(log, client_batch(records, max_timestamp=T0 - 2))
    assert info.max_timestamp == T0 - 2


def test_a_leader_refuses_timestamps_outside_int64_milliseconds(open_log):
    """A timestamp delta that takes a record past int64 is refused (no reader could hold
    it)."""
    records = [record(0), record(1, ts_delta=2**63 - 1)]
    refused(open_log(), client_batch(records), r"outside int64 milliseconds")


def test_the_message_says_what_to_do(open_log):
    """The refusal names the batch's place in the request and how to fix it."""
    e = refused(open_log(), client_batch([record(0, edit={"key": v(9)})]), r"record 0 of 1")
    assert str(e).startswith("batch at byte 0 of the request: ")
    assert "encode the records as Kafka's record batch v2" in str(e)


def test_a_compacted_topic_refuses_a_record_without_a_key_after_walking_it(open_log):
    """cleanup.policy=compact takes its keys from the same walk, and a well-formed keyless
    record is refused for its missing key."""
    log = open_log({"cleanup.policy": "compact"})
    refused(log, client_batch([record(0), record(1, key=None)]), r"without a key")
    assert take(log, client_batch([record(0)])).record_count == 1


# -- properties ---------------------------------------------------------------------------------

binary = st.one_of(st.none(), st.binary(max_size=200))
header_lists = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))), max_size=2
)
rows = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), binary, binary, header_lists), min_size=1, max_size=80
)
CONFIGS = [LogConfig.from_dict({}), LogConfig.from_dict({"cleanup.policy": "compact"})]


def leader_check(batch: bytes, config: LogConfig) -> None:
    """The leader's whole check of one client batch, without a log (validate_batches)."""
    log_validator.validate_batches(memoryview(accept_kafka_records(batch)), config, "t-0", False)


@given(rows, st.sampled_from(CODECS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_batch_kafka_python_writes_passes_the_walk(batch_rows, codec):
    """Whatever kafka-python encodes (any timestamps, keys, values, headers, codec) passes,
    and the walk reports its timestamp deltas and keyless records."""
    rows = [(T0 + d, k, value, h) for d, k, value, h in batch_rows]
    batch = kafka_batch(rows, codec)
    leader_check(batch, CONFIGS[0])
    stored = accept_kafka_records(batch)
    header = rb.read_header(stored)
    facts = walk.walk_records(rb.decompress(header.codec, stored[rb.HEADER_SIZE :]), len(rows))
    deltas = [t - header.first_timestamp for t, *_ in rows]
    assert facts == (min(deltas), max(deltas), sum(k is None for _, k, _, _ in rows))


@given(rows, st.lists(st.tuples(st.integers(0), st.integers(1, 255)), min_size=1, max_size=3),
       st.sampled_from(CONFIGS))  # fmt: skip
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_byte_flipped_records_section_is_refused_or_still_readable(batch_rows, flips, config):
    """Flip bytes of a records section and fix the CRC: the leader either refuses the batch
    with InvalidRecord or takes one that rafka's and kafka-python's readers both read
    whole, never anything else."""
    rows = [(T0 + d, k, value, h) for d, k, value, h in batch_rows]
    batch = bytearray(kafka_batch(rows))
    for where, mask in flips:
        batch[rb.HEADER_SIZE + where % (len(batch) - rb.HEADER_SIZE)] ^= mask
    rb.CRC.pack_into(batch, rb.CRC_POS, rb.crc32c(memoryview(batch)[rb.ATTRIBUTES_POS :]))
    try:
        leader_check(bytes(batch), config)
    except InvalidRecord:
        return
    stored = accept_kafka_records(bytes(batch))
    header = rb.read_header(stored)
    columns = kr.decode_columns(header, stored[rb.HEADER_SIZE :])
    assert columns[0] is None and len(columns[3]) == len(rows)  # offset deltas 0..n-1
    [(_, records)] = read_kafka(to_kafka_wire(stored))
    assert [r.offset for r in records] == list(range(len(rows)))


@given(st.binary(max_size=300), st.integers(0, 20))
@settings(max_examples=400, deadline=None)
def test_the_walk_raises_only_corrupt_record_on_any_bytes(section, count):
    """On arbitrary bytes the walk returns or raises CorruptRecord (which the validator turns
    into InvalidRecord), never IndexError or anything else."""
    try:
        walk.walk_records(section, count)
    except CorruptRecord as e:
        assert str(e)
