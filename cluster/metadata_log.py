"""The controller's durable metadata: an append-only log of records plus snapshots.

The log is an ordinary rafka partition log (``__cluster_metadata-0`` in the controller's data
directory), one record per batch value, each append flushed before it is acknowledged. Every
``snapshot_every`` records the whole image is written to ``metadata.snapshot`` (atomically)
and the log below it is deleted, so opening costs one snapshot plus a bounded replay.

One process at a time: opening takes the directory's lock (``DirectoryLock``) and holds it
until ``close``. Records are checked against the image before they are written
(``MetadataImage.check``), so a record that could not be applied never reaches the disk and
the log always replays. A snapshot that fails is logged and retried at the next append: the
records it follows are already durable.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

import msgpack

from rafka.cluster.metadata import MetadataImage
from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically
from rafka.storage.config import LogConfig
from rafka.storage.directory_lock import DirectoryLock
from rafka.storage.log import Log, now_ms

LOG_DIR = "__cluster_metadata-0"
SNAPSHOT_FILE = "metadata.snapshot"
#: How long opening waits for another process to release the directory, s.
LOCK_TIMEOUT_S = 60.0
log = logging.getLogger(__name__)
# Infinite retention: only a snapshot moves the log start.
_LOG_CONFIG = LogConfig.from_dict({"retention.ms": -1, "segment.bytes": 8 * 1024 * 1024})


class MetadataLog:
    """Owns the image; ``append`` makes records durable, then applies them."""

    def __init__(
        self, directory: str, snapshot_every: int = 10_000, clock: Callable[[], int] = now_ms,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.snapshot_every = snapshot_every
        self.clock = clock
        self.lock = DirectoryLock(directory)
        self.lock.acquire(lock_timeout_s, on_wait=lambda holder: log.warning(
            "metadata directory %s is locked by %s; waiting for it to stop", directory, holder
        ))  # fmt: skip
        try:
            self.log = Log(os.path.join(directory, LOG_DIR), _LOG_CONFIG, clock)
            self.image = MetadataImage()
            self._since_snapshot = 0
            start = self._load_snapshot()
            self._replay(max(start, self.log.log_start_offset))
        except BaseException:
            self.lock.release()
            raise
        # Every record on disk was acknowledged only after its flush: all of it is committed.
        self.log.update_high_watermark(self.log.log_end_offset)

    def _load_snapshot(self) -> int:
        path = os.path.join(self.directory, SNAPSHOT_FILE)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            if self.log.log_start_offset > 0:
                # The records below the log start are only in a snapshot: without it the
                # image would be missing topics, and replicas checking in would be told they
                # do not exist and delete their data.
                raise CorruptRecord(
                    f"metadata snapshot {path} is missing but the metadata log starts at "
                    f"offset {self.log.log_start_offset}: the records before it are lost; "
                    "restore the snapshot file from a backup"
                ) from None
            return 0
        try:
            snapshot = msgpack.unpackb(blob)
            next_offset, records = snapshot["next_offset"], snapshot["records"]
            for record in records:
                self.image.apply(record, next_offset - 1)
        except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as e:
            raise CorruptRecord(f"metadata snapshot {path} is unreadable: {e!r}") from e
        return next_offset

    def _replay(self, offset: int) -> None:
        end = self.log.log_end_offset
        while offset < end:
            data = self.log.read(offset, 1 << 20).records
            for pos, _header in rb.iter_batches(data):
                batch = rb.decode_records(data, pos, verify=False)
                for record_offset, value in zip(batch.offsets, batch.values):
                    if record_offset >= offset:
                        self.image.apply(msgpack.unpackb(value), record_offset)
                        self._since_snapshot += 1
                offset = batch.header.next_offset

    def append(self, records: list[dict[str, Any]]) -> None:
        """Make ``records`` durable (one batch, fsynced) and apply them, in order. Records
        that could not all be applied raise InvalidRecord and are not written."""
        if not records:
            return
        self.image.check(records)
        values = [msgpack.packb(r) for r in records]
        info = self.log.append_as_leader(rb.encode_batch(values, timestamps=self.clock()), 0)
        self.log.flush()
        self.log.update_high_watermark(self.log.log_end_offset)
        for offset, record in enumerate(records, start=info.first_offset):
            self.image.apply(record, offset)
        self._since_snapshot += len(records)
        if self._since_snapshot >= self.snapshot_every:
            try:
                self.snapshot()
            except Exception:  # the records are durable; the next append tries again
                log.exception("metadata snapshot of %s failed", self.directory)

    def snapshot(self) -> None:
        next_offset = self.log.log_end_offset
        blob = msgpack.packb({"next_offset": next_offset, "records": self.image.to_records()})
        write_atomically(os.path.join(self.directory, SNAPSHOT_FILE), blob)
        self.log.delete_records(next_offset)
        self._since_snapshot = 0

    def abandon(self) -> None:
        """Drop the files as a crashed process does: nothing flushed or marked clean, the
        directory lock released (the kernel releases it when the process dies)."""
        self.log.abandon()
        self.lock.release()

    def close(self) -> None:
        self.log.close()
        self.lock.release()
