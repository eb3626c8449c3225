"""Which batches a read_committed consumer returns: Kafka's aborted-transaction filter
(the consumer's ``CompletedFetch``), as pure logic.

A read_committed fetch reads only below the partition's last stable offset, and its answer
carries the aborted transactions of the range it read, as (producer id, first offset) pairs
(``Log.aborted_transactions``). The consumer then walks the batches in offset order:

- before a batch with a producer id, every aborted transaction whose first offset is at or
  below the batch's last offset becomes current: its producer id joins the aborted set;
- a transactional data batch whose producer id is in the aborted set is skipped;
- an ABORT marker of a producer in the set removes it (that transaction is over, and the
  producer's next transaction may commit);
- control batches are never returned, but the position moves past them.

``ReadCommittedFilter`` keeps the pending aborted transactions and the aborted set between
fetch answers of one partition, so batches may be fed answer by answer; a seek (a jump of
the position) needs ``reset``. Per batch it costs a set lookup, and a heap pop per aborted
transaction reached; no record is decoded except a marker's single record (``select``). The
log compaction pass uses the same walk to find the records of aborted transactions.
"""

from __future__ import annotations

import heapq
from typing import Iterable

from rafka.storage import record_batch as rb
from rafka.storage.transaction_markers import read_marker


class ReadCommittedFilter:
    """The aborted-transaction filter of one partition's consumer position: in memory only
    (a consumer that restarts starts a new walk with its next fetch answer), one per
    partition, not thread-safe."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int]] = []  # heap of (first offset, producer id)
        self._queued: set[tuple[int, int]] = set()  # what _pending holds, to skip repeats
        self._aborted: set[int] = set()  # producer ids whose aborted transaction is current

    def add_aborted(self, aborted: Iterable[tuple[int, int]]) -> None:
        """Take the aborted transactions of a fetch answer, (producer id, first offset)
        pairs in any order. A pair that an earlier answer gave too (a transaction spanning
        both) is queued once."""
        for producer_id, first_offset in aborted:
            item = (first_offset, producer_id)
            if item not in self._queued:
                self._queued.add(item)
                heapq.heappush(self._pending, item)

    def accept(self, header: rb.BatchHeader, control_type: rb.ControlType | None = None) -> bool:
        """Whether the consumer returns this batch, the next one in offset order; a control
        batch with a producer id needs its ``control_type`` (``transaction_markers``)."""
        if header.has_producer_id:
            self._activate_up_to(header.last_offset)
            if header.is_control:
                if control_type is None:
                    raise ValueError(
                        f"control batch at offset {header.base_offset} given without its "
                        "control type; read it with transaction_markers.read_marker"
                    )
                if control_type is rb.ControlType.ABORT:
                    self._aborted.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in self._aborted:
                return False
        return not header.is_control

    def select(self, data, verify: bool = False) -> list[tuple[int, rb.BatchHeader]]:
        """(position, header) of each batch of ``data`` (whole batches in offset order, as a
        fetch returns them) that the consumer returns, fed through ``accept``."""
        kept = []
        for position, header in rb.iter_batches(data, verify=verify):
            control_type = None
            if header.is_control and header.has_producer_id:
                control_type = read_marker(data, position).control_type
            if self.accept(header, control_type):
                kept.append((position, header))
        return kept

    def reset(self) -> None:
        """Forget everything (the consumer seeks: the next answer starts a new walk)."""
        self._pending, self._queued, self._aborted = [], set(), set()

    @property
    def aborted_producers(self) -> frozenset[int]:
        """Producer ids whose aborted transaction the position is inside."""
        return frozenset(self._aborted)

    def _activate_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            item = heapq.heappop(pending)
            self._queued.discard(item)
            self._aborted.add(item[1])


def committed_batches(txn_filter: ReadCommittedFilter, data):
    """The batches of ``data`` (whole batches in offset order, the next ones of the walk)
    that a read_committed reader gets, markers included (readers skip control batches
    themselves): ``data`` itself when nothing is dropped, else a copy of what is kept."""
    total = 0
    kept = []
    for position, header in rb.iter_batches(data):
        total += 1
        control_type = None
        if header.is_control and header.has_producer_id:
            control_type = read_marker(data, position).control_type
        if txn_filter.accept(header, control_type) or header.is_control:
            kept.append((position, header.size))
    if len(kept) == total:
        return data
    view = memoryview(data).cast("B")
    return b"".join(bytes(view[pos : pos + size]) for pos, size in kept)
