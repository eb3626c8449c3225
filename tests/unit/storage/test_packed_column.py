"""The packed column form of a records section, and the Arrow columns built on it.

A packed column is msgpack ext 1: count (uint32 LE), one int32 LE length per record (-1 for
null), then the non-null values back to back. The bulk producer writes it from Arrow/numpy
columns; the columnar consumer turns it back into Arrow without per-record work."""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients import columnar
from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb

cells = st.one_of(st.none(), st.binary(max_size=50))
columns = st.lists(cells, max_size=60)
CODECS = list(rb.Codec)


def pack(values: list[bytes | None]) -> msgpack.ExtType:
    """A packed column built by hand from the documented layout (independent of columnar)."""
    lengths = struct.pack(f"<{len(values)}i", *(-1 if v is None else len(v) for v in values))
    return rb.packed_column(lengths, b"".join(v for v in values if v is not None))


def payload(count: int, lengths: list[int], data: bytes) -> bytes:
    return struct.pack("<I", count) + struct.pack(f"<{len(lengths)}i", *lengths) + data


# -- record_batch: packed_column / parse_packed_column -----------------------------------------


def test_packed_column_is_ext_type_1_with_count_lengths_and_data():
    """The ext payload is exactly count, lengths (-1 for null) and the non-null bytes."""
    ext = pack([b"ab", None, b"", b"cde"])
    assert ext.code == rb.PACKED_COLUMN_EXT == 1
    assert ext.data == payload(4, [2, -1, 0, 3], b"abcde")


def test_parse_packed_column_gives_lengths_and_data_views():
    """Lengths come back as int32 with -1 for null; data is the values back to back."""
    column = rb.parse_packed_column(payload(3, [1, -1, 2], b"xyz"))
    assert isinstance(column, rb.PackedColumn)
    assert list(column.lengths) == [1, -1, 2]
    assert bytes(column.data) == b"xyz"
    assert column.to_list() == [b"x", None, b"yz"]


@given(columns)
def test_any_column_round_trips_through_the_packed_form(values):
    """Whatever bytes and nulls, packing then parsing gives them back; null stays None and
    the empty value stays b''."""
    ext = pack(values)
    assert rb.parse_packed_column(ext.data).to_list() == values


def test_empty_packed_column_has_no_records():
    assert rb.parse_packed_column(pack([]).data).to_list() == []


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"", "shorter than its count"),
        (b"\x01\x00\x00", "shorter than its count"),
        (struct.pack("<I", 3) + struct.pack("<2i", 1, 1) + b"ab", "declares 3 lengths"),
        (payload(2, [2, 2], b"abc"), "do not add up"),
        (payload(2, [1, 1], b"abc"), "do not add up"),
        (payload(1, [-1], b"x"), "do not add up"),
        (payload(0, [], b"stray"), "do not add up"),
    ],
    ids=["empty", "short-count", "missing-lengths", "data-short", "data-long", "null-with-data",
         "stray-data"],
)  # fmt: skip
def test_corrupt_packed_payload_raises_corrupt_record(blob, message):
    """A payload whose count, lengths and data disagree raises CorruptRecord."""
    with pytest.raises(CorruptRecord, match=message):
        rb.parse_packed_column(blob)


# -- record_batch: encode_batch / decode_records with packed columns ---------------------------


@given(columns.filter(bool), st.booleans(), st.sampled_from(CODECS), st.data())
def test_packed_batches_decode_into_lists(values, with_keys, codec, data):
    """A batch whose values (and keys) are packed decodes into plain lists, through every
    codec, with offsets and timestamps as for any batch."""
    n = len(values)
    keys = data.draw(st.lists(cells, min_size=n, max_size=n)) if with_keys else None
    batch = rb.encode_batch(
        pack(values), pack(keys) if keys is not None else None, 1000,
        count=n, codec=codec, base_offset=50,
    )  # fmt: skip
    records = rb.decode_records(batch)
    assert records.values == values
    assert records.keys == keys
    assert records.offsets == list(range(50, 50 + n))
    assert records.timestamps == [1000] * n
    assert records.header.record_count == n
    assert records.header.last_offset_delta == n - 1


def test_packed_values_may_carry_plain_keys_and_per_record_timestamps():
    """Only values need to be packed; keys and timestamps may be lists."""
    batch = rb.encode_batch(pack([b"a", b"b", None]), [b"k", None, b"m"], [5, 7, 6], count=3)
    records = rb.decode_records(batch)
    assert records.values == [b"a", b"b", None]
    assert records.keys == [b"k", None, b"m"]
    assert records.timestamps == [5, 7, 6]
    assert records.header.max_timestamp == 7


def test_packed_values_need_count():
    with pytest.raises(ValueError, match="count="):
        rb.encode_batch(pack([b"a"]))


def test_packed_keys_need_packed_values():
    with pytest.raises(ValueError, match="packed keys need packed values"):
        rb.encode_batch([b"a"], pack([b"k"]))


def test_count_that_disagrees_with_the_packed_column_is_corrupt_on_read():
    """The header's record count must match the column; a mismatch is CorruptRecord."""
    batch = rb.encode_batch(pack([b"a", b"b"]), count=3)
    with pytest.raises(CorruptRecord, match="declares 3 records"):
        rb.decode_records(batch)


def test_unpack_section_gives_packed_columns_to_the_columnar_reader():
    """With packed=True the packed columns come back as PackedColumn views; without, as
    lists; plain (list) columns are lists either way."""
    batch = rb.encode_batch(pack([b"v1", None]), pack([None, b"k2"]), 0, count=2)
    header = rb.verify_batch(batch)
    section = batch[rb.HEADER_SIZE :]
    _o, _t, keys, values, _h = rb.unpack_section(header, section, packed=True)
    assert isinstance(values, rb.PackedColumn) and isinstance(keys, rb.PackedColumn)
    assert list(values.lengths) == [2, -1] and list(keys.lengths) == [-1, 2]
    assert values.to_list() == [b"v1", None]
    _o, _t, keys, values, _h = rb.unpack_section(header, section)
    assert (keys, values) == ([None, b"k2"], [b"v1", None])
    plain = rb.encode_batch([b"x"], [b"y"])
    cols = rb.unpack_section(rb.verify_batch(plain), plain[rb.HEADER_SIZE :], packed=True)
    assert cols[2:4] == [[b"y"], [b"x"]]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "bad",
    [payload(2, [2, 2], b"abc"), payload(5, [1], b"a"), b"\x00\x01"],
    ids=["lengths-dont-add-up", "short-lengths", "short-count"],
)
def test_corrupt_packed_column_inside_a_batch_is_corrupt_record(codec, bad):
    """A batch with a valid CRC whose packed column is inconsistent raises CorruptRecord
    from decode_records and from the columnar reader."""
    ext = msgpack.ExtType(rb.PACKED_COLUMN_EXT, bad)
    batch = rb.encode_batch(ext, count=2, codec=codec)
    rb.verify_batch(batch)  # the CRC is fine: the damage is inside the section
    with pytest.raises(CorruptRecord):
        rb.decode_records(batch)
    with pytest.raises(CorruptRecord):
        columnar.batch_to_arrow("t", 0, batch, 0, 0)


def test_unknown_msgpack_extension_is_corrupt_record():
    batch = rb.encode_batch(msgpack.ExtType(9, b"\x00" * 4), count=0)
    with pytest.raises(CorruptRecord, match="unknown msgpack extension 9"):
        rb.decode_records(batch)
    with pytest.raises(CorruptRecord, match="unknown msgpack extension 9"):
        columnar.batch_to_arrow("t", 0, batch, 0, 0)


# -- columnar.binary_column --------------------------------------------------------------------


def as_list(column: columnar.BinaryColumn) -> list[bytes | None]:
    """The column's values, read from its lengths and data (what goes on the wire)."""
    return rb.parse_packed_column(column.to_msgpack().data).to_list()


def test_binary_column_from_a_list_uses_minus_one_for_nulls():
    column = columnar.binary_column([b"ab", None, b"", b"c"], "values")
    assert len(column) == 4
    assert column.lengths.tolist() == [2, -1, 0, 1]
    assert column.offsets.tolist() == [0, 2, 2, 2]
    assert bytes(column.data) == b"abc"
    assert column.null_count == 1
    assert column.size_of(0, 4) == 3 and column.size_of(1, 3) == 0
    assert as_list(column) == [b"ab", None, b"", b"c"]


@given(columns)
def test_binary_column_from_any_list_round_trips_through_the_packed_form(values):
    column = columnar.binary_column(values, "values")
    assert column.array.to_pylist() == values
    assert as_list(column) == values


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["héllo", None, "", "x"]),
        pa.array(["héllo", None, "", "x"], type=pa.large_string()),
        pa.array([b"h\xc3\xa9llo", None, b"", b"x"], type=pa.large_binary()),
        pa.array([b"h\xc3\xa9llo", None, b"", b"x"], type=pa.binary()),
        pa.chunked_array([["héllo", None], ["", "x"]]),
    ],
    ids=["string", "large_string", "large_binary", "binary", "chunked"],
)
def test_binary_column_takes_arrow_string_and_binary_arrays(array):
    """Strings become their UTF-8 bytes; large types and chunked arrays are accepted."""
    column = columnar.binary_column(array, "values")
    assert pa.types.is_binary(column.array.type)
    assert as_list(column) == ["héllo".encode(), None, b"", b"x"]


def test_binary_column_takes_a_2d_uint8_numpy_array_one_row_per_record():
    rows = np.arange(12, dtype=np.uint8).reshape(4, 3)
    column = columnar.binary_column(rows, "values")
    assert column.lengths.tolist() == [3, 3, 3, 3]
    assert as_list(column) == [bytes(r) for r in rows]
    # a non-contiguous view is copied into rows correctly
    view = np.arange(24, dtype=np.uint8).reshape(4, 6)[:, ::2]
    assert as_list(columnar.binary_column(view, "values")) == [bytes(r) for r in view]


def test_a_zero_width_numpy_array_is_a_column_of_empty_values():
    column = columnar.binary_column(np.zeros((3, 0), dtype=np.uint8), "values")
    assert as_list(column) == [b"", b"", b""]


@pytest.mark.parametrize(
    "values, message",
    [
        (pa.array([1, 2]), "binary or string Arrow array"),
        (np.zeros(4, dtype=np.uint8), "2-D uint8"),
        (np.zeros((2, 2), dtype=np.int32), "2-D uint8"),
        (b"abc", "not one bytes"),
        ("abc", "not one str"),
        ([b"a", 3], "bytes or None"),
        ([1, 2], "bytes or None"),
    ],
)
def test_binary_column_refuses_what_is_not_a_binary_column_naming_it(values, message):
    """Wrong inputs raise TypeError naming the argument and what to pass instead."""
    with pytest.raises(TypeError, match=message) as info:
        columnar.binary_column(values, "values")
    assert "values" in str(info.value)


@given(columns, st.data())
def test_slices_and_takes_keep_exactly_the_chosen_rows(values, data):
    """A slice or a take (of a column that may itself be a slice) holds only the chosen
    rows: lengths, offsets and data describe them and nothing else."""
    n = len(values)
    column = columnar.binary_column(values, "values")
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    part = column.slice(start, stop)
    assert as_list(part) == values[start:stop]
    assert part.size_of(0, len(part)) == sum(len(v) for v in values[start:stop] if v)
    assert part.offsets.tolist() == np.cumsum(
        [0] + [max(x, 0) for x in part.lengths.tolist()]
    )[:-1].tolist()
    rows = np.array(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n if n else 0)),
                    dtype=np.int64)  # fmt: skip
    taken = column.take(rows)
    assert as_list(taken) == [values[i] for i in rows]
    if stop > start:
        inner = data.draw(st.lists(st.integers(0, stop - start - 1), max_size=10))
        assert as_list(part.take(np.array(inner, dtype=np.int64))) == [
            values[start + i] for i in inner
        ]


def test_a_column_whose_nulls_occupy_data_bytes_packs_consistently():
    array = pc.if_else(pa.array([False, True, True]), pa.array([b"abc", b"de", b"f"]),
                       pa.scalar(None, pa.binary()))  # fmt: skip
    assert array.to_pylist() == [None, b"de", b"f"]
    column = columnar.binary_column(array, "values")
    assert column.size_of(0, 3) == 3
    assert as_list(column) == [None, b"de", b"f"]


# -- columnar.chunks ---------------------------------------------------------------------------


@given(columns, st.booleans(), st.integers(1, 200), st.integers(0, 10), st.data())
def test_chunks_cover_every_row_and_never_exceed_the_limit_but_for_single_big_rows(
    values, with_keys, limit, overhead, data
):
    """Chunks are consecutive, cover all rows, each holds at least one row, stays within
    the limit unless it is one row that alone exceeds it, and could not take one more row."""
    n = len(values)
    keys = data.draw(st.lists(cells, min_size=n, max_size=n)) if with_keys else None
    vcol = columnar.binary_column(values, "values")
    kcol = None if keys is None else columnar.binary_column(keys, "keys")

    def size(i):
        return len(values[i] or b"") + overhead + (len(keys[i] or b"") if keys else 0)

    got = list(columnar.chunks(vcol, kcol, limit, overhead))
    if not n:
        assert got == []
        return
    assert [start for start, _ in got] == [0] + [stop for _, stop in got[:-1]]
    assert got[-1][1] == n
    for start, stop in got:
        assert stop > start
        total = sum(size(i) for i in range(start, stop))
        if stop - start > 1:
            assert total <= limit
        else:
            assert total <= limit or size(start) > limit
        if stop < n:
            assert total + size(stop) > limit


def test_chunks_puts_an_oversized_row_alone():
    values = [b"a" * 5, b"b" * 50, b"c" * 5, b"d" * 5]
    vcol = columnar.binary_column(values, "values")
    assert list(columnar.chunks(vcol, None, 12, 1)) == [(0, 1), (1, 2), (2, 4)]


# -- columnar.batch_to_arrow -------------------------------------------------------------------


@given(columns.filter(bool), st.booleans(), st.sampled_from(CODECS), st.data())
def test_batch_to_arrow_over_a_packed_batch_gives_the_values_keys_and_offsets(
    values, with_keys, codec, data
):
    """The Arrow batch has one row per record: the batch's topic, partition, offsets,
    timestamps, keys (null when none) and values."""
    n = len(values)
    keys = data.draw(st.lists(cells, min_size=n, max_size=n)) if with_keys else None
    vcol = columnar.binary_column(values, "values")
    kcol = None if keys is None else columnar.binary_column(keys, "keys")
    batch = rb.encode_batch(
        vcol.to_msgpack(), None if kcol is None else kcol.to_msgpack(), 1234,
        count=n, codec=codec, base_offset=100,
    )  # fmt: skip
    table = columnar.batch_to_arrow("orders", 3, batch, 0, 0)
    assert table.schema == columnar.SCHEMA
    assert table.num_rows == n
    assert table.column("value").to_pylist() == values
    assert table.column("key").to_pylist() == (keys if keys is not None else [None] * n)
    assert table.column("offset").to_pylist() == list(range(100, 100 + n))
    assert table.column("timestamp").to_pylist() == [1234] * n
    assert table.column("partition").to_pylist() == [3] * n
    assert table.column("topic").to_pylist() == ["orders"] * n


@given(columns.filter(bool), st.booleans(), st.data())
def test_batch_to_arrow_skips_rows_below_from_offset(values, packed, data):
    """Rows with offsets below from_offset are dropped, whichever form the batch is in."""
    n = len(values)
    base = 40
    skip_to = data.draw(st.integers(0, base + n + 2))
    if packed:
        batch = rb.encode_batch(pack(values), None, 0, count=n, base_offset=base)
    else:
        batch = rb.encode_batch(values, None, 0, base_offset=base)
    table = columnar.batch_to_arrow("t", 0, batch, 0, skip_to)
    first = max(skip_to - base, 0)
    assert table.column("value").to_pylist() == values[first:]
    assert table.column("offset").to_pylist() == list(range(base + first, base + n))


def test_batch_to_arrow_honours_offset_gaps_and_per_record_timestamps():
    """A compacted batch (explicit offset deltas) and per-record timestamps come through;
    from_offset inside a gap starts at the next surviving record."""
    batch = rb.encode_batch(
        pack([b"a", None, b"c"]), pack([b"k1", b"k2", b"k3"]), [10, 30, 20],
        count=3, offset_deltas=[0, 4, 7], base_offset=1000,
    )  # fmt: skip
    table = columnar.batch_to_arrow("t", 0, batch, 0, 1002)
    assert table.column("offset").to_pylist() == [1004, 1007]
    assert table.column("timestamp").to_pylist() == [30, 20]
    assert table.column("value").to_pylist() == [None, b"c"]
    assert table.column("key").to_pylist() == [b"k2", b"k3"]


def test_batch_to_arrow_reads_the_batch_at_a_position_in_a_buffer():
    """``pos`` selects one batch among several in a fetched buffer."""
    first = rb.encode_batch([b"x"], base_offset=0)
    second = rb.encode_batch(pack([b"y", b"z"]), count=2, base_offset=1)
    table = columnar.batch_to_arrow("t", 0, first + second, len(first), 0)
    assert table.column("value").to_pylist() == [b"y", b"z"]
    assert table.column("offset").to_pylist() == [1, 2]


def test_batch_to_arrow_uses_log_append_time_when_the_batch_says_so():
    batch = rb.encode_batch(pack([b"a", b"b"]), None, [1, 2], count=2,
                            timestamp_type=rb.TimestampType.LOG_APPEND_TIME)  # fmt: skip
    table = columnar.batch_to_arrow("t", 0, batch, 0, 0)
    assert table.column("timestamp").to_pylist() == [2, 2]


def test_batch_to_arrow_checks_the_crc():
    batch = bytearray(rb.encode_batch(pack([b"abc"]), count=1))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC"):
        columnar.batch_to_arrow("t", 0, bytes(batch), 0, 0)


@pytest.mark.parametrize("count", [1, 3])
def test_batch_to_arrow_refuses_a_count_that_disagrees_with_the_columns(count):
    """A header record count that is not the packed column's is CorruptRecord, as in
    decode_records."""
    batch = rb.encode_batch(pack([b"a", b"b"]), count=count)
    with pytest.raises(CorruptRecord):
        rb.decode_records(batch)
    with pytest.raises(CorruptRecord):
        columnar.batch_to_arrow("t", 0, batch, 0, 0)
