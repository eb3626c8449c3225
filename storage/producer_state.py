"""Producer state: per producer id, its epoch, its last five batches and its open transaction.

A batch from an idempotent producer carries (producer id, epoch, base sequence). The leader
accepts it only if it follows the producer's last sequence; a retried batch whose answer was
lost matches one of the last five and is answered with its original offsets instead of being
written again (Kafka keeps five because a producer has at most five batches in flight).

Transactions (Kafka's ProducerAppendInfo and ProducerStateManager). A transactional data
batch opens its producer's transaction at its base offset when none is open; the producer's
next marker (a control batch, see transaction_markers) closes it, and ``update`` then returns
a ``CompletedTxn`` (the log indexes the aborted ones). A marker with no open transaction (an
abort with nothing written here) changes only the producer's epoch and coordinator epoch. A
marker with a newer producer epoch moves the producer to it: Kafka 4 bumps the epoch at every
transaction end, so the next transaction starts at sequence 0 of the new epoch and a late
batch of the old one is refused as fenced. ``first_unstable_offset`` is the first offset of
the earliest open transaction: the log's last stable offset never passes it. A producer with
an open transaction never expires (its transaction would silently stop holding the LSO).

Snapshots: ``NNNNNNNNNNNNNNNNNNNN.snapshot`` in the partition directory, named by the log end
offset they reflect, written atomically at every segment roll and at close. Layout: CRC32C
(uint32, big-endian) of the body, then the body: msgpack
``[2, [[producer_id, epoch, last_timestamp, [[first_seq, last_seq, first_offset, last_offset,
timestamp], ...], txn_first_offset or nil, coordinator_epoch], ...]]`` (version 1, still read,
has neither of the last two fields: it was written before transactions, so none is open).
On open the log loads the newest snapshot at or below its end and replays batches from there
(headers only, plus the one record of each marker); a snapshot that fails its CRC is deleted
and an older one used. Not thread-safe: the owning Log serializes calls.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import msgpack

from rafka.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from rafka.storage import files
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically
from rafka.storage.transaction_markers import TxnMarker

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
#: Producer ids from here up are the cluster's own writers (the group coordinators, see
#: rafka.cluster.coordinator_fencing). Their fencing rests on the log remembering their
#: epoch, so they never expire; there are as many as coordinator shards.
INTERNAL_PRODUCER_IDS_FROM = 1 << 62
BATCHES_KEPT = 5
SNAPSHOT_VERSION = 2
NO_COORDINATOR_EPOCH = -1
_CRC = struct.Struct(">I")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction that a marker ended: its producer, the offset of its first batch here
    and the marker's offset (``last_offset``), and whether it aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass
class ProducerEntry:
    """``current_txn_first_offset`` is the base offset of the producer's first batch in its
    open transaction (None when none is open); ``coordinator_epoch`` is the largest
    coordinator epoch of its markers."""

    epoch: int
    last_timestamp: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    current_txn_first_offset: int | None = None
    coordinator_epoch: int = NO_COORDINATOR_EPOCH

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
        # producer id -> first offset of its open transaction. Transactions open in offset
        # order (appends and replays go forwards; a snapshot's are inserted sorted), so the
        # dict's order is first-offset order and its first value is the first unstable
        # offset, found in O(1) on every append.
        self._ongoing: dict[int, int] = {}

    # -- the append path -----------------------------------------------------------------------

    def check(
        self, header: rb.BatchHeader, marker: TxnMarker | None = None
    ) -> BatchMetadata | None:
        """Validate a batch a leader is about to write for a client or a coordinator; changes
        nothing. Returns the metadata of the original batch when this one repeats one of its
        producer's last five batches of the same epoch (write nothing, answer with the
        original offsets). ``marker`` is a control batch's record (see transaction_markers).

        The rules are Kafka's for appends from clients and coordinators (``ProducerAppendInfo``
        ``checkProducerEpoch``, ``checkSequence``, ``appendDataBatch`` and
        ``checkCoordinatorEpoch``, 3.x and 4.x):

        - A producer the log does not know (new, or its state expired or went with the
          log's head) may write at any epoch and any sequence: since KIP-360 a leader that
          lost a producer's state accepts it rather than fail a live producer. (So a client
          must not let a later batch overtake a first one: see clients/producer_idempotence.)
        - An epoch older than the producer's: InvalidProducerEpoch (the producer is fenced),
          for markers too.
        - A marker from a coordinator epoch older than the producer's last marker's:
          TransactionCoordinatorFenced. Markers have no sequence: nothing else is checked.
        - A non-transactional batch while the producer's transaction is open: InvalidTxnState.
        - A newer epoch starts at sequence 0, else OutOfOrderSequence.
        - The same epoch continues at the sequence after its last batch (2**31 - 1 wraps to
          0; a producer known only from a transaction marker starts at 0), else
          OutOfOrderSequence.
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            if header.is_transactional and not header.is_control and header.base_sequence:
                # (Kafka 4, transaction version 2) a transaction's first batch here is at
                # sequence 0: a later one must not open the transaction without it.
                raise OutOfOrderSequence(
                    f"producer {header.producer_id} opened a transaction here at sequence "
                    f"{header.base_sequence}; its first batch (sequence 0) is missing: the "
                    "transaction must abort"
                )
            return None
        if header.is_control:
            self._check_marker(header, marker, entry)
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"producer {header.producer_id} wrote with epoch {header.producer_epoch} but "
                f"epoch {entry.epoch} has taken over; this producer is fenced: close it"
            )
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnState(
                f"producer {header.producer_id} sent a non-transactional batch while its "
                f"transaction begun at offset {entry.current_txn_first_offset} is open; "
                "commit or abort the transaction first, and send its records as part of it"
            )
        if header.producer_epoch > entry.epoch:
            if header.is_transactional and entry.current_txn_first_offset is not None:
                # The older epoch's transaction is still open here: its marker is on its
                # way (or lost). This batch must not join it and take on its outcome.
                raise ConcurrentTransactions(
                    f"producer {header.producer_id} epoch {header.producer_epoch} began a "
                    f"transaction while its epoch {entry.epoch} transaction, open here from "
                    f"offset {entry.current_txn_first_offset}, has not been ended by its "
                    "marker yet; retry shortly"
                )
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

    @staticmethod
    def _check_marker(
        header: rb.BatchHeader, marker: TxnMarker | None, entry: ProducerEntry
    ) -> None:
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"a transaction marker for producer {header.producer_id} carries epoch "
                f"{header.producer_epoch} but epoch {entry.epoch} has taken over; the "
                "transaction it ends was already ended (or fenced): do not retry it"
            )
        if marker is not None and marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"a transaction marker for producer {header.producer_id} comes from "
                f"coordinator epoch {marker.coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}; this coordinator was replaced: stop writing"
            )

    def update(
        self, header: rb.BatchHeader, marker: TxnMarker | None = None
    ) -> CompletedTxn | None:
        """Record a batch that was written (leader, follower, or replay on open), in offset
        order. ``marker`` is required for a control batch with a producer id (read it with
        ``transaction_markers.read_marker``). Returns the transaction a marker ended, or
        None (a data batch, or a marker with no open transaction)."""
        if not header.has_producer_id:
            return None
        if header.is_control:
            if marker is None:
                raise ValueError(
                    f"control batch at offset {header.base_offset} given without its marker; "
                    "read it with transaction_markers.read_marker"
                )
            return self._end_transaction(header, marker)
        entry = self._touch(header)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence,
                header.base_offset, header.last_offset, header.max_timestamp,
            )
        )  # fmt: skip
        if entry.current_txn_first_offset is None and header.is_transactional:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[header.producer_id] = header.base_offset
        return None

    def _end_transaction(self, header: rb.BatchHeader, marker: TxnMarker) -> CompletedTxn | None:
        entry = self._touch(header)
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        first = entry.current_txn_first_offset
        if first is None:
            return None
        entry.current_txn_first_offset = None
        del self._ongoing[header.producer_id]
        return CompletedTxn(header.producer_id, first, header.base_offset, marker.is_abort)

    def _touch(self, header: rb.BatchHeader) -> ProducerEntry:
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = ProducerEntry(header.producer_epoch, header.max_timestamp)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch > entry.epoch:
            # A new epoch starts its sequences again, so the old epoch's batches go; an open
            # transaction stays open until a marker ends it, or it would stop holding the LSO.
            entry = ProducerEntry(
                header.producer_epoch, entry.last_timestamp,
                current_txn_first_offset=entry.current_txn_first_offset,
                coordinator_epoch=entry.coordinator_epoch,
            )  # fmt: skip
            self.producers[header.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        return entry

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None when none is open."""
        return next(iter(self._ongoing.values()), None)

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction, earliest first."""
        return dict(self._ongoing)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset the log's records imply right after ``completed`` ended
        (not capped by any high watermark): the earliest transaction still open, else one
        past the marker. Stored with each aborted transaction, it lets a fetch stop reading
        the transaction index early (see transaction_index)."""
        first = self.first_unstable_offset()
        return completed.last_offset + 1 if first is None else first

    def remove_expired(self, now_ms: int) -> None:
        """Forget producers idle for longer than ``producer.id.expiration.ms``, except those
        with an open transaction (Kafka's rule) and the cluster's own writers (see
        INTERNAL_PRODUCER_IDS_FROM)."""
        horizon = now_ms - self.expiration_ms
        for pid in [p for p, e in self.producers.items()
                    if e.last_timestamp < horizon and p < INTERNAL_PRODUCER_IDS_FROM
                    and e.current_txn_first_offset is None]:  # fmt: skip
            del self.producers[pid]

    def _replace(self, producers: dict[int, ProducerEntry]) -> None:
        self.producers = producers
        ongoing = sorted(
            (e.current_txn_first_offset, pid)
            for pid, e in producers.items()
            if e.current_txn_first_offset is not None
        )
        self._ongoing = {pid: first for first, pid in ongoing}

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
                SNAPSHOT_VERSION,
                [
                    [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches],
                     e.current_txn_first_offset, e.coordinator_epoch]
                    for pid, e in self.producers.items()
                ],
            ]
        )  # fmt: skip
        write_atomically(self.snapshot_path(log_end_offset), _CRC.pack(rb.crc32c(body)) + body)

    def load_latest_snapshot(self, at_or_below: int) -> int | None:
        """Replace the state with the newest valid snapshot at or below ``at_or_below``;
        snapshots past it (left by a truncated log) and corrupt ones are deleted. Returns the
        snapshot's offset, or None (state cleared) when there is none."""
        self._replace({})
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > at_or_below:
                files.unlink(path)
                continue
            try:
                self._replace(_read_snapshot(path))
                return offset
            except (ValueError, TypeError, struct.error, msgpack.UnpackException) as e:
                log.warning("producer snapshot %s is unreadable (%s); deleting it", path, e)
                files.unlink(path)
        return None

    def truncate_fully(self) -> None:
        """Forget every producer and delete every snapshot (the log was discarded whole)."""
        self._replace({})
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
    if version not in (1, SNAPSHOT_VERSION):
        raise ValueError(f"unknown snapshot version {version}")
    state = {}
    for fields in producers:
        # Version 1 has the first four fields only: no transaction was ever open then.
        pid, epoch, last_timestamp, batches = fields[:4]
        txn_first_offset, coordinator_epoch = (
            fields[4:6] if version >= 2 else (None, NO_COORDINATOR_EPOCH)
        )
        entry = ProducerEntry(epoch, last_timestamp, current_txn_first_offset=txn_first_offset,
                              coordinator_epoch=coordinator_epoch)  # fmt: skip
        entry.batches.extend(BatchMetadata(*b) for b in batches)
        state[pid] = entry
    return state
