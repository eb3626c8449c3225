"""A partition's log: its segments, offsets, appends, flushing, truncation and cleanup hooks.

Directory ``<data>/<topic>-<partition>/`` holds the segments (see segment.py), producer-state
``*.snapshot`` files and the small state files of log_directory.py. The contract (offsets,
durability per flush setting, concurrency) is ``Log``'s docstring.

Transactions leave two kinds of state on disk besides their batches. Producer snapshots
(producer_state.py, version 2) carry each producer's open transaction as the offset of its
first batch. A segment whose batches include a marker aborting a transaction has a
``.txnindex`` (transaction_index.py): one 36-byte entry per such abort, (producer id, first
offset, marker offset, last stable offset then), all offsets absolute, each marker's entry in
the index of the segment that holds the marker. Both are derived from the batches: a replay
of the log rebuilds them after a crash (log_transactions.py).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, NamedTuple

from rafka.errors import InvalidFetchSize, InvalidRecord, OffsetOutOfRange
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig
from rafka.storage.flush_policy import FlushPolicy
from rafka.storage.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache
from rafka.storage.log_directory import LogDirectory
from rafka.storage.log_loader import RecoveryReport, load_segments, rebuild_leader_epochs
from rafka.storage.log_removals import LogRemovals
from rafka.storage.log_segments import LogSegments
from rafka.storage.log_transactions import LogTransactions
from rafka.storage.log_validator import (
    LogAppendInfo,
    PreparedBatch,
    appended,
    check_follower_offsets,
    prepare_leader_batches,
    validate_batches,
)
from rafka.storage.producer_state import ProducerStateManager
from rafka.storage.segment import Segment
from rafka.storage.transaction_markers import marker_of

log = logging.getLogger(__name__)

_IOV_MAX = 1024  # writev's limit on buffers per call (Linux)
_MAX_RELATIVE_OFFSET = 2**32 - 1  # index entries store offsets relative to the segment base


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, f"{topic}-{partition}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogReadResult(NamedTuple):
    """Whole batches (raw bytes, undecoded) and the log's offsets at the time of the read."""

    records: memoryview
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    last_stable_offset: int


class Log(LogRemovals, LogTransactions):
    """The segments of one partition and the offsets that describe them.

    Offsets: ``log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset``;
    one setter clamps the high watermark, and the last stable offset (the first offset of
    the earliest open transaction, capped by the high watermark) is computed from them.
    The owner moves the high watermark (``update_high_watermark``) and checkpoints it
    (``checkpoint_high_watermark``, and at ``close``); a reopened log starts from the
    checkpointed value, which may lag. Retention acts only below the high watermark,
    compaction only below the last stable offset; read_committed consumers read below it.

    Durability under power loss. A process crash loses nothing an append returned: the bytes
    are in the OS page cache, which outlives the process. An OS crash or power loss keeps
    only what was flushed (fdatasync); the unflushed tail may be lost whole or in part, and
    recovery cuts it at the first torn batch, so what survives is always a prefix of the log.
    A record acknowledged to a producer is durable on this node only once flushed.

    - Default (``flush.messages`` and ``flush.ms`` unset): the log fsyncs when a segment rolls,
      at ``close`` and when the owner calls ``flush()``. A power loss can lose everything
      appended since the last roll or flush, up to a whole active segment (``segment.bytes``).
      As in Kafka, durability comes from replication: an ``acks=all`` record is lost only if
      every in-sync replica loses power before its own flush.
    - ``flush.messages=N``: an append that brings the unflushed records to N or more flushes
      before it returns, so at most N-1 acknowledged records are ever unflushed; with N=1 every
      acknowledged record (acks=1 or all) is on this node's disk.
    - ``flush.ms=T``: an append flushes when T ms have passed since the last flush, and the
      owner's timer calls ``maybe_flush()``; a power loss can lose records up to T ms old, plus
      the timer's period when no append comes.

    Concurrency: not thread-safe and never awaits. The owner (a partition actor on one event
    loop) calls it from one thread; every method runs to completion, so no state is ever seen
    half-changed.
    """

    def __init__(
        self,
        directory: str,
        config: LogConfig | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.clock = clock
        self.files = LogDirectory(directory, self.config)
        self.epoch_cache = LeaderEpochCache(self.files.file(CHECKPOINT_FILE))
        loaded, self.recovery_report, checkpointed_start = load_segments(
            directory,
            self.files.make_segment,
            self._on_recovered_batch,
            gaps_allowed=self.config.compact or self.files.offset_gaps_allowed,
        )
        if not loaded:
            loaded = [self.files.make_segment(checkpointed_start or 0, "", new=True)]
            self.files.sync_new_log()
        self._segments = LogSegments(loaded)
        self.log_end_offset = self.active_segment.next_offset
        starts_empty = checkpointed_start is not None and checkpointed_start > self.log_end_offset
        if starts_empty:
            # The log start was made durable past records a crash took (delete_records on
            # unflushed records, truncate_fully_and_start_at cut short): start empty there,
            # as Kafka does, rather than hand out offsets below it again.
            self._segments.delete_all_and_start(
                lambda: self.files.make_segment(checkpointed_start, "", new=True)
            )
            self.files.sync()
            self.log_end_offset = checkpointed_start
            self.epoch_cache.clear()
        self.log_start_offset = min(
            max(checkpointed_start or 0, self.segments[0].base_offset), self.log_end_offset
        )
        below_start = self._segments.below(self.log_start_offset)
        if below_start:  # left by a deletion that a crash cut short
            self._segments.remove(below_start)
        if self.epoch_cache.needs_rebuild:
            rebuild_leader_epochs(self.epoch_cache, self._segments, self.log_start_offset)
        self.recovery_point = self.log_end_offset
        # Segments deleted below the log start before a crash could move its checkpoint.
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state = ProducerStateManager(directory, self.config.producer_id_expiration_ms)
        if starts_empty:
            self.producer_state.truncate_fully()
        self._rebuild_producer_state()
        self.high_watermark = self.log_start_offset
        self._set_high_watermark(self.files.read_high_watermark())
        self._checkpointed_high_watermark = -1  # not written by this life yet
        self.flush_policy = FlushPolicy(self.config, self.clock())
        # Bytes appended (as leader or follower) since this log was opened: a traffic counter
        # for the broker's load reports (rafka.cluster.load_rates); not persisted.
        self.bytes_appended = 0
        if self.recovery_report.dropped_data:
            log.warning("%s: %s", directory, self.recovery_report.summary())
        # Everything that survived recovery is on disk now: record it, so a crash before the
        # next roll re-validates only what is appended from here on.
        self.files.write_recovery_point(self.recovery_point)

    # -- opening -------------------------------------------------------------------------------

    def _on_recovered_batch(self, header: rb.BatchHeader) -> None:
        # Only epochs newer than the cache's latest are added, as Kafka's recovery does:
        # re-assigning an older epoch would drop the entries after it. (A cache that needs a
        # rebuild is rebuilt from every batch once recovery is over.)
        epoch = header.partition_leader_epoch
        if epoch > self.epoch_cache.latest_epoch and not self.epoch_cache.needs_rebuild:
            self.epoch_cache.assign(epoch, header.base_offset)

    # -- offsets -------------------------------------------------------------------------------

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first; the last is the active one. Read-only for callers."""
        return self._segments.ordered

    @property
    def active_segment(self) -> Segment:
        return self._segments.active

    @property
    def size_bytes(self) -> int:
        return self._segments.size_bytes

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
        the lower of the last stable offset and the active segment's base.

        Records at or above the high watermark are not yet on every in-sync replica and a
        follower may still truncate them, so a newer value there must never remove an older,
        committed one; records at or above the last stable offset (never above the high
        watermark) may belong to a transaction that has not ended, so compaction cannot yet
        tell whether they count."""
        return min(self.last_stable_offset, self.active_segment.base_offset)

    def segments_below(self, offset: int) -> list[Segment]:
        """The oldest non-active segments whose whole range lies below ``offset``: a segment
        counts only if the next segment's base (where the log would start once it is gone) is
        at or below ``offset``. Cleanup works on these whole segments."""
        return self._segments.below(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answer to a follower whose last epoch is ``epoch`` (KIP-279)."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- appending -----------------------------------------------------------------------------

    def append_as_leader(
        self, records, leader_epoch: int, allow_control: bool = False
    ) -> LogAppendInfo:
        """Validate client batches, assign their offsets and append them.

        ``records`` holds one or more whole batches (bytes-like). Each is checked (length,
        magic, CRC, size limits, producer state); offsets are assigned by patching each
        header, never by re-encoding. A batch with a producer id (idempotent or transactional
        data, or a transaction marker, which needs ``allow_control``) must come alone; if it
        repeats one of its producer's last five batches, nothing is written and the original
        offsets return. A coordinator writes a marker built with
        ``record_batch.encode_control_batch``.
        """
        view = memoryview(records).cast("B")
        batches = validate_batches(view, self.config, self.directory, allow_control)
        producers = [(p, h) for p, h in batches if h.has_producer_id]
        if producers:
            if len(batches) != 1:
                raise InvalidRecord(
                    f"a producer's batch (idempotent, transactional or a transaction marker) "
                    f"must be appended alone, got {len(batches)} batches in one request; send "
                    "one batch per partition per request"
                )
            position, header = producers[0]
            marker = marker_of(header, view, position)
            duplicate = self.producer_state.check(header, marker)
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
        return appended([h for _, h in prepared], append_time, self.log_start_offset)

    def append_as_follower(self, records) -> LogAppendInfo:
        """Append batches copied from the leader, keeping their offsets and epochs."""
        view = memoryview(records).cast("B")
        batches = validate_batches(
            view, self.config, self.directory, allow_control=True, as_follower=True
        )
        if check_follower_offsets(batches, self.log_end_offset):
            self.allow_offset_gaps()
        self._write([([view[p : p + h.size]], h) for p, h in batches])
        return appended([h for _, h in batches], -1, self.log_start_offset)

    def _write(self, batches: list[PreparedBatch]) -> None:
        """Roll if needed, write the batches (each given as buffers and its final header) to
        the active segment with as few writev calls as the OS allows, then update leader
        epochs, producer state (and a transaction index) and the flush policy."""
        headers = [h for _, h in batches]
        # Markers are read before anything is written: one that cannot be read must not
        # leave a batch on disk that producer state never saw.
        markers = [marker_of(h, b"".join(parts)) if h.is_control else None
                   for parts, h in batches]  # fmt: skip
        total = sum(h.size for h in headers)
        self._maybe_roll(total, headers[0].max_timestamp, headers[-1].last_offset)
        segment = self.active_segment
        per_call = _IOV_MAX // max(len(p) for p, _ in batches)
        position, state = segment.size, segment.append_state()
        try:
            for start in range(0, len(batches), per_call):
                group = batches[start : start + per_call]
                segment.append([part for parts, _ in group for part in parts],
                               [h for _, h in group])  # fmt: skip
        except Exception:
            # A later call failed: the earlier ones must go too, or a retry writes them twice.
            segment.cut_back(position, headers[0].base_offset, state)
            raise
        for header, marker in zip(headers, markers):
            if header.partition_leader_epoch >= 0:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self._update_producer_state(segment, header, marker)
        self.log_end_offset = segment.next_offset
        self.bytes_appended += total
        self.flush_policy.record_append(sum(h.record_count for h in headers))
        if self.flush_policy.due_after_append(self.clock()):
            self.flush()

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int) -> None:
        segment = self.active_segment
        if segment.size == 0:
            return
        first = segment.first_batch_timestamp  # 0 is a real timestamp: compare with None
        age = 0 if first is None else max_timestamp - first
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
        self.files.sync_if_needed()
        self.recovery_point = self.log_end_offset
        self.files.write_recovery_point(self.recovery_point)
        self.producer_state.remove_expired(self.clock())
        self.producer_state.take_snapshot(self.log_end_offset)
        self.producer_state.delete_snapshots_below(self.log_start_offset)
        return self._add_active_segment()

    def _add_active_segment(self) -> Segment:
        """Start an empty segment at the log end offset (its directory entry is synced by the
        next flush, before any record in it counts as flushed)."""
        segment = self.files.make_segment(self.log_end_offset, "", new=True)
        self._segments.add(segment)
        return segment

    # -- flushing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """fdatasync everything appended so far; it survives any crash from now on."""
        self._flush_active_segment()
        self.recovery_point = self.log_end_offset
        self.flush_policy.record_flush(self.clock())

    def _flush_active_segment(self) -> None:
        """fdatasync the active segment and, when a segment was created since the directory
        was last synced, the directory: a flushed record in a file whose directory entry is
        still in the page cache is lost with it (Kafka's flush does the same)."""
        self.active_segment.flush()
        self.files.sync_if_needed()

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
        read_uncommitted consumers; read_committed ones use ``read_committed``). The first
        batch may start before ``offset``: the reader skips records."""
        if max_bytes <= 0:
            raise InvalidFetchSize(f"max_bytes={max_bytes}; ask for at least 1 byte")
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside the log [{self.log_start_offset}, "
                f"{self.log_end_offset}] of {self.directory}; seek to a position inside it"
            )
        data = self._segments.read(offset, max_bytes, max_offset)
        return LogReadResult(
            data, self.log_start_offset, self.high_watermark, self.log_end_offset,
            self.last_stable_offset,
        )  # fmt: skip

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is at or after
        ``timestamp``, or None when there is none."""
        return self._segments.offset_for_timestamp(timestamp, self.log_start_offset)

    # -- closing -------------------------------------------------------------------------------

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark's checkpoint file, unless it holds this value already
        (an idle log writes nothing)."""
        if self.high_watermark != self._checkpointed_high_watermark:
            self.files.write_high_watermark(self.high_watermark)
            self._checkpointed_high_watermark = self.high_watermark

    def close(self) -> None:
        """Seal, flush, checkpoint and mark the shutdown clean, so the next open skips
        recovery and reads only the tail of each segment."""
        self.active_segment.seal()
        self.flush()
        self.files.write_recovery_point(self.recovery_point)
        self.checkpoint_high_watermark()
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self.segments:
            segment.close()
        self.files.mark_clean_shutdown()

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
