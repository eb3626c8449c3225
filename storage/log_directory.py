"""A log's partition directory: making its segments, its small state files, and when its
entries are synced.

Besides the segments (segment.py) and producer snapshots (producer_state.py) it holds:

    leader-epoch-checkpoint   leader_epoch.py
    recovery-point            offset below which every batch was fsynced (log_loader.py)
    log-start-offset          the log start when it moved inside a segment (log_loader.py)
    clean-shutdown            present only between a clean close and the next open
    offset-gaps               present once the log has had gaps between batches
    high-watermark            the owner's last checkpoint of the high watermark

A file created in the directory survives a power loss only once the directory is fsynced.
Segments (and the transaction index a segment gets at its first aborted transaction) are
created often, so their entries are synced lazily: the directory remembers that it has
unsynced entries and the log syncs it before it reports records in a new segment (or a new
index entry) flushed (``sync_if_needed``), as Kafka's flush does.
"""

from __future__ import annotations

import os

from rafka.storage import files
from rafka.storage.checkpoint import read_offset, write_atomically, write_offset
from rafka.storage.config import LogConfig
from rafka.storage.log_loader import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    ensure_writable_directory,
)
from rafka.storage.segment import Segment

HIGH_WATERMARK_FILE = "high-watermark"
OFFSET_GAPS_FILE = "offset-gaps"


class LogDirectory:
    """The directory at ``path`` (created if missing) of a log with ``config``."""

    def __init__(self, path: str, config: LogConfig) -> None:
        ensure_writable_directory(path)
        self.path = path
        self.config = config
        self._unsynced = False  # a segment was created since the directory was last synced
        self._offset_gaps_allowed = files.exists(self.file(OFFSET_GAPS_FILE))

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    # -- segments and entries ------------------------------------------------------------------

    def make_segment(self, base_offset: int, suffix: str, new: bool = False) -> Segment:
        """The segment at ``base_offset`` whose files carry ``suffix``: opened as found, or
        with ``new`` started empty (replacing any file at its names)."""
        segment = Segment(
            self.path,
            base_offset,
            self.config.index_interval_bytes,
            max(self.config.segment_index_bytes // 8, 1),
            suffix,
            new,
        )
        if new:
            self._unsynced = True
        return segment

    def entry_created(self) -> None:
        """A file was created here besides a segment (a transaction index): the next
        ``sync_if_needed`` makes its entry durable too."""
        self._unsynced = True

    def sync_if_needed(self) -> None:
        """fsync the directory if a segment was created since it was last synced."""
        if self._unsynced:
            self.sync()

    def sync(self) -> None:
        files.fsync_directory(self.path)
        self._unsynced = False

    def sync_new_log(self) -> None:
        """A new log: its first segment and the directory's own entry in the data directory
        must both survive a power loss once anything in them is flushed."""
        self.sync()
        files.fsync_directory(os.path.dirname(os.path.abspath(self.path)))

    # -- state files ---------------------------------------------------------------------------

    def write_recovery_point(self, offset: int) -> None:
        write_offset(self.file(RECOVERY_POINT_FILE), offset)

    def write_log_start_offset(self, offset: int) -> None:
        write_offset(self.file(LOG_START_OFFSET_FILE), offset)

    def read_high_watermark(self) -> int:
        return read_offset(self.file(HIGH_WATERMARK_FILE)) or 0

    def write_high_watermark(self, offset: int) -> None:
        write_offset(self.file(HIGH_WATERMARK_FILE), offset)

    def mark_clean_shutdown(self) -> None:
        write_atomically(self.file(CLEAN_SHUTDOWN_FILE), b"")

    @property
    def offset_gaps_allowed(self) -> bool:
        return self._offset_gaps_allowed

    def allow_offset_gaps(self) -> None:
        """Record, durably, that the log may have gaps between batches (see log_loader)."""
        if not self._offset_gaps_allowed:
            write_atomically(self.file(OFFSET_GAPS_FILE), b"")
            self._offset_gaps_allowed = True
