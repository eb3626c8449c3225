"""A group coordinator's part in transactions: offsets committed inside a transaction,
pending until its transaction coordinator says how it ended (see
``rafka.cluster.transactional_offsets`` for the rules). Mixed into ``GroupCoordinator``."""

from __future__ import annotations

import asyncio
import time

from rafka.actors.transaction_verifier import TransactionVerifier
from rafka.cluster.group_types import CommittedOffset
from rafka.cluster.offsets_records import (
    offset_key,
    offset_value,
    pending_offset_key,
    pending_offset_value,
)
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.cluster.transactional_offsets import PendingOffsets
from rafka.errors import RafkaError, TransactionAbortable


class GroupTransactionsMixin:
    """Part of ``GroupCoordinator`` (its fields: ``shard``, ``log``, ``namespace``,
    ``_until_loaded``, ``_group``). Commits and completions of transactions are serialized
    (``_resolving``): a completion never runs between a commit's check and its write."""

    def _init_transactions(self) -> None:
        self.pending = PendingOffsets()
        self._verifier = TransactionVerifier(self.namespace, self.log.controller_call)
        self._resolving = asyncio.Lock()

    async def commit_offsets_in_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
        member_id: str, group_instance_id: str | None, generation: int,
        offsets: dict[tuple[str, int], tuple[int, int, str]],
    ) -> RafkaError | None:  # fmt: skip
        """TxnOffsetCommit: {(topic, partition): (offset, leader epoch, metadata)} join the
        producer's transaction, which must be ongoing and hold this shard's offsets
        partition. A member of a generation (KIP-447) is checked as for any commit, so a
        zombie of an older generation is refused; a commit without one (member "",
        generation -1: TxnOffsetCommit v0-2, or a producer given only the group id) is
        accepted whatever the group's members, as Kafka accepts it."""
        await self._until_loaded()
        error = await self._verifier.verify(transactional_id, producer_id, epoch,
                                            CONSUMER_OFFSETS, self.shard)  # fmt: skip
        if error is not None:
            return error
        now = int(time.time() * 1000)
        committed = {
            (t, p): CommittedOffset(o, e, m or "", now) for (t, p), (o, e, m) in offsets.items()
        }
        outside = not member_id and generation < 0
        async with self._resolving:
            if self.pending.ended(producer_id, epoch):
                return TransactionAbortable(
                    f"the transaction of producer {producer_id} epoch {epoch} has ended "
                    "(it timed out, or was aborted) before its offsets were committed"
                )
            try:
                group = self._group(group_id, create=True)
                group.check_commit(member_id, group_instance_id, generation, committed,
                                   outside_group=outside, transactional=True)  # fmt: skip
                await self.log.write([
                    (pending_offset_key(group_id, t, p, producer_id),
                     pending_offset_value(c.offset, c.leader_epoch, c.metadata, c.commit_ms,
                                          epoch))
                    for (t, p), c in committed.items()
                ])  # fmt: skip
            except RafkaError as e:
                return e
            self.pending.add(producer_id, epoch, group_id, committed)
        return None

    async def complete_transaction(self, producer_id: int, marker_epoch: int, commit: bool,
                                   transaction_version: int = 2) -> tuple:  # fmt: skip
        """(errno, message): the producer's transaction ended, its markers carrying
        ``marker_epoch`` (its coordinator's marker for this shard's offsets partition). On
        commit the offsets it wrote below that epoch (at or below, for transaction version
        1) become committed; either way they stop being pending. A repeated or stale
        completion changes nothing."""
        await self._until_loaded()
        async with self._resolving:
            resolved = self.pending.to_resolve(producer_id, marker_epoch, transaction_version)
            records = []
            if commit:
                records += [
                    (offset_key(g, t, p), offset_value(c.offset, c.leader_epoch, c.metadata,
                                                       c.commit_ms))
                    for (g, (t, p)), c in resolved.items()
                ]  # fmt: skip
            records += [(pending_offset_key(g, t, p, producer_id), None)
                        for (g, (t, p)) in resolved]  # fmt: skip
            if records:
                try:
                    await self.log.write(records)
                except RafkaError as e:
                    return (e.errno, str(e))
            if commit:
                by_group: dict[str, dict] = {}
                for (g, tp), c in resolved.items():
                    by_group.setdefault(g, {})[tp] = c
                for group_id, offsets in by_group.items():
                    self._group(group_id, create=True).commit(offsets)
            self.pending.resolved(producer_id, marker_epoch, transaction_version)
        return (0, "")
