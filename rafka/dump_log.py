"""``rafka dump-log``: print and check segment files offline, like Kafka's kafka-dump-log.sh.

Reads ``.log`` files batch by batch through a read-only mmap (a 1 GiB segment is never loaded
into memory whole), ``.index`` and ``.timeindex`` files, and partition directories (their
``.log`` files in offset order, checked as one offset chain). Nothing is opened for writing,
so it is safe on a live broker's data directory.

The ``dump_*`` functions yield *events*, plain dicts with a ``type`` key, which ``run`` prints
as text lines or as JSON objects (one a line):

    file                a file begins: path, kind, base_offset (from its name), size
    batch               one batch header: position, offsets, codec, producer fields, crc, valid
                        (and format: kafka for a batch holding a Kafka client's records)
    record              one record of the batch before it (with --print-records)
    offset_index_entry  offset -> position
    time_index_entry    timestamp -> offset
    problem             something wrong in a file: file, message
    summary             totals (with --verify, last)
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
from dataclasses import dataclass
from typing import IO, Any, Generator, Iterable, Iterator, Sequence

from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb
from rafka.storage.index import OffsetIndex, TimeIndex
from rafka.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from rafka.storage.transaction_index import ENTRY_SIZE, TXN_INDEX_SUFFIX, decode_entries

Event = dict[str, Any]

_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_WHAT_TO_PASS = (
    "pass a segment file (<20-digit base offset>.log, .index, .timeindex or .txnindex) "
    "or a partition directory"
)
_TIMESTAMP_TYPE_NAMES = {
    rb.TimestampType.CREATE_TIME: "CreateTime",
    rb.TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class UsageError(Exception):
    """A PATH that dump-log cannot read as a segment file or partition directory."""


@dataclass(frozen=True)
class Target:
    """One file to dump: its path, its suffix (which says how to read it) and its base
    offset (from the file name)."""

    path: str
    suffix: str
    base_offset: int


@dataclass(frozen=True)
class DumpOptions:
    """What to show of each batch. ``max_bytes`` limits each key, value and header value
    shown (0: no limit)."""

    print_records: bool = False
    max_bytes: int = 64


@dataclass
class Summary:
    """Totals over the events printed."""

    files: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    problems: int = 0

    def count(self, event: Event) -> None:
        """Add one event to the totals."""
        kind = event["type"]
        if kind == "file":
            self.files += 1
            self.bytes += event["size"]
        elif kind == "batch":
            self.batches += 1
            self.records += event["record_count"]
        elif kind == "problem":
            self.problems += 1

    def event(self) -> Event:
        """The totals as a ``summary`` event."""
        return {"type": "summary", **dataclasses.asdict(self)}


# ---------------------------------------------------------------------------------------------
# finding the files


def segment_target(path: str) -> Target | None:
    """The Target for a file named like a segment file, or None."""
    name = os.path.basename(path)
    for suffix in _SUFFIXES:
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and len(stem) == 20 and stem.isdigit():
            return Target(path, suffix, int(stem))
    return None


def resolve(path: str) -> list[Target]:
    """The files ``path`` names: itself, or a directory's .log files in offset order.
    Raises UsageError saying what to pass instead."""
    if os.path.isdir(path):
        targets = [segment_target(os.path.join(path, name)) for name in os.listdir(path)]
        logs = [t for t in targets if t is not None and t.suffix == LOG_SUFFIX]
        if not logs:
            raise UsageError(f"{path}: no segment .log files in this directory; {_WHAT_TO_PASS}")
        return sorted(logs, key=lambda t: t.base_offset)
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file or directory; {_WHAT_TO_PASS}")
    target = segment_target(path)
    if target is None:
        raise UsageError(f"{path}: not a segment file; {_WHAT_TO_PASS}")
    return [target]


# ---------------------------------------------------------------------------------------------
# events


def dump_targets(targets: Sequence[Target], options: DumpOptions) -> Iterator[Event]:
    """Events for the files of one PATH; consecutive .log files form one offset chain."""
    expected: int | None = None
    for target in targets:
        if target.suffix == LOG_SUFFIX:
            expected = yield from dump_segment(target, options, expected)
        elif target.suffix == INDEX_SUFFIX:
            yield from dump_offset_index(target)
        elif target.suffix == TXN_INDEX_SUFFIX:
            yield from dump_txn_index(target)
        else:
            yield from dump_time_index(target)


def dump_segment(
    target: Target, options: DumpOptions, expected: int | None = None
) -> Generator[Event, None, int]:
    """Events for a .log file: each batch (and its records), and each problem: a CRC
    mismatch, an unknown codec, a base offset below the previous batch's next offset (or
    below ``expected``, the previous segment's next offset, or the file's base offset), a
    torn or garbled tail. Returns the offset the next segment's batches must reach."""
    with open(target.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        yield _file_event(target, size)
        if expected is None or expected < target.base_offset:
            expected, floor = target.base_offset, "the base offset in the file name"
        else:
            floor = "the previous segment's next offset"
        if size == 0:
            return expected
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            position = 0
            while position < size:
                try:
                    header = rb.read_header(buf, position, check_codec=False)
                except CorruptRecord as e:
                    yield _problem(target, _unreadable_batch(buf, position, e))
                    break
                yield from _batch_events(target, buf, position, header, options)
                if header.base_offset < expected:
                    message = (
                        f"batch at byte {position} has base offset {header.base_offset}, "
                        f"below {expected}, {floor}; offsets must increase"
                    )
                    yield _problem(target, message)
                expected, floor = header.next_offset, "the previous batch's next offset"
                position += header.size
    return expected


def _unreadable_batch(buf: mmap.mmap, position: int, error: CorruptRecord) -> str:
    """Describe a batch whose header cannot be read: torn by the end of the file, or garbled."""
    left = len(buf) - position
    torn = left < rb.HEADER_SIZE
    if not torn:
        header = rb.BatchHeader._make(rb.HEADER.unpack_from(buf, position))
        torn = header.magic == rb.MAGIC and header.size > left
    if torn:
        return f"torn tail: {error}; the file does not end at a batch boundary"
    return f"corrupt batch: {error}; the last {left} bytes were not read"


def _batch_events(
    target: Target, buf: mmap.mmap, position: int, header: rb.BatchHeader, options: DumpOptions
) -> Iterator[Event]:
    """The batch event, its CRC and codec problems, and (when asked for and readable) its
    records."""
    try:
        rb.verify_batch(buf, position, check_codec=False)
        crc_error = None
    except CorruptRecord as e:
        crc_error = str(e)
    codec = _codec_name(header)
    yield _batch_event(position, header, codec, valid=crc_error is None)
    if crc_error is not None:
        yield _problem(target, crc_error)
    if codec.startswith("unknown"):
        message = (
            f"batch at byte {position} (base offset {header.base_offset}) has {codec} codec; "
            "its records cannot be decoded"
        )
        yield _problem(target, message)
    elif options.print_records and crc_error is None:
        yield from _record_events(target, buf, position, header, options.max_bytes)


def _record_events(
    target: Target, buf: mmap.mmap, position: int, header: rb.BatchHeader, max_bytes: int
) -> Iterator[Event]:
    try:
        records = rb.decode_records(buf, position, verify=False)
    except CorruptRecord as e:
        yield _problem(target, f"records of batch at byte {position} cannot be decoded: {e}")
        return
    count = len(records)
    keys = records.keys or [None] * count
    headers = records.headers or [None] * count
    for offset, timestamp, key, value, record_headers in zip(
        records.offsets, records.timestamps, keys, records.values, headers
    ):
        if header.is_control:
            yield _control_record_event(target, offset, timestamp, key, value)
        else:
            yield {
                "type": "record", "offset": offset, "timestamp": timestamp,
                "key": show_bytes(key, max_bytes), "value": show_bytes(value, max_bytes),
                "headers": [[k, show_bytes(v, max_bytes)] for k, v in record_headers or ()],
            }  # fmt: skip


def _control_record_event(
    target: Target, offset: int, timestamp: int, key: bytes | None, value: bytes | None
) -> Event:
    try:
        control_type, coordinator_epoch = rb.parse_control_record(key or b"", value or b"")
    except CorruptRecord as e:
        return _problem(target, f"control record at offset {offset}: {e}")
    return {
        "type": "record", "offset": offset, "timestamp": timestamp,
        "control_type": control_type.name, "coordinator_epoch": coordinator_epoch,
    }  # fmt: skip


def dump_offset_index(target: Target) -> Iterator[Event]:
    """Events for a .index file: its entries, and each problem: entries that do not
    increase, a torn last entry, entries that do not point at a batch with their offset in
    the segment's .log (when that file is there)."""
    data = _read(target.path)
    yield _file_event(target, len(data))
    entries = list(OffsetIndex.entry.iter_unpack(_whole_entries(data, OffsetIndex.entry.size)))
    log_path = target.path[: -len(INDEX_SUFFIX)] + LOG_SUFFIX
    bases = _base_offsets_at(log_path, [position for _, position in entries])
    previous = None
    for i, (relative, position) in enumerate(entries):
        offset = target.base_offset + relative
        yield {"type": "offset_index_entry", "offset": offset, "position": position}
        if previous is not None and (offset <= previous[0] or position <= previous[1]):
            message = (
                f"entry {i} ({offset} -> {position}) does not follow entry {i - 1} "
                f"({previous[0]} -> {previous[1]}); offsets and positions must increase"
            )
            yield _problem(target, message)
        if bases is not None and bases.get(position) != offset:
            found = (
                f"the base offset there is {bases[position]}"
                if position in bases
                else "the log is shorter than that"
            )
            message = (
                f"entry {i} says the batch with base offset {offset} starts at byte {position} "
                f"of {os.path.basename(log_path)}, but {found}"
            )
            yield _problem(target, message)
        previous = offset, position
    yield from _torn_entry(target, data, OffsetIndex.entry.size)


def dump_time_index(target: Target) -> Iterator[Event]:
    """Events for a .timeindex file: its entries, and each problem: timestamps that do not
    increase or offsets that go back, a torn last entry."""
    data = _read(target.path)
    yield _file_event(target, len(data))
    previous = None
    for i, (timestamp, relative) in enumerate(
        TimeIndex.entry.iter_unpack(_whole_entries(data, TimeIndex.entry.size))
    ):
        offset = target.base_offset + relative
        yield {"type": "time_index_entry", "timestamp": timestamp, "offset": offset}
        if previous is not None and (timestamp <= previous[0] or offset < previous[1]):
            message = (
                f"entry {i} ({timestamp} -> {offset}) does not follow entry {i - 1} "
                f"({previous[0]} -> {previous[1]}); timestamps must increase and offsets must "
                "not go back"
            )
            yield _problem(target, message)
        previous = timestamp, offset
    yield from _torn_entry(target, data, TimeIndex.entry.size)


def dump_txn_index(target: Target) -> Iterator[Event]:
    """Events for a .txnindex file: its aborted transactions, and a problem where the valid
    entries end early (a torn entry, a CRC mismatch, or offsets that break the index's
    order; the log cuts the file there when it opens the segment)."""
    data = _read(target.path)
    yield _file_event(target, len(data))
    entries, valid = decode_entries(data, target.base_offset)
    for txn in entries:
        yield {"type": "aborted_txn", "producer_id": txn.producer_id,
               "first_offset": txn.first_offset, "last_offset": txn.last_offset,
               "last_stable_offset": txn.last_stable_offset}  # fmt: skip
    if valid != len(data):
        yield _problem(
            target, f"entry {len(entries)} (byte {valid}) and the {len(data) - valid} bytes "
            f"after it are not valid {ENTRY_SIZE}-byte entries (torn, a CRC mismatch, or a "
            "last offset that does not increase); opening the log cuts them",
        )  # fmt: skip


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _whole_entries(data: bytes, entry_size: int) -> memoryview:
    return memoryview(data)[: len(data) - len(data) % entry_size]


def _torn_entry(target: Target, data: bytes, entry_size: int) -> Iterator[Event]:
    extra = len(data) % entry_size
    if extra:
        yield _problem(
            target, f"torn last entry: {extra} bytes after the last whole {entry_size}-byte entry"
        )


def _base_offsets_at(log_path: str, positions: Iterable[int]) -> dict[int, int] | None:
    """The 8 bytes at each position of a .log file read as a base offset (positions past its
    end are left out), or None when the file does not exist."""
    try:
        f = open(log_path, "rb")
    except FileNotFoundError:
        return None
    with f:
        found = {}
        for position in positions:
            prefix = os.pread(f.fileno(), rb.BASE_OFFSET.size, position)
            if len(prefix) == rb.BASE_OFFSET.size:
                (found[position],) = rb.BASE_OFFSET.unpack(prefix)
        return found


def _file_event(target: Target, size: int) -> Event:
    return {
        "type": "file", "path": target.path, "kind": target.suffix.lstrip("."),
        "base_offset": target.base_offset, "size": size,
    }  # fmt: skip


def _problem(target: Target, message: str) -> Event:
    return {"type": "problem", "file": target.path, "message": message}


def _codec_name(header: rb.BatchHeader) -> str:
    try:
        codec = header.codec
    except ValueError:
        codec = None
    if codec is None or (codec is rb.SNAPPY and not header.is_kafka_format):
        return f"unknown ({header.attributes & rb.CODEC_MASK})"  # snappy only in Kafka's
    return codec.name.lower()


def _batch_event(position: int, header: rb.BatchHeader, codec: str, valid: bool) -> Event:
    event = {
        "type": "batch",
        "position": position,
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "record_count": header.record_count,
        "size": header.size,
        "codec": codec,
        "leader_epoch": header.partition_leader_epoch,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "transactional": header.is_transactional,
        "control": header.is_control,
        "max_timestamp": header.max_timestamp,
        "timestamp_type": _TIMESTAMP_TYPE_NAMES[header.timestamp_type],
        "crc": header.crc,
        "valid": valid,
    }
    if header.is_kafka_format:
        # Only then, so the lines of rafka's own batches read as they always have.
        event["format"] = "kafka"
    return event


def show_bytes(data: bytes | None, max_bytes: int) -> str | None:
    """``data`` as its Python repr, cut to ``max_bytes`` (0: whole) with the full length
    noted; None stays None."""
    if data is None:
        return None
    if max_bytes and len(data) > max_bytes:
        return f"{data[:max_bytes]!r}... ({len(data)} bytes)"
    return repr(data)


# ---------------------------------------------------------------------------------------------
# printing


def format_text(event: Event) -> str:
    """One line of text for an event."""
    kind = event["type"]
    if kind == "file":
        return (
            f"Dumping {event['path']} (base offset {event['base_offset']}, {event['size']} bytes)"
        )
    if kind == "problem":
        return f"PROBLEM: {event['file']}: {event['message']}"
    if kind == "batch":
        status = "valid" if event["valid"] else "INVALID"
        line = f"{_pairs(event, skip=('crc', 'valid', 'format'))} crc: {event['crc']:#010x}"
        if "format" in event:
            line += f" format: {event['format']}"
        return f"{line} {status}"
    if kind == "record":
        line = "| " + _pairs(event, skip=("headers",))
        if "headers" in event:
            line += " headers: [" + ", ".join(f"({k!r}, {v})" for k, v in event["headers"]) + "]"
        return line
    if kind == "summary":
        return "Summary " + _pairs(event)
    return _pairs(event)


def _pairs(event: Event, skip: Sequence[str] = ()) -> str:
    return " ".join(
        f"{key}: {str(value).lower() if isinstance(value, bool) else value}"
        for key, value in event.items()
        if key != "type" and key not in skip
    )


def run(
    paths: Sequence[str],
    options: DumpOptions,
    *,
    verify: bool,
    as_json: bool,
    out: IO[str],
    err: IO[str],
) -> int:
    """Dump every PATH to ``out``; return the exit status: 2 for a bad PATH, 1 when a file
    cannot be read or (with ``verify``) any problem was found, else 0."""
    try:
        groups = [resolve(path) for path in paths]
    except UsageError as e:
        err.write(f"rafka dump-log: {e}\n")
        return 2
    except OSError as e:
        err.write(f"rafka dump-log: cannot read {e.filename}: {e.strerror}\n")
        return 1
    render = json.dumps if as_json else format_text
    summary = Summary()
    for path, targets in zip(paths, groups):
        try:
            for event in dump_targets(targets, options):
                summary.count(event)
                out.write(render(event) + "\n")
        except BrokenPipeError:
            raise
        except OSError as e:
            err.write(f"rafka dump-log: cannot read {e.filename or path}: {e.strerror or e}\n")
            return 1
    if verify:
        out.write(render(summary.event()) + "\n")
        return 1 if summary.problems else 0
    return 0
