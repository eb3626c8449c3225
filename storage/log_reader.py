"""Lookups over a log's ordered segments: which segment holds an offset, batches from an
offset, and the first record at or after a timestamp.

Read-only: these functions never change a segment. ``bases`` is the sorted list of the
segments' base offsets, kept by the owning Log beside ``segments``.
"""

from __future__ import annotations

from bisect import bisect_right

from rafka.storage import record_batch as rb
from rafka.storage.segment import Segment


def segment_index(bases: list[int], offset: int) -> int:
    """Index of the segment whose range holds ``offset`` (-1 if below the first)."""
    return bisect_right(bases, offset) - 1


def read_batches(
    segments: list[Segment],
    bases: list[int],
    offset: int,
    max_bytes: int,
    max_offset: int | None,
) -> memoryview:
    """Whole batches from the one holding ``offset`` (or the next one after a compacted gap),
    at most ``max_bytes`` but at least one batch, none at or past ``max_offset``. The caller
    has checked that ``offset`` lies inside the log."""
    if max_offset is not None and offset >= max_offset:
        return memoryview(b"")
    for segment in segments[max(segment_index(bases, offset), 0) :]:
        found = segment.find_batch(offset)
        if found is not None:
            return segment.read(found[0], max_bytes, max_offset)
    return memoryview(b"")


def find_offset_for_timestamp(
    segments: list[Segment], timestamp: int, log_start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or above ``log_start_offset`` whose
    timestamp is at or after ``timestamp``, or None when there is none."""
    for segment in segments:
        if segment.max_timestamp < timestamp:
            continue
        found = segment.find_offset_by_timestamp(timestamp)
        if found is None:
            continue
        records = rb.decode_records(found[1])
        for record_offset, record_ts in zip(records.offsets, records.timestamps):
            if record_ts >= timestamp and record_offset >= log_start_offset:
                return record_offset, record_ts
    return None
