"""The ways records leave a log: truncation (a follower that diverged), a full restart at a
later offset, delete_records, whole-segment deletion (retention), and compaction's segment
swap.

``LogRemovals`` is mixed into ``Log`` (log.py) and works on its state: the segments, the
offsets and their one high-watermark setter, the directory's files, the leader-epoch cache
and producer state. Every method here returns only once its removal is durable, and orders
its file operations so that a crash at any point reopens to the log before or after it (the
crash-consistency checker in tests/unit/storage checks exactly that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.errors import OffsetOutOfRange
from rafka.storage.segment import Segment

if TYPE_CHECKING:
    from rafka.storage.leader_epoch import LeaderEpochCache
    from rafka.storage.log_directory import LogDirectory
    from rafka.storage.log_segments import LogSegments
    from rafka.storage.producer_state import ProducerStateManager


class LogRemovals:
    """Removal operations of ``Log``; see the module docstring. Besides the attributes
    below they use Log's ``roll``, ``segments``, ``active_segment``, ``segments_below``,
    ``_add_active_segment``, ``_flush_active_segment``, ``_rebuild_producer_state`` and
    ``_set_high_watermark``."""

    directory: str
    files: "LogDirectory"
    epoch_cache: "LeaderEpochCache"
    producer_state: "ProducerStateManager"
    _segments: "LogSegments"
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after ``offset`` (a follower that diverged from its
        leader). Whole batches go; returns the new log end offset."""
        if offset >= self.log_end_offset:
            return self.log_end_offset
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return self.log_end_offset
        # As Kafka does, a segment starting exactly at ``offset`` stays (emptied): it carries
        # the log end even when compaction removed the records just below it.
        if self._segments.delete_after(offset):
            # The removals are durable before the active segment shrinks: a power loss must
            # not bring back later segments behind a truncated one (a hole in the log).
            self.files.sync()
        first_removed = self.active_segment.truncate_to(offset)
        # A batch spanning ``offset`` went whole, records below ``offset`` too. Kafka would
        # still put the log end at ``offset``, leaving a hole of records this replica never
        # gets back; ending at the batch's base lets it fetch them again.
        self.log_end_offset = offset if first_removed is None else min(offset, first_removed)
        self._after_truncation()
        if self.active_segment.next_offset < self.log_end_offset:
            self._start_segment_at_log_end()
        return self.log_end_offset

    def _start_segment_at_log_end(self) -> None:
        """The offsets just below the log end were compacted away, so the active segment ends
        below it; a new segment starting at the log end keeps that end across a reopen, so no
        offset is handed out twice."""
        if self.active_segment.size:
            self.roll()
            return
        if len(self._segments) > 1:  # an emptied segment is replaced by one at the log end
            self._segments.delete_active()
            self._add_active_segment()
        # A log whose only segment lost every record to compaction keeps its end in memory.

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and start empty at ``offset`` (a follower far behind a leader
        whose log now starts later). Producer state goes with it, snapshots included, as in
        Kafka: a snapshot of the discarded log would answer retries with offsets it no longer
        has and refuse sequences the new leader accepted.

        Crash-safe in this order: the snapshots go (synced), then the new log start is
        written durably, then the segments go. A log that reopens with its log start past
        its end starts empty there (see ``__init__``), so a crash at any point leaves either
        the old log whole or the new, empty one."""
        self.producer_state.truncate_fully()
        self.files.sync()
        self.files.write_log_start_offset(offset)
        self._segments.delete_all_and_start(
            lambda: self.files.make_segment(offset, "", new=True)
        )
        self.log_start_offset = self.log_end_offset = offset
        self.epoch_cache.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state()
        self._set_high_watermark(self.high_watermark)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._flush_active_segment()
        self.files.write_recovery_point(self.recovery_point)

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset up to ``before_offset`` (Kafka's DeleteRecords) and delete
        the segments wholly below it. Returns the new log start offset."""
        if before_offset > self.high_watermark:
            raise OffsetOutOfRange(
                f"cannot delete records before {before_offset}: above the high watermark "
                f"{self.high_watermark}; records not yet committed cannot be deleted"
            )
        if before_offset > self.log_start_offset:
            self._move_log_start(before_offset)
            # By the next segment's base: a compacted segment may end before it, and the log
            # start may lie in that gap.
            self.delete_segments(self.segments_below(self.log_start_offset))
        return self.log_start_offset

    def _move_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.files.write_log_start_offset(offset)
        self.epoch_cache.truncate_from_start(offset)
        self._set_high_watermark(self.high_watermark)

    def delete_segments(self, doomed: list[Segment]) -> int:
        """Delete these (non-active) segments, oldest first, and move the log start past them.
        Returns the bytes freed."""
        doomed_ids = {id(s) for s in doomed}
        first_kept = next(s for s in self.segments if id(s) not in doomed_ids)
        new_start = max(self.log_start_offset, first_kept.base_offset)
        if new_start > self.high_watermark:
            raise OffsetOutOfRange(
                f"deleting these segments of {self.directory} would move the log start offset "
                f"to {new_start}, past the high watermark {self.high_watermark}; delete only "
                "segments wholly below the high watermark (Log.segments_below)"
            )
        if self.segments[: len(doomed)] != doomed:
            raise ValueError("only the oldest segments are deleted, oldest first")
        if new_start > self.log_start_offset:
            # Durable before any segment goes: a power loss that keeps some removals and not
            # others (a file system may persist them in any order) then leaves holes only
            # below the log start, and the next open deletes what is left there.
            self._move_log_start(new_start)
        freed = self._segments.remove(doomed)
        self.producer_state.delete_snapshots_below(self.log_start_offset)
        return freed

    def allow_offset_gaps(self) -> None:
        """Record, durably and before any gap is written, that this log may have gaps between
        batches, so recovery never takes them for damage (even once cleanup.policy is
        delete). Compaction calls it before its first pass."""
        self.files.allow_offset_gaps()

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Put a compacted segment (files carrying the .swap suffix) in place of ``old``.
        Crash-safe: the swap file is complete before any input is deleted (log_loader.py
        finishes the job if a crash interrupts it), and the deletions are durable before the
        swap takes its final names: a file system that persists directory changes out of
        order could otherwise keep the renamed segment beside an input it replaced, and once
        no ``.swap`` is left nothing would tell that input apart from a live segment."""
        self._segments.remove(old)
        self.files.sync()
        new.rename_suffix("")  # only now: the new files take the first input's names
        self._segments.insert(new)

