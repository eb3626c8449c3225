"""``rafka dump-log``: run through the CLI's main() on logs written by rafka.storage.Log."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgpack
import pytest

from rafka.cli import main
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

FIRST = "00000000000000000000"
SECOND = "00000000000000000007"


@pytest.fixture
def partition(tmp_path) -> str:
    """A closed partition directory with two segments: offsets 0-6 (plain, lz4, a
    transactional batch and its commit marker) and offset 7 (zstd). Every batch after the
    first of a segment gets an offset-index entry."""
    directory = str(tmp_path / "orders-0")
    log = Log(directory, LogConfig(index_interval_bytes=0))
    log.append_as_leader(
        rb.encode_batch(
            [b"v0", b"v1"], [b"k0", None], [1000, 1001], [[("h", b"x")], None]
        ),
        leader_epoch=0,
    )
    log.append_as_leader(
        rb.encode_batch([b"a" * 100] * 3, timestamps=2000, codec=rb.Codec.LZ4), leader_epoch=1
    )
    log.append_as_leader(
        rb.encode_batch(
            [b"p"], timestamps=2500, producer_id=7, producer_epoch=0, base_sequence=0,
            is_transactional=True,
        ),
        leader_epoch=1,
    )  # fmt: skip
    marker = bytearray(
        rb.encode_control_batch(
            rb.ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=3,
            timestamp=3000, partition_leader_epoch=1,
        )
    )  # fmt: skip
    rb.set_base_offset(marker, log.log_end_offset)
    log.append_as_follower(marker)
    log.roll()
    log.append_as_leader(rb.encode_batch([b"z"], timestamps=4000, codec=rb.Codec.ZSTD), 2)
    log.close()
    return directory


def segment(directory: str, stem: str = FIRST, suffix: str = ".log") -> str:
    return os.path.join(directory, stem + suffix)


def positions(path: str) -> list[int]:
    with open(path, "rb") as f:
        return [position for position, _ in rb.iter_batches(f.read())]


def dump(capsys, *args: str) -> tuple[int, list[str], str]:
    status = main(["dump-log", *args])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def test_directory_prints_one_line_per_batch_in_offset_order(partition, capsys):
    """A partition directory dumps each .log in offset order, one line per batch with its
    position, offsets, count, codec, epoch, producer fields, flags, timestamp and CRC."""
    status, lines, _ = dump(capsys, partition)
    assert status == 0
    assert lines[0].startswith(f"Dumping {segment(partition)} (base offset 0, ")
    batches = [line for line in lines if line.startswith("position:")]
    assert [line.split()[3] for line in batches] == ["0", "2", "5", "6", "7"]
    assert batches[0].startswith(
        "position: 0 base_offset: 0 last_offset: 1 record_count: 2 size: 90 codec: none "
        "leader_epoch: 0 producer_id: -1 producer_epoch: -1 base_sequence: -1 "
        "transactional: false control: false max_timestamp: 1001 timestamp_type: CreateTime crc: 0x"
    )
    assert batches[0].endswith(" valid")
    assert " codec: lz4 leader_epoch: 1 " in batches[1]
    assert " producer_id: 7 producer_epoch: 0 base_sequence: 0 transactional: true " in batches[2]
    assert " transactional: true control: true " in batches[3]
    assert lines.index(f"Dumping {segment(partition, SECOND)} (base offset 7, 79 bytes)") == 5
    assert not any(line.startswith("|") or line.startswith("PROBLEM") for line in lines)


def test_print_records_shows_keys_values_and_headers_truncated(partition, capsys):
    """--print-records prints every record, bytes as Python repr cut to --max-bytes."""
    status, lines, _ = dump(capsys, "--print-records", "--max-bytes", "8", segment(partition))
    assert status == 0
    records = [line for line in lines if line.startswith("|")]
    assert records[:3] == [
        "| offset: 0 timestamp: 1000 key: b'k0' value: b'v0' headers: [('h', b'x')]",
        "| offset: 1 timestamp: 1001 key: None value: b'v1' headers: []",
        "| offset: 2 timestamp: 2000 key: None value: b'aaaaaaaa'... (100 bytes) headers: []",
    ]
    assert len(records) == 7


def test_control_record_shows_type_and_coordinator_epoch(partition, capsys):
    """A transaction marker is printed as its control type and coordinator epoch."""
    _, lines, _ = dump(capsys, "--print-records", segment(partition))
    assert "| offset: 6 timestamp: 3000 control_type: COMMIT coordinator_epoch: 3" in lines


def test_json_prints_one_object_per_file_batch_and_record(partition, capsys):
    """--json prints one JSON object a line, typed file, batch or record."""
    status, lines, _ = dump(capsys, "--json", "--print-records", segment(partition, SECOND))
    assert status == 0
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["file", "batch", "record"]
    batch, record = events[1], events[2]
    assert batch["base_offset"] == 7 and batch["codec"] == "zstd" and batch["valid"] is True
    assert batch["leader_epoch"] == 2 and batch["record_count"] == 1
    assert record == {
        "type": "record", "offset": 7, "timestamp": 4000, "key": None, "value": "b'z'",
        "headers": [],
    }  # fmt: skip


def test_verify_on_a_clean_log_exits_0_with_a_summary(partition, capsys):
    """--verify on an intact log exits 0 and ends with the totals."""
    status, lines, _ = dump(capsys, "--verify", partition)
    size = os.path.getsize(segment(partition)) + os.path.getsize(segment(partition, SECOND))
    assert status == 0
    assert lines[-1] == f"Summary files: 2 batches: 5 records: 8 bytes: {size} problems: 0"


def test_flipped_byte_fails_verify_and_names_the_batch(partition, capsys):
    """A byte flipped inside a batch marks it INVALID, names it in a problem line, and
    makes --verify exit 1; the batches after it are still dumped."""
    path = segment(partition)
    second = positions(path)[1]
    with open(path, "r+b") as f:
        f.seek(second + rb.HEADER_SIZE + 5)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))

    status, lines, _ = dump(capsys, "--verify", "--print-records", path)
    assert status == 1
    batch = next(line for line in lines if line.startswith(f"position: {second} "))
    assert batch.endswith(" INVALID")
    assert (
        f"PROBLEM: {path}: CRC mismatch in batch at byte {second} (base offset 2): stored 0x"
        in "\n".join(lines)
    )
    assert not any(line.startswith("| offset: 2 ") for line in lines)
    assert sum(line.startswith("position:") for line in lines) == 4
    assert lines[-1].endswith("problems: 1")

    status, lines, _ = dump(capsys, path)
    assert status == 0
    assert any(line.startswith("PROBLEM:") for line in lines)


def test_truncated_file_reports_the_torn_tail(partition, capsys):
    """A file cut mid-batch dumps the whole batches before the cut and reports a torn tail
    at the cut batch's position; --verify exits 1."""
    path = segment(partition)
    last = positions(path)[-1]
    os.truncate(path, last + 20)

    status, lines, _ = dump(capsys, "--verify", path)
    assert status == 1
    assert sum(line.startswith("position:") for line in lines) == 3
    problem = next(line for line in lines if line.startswith("PROBLEM:"))
    assert problem.startswith(f"PROBLEM: {path}: torn tail: truncated batch at byte {last}: ")
    assert problem.endswith("the file does not end at a batch boundary")
    assert lines[-1] == f"Summary files: 1 batches: 3 records: 6 bytes: {last + 20} problems: 1"


def test_base_offset_going_back_is_a_problem(partition, capsys):
    """A batch whose base offset is below the previous batch's next offset breaks the chain."""
    path = segment(partition)
    third = positions(path)[2]
    with open(path, "r+b") as f:  # the base offset is outside the CRC, so the CRC stays valid
        f.seek(third)
        f.write(rb.BASE_OFFSET.pack(1))

    status, lines, _ = dump(capsys, "--verify", path)
    assert status == 1
    assert (
        f"PROBLEM: {path}: batch at byte {third} has base offset 1, below 5, the previous "
        "batch's next offset; offsets must increase"
    ) in lines
    assert all(line.endswith(" valid") for line in lines if line.startswith("position:"))


def test_batch_whose_records_do_not_decode_is_reported(tmp_path, capsys):
    """A batch with a valid CRC whose records section does not decompress, and one naming an
    unknown codec, are reported as problems; the batch after them still prints its records."""
    section = msgpack.packb([None, None, None, [b"v"], None])
    fields = dict(
        partition_leader_epoch=0, last_offset_delta=0, first_timestamp=5, max_timestamp=5,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=1,
    )  # fmt: skip
    not_lz4 = rb.assemble_batch(section, base_offset=0, attributes=int(rb.Codec.LZ4), **fields)
    unknown = rb.assemble_batch(section, base_offset=1, attributes=5, **fields)
    good = rb.encode_batch([b"ok"], base_offset=2, timestamps=6)
    path = tmp_path / f"{FIRST}.log"
    path.write_bytes(not_lz4 + unknown + good)

    status, lines, _ = dump(capsys, "--verify", "--print-records", str(path))
    assert status == 1
    problems = [line.split(": ", 2)[2] for line in lines if line.startswith("PROBLEM:")]
    assert len(problems) == 2
    assert problems[0].startswith(
        "records of batch at byte 0 cannot be decoded: records section does not decompress "
        "with LZ4: "
    )
    assert problems[1] == (
        f"batch at byte {len(not_lz4)} (base offset 1) has unknown (5) codec; its records "
        "cannot be decoded"
    )
    assert "| offset: 2 timestamp: 6 key: None value: b'ok' headers: []" in lines
    assert all(line.endswith(" valid") for line in lines if line.startswith("position:"))


def test_index_files_print_their_entries(partition, capsys):
    """.index entries print as offset -> position and .timeindex entries as timestamp ->
    offset, matching where the batches are."""
    status, lines, _ = dump(
        capsys, "--verify", segment(partition, suffix=".index"),
        segment(partition, suffix=".timeindex"),
    )  # fmt: skip
    assert status == 0
    starts = positions(segment(partition))
    assert lines[1:4] == [
        f"offset: 2 position: {starts[1]}",
        f"offset: 5 position: {starts[2]}",
        f"offset: 6 position: {starts[3]}",
    ]
    assert lines[5:9] == [
        "timestamp: 1001 offset: 0",
        "timestamp: 2000 offset: 2",
        "timestamp: 2500 offset: 5",
        "timestamp: 3000 offset: 6",
    ]
    assert lines[-1].endswith("batches: 0 records: 0 bytes: 72 problems: 0")


def test_index_entry_that_misses_its_batch_is_a_problem(partition, capsys):
    """An offset-index entry that does not point at its batch, and a torn last entry, are
    reported; --verify exits 1."""
    path = segment(partition, suffix=".index")
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x09\x00\x00\x01\x2c\x01")  # (9 -> 300), then one stray byte

    status, lines, _ = dump(capsys, "--verify", path)
    assert status == 1
    problems = [line.split(": ", 2)[2] for line in lines if line.startswith("PROBLEM:")]
    assert len(problems) == 2
    assert problems[0].startswith(
        f"entry 3 says the batch with base offset 9 starts at byte 300 of {FIRST}.log, but "
        "the base offset there is "
    )
    assert problems[1] == "torn last entry: 1 bytes after the last whole 8-byte entry"


@pytest.mark.parametrize(
    "name, complaint",
    [
        ("missing.log", "no such file or directory"),
        ("leader-epoch-checkpoint", "not a segment file"),
    ],
)
def test_bad_path_exits_2_with_a_one_line_message(partition, capsys, name, complaint):
    """A missing path or a file that is not a segment file exits 2 with one line saying what
    was wrong and what to pass."""
    path = os.path.join(partition, name)
    status, lines, err = dump(capsys, path)
    assert status == 2
    assert lines == []
    assert err.splitlines() == [
        f"rafka dump-log: {path}: {complaint}; pass a segment file (<20-digit base offset>.log, "
        ".index, .timeindex or .txnindex) or a partition directory"
    ]


def aborted_partition(tmp_path) -> str:
    """A closed partition whose one segment holds a transaction of producer 9 (offsets 0-1)
    and its ABORT marker (offset 2), so the segment has a .txnindex entry."""
    directory = str(tmp_path / "audit-0")
    log = Log(directory, LogConfig())
    log.append_as_leader(rb.encode_batch(
        [b"a", b"b"], timestamps=1000, producer_id=9, producer_epoch=0, base_sequence=0,
        is_transactional=True,
    ), leader_epoch=0)  # fmt: skip
    marker = bytearray(rb.encode_control_batch(
        rb.ControlType.ABORT, producer_id=9, producer_epoch=1, coordinator_epoch=0,
        timestamp=2000,
    ))  # fmt: skip
    rb.set_base_offset(marker, log.log_end_offset)
    log.append_as_follower(marker)
    log.close()
    return directory


def test_a_transaction_index_prints_its_aborted_transactions(tmp_path, capsys):
    txn_index = segment(aborted_partition(tmp_path), suffix=".txnindex")
    status, lines, _ = dump(capsys, "--verify", txn_index)
    assert status == 0
    assert lines[1] == "producer_id: 9 first_offset: 0 last_offset: 2 last_stable_offset: 3"


def test_a_torn_transaction_index_entry_is_a_problem(tmp_path, capsys):
    txn_index = segment(aborted_partition(tmp_path), suffix=".txnindex")
    with open(txn_index, "ab") as f:
        f.write(b"\x00" * 10)  # a torn second entry
    status, lines, _ = dump(capsys, "--verify", txn_index)
    assert status == 1
    assert any(line.startswith("PROBLEM:") and "entry 1 (byte 36)" in line for line in lines)


def test_directory_without_segments_exits_2(tmp_path, capsys):
    """A directory with no .log segment files exits 2 saying so."""
    status, _, err = dump(capsys, str(tmp_path))
    assert status == 2
    assert err.startswith(f"rafka dump-log: {tmp_path}: no segment .log files in this directory")


def test_dump_log_does_not_import_ray(partition):
    """The CLI and dump-log run without importing Ray."""
    code = (
        "import sys\n"
        "from rafka.cli import main\n"
        f"assert main(['dump-log', '--verify', '--print-records', {partition!r}]) == 0\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
