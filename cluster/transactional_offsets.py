"""Offsets committed inside a transaction (KIP-98's TxnOffsetCommit, with KIP-447's group
checks), held by the group coordinator until the transaction ends.

A transactional producer sends its consumer's offsets to the group coordinator as part of
its transaction (``send_offsets_to_transaction``). They are written to the coordinator's
partition of ``__consumer_offsets`` as pending records, one per (group, partition, producer
id), and stay invisible: a group's committed offsets do not include them, and a fetch asking
for stable offsets (a read_committed consumer taking partitions over) is answered
UnstableOffsetCommit until they are resolved. When the transaction ends, its coordinator
tells the group coordinator (that is the marker of the offsets partition): on commit the
pending offsets become the group's committed offsets, on abort they are dropped; either way
the pending records are deleted, with the committed ones written in the same batch.

Plain Python: the pending offsets of one coordinator shard, by producer id.
"""

from __future__ import annotations

from typing import Iterable

from rafka.cluster.group_types import CommittedOffset

GroupPartition = tuple[str, tuple[str, int]]  # (group id, (topic, partition))


class PendingOffsets:
    """Pending transactional offsets of one shard: producer id -> {(group id, (topic,
    partition)): offset}. A later commit of the same producer to the same partition in the
    same transaction replaces the earlier one (as Kafka's pending map does)."""

    def __init__(self) -> None:
        self.by_producer: dict[int, dict[GroupPartition, CommittedOffset]] = {}

    def add(self, producer_id: int, group_id: str,
            offsets: dict[tuple[str, int], CommittedOffset]) -> None:  # fmt: skip
        pending = self.by_producer.setdefault(producer_id, {})
        for tp, committed in offsets.items():
            pending[(group_id, tuple(tp))] = committed

    def remove(self, producer_id: int, group_id: str, tp: tuple[str, int]) -> None:
        """One pending record deleted (a load replaying its tombstone)."""
        pending = self.by_producer.get(producer_id)
        if pending is not None:
            pending.pop((group_id, tuple(tp)), None)
            if not pending:
                del self.by_producer[producer_id]

    def of(self, producer_id: int) -> dict[GroupPartition, CommittedOffset]:
        """The producer's pending offsets (empty when none), not removed."""
        return dict(self.by_producer.get(producer_id, {}))

    def resolved(self, producer_id: int) -> None:
        """The producer's transaction ended and its records are written: forget them."""
        self.by_producer.pop(producer_id, None)

    def is_pending(self, group_id: str, partitions: Iterable[tuple[str, int]] | None) -> bool:
        """Whether any of ``partitions`` (every partition when None) of ``group_id`` has
        offsets waiting for a transaction to end."""
        wanted = None if partitions is None else {tuple(tp) for tp in partitions}
        return any(
            g == group_id and (wanted is None or tp in wanted)
            for pending in self.by_producer.values() for g, tp in pending
        )  # fmt: skip
