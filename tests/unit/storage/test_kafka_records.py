"""Kafka's varint records section: rafka decodes what kafka-python writes, and writes what
kafka-python reads."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.errors import CorruptRecord
from rafka.storage import Log, LogConfig
from rafka.storage import kafka_record_walk as walk
from rafka.storage import kafka_records as kr
from rafka.storage import record_batch as rb
from rafka.storage.kafka_batches import accept_kafka_records, to_kafka_wire

from .kafka_oracle import NONE, kafka_batch, read_kafka, rows_of
from .support import FakeClock

T0 = 1_700_000_000_000

binary = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
)
rows = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), binary, binary, header_lists), min_size=1, max_size=40
)


@pytest.mark.parametrize(
    "value, encoded",
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (300, b"\xd8\x04"), (-(2**63), b"\xff" * 9 + b"\x01")],
)  # fmt: skip
def test_varints_are_zigzag_base_128_as_kafka_writes_them(value, encoded):
    """Pinned bytes: zigzag, 7 bits a byte, low bits first."""
    assert kr.encode_varint(value) == encoded
    assert kr.read_varint(encoded, 0) == (value, len(encoded))


@given(rows)
@settings(max_examples=80, deadline=None)
def test_any_kafka_batch_decodes_to_its_records(batch_rows):
    """Whatever kafka-python puts in a batch (timestamps either side of the first, null and
    empty keys and values, headers), decode_records returns it."""
    rows = [(T0 + d, k, v, h) for d, k, v, h in batch_rows]
    data = accept_kafka_records(kafka_batch(rows))
    r = rb.decode_records(data)
    assert r.offsets == list(range(len(rows)))
    assert r.timestamps == [t for t, _, _, _ in rows]
    assert (r.keys or [None] * len(rows)) == [k for _, k, _, _ in rows]
    assert r.values == [v for _, _, v, _ in rows]
    assert [h or [] for h in (r.headers or [None] * len(rows))] == [h for *_, h in rows]


@given(rows, st.sampled_from(list(rb.Codec)))
@settings(max_examples=60, deadline=None)
def test_any_rafka_batch_translates_to_what_kafka_python_reads(batch_rows, codec):
    """The translation of any rafka batch reads back in kafka-python as the same records,
    with a valid CRC."""
    timestamps = [T0 + d for d, *_ in batch_rows]
    keys = [k for _, k, _, _ in batch_rows]
    values = [v for _, _, v, _ in batch_rows]
    headers = [h or None for *_, h in batch_rows]
    batch = rb.encode_batch(values, keys, timestamps, headers, codec=codec, base_offset=7)
    [(_, records)] = read_kafka(to_kafka_wire(batch))
    assert rows_of(records) == [
        (7 + i, t, k, v, h or []) for i, (t, k, v, h) in
        enumerate(zip(timestamps, keys, values, headers))
    ]  # fmt: skip


@given(rows)
@settings(max_examples=60, deadline=None)
def test_encoding_rafkas_columns_gives_kafka_pythons_bytes(batch_rows):
    """encode_records writes the very bytes kafka-python writes for the same records."""
    rows = [(T0 + d, k, v, h) for d, k, v, h in batch_rows]
    section = kafka_batch(rows)[rb.HEADER_SIZE :]
    header = rb.read_header(kafka_batch(rows))
    columns = kr.decode_columns(header, section)
    assert kr.encode_records(*columns) == section


def _section(rows) -> tuple[rb.BatchHeader, bytes]:
    batch = kafka_batch(rows)
    return rb.read_header(batch), batch[rb.HEADER_SIZE :]


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda s: s[:-1], "ends inside record"),
        (lambda s: s + b"\x00", "after its 2 records"),
        (lambda s: b"\x08" + s[1:], "declares 4 bytes"),  # first record's length too small
        (lambda s: s[:4] + b"\x05" + s[5:], "key length -3"),
        (lambda s: s[:1] + b"\xff" * 11 + s[12:], "exceeds 10 bytes"),
    ],
)
def test_a_malformed_section_is_corrupt_and_says_where(damage, problem):
    """Cut, padded or garbled records raise CorruptRecord naming the record."""
    header, section = _section([(T0, b"k", b"value", []), (T0, None, b"v2", [])])
    with pytest.raises(CorruptRecord, match=problem):
        kr.decode_columns(header, damage(section))


def test_a_header_key_that_is_not_utf8_is_corrupt():
    """Record header keys are strings; invalid UTF-8 is a CorruptRecord."""
    header, section = _section([(T0, None, b"v", [("ab", b"1")])])
    bad = section.replace(b"\x04ab", b"\x04\xff\xfe")
    with pytest.raises(CorruptRecord, match="UTF-8"):
        kr.decode_columns(header, bad)


def test_walk_records_reports_timestamp_deltas_and_keyless_records():
    """The produce path's walk returns the smallest and largest timestamp delta and how many
    records have no key, and builds no record."""
    _, section = _section([(T0 + 4, b"k", b"v" * 200, []), (T0 - 3, None, b"v", [("h", None)]),
                           (T0 + 9, None, None, [])])  # fmt: skip
    assert walk.walk_records(section, 3) == walk.SectionFacts(-7, 5, 2)  # first_timestamp T0 + 4


@pytest.mark.parametrize(
    "damage, count, problem",
    [
        (lambda s: s[:-1], 2, "record 1 of 2 declares 8 bytes but only 7 remain"),
        (lambda s: s + b"\x00", 2, "holds 1 bytes after the 2 records its header declares"),
        (lambda s: s, 3, "ends after 2 records, but the header declares 3"),
        (lambda s: s[:4] + b"\x05" + s[5:], 2, "record 0 of 2: key length -3 is negative"),
        (lambda s: s[:3] + b"\x02" + s[4:], 2, "record 0 of 2 has offset delta 1, expected 0"),
    ],
)
def test_walk_records_raises_corrupt_record_naming_the_record_and_field(damage, count, problem):
    """A section cut short, padded, short of records or with a bad field: CorruptRecord
    naming the record and the field (the validator turns it into InvalidRecord)."""
    _, section = _section([(T0, b"k", b"value", []), (T0, None, b"v2", [])])
    with pytest.raises(CorruptRecord, match=problem):
        walk.walk_records(damage(section), count)


def test_dump_log_prints_the_records_of_a_kafka_batch(tmp_path, capsys):
    """rafka dump-log marks a Kafka batch and prints its records."""
    from rafka.cli import main

    log = Log(str(tmp_path / "t-0"), LogConfig.from_dict({}), FakeClock())
    log.append_as_leader(accept_kafka_records(kafka_batch([(T0, b"k", b"hello", [])], NONE)), 0)
    log.close()
    path = str(tmp_path / "t-0" / ("0" * 20 + ".log"))
    assert main(["dump-log", "--print-records", "--json", path]) in (0, None)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    batch = next(e for e in events if e["type"] == "batch")
    record = next(e for e in events if e["type"] == "record")
    assert batch["format"] == "kafka" and batch["valid"] is True
    assert (record["key"], record["value"]) == (repr(b"k"), repr(b"hello"))
