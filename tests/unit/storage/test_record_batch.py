"""The record-batch codec: exact header bytes, round trips, patching and corruption checks."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.errors import CorruptRecord, UnsupportedCompressionType
from rafka.storage import record_batch as rb

CODECS = list(rb.Codec)

values_st = st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=40)


@st.composite
def record_columns(draw):
    values = draw(values_st)
    n = len(values)
    keys = draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.binary(max_size=40)),
                                               min_size=n, max_size=n)))
    base_ts = draw(st.integers(0, 2**41))
    timestamps = draw(st.one_of(
        st.just(base_ts),
        st.lists(st.integers(0, 2**41), min_size=n, max_size=n),
    ))
    header_st = st.one_of(st.none(), st.lists(
        st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3))
    headers = draw(st.one_of(st.none(), st.lists(header_st, min_size=n, max_size=n)))
    return values, keys, timestamps, headers


@given(record_columns(), st.sampled_from(CODECS))
def test_any_records_round_trip_through_every_codec(columns, codec):
    """Whatever the values, keys, timestamps and headers, decoding gives back what was encoded."""
    values, keys, timestamps, headers = columns
    batch = rb.encode_batch(values, keys, timestamps, headers, codec=codec, base_offset=7)
    records = rb.decode_records(batch)
    n = len(values)
    assert records.values == values
    assert records.offsets == list(range(7, 7 + n))
    expected_ts = [timestamps] * n if isinstance(timestamps, int) else timestamps
    assert records.timestamps == expected_ts
    assert (records.keys or [None] * n) == (keys or [None] * n)
    got_headers = [h or [] for h in (records.headers or [None] * n)]
    want_headers = [list(h or []) for h in (headers or [None] * n)]
    assert got_headers == want_headers
    assert records.header.codec is codec
    assert records.header.max_timestamp == max(expected_ts)


def test_header_bytes_are_pinned():
    """The 61-byte header layout is Kafka v2's, big-endian, field by field."""
    batch = rb.encode_batch(
        [b"v"], [b"k"], 1000, base_offset=5, producer_id=9, producer_epoch=2, base_sequence=3,
        partition_leader_epoch=4,
    )
    base, length, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, seq, count = (
        struct.unpack_from(">qiibIhiqqqhii", batch))
    assert (base, epoch, magic, attrs, lod, first_ts, max_ts, pid, pepoch, seq, count) == (
        5, 4, 2, 0, 0, 1000, 1000, 9, 2, 3, 1)
    assert length == len(batch) - 12 == 61
    assert crc == 0xCC15C62C == rb.crc32c(batch[21:])
    # msgpack [nil, nil, [b"k"], [b"v"], nil]
    assert batch[61:] == bytes.fromhex("95c0c091c4016b91c40176c0")


def test_records_section_is_one_msgpack_array_of_columns():
    """The records section is [offset_deltas, timestamp_deltas, keys, values, headers]."""
    batch = rb.encode_batch([b"a", None], [b"k", None], [10, 12])
    import msgpack
    assert msgpack.unpackb(batch[61:]) == [None, [0, 2], [b"k", None], [b"a", None], None]


def test_patching_base_offset_and_epoch_keeps_crc_and_records_bytes():
    """The leader writes base offset and epoch into the header without touching the CRC'd part."""
    batch = bytearray(rb.encode_batch([b"x" * 100] * 10, codec=rb.Codec.LZ4))
    before = bytes(batch[21:])
    rb.set_base_offset(batch, 123456)
    rb.set_partition_leader_epoch(batch, 7)
    assert bytes(batch[21:]) == before
    header = rb.verify_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (123456, 7)
    assert rb.decode_records(batch).offsets[0] == 123456


def test_log_append_time_restamps_and_recomputes_crc():
    """Stamping LogAppendTime changes attributes and max timestamp and leaves a valid CRC."""
    batch = rb.encode_batch([b"a", b"b"], timestamps=[1, 2])
    head = bytearray(batch[:61])
    rb.set_log_append_time(head, batch[61:], 999)
    patched = bytes(head) + batch[61:]
    records = rb.decode_records(patched)
    assert records.header.timestamp_type is rb.TimestampType.LOG_APPEND_TIME
    assert records.timestamps == [999, 999]


def test_crc_mismatch_is_a_typed_error_naming_the_batch():
    """A flipped bit in the records section fails the CRC check with CorruptRecord."""
    batch = bytearray(rb.encode_batch([b"hello"], base_offset=42))
    batch[-1] ^= 0x01
    with pytest.raises(CorruptRecord, match="CRC mismatch.*base offset 42"):
        rb.verify_batch(batch)


def test_bad_magic_and_truncation_are_detected():
    """A wrong magic byte and a batch cut short each raise CorruptRecord saying which."""
    batch = bytearray(rb.encode_batch([b"hello"]))
    with pytest.raises(CorruptRecord, match="truncated"):
        rb.read_header(batch[:-1])
    with pytest.raises(CorruptRecord, match="truncated"):
        rb.read_header(batch[:30])
    batch[16] = 1
    with pytest.raises(CorruptRecord, match="magic 1"):
        rb.read_header(batch)


def test_iter_batches_yields_the_valid_prefix_before_raising():
    """Walking a buffer yields every good batch before the first corrupt one."""
    good = rb.encode_batch([b"a"]) + rb.encode_batch([b"b"])
    bad = bytearray(rb.encode_batch([b"c"]))
    bad[-1] ^= 0xFF
    seen = []
    with pytest.raises(CorruptRecord):
        for pos, _ in rb.iter_batches(good + bytes(bad)):
            seen.append(pos)
    assert len(seen) == 2


def test_control_batch_round_trip():
    """A commit marker decodes as a control record with its coordinator epoch."""
    batch = rb.encode_control_batch(
        rb.ControlType.COMMIT, producer_id=5, producer_epoch=1, coordinator_epoch=3, timestamp=10)
    records = rb.decode_records(batch)
    assert records.header.is_control and records.header.is_transactional
    assert rb.parse_control_record(records.keys[0], records.values[0]) == (rb.ControlType.COMMIT, 3)


def test_compacted_batches_keep_explicit_offset_deltas_and_last_offset():
    """A batch with gaps keeps its offsets and its last offset delta."""
    batch = rb.encode_batch([b"a", b"b"], offset_deltas=[1, 4], last_offset_delta=6, base_offset=10)
    records = rb.decode_records(batch)
    assert records.offsets == [11, 14]
    assert records.header.last_offset == 16


def test_reencode_with_another_codec_keeps_every_field():
    """Re-encoding with another codec changes only the codec."""
    batch = rb.encode_batch([b"a", None], [b"k", b"j"], [5, 6], [[("h", b"v")], None],
                            producer_id=1, producer_epoch=0, base_sequence=4, codec=rb.Codec.GZIP)
    again = rb.decode_records(rb.reencode(rb.decode_records(batch), codec=rb.Codec.ZSTD))
    original = rb.decode_records(batch)
    assert again.header.codec is rb.Codec.ZSTD
    assert again[1:] == original[1:]
    ignore = dict(crc=0, batch_length=0, attributes=0)
    assert again.header._replace(**ignore) == original.header._replace(**ignore)


def test_unknown_codec_name_says_which_are_allowed():
    """Asking for an unknown codec names the ones that exist."""
    with pytest.raises(UnsupportedCompressionType, match="none, gzip, lz4, zstd"):
        rb.Codec.from_name("snappy")


def test_unknown_codec_bits_are_refused_when_reading_the_header():
    """A batch naming codec 5 is refused up front with the codecs rafka knows."""
    batch = bytearray(rb.encode_batch([b"a"]))
    rb.ATTRIBUTES.pack_into(batch, rb.ATTRIBUTES_POS, 5)
    with pytest.raises(UnsupportedCompressionType, match="codec 5"):
        rb.read_header(batch)


def test_wrongly_shaped_records_section_is_corrupt_not_a_crash():
    """Valid msgpack in the wrong shape (with a valid CRC) raises CorruptRecord."""
    import msgpack
    for section in ([None, None, None, 5, None], [None, None, [b"k"], [b"a", b"b"], None]):
        batch = rb.assemble_batch(
            msgpack.packb(section), base_offset=0, partition_leader_epoch=-1, attributes=0,
            last_offset_delta=0, first_timestamp=0, max_timestamp=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, record_count=1)
        with pytest.raises(CorruptRecord):
            rb.decode_records(batch)


def test_missing_control_record_key_is_corrupt():
    """A control record without a key raises CorruptRecord."""
    with pytest.raises(CorruptRecord):
        rb.parse_control_record(None, b"\0\0\0\0\0\0")
