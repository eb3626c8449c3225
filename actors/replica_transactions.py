"""The leader's side of transactions: markers, and the check before a transaction's first
write to this partition.

- ``write_marker``: a transaction coordinator ends a producer's transaction here with a
  control batch (COMMIT or ABORT), appended with acks=all. The marker carries the epoch the
  coordinator bumped at the transaction's end, so it must be above the producer's epoch in
  this log: a marker at or below it was written already (a retry whose answer was lost) or
  belongs to a transaction already ended, and is refused with InvalidProducerEpoch, which
  the coordinator takes as done. (Kafka 4's rule for transaction version 2 markers: without
  it a late marker of one transaction could end the next one, which writes with the epoch
  that marker carries.) A marker of transaction version 1 (a Kafka client that keeps its
  epoch across transactions) carries the producer's own epoch: it is written when a
  transaction of that epoch is open here, as Kafka writes such markers; that version has
  no defense against a late marker, which is why version 2 bumps.
- ``check_transactional``: before a producer's transactional batch opens a transaction in
  this partition, the leader adds the partition to the transaction at the producer's
  coordinator (Kafka 4's transaction version 2: KIP-890's server-side defense with the add
  made by the leader, not the producer). The coordinator adds it only to the transaction of
  exactly that producer id and epoch, so a write of a transaction that has ended (its epoch
  was bumped) is refused with the coordinator's error, and the coordinator always knows
  every partition it must send markers to. Once the first batch opened the transaction
  here, the producer state itself keeps the rest of it honest.
- ``describe_producers``: the producer state of this partition as its leader holds it
  (Kafka's DescribeProducers, for the admin tooling of KIP-664: finding hanging
  transactions, and the producer id, epoch and coordinator epoch an admin abort names).

Owned by one ``PartitionReplica`` and run on its event loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rafka.actors.transaction_verifier import TransactionVerifier
from rafka.errors import InvalidProducerEpoch, InvalidRecord, NotEnoughReplicas, RafkaError
from rafka.storage import record_batch as rb

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica


class TransactionHandler:
    """Markers into the log of ``replica``, and the check of transactions' first writes."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self.verifier = TransactionVerifier(replica.namespace, replica.controller.call)

    async def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        timeout_ms: int, transaction_version: int = 2,
    ) -> tuple:  # fmt: skip
        """(errno, message, offset of the marker)."""
        r = self.replica
        r.loop_ready()
        try:
            leader = r.require_leader()
            min_isr = r.log.config.min_insync_replicas
            if not leader.enough_in_sync(min_isr):
                raise NotEnoughReplicas(
                    f"{r.topic}-{r.partition} has {len(leader.isr)} in-sync replica(s), below "
                    f"min.insync.replicas={min_isr}: the marker is not written; retrying"
                )
            entry = r.log.producer_state.producers.get(producer_id)
            if (entry is not None and producer_epoch == entry.epoch
                    and entry.current_txn_first_offset is None):  # fmt: skip
                # This marker was appended by an earlier attempt whose answer was lost (or
                # that timed out waiting for the replicas): it is done once replicated.
                if r.log.high_watermark < r.log.log_end_offset:
                    await r.produce_handler.await_high_watermark(
                        leader, r.log.log_end_offset, timeout_ms
                    )
                return (0, "", -1)
            own_epoch = transaction_version < 2 and entry is not None and (
                producer_epoch == entry.epoch and entry.current_txn_first_offset is not None)
            if entry is not None and producer_epoch <= entry.epoch and not own_epoch:
                raise InvalidProducerEpoch(
                    f"a {'commit' if commit else 'abort'} marker of producer {producer_id} "
                    f"with epoch {producer_epoch} is not above its epoch {entry.epoch} in "
                    f"{r.topic}-{r.partition}: it was written already, or its transaction ended"
                )
            marker = rb.encode_control_batch(
                rb.ControlType.COMMIT if commit else rb.ControlType.ABORT,
                producer_id=producer_id, producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch, timestamp=int(time.time() * 1000),
            )  # fmt: skip
            info = r.log.append_as_leader(marker, leader.leader_epoch, allow_control=True)
            await r.produce_handler.appended_locally(leader)
            if r.log.high_watermark <= info.last_offset:
                await r.produce_handler.await_high_watermark(
                    leader, info.last_offset + 1, timeout_ms
                )
        except RafkaError as e:
            return (e.errno, str(e), -1)
        return (0, "", info.first_offset)

    def describe_producers(self) -> tuple:
        """(errno, message, rows): one row per producer the leader's state holds, by producer
        id: [producer id, epoch, last sequence (-1: none kept), last timestamp, coordinator
        epoch of its last marker (-1: none), first offset of its open transaction (-1: none
        open)]. Only the leader answers: a follower's state may lag its log's replay."""
        r = self.replica
        try:
            r.require_leader()
        except RafkaError as e:
            return (e.errno, str(e), [])
        rows = [
            [producer_id, entry.epoch, entry.last_seq, entry.last_timestamp,
             entry.coordinator_epoch,
             -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset]
            for producer_id, entry in sorted(r.log.producer_state.producers.items())
        ]  # fmt: skip
        return (0, "", rows)

    async def check_transactional(
        self, batches: list, transactional_id: str | None
    ) -> RafkaError | None:
        """The error that refuses a transactional batch among ``batches`` opening a
        transaction here that its coordinator would not add this partition to; None when
        all may go on (each such partition added, durably, at the coordinator)."""
        r = self.replica
        added: set[tuple[int, int]] = set()
        for batch in batches:
            try:
                header = rb.read_header(memoryview(batch).cast("B"), 0, check_codec=False)
            except RafkaError:
                continue  # malformed: the append refuses it
            if not header.is_transactional or header.is_control:
                continue
            entry = r.log.producer_state.producers.get(header.producer_id)
            if (entry is not None and entry.current_txn_first_offset is not None
                    and entry.epoch == header.producer_epoch):  # fmt: skip
                continue  # its transaction is open here already
            if (header.producer_id, header.producer_epoch) in added:
                continue
            if not transactional_id:
                return InvalidRecord(
                    f"a transactional batch of producer {header.producer_id} came without "
                    "its transactional id; send it through a transactional producer"
                )
            error = await self.verifier.add_partition(
                transactional_id, header.producer_id, header.producer_epoch, r.topic,
                r.partition,
            )  # fmt: skip
            if error is not None:
                return retriable_verification(error)
            added.add((header.producer_id, header.producer_epoch))
        return None


def retriable_verification(error: RafkaError) -> RafkaError:
    """An add that could not be made (the coordinator loading, moving, or still completing
    the previous transaction) refuses the write with a retriable error, as Kafka's leader
    turns those answers into NOT_ENOUGH_REPLICAS; the coordinator's verdicts (an ended
    transaction, fenced) are kept."""
    if error.retriable:
        wrapped = NotEnoughReplicas(
            f"the partition could not be added to the transaction yet ({error}); retrying"
        )
        wrapped.__cause__ = error
        return wrapped
    return error
