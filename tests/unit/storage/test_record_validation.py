"""A leader checks the records section of every client batch, not only its header.

Each bad batch here carries a valid CRC and a consistent header, so only the records section
(the five msgpack columns, see record_batch.py) is wrong. A consumer could not read such a
batch, so the leader refuses it with InvalidRecord (not retried) and writes nothing."""

from __future__ import annotations

import struct

import msgpack
import pytest

from rafka.errors import InvalidRecord
from rafka.storage import record_batch as rb

from .support import batch, read_all

CODECS = list(rb.Codec)
TS = 1_700_000_000_000


def pack(values: list[bytes | None]) -> msgpack.ExtType:
    """A packed column built from the documented layout."""
    lengths = struct.pack(f"<{len(values)}i", *(-1 if v is None else len(v) for v in values))
    return rb.packed_column(lengths, b"".join(v for v in values if v is not None))


def raw_batch(
    section: bytes,
    count: int,
    codec: rb.Codec = rb.Codec.NONE,
    *,
    control: bool = False,
    producer_id: int = -1,
    base_sequence: int = -1,
    max_timestamp: int = TS,
) -> bytes:
    """A batch of ``count`` records (offsets 0..count-1 in its header) around an arbitrary,
    uncompressed ``section``, compressed with ``codec``; its CRC is valid."""
    attributes = int(codec) | (0x30 if control else 0)  # 0x10 transactional, 0x20 control
    return rb.assemble_batch(
        rb.compress(codec, section),
        base_offset=0, partition_leader_epoch=-1, attributes=attributes,
        last_offset_delta=count - 1, first_timestamp=TS, max_timestamp=max_timestamp,
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence, record_count=count,
    )  # fmt: skip


def columns_batch(columns: list, count: int, codec: rb.Codec = rb.Codec.NONE, **kw) -> bytes:
    return raw_batch(msgpack.packb(columns, use_bin_type=True), count, codec, **kw)


def refused(log, data: bytes, match: str, **kw) -> InvalidRecord:
    """Append ``data`` as leader, expect InvalidRecord matching ``match``, and check that
    nothing was written."""
    end, size = log.log_end_offset, log.active_segment.size
    with pytest.raises(InvalidRecord, match=match) as caught:
        log.append_as_leader(data, leader_epoch=0, **kw)
    assert (log.log_end_offset, log.active_segment.size) == (end, size)
    return caught.value


# -- offsets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_a_leader_refuses_offset_deltas_that_go_backwards(open_log, codec):
    log = open_log()
    bad = columns_batch([[0, 2, 1], None, None, [b"a", b"b", b"c"], None], 3, codec)
    rb.verify_batch(bad)  # only the records section is wrong
    refused(log, bad, r"offset deltas must be 0\.\.2")


@pytest.mark.parametrize("codec", CODECS)
def test_a_leader_refuses_offset_deltas_past_the_last_offset_delta(open_log, codec):
    log = open_log()
    bad = columns_batch([[0, 1, 7], None, None, [b"a", b"b", b"c"], None], 3, codec)
    refused(log, bad, r"offset deltas must be 0\.\.2")


@pytest.mark.parametrize(
    "deltas",
    [[0, 0, 1], [1, 2, 3], [-1, 0, 1], [0, 1], [0, 1, 2, 3], [0, 1.0, 2], [0, True, 2], 5,
     {"0": 1}],
    ids=["repeated", "shifted", "negative", "short", "long", "float", "bool", "int", "map"],
)  # fmt: skip
def test_a_leader_refuses_offset_deltas_other_than_0_to_n_minus_1(open_log, deltas):
    """A producer's batch has offsets 0..n-1; gaps are left only by compaction, which a
    leader never receives."""
    log = open_log()
    bad = columns_batch([deltas, None, None, [b"a", b"b", b"c"], None], 3)
    refused(log, bad, "offset deltas")


def test_explicit_offset_deltas_0_to_n_minus_1_are_accepted(open_log):
    log = open_log()
    log.append_as_leader(columns_batch([[0, 1, 2], None, None, [b"a", b"b", b"c"], None], 3), 0)
    assert [r[:3] for r in read_all(log)] == [(0, None, b"a"), (1, None, b"b"), (2, None, b"c")]


# -- columns -----------------------------------------------------------------------------------

THREE = [b"a", b"b", b"c"]
SHORT_COLUMNS = {
    "timestamps": [None, [0, 1], None, THREE, None],
    "keys": [None, None, [b"k", b"l"], THREE, None],
    "values": [None, None, None, [b"a", b"b"], None],
    "headers": [None, None, None, THREE, [None, [["h", b"v"]]]],
    "packed-keys": [None, None, pack([b"k", None]), pack(THREE), None],
    "packed-values": [None, None, None, pack([b"a", b"b"]), None],
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("columns", SHORT_COLUMNS.values(), ids=SHORT_COLUMNS.keys())
def test_a_leader_refuses_columns_shorter_than_the_record_count(open_log, columns, codec):
    log = open_log()
    refused(log, columns_batch(columns, 3, codec), r"per record \(3, the header.s record_count\)")


LONG_COLUMNS = {
    "timestamps": [None, [0, 1, 2, 3], None, THREE, None],
    "keys": [None, None, [b"k", b"l", b"m", b"n"], THREE, None],
    "values": [None, None, None, THREE + [b"d"], None],
    "headers": [None, None, None, THREE, [None] * 4],
    "packed-values": [None, None, None, pack(THREE + [b"d"]), None],
}


@pytest.mark.parametrize("columns", LONG_COLUMNS.values(), ids=LONG_COLUMNS.keys())
def test_a_leader_refuses_columns_longer_than_the_record_count(open_log, columns):
    log = open_log()
    refused(log, columns_batch(columns, 3), r"per record \(3, the header.s record_count\)")


WRONG_CELLS = {
    "int-value": [None, None, None, [b"a", 5, b"c"], None],
    "str-value": [None, None, None, [b"a", "b", b"c"], None],
    "list-value": [None, None, None, [b"a", [b"b"], b"c"], None],
    "values-missing": [None, None, None, None, None],
    "values-map": [None, None, None, {b"a": b"b"}, None],
    "str-key": [None, None, ["k", None, None], THREE, None],
    "float-timestamp": [None, [0, 1.5, 2], None, THREE, None],
    "null-timestamp": [None, [0, None, 2], None, THREE, None],
    "timestamp-past-int64": [None, [0, 2**63, 0], None, THREE, None],
    "header-not-a-list": [None, None, None, THREE, [None, 5, None]],
    "header-pair-of-three": [None, None, None, THREE, [None, [["h", b"v", b"x"]], None]],
    "header-name-bytes": [None, None, None, THREE, [None, [[b"h", b"v"]], None]],
    "header-value-str": [None, None, None, THREE, [None, [["h", "v"]], None]],
    "packed-offsets": [pack([b"", b"", b""]), None, None, THREE, None],
    "packed-headers": [None, None, None, THREE, pack([None, None, None])],
}


@pytest.mark.parametrize("columns", WRONG_CELLS.values(), ids=WRONG_CELLS.keys())
def test_a_leader_refuses_cells_a_consumer_cannot_read(open_log, columns):
    log = open_log()
    refused(log, columns_batch(columns, 3), "batch at byte 0")


# -- sections that do not parse ----------------------------------------------------------------

NOT_MSGPACK = {
    "never-used-byte": b"\xc1\xc1\xc1",
    "text": b"these are not five columns",
    "truncated": msgpack.packb([None, None, None, THREE, None])[:-2],
    "trailing-bytes": msgpack.packb([None, None, None, THREE, None]) + b"\x00",
    "four-columns": msgpack.packb([None, None, None, THREE]),
    "a-map": msgpack.packb({"values": THREE}),
    "empty": b"",
    "unknown-extension": msgpack.packb([None, None, None, msgpack.ExtType(9, b"xxxx"), None]),
    "torn-packed-column": msgpack.packb(
        [None, None, None, msgpack.ExtType(1, struct.pack("<I3i", 3, 1, 1, 1) + b"ab"), None]
    ),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("section", NOT_MSGPACK.values(), ids=NOT_MSGPACK.keys())
def test_a_leader_refuses_a_records_section_that_is_not_msgpack(open_log, section, codec):
    log = open_log()
    refused(log, raw_batch(section, 3, codec), "batch at byte 0")


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not rb.Codec.NONE])
def test_a_leader_refuses_a_records_section_that_does_not_decompress(open_log, codec):
    log = open_log()
    bad = rb.assemble_batch(
        b"\x00not compressed at all\x00" * 4, base_offset=0, partition_leader_epoch=-1,
        attributes=int(codec), last_offset_delta=0, first_timestamp=TS, max_timestamp=TS,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=1,
    )  # fmt: skip
    refused(log, bad, f"does not decompress with {codec.name}")


# -- what a refusal leaves behind --------------------------------------------------------------


def test_the_refusal_is_an_invalid_record_the_producer_does_not_retry(open_log):
    """The CRC was right, so resending the same bytes cannot help: the error is not
    retriable and says which batch was wrong and what to do."""
    log = open_log()
    good = batch([b"x"])
    bad = columns_batch([[0, 2, 1], None, None, THREE, None], 3)
    error = refused(log, good + bad, "offset deltas")
    assert type(error) is InvalidRecord and not error.retriable and error.errno == 87
    assert f"batch at byte {len(good)}" in str(error)


def test_a_refused_request_writes_nothing_and_the_next_append_gets_the_next_offset(open_log):
    """A request whose later batch is bad loses its good batches too (a request is
    appended whole or not at all); the following append continues the offsets."""
    log = open_log()
    log.append_as_leader(batch([b"a", b"b"]), leader_epoch=0)
    bad = columns_batch([None, None, None, [b"x", b"y"], None], 3)
    refused(log, batch([b"c"]) + bad, "record_count")
    assert log.append_as_leader(batch([b"d"]), leader_epoch=0).first_offset == 2
    assert [(r[0], r[2]) for r in read_all(log)] == [(0, b"a"), (1, b"b"), (2, b"d")]


def test_a_refused_idempotent_batch_leaves_its_sequence_free(open_log):
    """Producer state moves only for written batches: the corrected batch with the same
    sequence is accepted as new, not as a duplicate or out of order."""
    log = open_log()
    bad = columns_batch([[0, 0], None, None, [b"a", b"b"], None], 2, producer_id=7,
                        base_sequence=0)  # fmt: skip
    refused(log, bad, "offset deltas")
    good = batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    info = log.append_as_leader(good, leader_epoch=0)
    assert (info.first_offset, info.duplicate) == (0, False)


# -- what is still accepted --------------------------------------------------------------------

VALID = {
    "plain": dict(values=[b"a", None, b""], keys=None, timestamps=TS),
    "keys-timestamps-headers": dict(
        values=[b"a", b"b", None], keys=[b"k", None, b"m"], timestamps=[TS, TS + 5, TS - 2],
        headers=[[("h", b"v"), ("n", None)], None, []],
    ),
    "packed-values": dict(values=pack([b"a", None, b"c"]), count=3),
    "packed-keys-and-values": dict(
        values=pack([b"a", None, b"c"]), keys=pack([None, b"k", b""]), count=3,
        timestamps=[TS, TS + 1, TS + 1],
    ),
    "packed-values-plain-keys": dict(values=pack([b"a", b"b", b"c"]), keys=[b"k", None, b"m"],
                                     count=3),
}  # fmt: skip


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kw", VALID.values(), ids=VALID.keys())
def test_valid_batches_of_every_codec_and_column_form_are_accepted(open_log, codec, kw):
    log = open_log()
    data = rb.encode_batch(codec=codec, **kw)
    expected = rb.decode_records(data)
    info = log.append_as_leader(data, leader_epoch=0)
    assert (info.first_offset, info.last_offset) == (0, 2)
    stored = rb.decode_records(log.read(0, 1 << 20).records)
    assert stored.header.codec is codec
    assert stored[1:] == expected[1:]  # everything but the (patched) header


@pytest.mark.parametrize("topic_codec", CODECS)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kw", VALID.values(), ids=VALID.keys())
def test_a_topic_codec_other_than_the_producers_keeps_every_record(
    open_log, codec, topic_codec, kw
):
    """compression.type re-encodes into the topic's codec; every field of every record
    survives, packed columns included."""
    log = open_log({"compression.type": topic_codec.name.lower()})
    data = rb.encode_batch(codec=codec, producer_id=3, producer_epoch=1, base_sequence=0, **kw)
    expected = rb.decode_records(data)
    log.append_as_leader(batch([b"first"]), leader_epoch=4)
    info = log.append_as_leader(data, leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (1, 3)
    view = log.read(1, 1 << 20).records
    stored = rb.decode_records(view, next(p for p, h in rb.iter_batches(view) if h.base_offset))
    assert stored.header.codec is topic_codec
    assert stored.offsets == [1, 2, 3]
    assert stored[2:] == expected[2:]
    h, e = stored.header, expected.header
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (
        3, 1, 0, 4)  # fmt: skip
    assert (h.first_timestamp, h.max_timestamp, h.record_count) == (
        e.first_timestamp, e.max_timestamp, e.record_count)  # fmt: skip


def test_transaction_markers_are_accepted(open_log):
    log = open_log()
    log.append_as_leader(batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0,
                               is_transactional=True), leader_epoch=0)  # fmt: skip
    marker = rb.encode_control_batch(rb.ControlType.COMMIT, producer_id=7, producer_epoch=0,
                                     coordinator_epoch=3, timestamp=TS)  # fmt: skip
    assert log.append_as_leader(marker, leader_epoch=0, allow_control=True).first_offset == 1


@pytest.mark.parametrize(
    "columns",
    [[None, None, None, [struct.pack(">hi", 0, 3)], None],
     [None, None, [b"junk"], [struct.pack(">hi", 0, 3)], None],
     [None, None, [struct.pack(">hh", 0, 1)], [b"junk"], None],
     [None, None, [struct.pack(">hh", 0, 9)], [struct.pack(">hi", 0, 3)], None]],
    ids=["no-key", "bad-key", "bad-value", "unknown-type"],
)  # fmt: skip
def test_a_leader_refuses_a_control_batch_that_is_not_a_marker(open_log, columns):
    log = open_log()
    bad = columns_batch(columns, 1, control=True, producer_id=7)
    refused(log, bad, "control", allow_control=True)


def test_a_follower_still_takes_compacted_batches_with_offset_gaps(open_log, tmp_path):
    """Compaction leaves gaps in offset deltas; a follower copies such batches from its
    leader's log, so only leader appends check the records section."""
    compacted = rb.encode_batch([b"a", b"c"], offset_deltas=[0, 2], last_offset_delta=3)
    follower = open_log(directory=tmp_path / "follower-0")
    follower.append_as_follower(compacted)
    assert follower.log_end_offset == 4
    assert [(r[0], r[2]) for r in read_all(follower)] == [(0, b"a"), (2, b"c")]


# -- timestamps --------------------------------------------------------------------------------


@pytest.mark.parametrize("header_max", [TS, TS + 10_000])
def test_a_leader_refuses_a_header_max_timestamp_that_is_not_the_records_largest(
    open_log, header_max
):
    """The header's max timestamp feeds the time index, timestamp lookups and retention; one
    that is not the largest record timestamp (TS + 5,000 here) would mislead all three."""
    log = open_log()
    bad = columns_batch([None, [0, 5000, 10], None, [b"a", b"b", b"c"], None], 3,
                        max_timestamp=header_max)  # fmt: skip
    refused(log, bad, r"max timestamp")


def test_a_leader_accepts_a_header_max_timestamp_equal_to_the_records_largest(open_log):
    log = open_log()
    good = columns_batch([None, [0, 5000, 10], None, [b"a", b"b", b"c"], None], 3,
                         max_timestamp=TS + 5000)  # fmt: skip
    assert log.append_as_leader(good, leader_epoch=0).max_timestamp == TS + 5000


# -- compacted topics --------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [None, [b"k", None]])
def test_a_compacted_topic_refuses_records_without_a_key(open_log, keys):
    """As Kafka does: compaction keeps the latest record per key, so a record without one
    could never be cleaned."""
    log = open_log({"cleanup.policy": "compact"})
    refused(log, batch([b"a", b"b"], keys), r"without a key")


def test_a_compacted_topic_refuses_a_packed_key_column_with_a_null(open_log):
    log = open_log({"cleanup.policy": "compact"})
    bad = columns_batch([None, None, pack([b"k", None]), [b"a", b"b"], None], 2)
    refused(log, bad, r"without a key")


def test_a_compacted_topic_accepts_records_that_all_have_keys(open_log):
    log = open_log({"cleanup.policy": "compact"})
    assert log.append_as_leader(batch([b"a", None], [b"k", b"j"]), leader_epoch=0).record_count == 2
    packed = columns_batch([None, None, pack([b"k", b"j"]), [b"a", b"b"], None], 2)
    assert log.append_as_leader(packed, leader_epoch=0).first_offset == 2
