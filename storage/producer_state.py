"""Producer state for idempotence: per producer id, its epoch and its last five batches.

A batch from an idempotent producer carries (producer id, epoch, base sequence). The leader
accepts it only if it follows the producer's last sequence; a retried batch whose answer was
lost matches one of the last five and is answered with its original offsets instead of being
written again (Kafka keeps five because a producer has at most five batches in flight).

Snapshots: ``NNNNNNNNNNNNNNNNNNNN.snapshot`` in the partition directory, named by the log end
offset they reflect, written atomically at every segment roll and at close. Layout: CRC32C
(uint32, big-endian) of the body, then the body: msgpack
``[1, [[producer_id, epoch, last_timestamp, [[first_seq, last_seq, first_offset, last_offset,
timestamp], ...]], ...]]``. On open the log loads the newest snapshot at or below its end and
replays batch headers from there; a snapshot that fails its CRC is deleted and an older one used.
Not thread-safe: the owning Log serializes calls.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack

from rafka.errors import InvalidProducerEpoch, OutOfOrderSequence
from rafka.storage import files
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
#: Producer ids from here up are the cluster's own writers (the group coordinators, see
#: rafka.cluster.coordinator_fencing). Their fencing rests on the log remembering their
#: epoch, so they never expire; there are as many as coordinator shards.
INTERNAL_PRODUCER_IDS_FROM = 1 << 62
BATCHES_KEPT = 5
_CRC = struct.Struct(">I")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    last_timestamp: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else rb.NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


class ProducerStateManager:
    """Producer entries of one partition, and their snapshots in ``directory``."""

    def __init__(self, directory: str, expiration_ms: int) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}

    # -- the append path -----------------------------------------------------------------------

    def check(self, header: rb.BatchHeader) -> BatchMetadata | None:
        """Validate a client's idempotent batch before it is written; changes nothing.
        Returns the metadata of the original batch when this one repeats one of its
        producer's last five batches of the same epoch (write nothing, answer with the
        original offsets).

        The rules are Kafka's for appends from clients (``ProducerAppendInfo``
        ``checkProducerEpoch`` and ``checkSequence``, 3.x and 4.x):

        - A producer the log does not know (new, or its state expired or went with the
          log's head) may write at any epoch and any sequence: since KIP-360 a leader that
          lost a producer's state accepts it rather than fail a live producer. (So a client
          must not let a later batch overtake a first one: see clients/producer_idempotence.)
        - An epoch older than the producer's: InvalidProducerEpoch (the producer is fenced).
        - A newer epoch starts at sequence 0, else OutOfOrderSequence.
        - The same epoch continues at the sequence after its last batch (2**31 - 1 wraps to
          0; a producer known only from a transaction marker starts at 0), else
          OutOfOrderSequence.
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {header.producer_id} wrote with epoch {header.producer_epoch} but "
                f"epoch {entry.epoch} has taken over; this producer is fenced: close it"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"producer {header.producer_id} began epoch {header.producer_epoch} at "
                    f"sequence {header.base_sequence}; a new epoch starts at sequence 0"
                )
            return None
        duplicate = entry.find_duplicate(header.base_sequence, header.last_sequence)
        if duplicate is not None:
            return duplicate
        expected = rb.increment_sequence(entry.last_seq, 1)
        if header.base_sequence != expected:
            raise OutOfOrderSequence(
                f"producer {header.producer_id} epoch {header.producer_epoch} sent sequence "
                f"{header.base_sequence}, expected {expected} (the last written was "
                f"{entry.last_seq}); a batch before it was lost: the producer must reset"
            )
        return None

    def update(self, header: rb.BatchHeader) -> None:
        """Record a batch that was written (leader, follower, or replay on open)."""
        if not header.has_producer_id or header.is_control:
            if header.has_producer_id:
                self._touch(header)
            return
        entry = self._touch(header)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence,
                header.base_offset, header.last_offset, header.max_timestamp,
            )
        )  # fmt: skip

    def _touch(self, header: rb.BatchHeader) -> ProducerEntry:
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch, header.max_timestamp)
            self.producers[header.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        return entry

    def remove_expired(self, now_ms: int) -> None:
        """Forget producers idle for longer than ``producer.id.expiration.ms`` (never the
        cluster's own writers: see INTERNAL_PRODUCER_IDS_FROM)."""
        horizon = now_ms - self.expiration_ms
        for pid in [p for p, e in self.producers.items()
                    if e.last_timestamp < horizon and p < INTERNAL_PRODUCER_IDS_FROM]:  # fmt: skip
            del self.producers[pid]

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for name in files.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(offsets)

    def take_snapshot(self, log_end_offset: int) -> None:
        """Write the state as of ``log_end_offset`` (every batch below it is reflected)."""
        body = msgpack.packb(
            [
                1,
                [
                    [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]]
                    for pid, e in self.producers.items()
                ],
            ]
        )
        write_atomically(self.snapshot_path(log_end_offset), _CRC.pack(rb.crc32c(body)) + body)

    def load_latest_snapshot(self, at_or_below: int) -> int | None:
        """Replace the state with the newest valid snapshot at or below ``at_or_below``;
        snapshots past it (left by a truncated log) and corrupt ones are deleted. Returns the
        snapshot's offset, or None (state cleared) when there is none."""
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > at_or_below:
                files.unlink(path)
                continue
            try:
                self.producers = _read_snapshot(path)
                return offset
            except (ValueError, TypeError, struct.error, msgpack.UnpackException) as e:
                log.warning("producer snapshot %s is unreadable (%s); deleting it", path, e)
                files.unlink(path)
        return None

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot (the log was discarded whole)."""
        self.producers = {}
        for offset in self.snapshot_offsets():
            files.unlink(self.snapshot_path(offset))

    def delete_snapshots_below(self, offset: int, keep_latest: int = 2) -> None:
        """Delete snapshots below ``offset`` (the log start), keeping the newest few."""
        offsets = self.snapshot_offsets()
        for snap in offsets[:-keep_latest] if keep_latest else offsets:
            if snap < offset:
                files.unlink(self.snapshot_path(snap))


def _read_snapshot(path: str) -> dict[int, ProducerEntry]:
    data = files.read_file(path)
    if data is None:
        raise ValueError("missing")
    (crc,) = _CRC.unpack_from(data)
    body = data[_CRC.size :]
    if rb.crc32c(body) != crc:
        raise ValueError("CRC mismatch")
    version, producers = msgpack.unpackb(body)
    if version != 1:
        raise ValueError(f"unknown snapshot version {version}")
    state = {}
    for pid, epoch, last_timestamp, batches in producers:
        entry = ProducerEntry(epoch, last_timestamp)
        entry.batches.extend(BatchMetadata(*b) for b in batches)
        state[pid] = entry
    return state
