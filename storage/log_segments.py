"""The ordered segments of one log (Kafka's LogSegments): lookups by offset and time, reads,
and the structural changes (add, cut, remove, insert) the Log makes to the list.

Invariants: at least one segment; base offsets strictly increase; the last segment is the
active one, the only one appended to. ``bases`` mirrors the base offsets for bisection. Not
thread-safe: the owning Log serializes every call.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Iterator

from rafka.storage import record_batch as rb
from rafka.storage.segment import Segment
from rafka.storage.transaction_index import AbortedTxn


class LogSegments:
    """Segments oldest first. ``ordered`` is the list itself; callers treat it as read-only."""

    def __init__(self, segments: list[Segment]) -> None:
        if not segments:
            raise ValueError("a log has at least one segment")
        self.ordered = list(segments)
        self.bases = [s.base_offset for s in self.ordered]

    def __len__(self) -> int:
        return len(self.ordered)

    @property
    def active(self) -> Segment:
        return self.ordered[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.ordered)

    # -- lookups -------------------------------------------------------------------------------

    def index_of(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (-1 if below the first)."""
        return bisect_right(self.bases, offset) - 1

    def below(self, offset: int) -> list[Segment]:
        """The oldest non-active segments whose whole range lies below ``offset``: a segment
        counts only if the next segment's base (where the log would start once it is gone) is
        at or below ``offset``."""
        count = 0
        while count < len(self.ordered) - 1 and self.bases[count + 1] <= offset:
            count += 1
        return self.ordered[:count]

    def headers_from(self, offset: int) -> Iterator[rb.BatchHeader]:
        """Header of every batch that holds ``offset`` or a later offset, in order. Raises
        CorruptRecord at a damaged batch, after yielding the ones before it."""
        for _, _, header in self.batches_from(offset):
            yield header

    def batches_from(self, offset: int) -> Iterator[tuple[Segment, int, rb.BatchHeader]]:
        """(segment, position, header) of every batch that holds ``offset`` or a later
        offset, in order, reading headers only (``segment.read_at`` gets a whole batch)."""
        for segment in self.ordered[max(self.index_of(offset), 0) :]:
            _, position = segment.offset_index.lookup(offset)
            for position, header in segment.iter_headers(position):
                if header.last_offset >= offset:
                    yield segment, position, header

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Entries of the transaction indexes for transactions that overlap [start, end)
        (aborted at or after ``start``, begun before ``end``), by first offset. A marker is
        never before its transaction's records, so the search starts at the segment holding
        ``start`` and ends at the first entry whose last stable offset reaches ``end``."""
        found: set[AbortedTxn] = set()
        for segment in self.ordered[max(self.index_of(start), 0) :]:
            entries, complete = segment.txn_index.collect(start, end)
            found.update(entries)
            if complete:
                break
        return sorted(found, key=lambda t: (t.first_offset, t.last_offset))

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> memoryview:
        """Whole batches from the one holding ``offset`` (or the next one after a compacted
        gap), at most ``max_bytes`` but at least one batch, none at or past ``max_offset``.
        The caller has checked that ``offset`` lies inside the log."""
        if max_offset is not None and offset >= max_offset:
            return memoryview(b"")
        for segment in self.ordered[max(self.index_of(offset), 0) :]:
            found = segment.find_batch(offset)
            if found is not None:
                return segment.read(found[0], max_bytes, max_offset)
        return memoryview(b"")

    def offset_for_timestamp(
        self, timestamp: int, log_start_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record, in offset order, at or above
        ``log_start_offset`` whose timestamp is at or after ``timestamp``, or None when
        there is none."""
        for segment in self.ordered:
            if segment.max_timestamp < timestamp or segment.next_offset <= log_start_offset:
                continue
            found = _first_record_at_or_after(segment, timestamp, log_start_offset)
            if found is not None:
                return found
        return None

    # -- changes -------------------------------------------------------------------------------

    def add(self, segment: Segment) -> None:
        """Make ``segment`` (starting past every other) the active one."""
        if segment.base_offset <= self.bases[-1]:
            raise ValueError(
                f"segment at {segment.base_offset} does not follow the active one at "
                f"{self.bases[-1]}"
            )
        self.ordered.append(segment)
        self.bases.append(segment.base_offset)

    def delete_active(self) -> None:
        """Delete the active segment's files; the one before it becomes active."""
        if len(self.ordered) == 1:
            raise ValueError("the only segment of a log is never deleted")
        self.ordered.pop().delete()
        self.bases.pop()

    def delete_after(self, offset: int) -> int:
        """Delete every segment starting past ``offset``, keeping at least the first; returns
        how many went."""
        deleted = 0
        while len(self.ordered) > 1 and self.bases[-1] > offset:
            self.delete_active()
            deleted += 1
        return deleted

    def delete_all_and_start(self, make_segment: Callable[[], Segment]) -> None:
        """Delete every segment, then make the one that replaces them all (it may take the
        name of one just deleted)."""
        for old in self.ordered:
            old.delete()
        segment = make_segment()
        self.ordered = [segment]
        self.bases = [segment.base_offset]

    def remove(self, doomed: list[Segment]) -> int:
        """Delete these non-active segments' files; returns the bytes freed."""
        doomed_ids = {id(s) for s in doomed}
        if id(self.active) in doomed_ids:
            raise ValueError("the active segment is never deleted")
        freed = 0
        for segment in doomed:
            freed += segment.size
            segment.delete()
        self.ordered = [s for s in self.ordered if id(s) not in doomed_ids]
        self.bases = [s.base_offset for s in self.ordered]
        return freed

    def insert(self, segment: Segment) -> None:
        """Put ``segment`` among the others by base offset (a compacted segment taking the
        place of the ones ``remove`` just deleted)."""
        at = bisect_right(self.bases, segment.base_offset)
        if at and self.bases[at - 1] == segment.base_offset:
            raise ValueError(f"a segment at {segment.base_offset} is already in the log")
        self.ordered.insert(at, segment)
        self.bases.insert(at, segment.base_offset)


def _first_record_at_or_after(
    segment: Segment, timestamp: int, log_start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of ``segment`` at or above
    ``log_start_offset`` whose timestamp is at or after ``timestamp``, or None.

    The scan starts at the later of the time index's answer (every record before it is
    older than ``timestamp``) and the batch holding the log start, and goes on to the
    segment's end: with timestamps out of order, or with the log start inside the segment,
    the first batch reaching ``timestamp`` may hold no record that counts."""
    start = max(segment.time_index.lookup(timestamp), log_start_offset)
    _, position = segment.offset_index.lookup(start)
    for position, header in segment.iter_headers(position):
        # Only batches that can hold an answer are read and decoded.
        if header.last_offset < start or header.max_timestamp < timestamp:
            continue
        records = rb.decode_records(segment.read_at(position, header.size))
        for offset, record_timestamp in zip(records.offsets, records.timestamps):
            if record_timestamp >= timestamp and offset >= start:
                return offset, record_timestamp
    return None
