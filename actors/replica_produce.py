"""The leader's produce path: order, append, acknowledge.

One ``produce`` call carries one or more encoded batches back to back. Each is checked and
appended on its own by ``rafka.storage.log.Log.append_as_leader`` (CRC, producer sequence,
offsets written into the header, no re-encoding), so one may fail while the others are
written. The answer follows ``acks``: 0 and 1 after the local append, -1 (all) once the high
watermark passes the last batch, failing with NotEnoughReplicasAfterAppend when the ISR
shrank below ``min.insync.replicas`` meanwhile.

Owned by one ``PartitionReplica`` and run on its event loop; many calls interleave at every
``await``, and one client's numbered requests are appended in order (``RequestOrder``). After
a crash the log recovers from its files; an acks=all call that was waiting is lost with the
process and its client retries (an idempotent producer's retry is answered as a duplicate).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from rafka.actors import metrics, stage_trace
from rafka.actors.request_order import RequestOrder
from rafka.cluster.replication import LeaderState
from rafka.errors import (
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RafkaError,
    RequestTimedOut,
)
from rafka.storage import record_batch as rb

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica


class ProduceHandler:
    """Client batches into the log of ``replica`` while it leads."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self.order = RequestOrder(replica.logger)

    async def produce(
        self, batches, acks: int, timeout_ms: int, client_id: str, request_no: int,
        transactional_id: str | None = None,
    ) -> tuple:  # fmt: skip
        """See ``PartitionReplica.produce``."""
        r = self.replica
        started = time.perf_counter()
        r.loop_ready()
        if request_no >= 0:
            await self.order.wait_turn(client_id, request_no, timeout_ms)
        received_ns = time.monotonic_ns() if stage_trace.ENABLED else 0
        results = []
        last_offset = -1
        records_in = bytes_in = 0  # for the metrics: what this call appended
        try:
            try:
                pieces = split_batches(batches)
                self._require_leader_in_sync(acks)  # before a transaction's partition is added
                refused = await r.transactions.check_transactional(pieces, transactional_id)
                if refused is not None:
                    raise refused
                leader = self._require_leader_in_sync(acks)  # again: the add awaited
                for batch in pieces:
                    try:
                        info = r.log.append_as_leader(batch, leader.leader_epoch)
                    except RafkaError as e:
                        results.append((e.errno, str(e), -1, -1))
                        continue
                    results.append((0, "", info.first_offset, info.log_append_time))
                    last_offset = max(last_offset, info.last_offset)
                    if not info.duplicate:
                        records_in += info.record_count
                        bytes_in += len(batch)
            finally:
                if request_no >= 0:
                    await self.order.end_turn(client_id, request_no)
            await self.appended_locally(leader)
            if stage_trace.ENABLED and last_offset >= 0:
                stage_trace.mark("leader.received", last_offset + 1, received_ns)
                stage_trace.mark("leader.appended", last_offset + 1)
            if acks == -1 and r.log.high_watermark <= last_offset:
                await self.await_high_watermark(leader, last_offset + 1, timeout_ms)
        except RafkaError as e:
            self._produced(records_in, bytes_in, acks, started)
            return (e.errno, str(e), -1, [])
        if stage_trace.ENABLED and last_offset >= 0:
            stage_trace.mark("leader.answered", last_offset + 1)
        self._produced(records_in, bytes_in, acks, started)
        return (0, "", r.log.log_start_offset, results)

    def _require_leader_in_sync(self, acks: int) -> LeaderState:
        """This replica's leader state; NotLeaderOrFollower when it does not lead, and
        NotEnoughReplicas for acks=all below min.insync.replicas."""
        r = self.replica
        leader = r.require_leader()
        min_isr = r.log.config.min_insync_replicas
        if acks == -1 and not leader.enough_in_sync(min_isr):
            raise NotEnoughReplicas(
                f"{r.topic}-{r.partition} has {len(leader.isr)} in-sync replica(s), below "
                f"min.insync.replicas={min_isr}; wait for replicas to catch up or produce "
                "with acks=1"
            )
        return leader

    async def appended_locally(self, leader: LeaderState) -> None:
        """After this leader's appends (records or a marker): the leader's end offset and
        high watermark move, the flush policy runs, and long polls wake."""
        r = self.replica
        if r.log.log_end_offset > leader.log_end_offset:
            r.set_high_watermark(leader.on_local_append(r.log.log_end_offset))
            r.log.maybe_flush()
            r.log_changed = True
            appended = r.loop_ready()
            async with appended:
                appended.notify_all()

    def _produced(self, records: int, size: int, acks: int, started: float) -> None:
        """One produce call's metrics: what it appended (records, bytes) and how long it
        took (``started``: time.perf_counter() at its start)."""
        elapsed = metrics.elapsed_ms(started, time.perf_counter())
        self.replica.partition_metrics.produced(records, size, acks, elapsed)

    async def await_high_watermark(self, leader: LeaderState, offset: int, timeout_ms: int):
        """Wait until the high watermark reaches ``offset``, while ``leader`` still leads."""
        r = self.replica
        appended = r.loop_ready()
        deadline = time.monotonic() + timeout_ms / 1000
        async with appended:
            while r.log.high_watermark < offset:
                if r.leader is not leader:
                    raise NotLeaderOrFollower(
                        f"broker {r.broker_id} lost the leadership of {r.topic}-"
                        f"{r.partition} before the batch ending at offset {offset - 1} was "
                        "replicated; retry with the new leader"
                    )
                if leader.under_min_isr:
                    # The high watermark holds still below min ISR (KIP-966): say so now
                    # rather than at the timeout; the producer retries and the leader
                    # recognises the batch as a duplicate.
                    raise NotEnoughReplicasAfterAppend(
                        f"the batch ending at offset {offset - 1} of {r.topic}-{r.partition} "
                        f"was written, but the ISR {leader.isr} is below min.insync.replicas="
                        f"{leader.min_insync_replicas} and it cannot be committed until "
                        "replicas catch up"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOut(
                        f"the batch ending at offset {offset - 1} of {r.topic}-"
                        f"{r.partition} was appended but not replicated to every in-sync "
                        f"replica within {timeout_ms} ms"
                    )
                try:
                    await asyncio.wait_for(appended.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        min_isr = r.log.config.min_insync_replicas
        if not leader.enough_in_sync(min_isr):
            raise NotEnoughReplicasAfterAppend(
                f"the batch ending at offset {offset - 1} of {r.topic}-{r.partition} was "
                f"written, but the ISR shrank to {leader.isr}, below min.insync.replicas="
                f"{min_isr}, before it was replicated"
            )


def split_batches(buffer) -> list:
    """The batches in a request buffer, as views, split on their length fields only (each is
    fully checked when it is appended). A malformed tail becomes one more piece, so its
    append fails with CorruptRecord."""
    view = memoryview(buffer).cast("B")
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        try:
            size = rb.read_header(view, pos, check_codec=False).size
        except RafkaError:
            size = end - pos
        out.append(view[pos : pos + size])
        pos += size
    return out
