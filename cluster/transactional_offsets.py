"""Offsets committed inside a transaction (KIP-98's TxnOffsetCommit, with KIP-447's group
checks), held by the group coordinator until the transaction ends.

A transactional producer sends its consumer's offsets to the group coordinator as part of
its transaction (``send_offsets_to_transaction``). They are written to the coordinator's
partition of ``__consumer_offsets`` as pending records, one per (group, partition, producer
id), with the producer epoch that wrote them, and stay invisible: a group's committed offsets
do not include them, and a fetch asking for stable offsets (a read_committed consumer taking
partitions over) is answered UnstableOffsetCommit until they are resolved. When the
transaction ends, its coordinator tells the group coordinator, with the epoch its markers
carry (that is the marker of the offsets partition): on commit the pending offsets written
below that epoch become the group's committed offsets, on abort they are dropped; either way
their pending records are deleted, with the committed ones written in the same batch.

Epochs make it safe against late messages (transaction version 2: the epoch is bumped at
every transaction end, and markers carry the new one): a completion at or below the last
marker epoch seen for the producer is a repeat and changes nothing, and offsets whose write
ends after their transaction's marker (a slow write racing a timeout abort) are refused
rather than left pending for the producer's next transaction to commit. A Kafka client of
transaction version 1 keeps its epoch across transactions, and its markers carry that epoch:
such a marker resolves the offsets written at or below it, and only one below the last
marker epoch is stale (that version cannot tell a late marker from the next transaction's).

Plain Python: the pending offsets of one coordinator shard, by producer id.
"""

from __future__ import annotations

from typing import Iterable

from rafka.cluster.group_types import CommittedOffset

GroupPartition = tuple[str, tuple[str, int]]  # (group id, (topic, partition))


class PendingOffsets:
    """Pending transactional offsets of one shard: producer id -> {(group id, (topic,
    partition)): (offset, producer epoch)}, and the last marker epoch seen per producer id.
    A later commit of the same producer to the same partition replaces the earlier one (as
    Kafka's pending map does)."""

    def __init__(self) -> None:
        self.by_producer: dict[int, dict[GroupPartition, tuple[CommittedOffset, int]]] = {}
        self.marker_epochs: dict[int, int] = {}

    def ended(self, producer_id: int, epoch: int) -> bool:
        """Whether a transaction of ``producer_id`` at ``epoch`` has ended here already (a
        marker above that epoch was applied): its offsets must not be taken any more."""
        return self.marker_epochs.get(producer_id, -1) > epoch

    def add(self, producer_id: int, epoch: int, group_id: str,
            offsets: dict[tuple[str, int], CommittedOffset]) -> None:  # fmt: skip
        pending = self.by_producer.setdefault(producer_id, {})
        for tp, committed in offsets.items():
            pending[(group_id, tuple(tp))] = (committed, epoch)

    def remove(self, producer_id: int, group_id: str, tp: tuple[str, int]) -> None:
        """One pending record deleted (a load replaying its tombstone)."""
        pending = self.by_producer.get(producer_id)
        if pending is not None:
            pending.pop((group_id, tuple(tp)), None)
            if not pending:
                del self.by_producer[producer_id]

    def to_resolve(self, producer_id: int, marker_epoch: int, transaction_version: int = 2,
                   ) -> dict[GroupPartition, CommittedOffset]:  # fmt: skip
        """What a marker at ``marker_epoch`` resolves: the producer's pending offsets written
        below that epoch (at or below it for transaction version 1; empty for a repeated or
        stale marker). Nothing is removed."""
        last = self.marker_epochs.get(producer_id, -1)
        if marker_epoch < last or (marker_epoch == last and transaction_version >= 2):
            return {}
        resolves = _resolves(marker_epoch, transaction_version)
        return {key: c for key, (c, epoch) in self.by_producer.get(producer_id, {}).items()
                if resolves(epoch)}  # fmt: skip

    def resolved(self, producer_id: int, marker_epoch: int, transaction_version: int = 2,
                 ) -> None:  # fmt: skip
        """The marker at ``marker_epoch`` was applied (its records written): its offsets go,
        and later completions at or below that epoch are repeats (below it, for version 1)."""
        self.marker_epochs[producer_id] = max(marker_epoch,
                                              self.marker_epochs.get(producer_id, -1))
        pending = self.by_producer.get(producer_id, {})
        resolves = _resolves(marker_epoch, transaction_version)
        for key in [k for k, (_, epoch) in pending.items() if resolves(epoch)]:
            del pending[key]
        if not pending:
            self.by_producer.pop(producer_id, None)

    def is_pending(self, group_id: str, partitions: Iterable[tuple[str, int]] | None) -> bool:
        """Whether any of ``partitions`` (every partition when None) of ``group_id`` has
        offsets waiting for a transaction to end."""
        wanted = None if partitions is None else {tuple(tp) for tp in partitions}
        return any(
            g == group_id and (wanted is None or tp in wanted)
            for pending in self.by_producer.values() for g, tp in pending
        )  # fmt: skip


def _resolves(marker_epoch: int, transaction_version: int):
    """Whether a marker resolves offsets written at an epoch: below its own (version 2, the
    epoch was bumped), or at most its own (version 1, the producer's epoch)."""
    if transaction_version >= 2:
        return lambda epoch: epoch < marker_epoch
    return lambda epoch: epoch <= marker_epoch
