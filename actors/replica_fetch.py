"""The leader's read paths: consumer fetches, follower fetches, offset lookups, Spark blocks.

Consumers read whole batches up to the high watermark; followers read up to the log end
and are told where to truncate when their last epoch diverged from this log (KIP-320); a
follower's fetch also reports its progress to ``LeaderState``, which may move the high
watermark and call for an ISR change. Long polls wait on the replica's ``appended``
condition, which every append, high watermark move and role change notifies. Record bytes
leave as numpy uint8 arrays, which Ray moves through the object store without copying.

Owned by one ``PartitionReplica`` and run on its event loop; any number of fetches wait at
once. Nothing here is persisted; Spark blocks this process put in the object store are
lost with it, and their readers plan the read again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import numpy as np

from rafka.actors import metrics, stage_trace
from rafka.actors.block_export import BlockExporter
from rafka.cluster.replication import UNDEFINED_EPOCH, diverging_epoch
from rafka.errors import NotLeaderOrFollower, OffsetOutOfRange, RafkaError
from rafka.storage import record_batch as rb
from rafka.storage.log import now_ms
from rafka.storage.read_committed import ReadCommittedFilter

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica

EARLIEST = -2
LATEST = -1
_EMPTY = np.zeros(0, dtype=np.uint8)
# How far a read goes: the high watermark (consumers), the last stable offset
# (read_committed consumers), the log end (followers).
_TO_HW, _TO_LSO, _TO_LEO = "high watermark", "last stable offset", "log end"


class WaitCutoff:
    """Cuts short the long polls of a batch of fetches (``ReplicaHost.replicate_many``):
    once ``reached``, a waiting fetch answers with what it has at its next wake-up. A waiting
    fetch is never cancelled instead: cancelling an ``asyncio.Condition.wait`` can leave the
    condition's lock unheld (Python 3.11)."""

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False


class FetchHandler:
    """Reads from the log of ``replica``: see the ``PartitionReplica`` methods of the same
    names for the answers' shapes."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self.exporter = BlockExporter(replica.topic, replica.partition,
                                      replica.partition_metrics)  # fmt: skip

    def close(self) -> None:
        self.exporter.close()

    async def fetch(self, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int) -> tuple:
        started = time.perf_counter()
        try:
            self.replica.require_leader()
            data = await self._read_waiting(offset, max_bytes, min_bytes, max_wait_ms, _TO_HW)
        except RafkaError as e:
            self._fetched(metrics.CONSUMER, _EMPTY, started)
            return (e.errno, str(e), -1, -1, -1, _EMPTY)
        self._fetched(metrics.CONSUMER, data, started)
        records = np.frombuffer(data, dtype=np.uint8) if len(data) else _EMPTY
        log_ = self.replica.log
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset, records)

    async def fetch_committed(
        self, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int
    ) -> tuple:
        """A read_committed consumer's fetch: see ``PartitionReplica.fetch_committed``."""
        started = time.perf_counter()
        try:
            self.replica.require_leader()
            data = await self._read_waiting(offset, max_bytes, min_bytes, max_wait_ms, _TO_LSO)
        except RafkaError as e:
            self._fetched(metrics.CONSUMER, _EMPTY, started)
            return (e.errno, str(e), -1, -1, -1, _EMPTY, -1, [])
        self._fetched(metrics.CONSUMER, data, started)
        log_ = self.replica.log
        aborted: list = []
        records = _EMPTY
        if len(data):
            records = np.frombuffer(data, dtype=np.uint8)
            *_, (_, last) = rb.iter_batches(data)
            aborted = [list(a) for a in log_.aborted_transactions(offset, last.next_offset)]
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset,
                records, log_.last_stable_offset, aborted)  # fmt: skip

    async def replicate(
        self, follower: int, leader_epoch: int, fetch_offset: int, last_fetched_epoch: int,
        max_bytes: int, max_wait_ms: int, incarnation: int | None,
        log_end_offset: int | None = None, cutoff: WaitCutoff | None = None,
    ) -> tuple:  # fmt: skip
        r = self.replica
        written = fetch_offset if log_end_offset is None else min(log_end_offset, fetch_offset)
        started = time.perf_counter()
        appended = r.loop_ready()
        log_ = r.log
        try:
            leader = r.require_leader(leader_epoch)
            if follower not in leader.followers:
                raise NotLeaderOrFollower(
                    f"broker {follower} is not a replica of {r.topic}-{r.partition} "
                    f"(replicas {leader.replicas})"
                )
            if fetch_offset < log_.log_start_offset:
                raise OffsetOutOfRange(
                    f"offset {fetch_offset} is below the log start {log_.log_start_offset}"
                )
            if stage_trace.ENABLED:
                stage_trace.mark("leader.fetched", written, peer=follower)
            if fetch_offset > log_.log_end_offset and last_fetched_epoch == UNDEFINED_EPOCH:
                return self._diverged(log_.latest_epoch, log_.log_end_offset)
            diverged = diverging_epoch(
                lambda e: log_.end_offset_for_epoch(e), fetch_offset, last_fetched_epoch
            )
            if diverged is not None:
                return self._diverged(*diverged)
            if r.set_high_watermark(
                leader.on_follower_fetch(follower, written, now_ms(), incarnation)
            ):
                async with appended:
                    appended.notify_all()
            r.isr.maybe_propose()
            data = await self._read_waiting(fetch_offset, max_bytes, 1, max_wait_ms, _TO_LEO,
                                            cutoff)  # fmt: skip
        except RafkaError as e:
            self._fetched(metrics.REPLICATION, _EMPTY, started)
            return (e.errno, str(e), -1, log_.log_start_offset, -1, -1, -1, _EMPTY)
        self._fetched(metrics.REPLICATION, data, started)
        if stage_trace.ENABLED and len(data):
            stage_trace.mark("leader.sent", rb.next_offset(data), peer=follower)
        records = np.frombuffer(data, dtype=np.uint8) if len(data) else _EMPTY
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset, -1, -1,
                records)  # fmt: skip

    def _fetched(self, kind: str, data, started: float) -> None:
        """One fetch's metrics: what it sent (``data``, whole batches) and how long it took,
        including the long-poll wait (``started``: time.perf_counter() at its start)."""
        elapsed = metrics.elapsed_ms(started, time.perf_counter())
        self.replica.partition_metrics.fetched(kind, data, elapsed)

    def _diverged(self, epoch: int, end_offset: int) -> tuple:
        log_ = self.replica.log
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset,
                epoch, max(end_offset, 0), _EMPTY)  # fmt: skip

    async def _read_waiting(
        self, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int, upto: str,
        cutoff: WaitCutoff | None = None,
    ):
        """Batches from ``offset`` below ``upto`` (see ``_read``), waiting up to
        ``max_wait_ms`` for ``min_bytes``, while this replica keeps leading, and, given a
        ``cutoff``, until it is cut short (then the replica's waiters are woken)."""
        r = self.replica
        appended = r.loop_ready()
        leader = r.leader
        data = self._read(offset, max_bytes, upto)
        if len(data) < min_bytes and max_wait_ms > 0:
            deadline = time.monotonic() + max_wait_ms / 1000
            async with appended:
                while len(data) < min_bytes and r.leader is leader:
                    if cutoff is not None and cutoff.reached:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(appended.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass
                    data = self._read(offset, max_bytes, upto)
        return data

    def _read(self, offset: int, max_bytes: int, upto: str):
        """Whole batches from ``offset``, below the high watermark (``_TO_HW``), the last
        stable offset (``_TO_LSO``) or the log end (``_TO_LEO``)."""
        log_ = self.replica.log
        if upto == _TO_HW:
            limit = log_.high_watermark
        elif upto == _TO_LSO:
            limit = log_.last_stable_offset
        else:
            limit = None
        return log_.read(offset, max_bytes, limit).records

    async def export_block(self, start: int, end: int, committed_only: bool = False) -> tuple:
        r = self.replica
        r.loop_ready()
        log_ = r.log
        try:
            if r.deleted or r.closed:
                raise NotLeaderOrFollower(
                    f"the replica of {r.topic}-{r.partition} on broker {r.broker_id} "
                    "is closed; refresh metadata and retry"
                )
            if not log_.log_start_offset <= start <= end <= log_.high_watermark:
                raise OffsetOutOfRange(
                    f"range [{start}, {end}) of {r.topic}-{r.partition} is outside the "
                    f"committed log [{log_.log_start_offset}, {log_.high_watermark}) of broker "
                    f"{r.broker_id}; plan the read again"
                )
            committed = None
            if committed_only:
                if end > log_.last_stable_offset:
                    raise OffsetOutOfRange(
                        f"range [{start}, {end}) of {r.topic}-{r.partition} passes the last "
                        f"stable offset {log_.last_stable_offset} of broker {r.broker_id} (a "
                        "transaction is open there); plan the read again"
                    )
                committed = ReadCommittedFilter()
                committed.add_aborted(log_.aborted_transactions(start, end))
            ref, rows = await self.exporter.export(
                lambda offset, max_bytes: self._read(offset, max_bytes, _TO_HW), start, end,
                committed,
            )  # fmt: skip
        except RafkaError as e:
            return (e.errno, str(e), [], 0)
        return (0, "", [ref], rows)

    async def list_offset(self, timestamp: int, read_committed: bool = False) -> tuple:
        log_ = self.replica.log
        try:
            self.replica.require_leader()
            if timestamp == EARLIEST:
                return (0, "", log_.log_start_offset, -1)
            if timestamp == LATEST:
                latest = log_.last_stable_offset if read_committed else log_.high_watermark
                return (0, "", latest, -1)
            found = log_.offset_for_timestamp(timestamp)
            readable = log_.last_stable_offset if read_committed else log_.high_watermark
            if found is None or found[0] >= readable:
                return (0, "", -1, -1)
            return (0, "", found[0], found[1])
        except RafkaError as e:
            return (e.errno, str(e), -1, -1)
