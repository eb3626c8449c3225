"""Transaction bookkeeping of a partition's log: producer state fed from every batch written
or replayed, the aborted-transaction index of each segment, and the last stable offset.

``LogTransactions`` is mixed into ``Log`` (log.py) and works on its state: the segments, the
offsets, the directory and producer state.

- Every batch written (leader, follower) goes to producer state in offset order; a marker
  goes with its one control record, the only record read on the append path. A marker
  that aborts a transaction adds an entry to the ``.txnindex`` of the segment it is written
  to (transaction_index.py).
- The last stable offset (LSO) is the first offset of the earliest open transaction when
  that is below the high watermark, else the high watermark; never below the log start. A
  transaction ended by a marker that is not below the high watermark yet counts as open: a
  new leader may not have that marker, find the transaction open again, and abort it
  (Kafka's unreplicated transactions).
  ``log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset`` holds
  because it is computed, in one place, from the other three and producer state.
- On open and after a truncation, producer state is the newest snapshot at or below the
  log end plus a replay of the batches after it; the replay also recomputes the
  transaction-index entries of every abort it meets, and those entries replace whatever the
  indexes hold from the snapshot's offset on. Entries below it were synced before the
  snapshot was written (a snapshot follows a flush of everything below it), so they stand;
  entries from it on may be torn, stale or missing after a crash, and the replay, which
  reads only what the log holds, makes them right without duplicating any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.storage import record_batch as rb
from rafka.storage.producer_state import CompletedTxn
from rafka.storage.transaction_index import AbortedTxn
from rafka.storage.transaction_markers import TxnMarker, marker_of

if TYPE_CHECKING:
    from rafka.storage.log import LogReadResult
    from rafka.storage.log_directory import LogDirectory
    from rafka.storage.log_segments import LogSegments
    from rafka.storage.producer_state import ProducerStateManager
    from rafka.storage.segment import Segment


class LogTransactions:
    """Transaction operations of ``Log``; see the module docstring. Besides the attributes
    below they use Log's ``read``."""

    files: "LogDirectory"
    producer_state: "ProducerStateManager"
    _segments: "LogSegments"
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    # (first offset, marker offset) of transactions ended by a marker that may not be
    # replicated yet, in marker order; pruned as the high watermark passes their markers.
    _unreplicated_txns: list[tuple[int, int]]

    @property
    def last_stable_offset(self) -> int:
        """Offset below which every transaction has ended, its marker replicated: what a
        read_committed consumer may read up to. ``log_start_offset <= last_stable_offset <=
        high_watermark``."""
        high_watermark = self.high_watermark
        unreplicated = self._unreplicated_txns
        while unreplicated and unreplicated[0][1] < high_watermark:
            unreplicated.pop(0)  # markers arrive in offset order: the oldest goes first
        firsts = [first for first, _ in unreplicated]
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is not None:
            firsts.append(first_unstable)
        first = min(firsts, default=None)
        if first is None or first >= high_watermark:
            return high_watermark
        return max(first, self.log_start_offset)

    def read_committed(
        self, offset: int, max_bytes: int
    ) -> tuple["LogReadResult", list[tuple[int, int]]]:
        """A read_committed fetch: whole batches from ``offset`` below the last stable offset
        (as ``read``), and the aborted transactions of the range they cover, up to the offset
        after the last batch returned (empty when no batch is)."""
        result = self.read(offset, max_bytes, self.last_stable_offset)
        if not len(result.records):
            return result, []
        return result, self.aborted_transactions(offset, rb.next_offset(result.records))

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction with records in
        [start_offset, end_offset), by first offset: the list a read_committed fetch of that
        range answers with (see read_committed.py for how a consumer uses it)."""
        return [
            (t.producer_id, t.first_offset)
            for t in self._segments.aborted_transactions(start_offset, end_offset)
        ]

    # -- feeding producer state ----------------------------------------------------------------

    def _update_producer_state(
        self, segment: "Segment", header: rb.BatchHeader, marker: TxnMarker | None
    ) -> None:
        """Record a batch just written to ``segment`` (the active one)."""
        completed = self.producer_state.update(header, marker)
        if completed is not None:
            self._unreplicated_txns.append((completed.first_offset, completed.last_offset))
        if completed is not None and completed.is_aborted:
            if segment.txn_index.append(self._aborted_entry(completed)):
                self.files.entry_created()

    def _aborted_entry(self, completed: CompletedTxn) -> AbortedTxn:
        return AbortedTxn(
            completed.producer_id, completed.first_offset, completed.last_offset,
            self.producer_state.last_stable_offset_after(completed),
        )  # fmt: skip

    def _rebuild_producer_state(self) -> None:
        """Load the newest snapshot at or below the log end and replay the batches after it
        (with no snapshot, every batch the segments hold); then make the transaction indexes
        agree with the replay from where it began (see the module docstring) and sync them."""
        self._unreplicated_txns = []
        start = self.producer_state.load_latest_snapshot(self.log_end_offset)
        if start is None:
            # Records below the log start that a segment still holds still tell which
            # transactions were open and which producers wrote, as a snapshot would.
            start = self._segments.ordered[0].base_offset
        aborted: dict[int, list[AbortedTxn]] = {}  # id(segment) -> entries, marker order
        if start < self.log_end_offset:
            for segment, position, header in self._segments.batches_from(start):
                if header.base_offset < start:
                    continue
                marker = None
                if header.is_control:
                    marker = marker_of(header, segment.read_at(position, header.size))
                completed = self.producer_state.update(header, marker)
                if completed is not None:
                    # Replayed markers may be above the (checkpointed) high watermark.
                    self._unreplicated_txns.append((completed.first_offset,
                                                    completed.last_offset))  # fmt: skip
                if completed is not None and completed.is_aborted:
                    aborted.setdefault(id(segment), []).append(self._aborted_entry(completed))
        created = False
        for segment in self._segments.ordered[max(self._segments.index_of(start), 0) :]:
            created = segment.txn_index.replace_from(start, aborted.get(id(segment), [])) or created
            segment.txn_index.flush()
        if created:
            self.files.entry_created()
