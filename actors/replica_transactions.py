"""The leader's side of transactions: markers, and the check before a transaction's first
write to this partition.

- ``write_marker``: a transaction coordinator ends a producer's transaction here with a
  control batch (COMMIT or ABORT), appended with acks=all. The marker carries the epoch the
  coordinator bumped at the transaction's end, so it must be above the producer's epoch in
  this log: a marker at or below it was written already (a retry whose answer was lost) or
  belongs to a transaction already ended, and is refused with InvalidProducerEpoch, which
  the coordinator takes as done. (Kafka 4's rule for transaction version 2 markers: without
  it a late marker of one transaction could end the next one, which writes with the epoch
  that marker carries.)
- ``check_transactional``: before a producer's transactional batch opens a transaction in
  this partition (KIP-890's server-side defense), the producer's transaction coordinator must
  confirm that the transaction is ongoing, with that producer id and epoch, and holds this
  partition; otherwise the write is refused with the coordinator's error. Once the first batch
  opened the transaction here, the producer state itself keeps the rest of it honest.
- ``describe_producers``: the producer state of this partition as its leader holds it
  (Kafka's DescribeProducers, for the admin tooling of KIP-664: finding hanging
  transactions, and the producer id, epoch and coordinator epoch an admin abort names).

Owned by one ``PartitionReplica`` and run on its event loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import ray

from rafka.actors.placement import transaction_coordinator_name
from rafka.cluster.topics import TRANSACTION_STATE
from rafka.cluster.transaction_records import shard_of
from rafka.errors import (
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    InvalidRecord,
    RafkaError,
    error_class,
)
from rafka.storage import record_batch as rb

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica


class TransactionHandler:
    """Markers into the log of ``replica``, and the check of transactions' first writes."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self._shards: int | None = None  # partitions of __transaction_state, fixed once made

    async def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        timeout_ms: int,
    ) -> tuple:  # fmt: skip
        """(errno, message, offset of the marker)."""
        r = self.replica
        appended = r.loop_ready()
        try:
            leader = r.require_leader()
            entry = r.log.producer_state.producers.get(producer_id)
            if entry is not None and producer_epoch <= entry.epoch:
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
            r.set_high_watermark(leader.on_local_append(r.log.log_end_offset))
            r.log.maybe_flush()
            r.log_changed = True
            async with appended:
                appended.notify_all()
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
        transaction here that its coordinator does not confirm; None when all may go on."""
        r = self.replica
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
            if not transactional_id:
                return InvalidRecord(
                    f"a transactional batch of producer {header.producer_id} came without "
                    "its transactional id; send it through a transactional producer"
                )
            error = await self._verify(transactional_id, header.producer_id,
                                       header.producer_epoch)  # fmt: skip
            if error is not None:
                return error
        return None

    async def _verify(self, transactional_id: str, producer_id: int, epoch: int):
        r = self.replica
        try:
            if self._shards is None:
                described = (await r.controller.call("metadata", [TRANSACTION_STATE], False))[
                    TRANSACTION_STATE
                ]
                if not isinstance(described, dict):
                    raise CoordinatorNotAvailable(
                        f"{TRANSACTION_STATE} does not exist yet; retry"
                    )
                self._shards = len(described["partitions"])
            name = transaction_coordinator_name(shard_of(transactional_id, self._shards))
            coordinator = ray.get_actor(name, namespace=r.namespace)
            errno, message = await coordinator.verify_partition.remote(
                transactional_id, producer_id, epoch, r.topic, r.partition
            )
        except (ValueError, ray.exceptions.RayActorError) as e:
            return CoordinatorNotAvailable(
                f"the transaction coordinator of {transactional_id!r} could not be asked "
                f"({e!r}); retry"
            )
        except RafkaError as e:
            return e
        return error_class(errno)(message) if errno else None
