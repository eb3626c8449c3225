"""A partition's log: ordered segments, offsets, flushing, truncation, and producer state.

Directory ``<data>/<topic>-<partition>/`` holds the segments (see segment.py), the
``leader-epoch-checkpoint``, producer-state ``*.snapshot`` files and the small offset files of
log_loader.py. Offsets obey ``log_start_offset <= high_watermark <= log_end_offset`` at all
times; ``_set_high_watermark`` is the one place that moves the high watermark. Cleanup acts
only below it: retention deletes whole segments below the high watermark, and compaction works
below ``cleanable_end_offset``, since a follower may still truncate what lies above.

Concurrency: not thread-safe and never awaits. The owner (a partition actor on one event loop)
calls it from one thread; every method runs to completion, so state is never seen half-changed.

Durability: an append is in the OS page cache when it returns; it is on disk after ``flush()``
(explicit, every ``flush.messages`` records, or every ``flush.ms``). After a crash, everything
below the recovery point survives; the tail after it is re-validated and cut at the first
torn batch (log_loader.py).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, NamedTuple

from rafka.errors import CorruptRecord, InvalidFetchSize, InvalidRecord, OffsetOutOfRange
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import (
    fsync_directory,
    read_offset,
    write_atomically,
    write_offset,
)
from rafka.storage.config import LogConfig
from rafka.storage.flush_policy import FlushPolicy
from rafka.storage.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache
from rafka.storage.log_loader import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    RecoveryReport,
    ensure_writable_directory,
    load_segments,
)
from rafka.storage.log_reader import find_offset_for_timestamp, read_batches, segment_index
from rafka.storage.log_validator import (
    PreparedBatch,
    prepare_leader_batches,
    validate_batches,
)
from rafka.storage.producer_state import ProducerStateManager
from rafka.storage.segment import Segment

log = logging.getLogger(__name__)

HIGH_WATERMARK_FILE = "high-watermark"
_IOV_MAX = 1024  # writev's limit on buffers per call (Linux)
_MAX_RELATIVE_OFFSET = 2**32 - 1  # index entries store offsets relative to the segment base


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, f"{topic}-{partition}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogAppendInfo(NamedTuple):
    """Outcome of an append. ``duplicate`` marks a retried idempotent batch that was already in
    the log: nothing was written and the offsets are those of the original."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    log_start_offset: int
    duplicate: bool = False


class LogReadResult(NamedTuple):
    """Whole batches (raw bytes, undecoded) and the log's offsets at the time of the read."""

    records: memoryview
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


class Log:
    """The segments of one partition and the offsets that describe them."""

    def __init__(
        self,
        directory: str,
        config: LogConfig | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.clock = clock
        ensure_writable_directory(directory)
        self.epoch_cache = LeaderEpochCache(self._path(CHECKPOINT_FILE))
        self.segments, self.recovery_report, checkpointed_start = load_segments(
            directory, self.make_segment, self._on_recovered_batch, not self.config.compact
        )
        if not self.segments:
            self.segments.append(self.make_segment(checkpointed_start or 0, ""))
        self._bases = [s.base_offset for s in self.segments]
        self.log_end_offset = self.active_segment.next_offset
        self.log_start_offset = min(
            max(checkpointed_start or 0, self.segments[0].base_offset), self.log_end_offset
        )
        if self.epoch_cache.needs_rebuild:
            self._rebuild_epoch_cache()
        self.recovery_point = self.log_end_offset
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state = ProducerStateManager(directory, self.config.producer_id_expiration_ms)
        self._rebuild_producer_state()
        self.high_watermark = self.log_start_offset
        self._set_high_watermark(read_offset(self._path(HIGH_WATERMARK_FILE)) or 0)
        self.flush_policy = FlushPolicy(self.config, self.clock())
        if self.recovery_report.dropped_data:
            log.warning("%s: %s", directory, self.recovery_report.summary())
        # Everything that survived recovery is on disk now: record it, so a crash before the
        # next roll re-validates only what is appended from here on.
        write_offset(self._path(RECOVERY_POINT_FILE), self.recovery_point)

    # -- opening -------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def make_segment(self, base_offset: int, suffix: str) -> Segment:
        return Segment(
            self.directory,
            base_offset,
            self.config.index_interval_bytes,
            max(self.config.segment_index_bytes // 8, 1),
            suffix,
        )

    def _on_recovered_batch(self, header: rb.BatchHeader) -> None:
        # A cache that needs a rebuild is rebuilt from every batch once recovery is over.
        if header.partition_leader_epoch >= 0 and not self.epoch_cache.needs_rebuild:
            self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _rebuild_epoch_cache(self) -> None:
        """The leader-epoch checkpoint was missing or malformed: rebuild the cache from the
        partition leader epoch in every batch header (one small read per batch)."""
        batches = 0
        pairs: list[tuple[int, int]] = []
        try:
            for segment in self.segments:
                for _, header in segment.iter_headers(0):
                    batches += 1
                    pairs.append((header.partition_leader_epoch, header.base_offset))
        except CorruptRecord as e:  # keep the epochs before the damage; reads will report it
            log.warning("%s: leader epochs rebuilt up to a damaged batch: %s", self.directory, e)
        self.epoch_cache.rebuild(pairs)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        if batches:
            log.warning(
                "%s: rebuilt the leader-epoch cache from %d batch headers: %s",
                self.directory, batches, self.epoch_cache.entries,
            )  # fmt: skip

    def _rebuild_producer_state(self) -> None:
        """Load the newest snapshot at or below the log end and replay headers after it."""
        start = self.producer_state.load_latest_snapshot(self.log_end_offset)
        start = self.log_start_offset if start is None else start
        if start >= self.log_end_offset:
            return
        for segment in self.segments[max(segment_index(self._bases, start), 0) :]:
            _, position = segment.offset_index.lookup(start)
            for _, header in segment.iter_headers(position):
                if header.base_offset >= start:
                    self.producer_state.update(header)

    # -- offsets -------------------------------------------------------------------------------

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    def _set_high_watermark(self, offset: int) -> int:
        """The one setter: clamps into [log_start_offset, log_end_offset]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Move the high watermark (the replication layer decides where); returns the value
        actually set, which never leaves [log_start_offset, log_end_offset]."""
        return self._set_high_watermark(offset)

    @property
    def cleanable_end_offset(self) -> int:
        """First offset that compaction leaves alone (Kafka's first uncleanable dirty offset):
        the lower of the high watermark and the active segment's base.

        Records at or above the high watermark are not yet on every in-sync replica and a
        follower may still truncate them, so a newer value there must never remove an older,
        committed one. With transactions, the last stable offset (never above the high
        watermark) takes the high watermark's place here."""
        return min(self.high_watermark, self.active_segment.base_offset)

    def segments_below(self, offset: int) -> list[Segment]:
        """The oldest non-active segments whose whole range lies below ``offset``: a segment
        counts only if the next segment's base (where the log would start once it is gone) is
        at or below ``offset``. Cleanup works on these whole segments."""
        count = 0
        while count < len(self.segments) - 1 and self._bases[count + 1] <= offset:
            count += 1
        return self.segments[:count]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answer to a follower whose last epoch is ``epoch`` (KIP-279)."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- appending -----------------------------------------------------------------------------

    def append_as_leader(
        self, records, leader_epoch: int, allow_control: bool = False
    ) -> LogAppendInfo:
        """Validate client batches, assign their offsets and append them.

        ``records`` holds one or more whole batches (bytes-like). Each is checked (length,
        magic, CRC, size limits, producer sequence); offsets are assigned by patching each
        header, never by re-encoding. An idempotent batch must come alone; if it repeats one of
        its producer's last five batches, nothing is written and the original offsets return.
        """
        view = memoryview(records).cast("B")
        batches = validate_batches(view, self.config, self.directory, allow_control)
        # Transaction markers carry a producer id but no sequence: only data batches are checked.
        idempotent = [h for _, h in batches if h.has_producer_id and not h.is_control]
        if idempotent:
            if len(batches) != 1:
                raise InvalidRecord(
                    f"an idempotent producer's batch must be appended alone, got {len(batches)} "
                    "batches in one request; send one batch per partition per request"
                )
            duplicate = self.producer_state.check(idempotent[0])
            if duplicate is not None:
                return LogAppendInfo(
                    duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, -1,
                    duplicate.last_offset - duplicate.first_offset + 1,
                    self.log_start_offset, duplicate=True,
                )  # fmt: skip

        append_time = self.clock() if self.config.message_timestamp_type == "LogAppendTime" else -1
        prepared = prepare_leader_batches(
            view, batches, self.config, self.log_end_offset, leader_epoch, append_time
        )
        self._write(prepared)
        headers = [h for _, h in prepared]
        first, last = headers[0], headers[-1]
        return LogAppendInfo(
            first.base_offset, last.last_offset, max(h.max_timestamp for h in headers),
            append_time, sum(h.record_count for h in headers), self.log_start_offset,
        )  # fmt: skip

    def append_as_follower(self, records) -> LogAppendInfo:
        """Append batches copied from the leader, keeping their offsets and epochs."""
        view = memoryview(records).cast("B")
        batches = validate_batches(
            view, self.config, self.directory, allow_control=True, as_follower=True
        )
        expected = self.log_end_offset
        for _, header in batches:
            if header.base_offset < expected:
                raise InvalidRecord(
                    f"follower append at offset {header.base_offset} is below the log end "
                    f"offset {expected}; truncate the log to the leader's answer first"
                )
            expected = header.next_offset
        self._write([([view[p : p + h.size]], h) for p, h in batches])
        headers = [h for _, h in batches]
        return LogAppendInfo(
            headers[0].base_offset, headers[-1].last_offset,
            max(h.max_timestamp for h in headers), -1,
            sum(h.record_count for h in headers), self.log_start_offset,
        )  # fmt: skip

    def _write(self, batches: list[PreparedBatch]) -> None:
        """Roll if needed, write the batches (each given as buffers and its final header) to
        the active segment with as few writev calls as the OS allows, then update leader
        epochs, producer state and the flush policy."""
        headers = [h for _, h in batches]
        total = sum(h.size for h in headers)
        self._maybe_roll(total, headers[0].max_timestamp, headers[-1].last_offset)
        segment = self.active_segment
        per_call = _IOV_MAX // max(len(p) for p, _ in batches)
        for start in range(0, len(batches), per_call):
            group = batches[start : start + per_call]
            segment.append([part for parts, _ in group for part in parts], [h for _, h in group])
        for header in headers:
            if header.partition_leader_epoch >= 0:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self.producer_state.update(header)
        self.log_end_offset = segment.next_offset
        self.flush_policy.record_append(sum(h.record_count for h in headers))
        if self.flush_policy.due_after_append(self.clock()):
            self.flush()

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int) -> None:
        segment = self.active_segment
        if segment.size == 0:
            return
        age = max_timestamp - (segment.first_batch_timestamp or max_timestamp)
        if (
            segment.size + size > self.config.segment_bytes
            or age > self.config.segment_ms
            or segment.index_is_full
            or last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET
        ):
            self.roll()

    def roll(self) -> Segment:
        """Seal the active segment (flushed, final time-index entry) and start a new one at
        the log end offset. Snapshots producer state and advances the recovery point."""
        if self.active_segment.size == 0:
            return self.active_segment
        self.active_segment.seal()
        self.recovery_point = self.log_end_offset
        write_offset(self._path(RECOVERY_POINT_FILE), self.recovery_point)
        self.producer_state.remove_expired(self.clock())
        self.producer_state.take_snapshot(self.log_end_offset)
        self.producer_state.delete_snapshots_below(self.log_start_offset)
        return self._add_active_segment()

    def _add_active_segment(self) -> Segment:
        """Start an empty segment at the log end offset. Its file's directory entry is fsynced,
        so records later flushed into it cannot vanish with an entry lost to a power loss."""
        segment = self.make_segment(self.log_end_offset, "")
        fsync_directory(self.directory)
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    # -- flushing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """fdatasync everything appended so far; it survives any crash from now on."""
        self.active_segment.flush()
        self.recovery_point = self.log_end_offset
        self.flush_policy.record_flush(self.clock())

    def maybe_flush(self) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush (call from a timer)."""
        if self.flush_policy.due_on_timer(self.clock()):
            self.flush()
            return True
        return False

    @property
    def unflushed_messages(self) -> int:
        return self.flush_policy.unflushed_messages

    # -- reading -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> LogReadResult:
        """Whole batches starting with the one that holds ``offset``, at most ``max_bytes``
        (but at least one batch), none at or past ``max_offset`` (pass the high watermark for
        consumers). The first batch may start before ``offset``: the reader skips records."""
        if max_bytes <= 0:
            raise InvalidFetchSize(f"max_bytes={max_bytes}; ask for at least 1 byte")
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside the log [{self.log_start_offset}, "
                f"{self.log_end_offset}] of {self.directory}; seek to a position inside it"
            )
        data = read_batches(self.segments, self._bases, offset, max_bytes, max_offset)
        return LogReadResult(
            data, self.log_start_offset, self.high_watermark, self.log_end_offset
        )

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is at or after
        ``timestamp``, or None when there is none."""
        return find_offset_for_timestamp(self.segments, timestamp, self.log_start_offset)

    # -- truncation and deletion ---------------------------------------------------------------

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
        while len(self.segments) > 1 and self.active_segment.base_offset > offset:
            self.segments.pop().delete()
            self._bases.pop()
        straddling = self.active_segment.find_batch(offset)
        self.active_segment.truncate_to(offset)
        if straddling is not None and straddling[1].base_offset < offset:
            self.log_end_offset = straddling[1].base_offset  # that batch went whole
        else:
            self.log_end_offset = offset
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
        if len(self.segments) > 1:  # an emptied segment is replaced by one at the log end
            self.segments.pop().delete()
            self._bases.pop()
            self._add_active_segment()
        # A log whose only segment lost every record to compaction keeps its end in memory.

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and start empty at ``offset`` (a follower far behind a leader
        whose log now starts later)."""
        for segment in self.segments:
            segment.delete()
        self.segments = [self.make_segment(offset, "")]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = offset
        write_offset(self._path(LOG_START_OFFSET_FILE), offset)
        self.epoch_cache.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state()
        self._set_high_watermark(self.high_watermark)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.active_segment.flush()
        write_offset(self._path(RECOVERY_POINT_FILE), self.recovery_point)

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
            self.delete_segments(
                [s for s in self.segments[:-1] if s.next_offset <= self.log_start_offset]
            )
        return self.log_start_offset

    def _move_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        write_offset(self._path(LOG_START_OFFSET_FILE), offset)
        self.epoch_cache.truncate_from_start(offset)
        self._set_high_watermark(self.high_watermark)

    def delete_segments(self, doomed: list[Segment]) -> int:
        """Delete these (non-active) segments, oldest first, and move the log start past them.
        Returns the bytes freed."""
        doomed_ids = {id(s) for s in doomed}
        if id(self.active_segment) in doomed_ids:
            raise ValueError("the active segment is never deleted")
        remaining = [s for s in self.segments if id(s) not in doomed_ids]
        new_start = max(self.log_start_offset, remaining[0].base_offset)
        if new_start > self.high_watermark:
            raise OffsetOutOfRange(
                f"deleting these segments of {self.directory} would move the log start offset "
                f"to {new_start}, past the high watermark {self.high_watermark}; delete only "
                "segments wholly below the high watermark (Log.segments_below)"
            )
        freed = 0
        for segment in doomed:
            freed += segment.size
            segment.delete()
        self.segments = remaining
        self._bases = [s.base_offset for s in self.segments]
        if self.segments[0].base_offset > self.log_start_offset:
            self._move_log_start(self.segments[0].base_offset)
        self.producer_state.delete_snapshots_below(self.log_start_offset)
        return freed

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Put a compacted segment (files carrying the .swap suffix) in place of ``old``.
        Crash-safe: the swap file is complete before any input is deleted (log_loader.py
        finishes the job if a crash interrupts it)."""
        old_ids = {id(s) for s in old}
        for segment in old:
            segment.delete()
        new.rename_suffix("")
        kept = [s for s in self.segments if id(s) not in old_ids] + [new]
        self.segments = sorted(kept, key=lambda s: s.base_offset)
        self._bases = [s.base_offset for s in self.segments]

    # -- closing -------------------------------------------------------------------------------

    def checkpoint_high_watermark(self) -> None:
        write_offset(self._path(HIGH_WATERMARK_FILE), self.high_watermark)

    def close(self) -> None:
        """Seal, flush, checkpoint and mark the shutdown clean, so the next open skips
        recovery and reads only the tail of each segment."""
        self.active_segment.seal()
        self.flush()
        write_offset(self._path(RECOVERY_POINT_FILE), self.recovery_point)
        self.checkpoint_high_watermark()
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self.segments:
            segment.close()
        write_atomically(self._path(CLEAN_SHUTDOWN_FILE), b"")

    def abandon(self) -> None:
        """Close file handles without flushing or marking a clean shutdown (tests use it to
        stand for a crash; the next open recovers)."""
        for segment in self.segments:
            segment.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory!r}, start={self.log_start_offset}, hw={self.high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )


__all__ = [
    "Log",
    "LogAppendInfo",
    "LogReadResult",
    "RecoveryReport",
    "partition_dir",
]
