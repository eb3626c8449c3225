"""The controller's durable metadata: an append-only log of records plus snapshots.

The log is an ordinary rafka partition log (``__cluster_metadata-0`` in the controller's data
directory), one record per batch value, each append flushed before it is acknowledged. Every
``snapshot_every`` records the whole image is written to ``metadata.snapshot`` (atomically)
and the log below it is deleted, so opening costs one snapshot plus a bounded replay.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import msgpack

from rafka.cluster.metadata import MetadataImage
from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically
from rafka.storage.config import LogConfig
from rafka.storage.log import Log, now_ms

LOG_DIR = "__cluster_metadata-0"
SNAPSHOT_FILE = "metadata.snapshot"
# Infinite retention: only a snapshot moves the log start.
_LOG_CONFIG = LogConfig.from_dict({"retention.ms": -1, "segment.bytes": 8 * 1024 * 1024})


class MetadataLog:
    """Owns the image; ``append`` makes records durable, then applies them."""

    def __init__(
        self, directory: str, snapshot_every: int = 10_000, clock: Callable[[], int] = now_ms
    ) -> None:
        self.directory = directory
        self.snapshot_every = snapshot_every
        self.clock = clock
        self.log = Log(os.path.join(directory, LOG_DIR), _LOG_CONFIG, clock)
        self.image = MetadataImage()
        self._since_snapshot = 0
        start = self._load_snapshot()
        self._replay(max(start, self.log.log_start_offset))
        # Every record on disk was acknowledged only after its flush: all of it is committed.
        self.log.update_high_watermark(self.log.log_end_offset)

    def _load_snapshot(self) -> int:
        path = os.path.join(self.directory, SNAPSHOT_FILE)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
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
        """Make ``records`` durable (one batch, fsynced) and apply them, in order."""
        if not records:
            return
        values = [msgpack.packb(r) for r in records]
        info = self.log.append_as_leader(rb.encode_batch(values, timestamps=self.clock()), 0)
        self.log.flush()
        self.log.update_high_watermark(self.log.log_end_offset)
        for offset, record in enumerate(records, start=info.first_offset):
            self.image.apply(record, offset)
        self._since_snapshot += len(records)
        if self._since_snapshot >= self.snapshot_every:
            self.snapshot()

    def snapshot(self) -> None:
        next_offset = self.log.log_end_offset
        blob = msgpack.packb({"next_offset": next_offset, "records": self.image.to_records()})
        write_atomically(os.path.join(self.directory, SNAPSHOT_FILE), blob)
        self.log.delete_records(next_offset)
        self._since_snapshot = 0

    def close(self) -> None:
        self.log.close()
