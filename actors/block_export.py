"""A partition replica's side of a Spark read: a range of its log as one Arrow block in Ray's
object store, put there by the replica's own process so the block is owned on the node that
holds the partition (and Spark, which prefers a block's owner host, reads it there).

Reading the log stays on the replica's event loop, a few MiB at a time, as a consumer fetch
does. Decoding into Arrow and the ``ray.put`` run on one worker thread of the replica, so a
Spark read never holds up produce, fetch or replication for longer than one chunk's read.
pyarrow is imported on the first export only: a replica that never serves Spark never
loads it.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import ray

from rafka.actors import metrics
from rafka.storage import record_batch as rb
from rafka.storage.read_committed import ReadCommittedFilter, committed_batches

#: Bytes read from the log per step on the event loop.
READ_CHUNK_BYTES = 4 << 20
#: Ranges one replica reads and decodes at once: one decoding while the next is read, so raw
#: bytes waiting for the decoder stay bounded.
RANGES_IN_FLIGHT = 2


class BlockExporter:
    """Turns ranges of one partition's log into Arrow IPC blocks owned by this process."""

    def __init__(
        self, topic: str, partition: int, partition_metrics: metrics.PartitionMetrics | None = None
    ) -> None:
        self.topic = topic
        self.partition = partition
        # Exports count as records out of the partition (kind "export").
        self.partition_metrics = partition_metrics
        self._pool: ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None

    async def export(
        self, read: Callable[[int, int], Any], start: int, end: int,
        committed: ReadCommittedFilter | None = None,
    ) -> tuple:  # fmt: skip
        """The records in [start, end) as one block. ``read(offset, max_bytes)`` returns the
        log's batches from ``offset`` (the caller has checked the range is readable).
        ``committed``: a read_committed read, whose filter (given the aborted transactions
        of the range) drops the batches of aborted transactions. Answers (object ref,
        rows)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(RANGES_IN_FLIGHT)
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"export-{self.partition}")
        started = time.perf_counter()
        async with self._slots:
            chunks = []
            offset = start
            while offset < end:
                data = read(offset, READ_CHUNK_BYTES)
                if not len(data):
                    break
                chunks.append(data)
                offset = rb.next_offset(data)
                await asyncio.sleep(0)  # let produce and fetch calls run between chunks
            loop = asyncio.get_running_loop()
            ref, rows = await loop.run_in_executor(
                self._pool, self._encode_and_put, chunks, start, end, committed
            )
        if self.partition_metrics is not None:
            elapsed = metrics.elapsed_ms(started, time.perf_counter())
            size = sum(len(c) for c in chunks)
            self.partition_metrics.sent(metrics.EXPORT, rows, size, elapsed)
        return ref, rows

    def _encode_and_put(
        self, chunks: list, start: int, end: int, committed: ReadCommittedFilter | None
    ) -> tuple:
        from rafka.clients import arrow_blocks

        if committed is not None:  # in offset order: the filter walks the range once
            chunks = [committed_batches(committed, data) for data in chunks]

        table = arrow_blocks.records_table(self.topic, self.partition, chunks, start, end)
        return ray.put(arrow_blocks.to_ipc_stream(table)), table.num_rows

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
