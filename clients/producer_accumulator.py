"""The producer's record accumulator: per partition, the batch being filled and the sealed
batches queued for the sender, with the buffer-memory accounting that bounds them.

Shared by the Producer (which appends records) and the Sender (which seals lingering batches,
takes sealed ones and hands their outcome back). Every field is guarded by ``lock``; ``wake``
is notified whenever the sender has new work or the buffer has room again.

Within a partition, batches are sent in the order they are sealed, so a batch queued whole
(``add_sealed``) first seals the partition's open batch: records keep the order they were
sent in, one by one or in bulk. Once the producer starts closing (``closing``) nothing more
is accepted: a record queued after the sender stopped would never complete.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from rafka.clients.producer_batches import (
    PartitionQueue,
    ProducerBatch,
    RecordFuture,
    new_future,
)
from rafka.clients.producer_config import ProducerConfig
from rafka.errors import IllegalState, RequestTimedOut

CLOSED = "the producer is closed or closing; create a new one to send more"


class RecordAccumulator:
    """Open and sealed batches per partition. Not thread-safe by itself: callers hold
    ``lock`` around every method (the Producer's send path and the sender thread share it)."""

    def __init__(self, config: ProducerConfig, metadata, partitioner) -> None:
        self.config = config
        # A batch must also fit in one request: its header and framing take some room.
        self.batch_limit = max(1, min(config.batch_size, config.max_request_size - 256))
        self.buffer_memory = config.buffer_memory
        self._metadata = metadata
        self._partitioner = partitioner
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)  # new work or space for the sender
        self.open: dict[tuple[str, int], ProducerBatch] = {}
        # Null-key records under the default partitioner all go to the topic's sticky batch.
        self.sticky_batches: dict[str, ProducerBatch] = {}
        self.queues: dict[tuple[str, int], PartitionQueue] = {}
        # Batches created and not yet done (the halves of a split batch in its place): what
        # a flush waits for is the set when it began.
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0  # bytes of records not yet acknowledged
        self.flushing = 0
        self.closing = False  # close() has begun: appends are refused
        self.closed = False  # close() has flushed: the sender ends once nothing is left

    @property
    def outstanding(self) -> int:
        """Batches created and not yet done."""
        return len(self.incomplete)

    def check_open(self) -> None:
        """IllegalState once close() has begun. Lock held (for an answer that stands)."""
        if self.closing or self.closed:
            raise IllegalState(CLOSED)

    def append(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None,
        headers: list | None,
        timestamp_ms: int | None,
        callback: Callable | None,
        size: int,
        sticky: bool,
    ) -> RecordFuture:
        """Add one checked record (``size`` bytes as counted against the buffer) to the open
        batch of its partition, opening or sealing batches as needed. IllegalState once
        close() has begun. Lock held."""
        self.check_open()
        if self.buffered + size > self.buffer_memory:
            self.wait_for_buffer(size)
        batch = self.open.get((topic, partition))
        if batch is None or (batch.size + size > self.batch_limit and batch.count):
            batch = self.open_batch(topic, partition)
        index = batch.count
        batch.values.append(value)
        if key is None and sticky:
            self.sticky_batches[topic] = batch
        if key is not None or batch.keys is not None:
            if batch.keys is None:
                batch.keys = [None] * index
            batch.keys.append(key)
        if headers or batch.headers is not None:
            if batch.headers is None:
                batch.headers = [None] * index
            batch.headers.append(headers or None)
        if timestamp_ms is not None or batch.timestamps is not None:
            if batch.timestamps is None:
                batch.timestamps = [batch.timestamp] * index
            batch.timestamps.append(batch.timestamp if timestamp_ms is None else timestamp_ms)
        batch.count = index + 1
        batch.size += size
        self.buffered += size
        if key is not None or headers or timestamp_ms is not None:
            batch.plain = False
        if callback is not None:
            if batch.callbacks is None:
                batch.callbacks = []
            batch.callbacks.append((index, callback))
        if batch.size >= self.batch_limit:
            self.seal(batch)
        return new_future((batch, index))

    def add_sealed(self, batch: ProducerBatch) -> None:
        """Queue a batch built whole (the bulk path), once the buffer has room, after the
        open batch of its partition (sealed now: its records were sent first). IllegalState
        once close() has begun. Lock held."""
        self.check_open()
        if self.buffered + batch.size > self.buffer_memory:
            self.wait_for_buffer(batch.size)
        before = self.open.get((batch.topic, batch.partition))
        if before is not None:
            self.seal(before)
        self.buffered += batch.size
        self.incomplete.add(batch)
        self.seal(batch)

    def open_batch(self, topic: str, partition: int) -> ProducerBatch:
        old = self.open.get((topic, partition))
        if old is not None:
            self.seal(old)
        batch = ProducerBatch(topic, partition, int(time.time() * 1000))
        self.open[(topic, partition)] = batch
        self.incomplete.add(batch)
        self.wake.notify()  # the sender's linger deadline may now be earlier
        return batch

    def seal(self, batch: ProducerBatch) -> None:
        """Close ``batch`` to new records and queue it for sending. Lock held."""
        if self.open.get((batch.topic, batch.partition)) is batch:
            del self.open[(batch.topic, batch.partition)]
        batch.closed = True
        if self.sticky_batches.get(batch.topic) is batch:
            del self.sticky_batches[batch.topic]
        queue = self.queue(batch.topic, batch.partition)
        batch.order = (queue.next_order,)
        queue.next_order += 1
        queue.ready.append(batch)
        # Sticky partitioning moves null-key records on once their batch is sealed.
        meta = self._metadata.cached(batch.topic)  # never a controller call under the lock
        if meta is not None:
            self._partitioner.on_new_batch(batch.topic, len(meta), batch.partition)
        self.wake.notify()

    def seal_all(self) -> None:
        """Seal every open batch (flush, or a full buffer). Lock held."""
        for batch in list(self.open.values()):
            self.seal(batch)

    def seal_lingering(
        self, now: float, can_take: Callable[[tuple[str, int]], bool] = lambda key: True
    ) -> None:
        """Seal the open batches whose linger time is over and whose partition
        ``can_take((topic, partition))`` a batch now (all of them while flushing or closing).
        A batch past its linger whose partition cannot send stays open and keeps taking
        records until it can, as Kafka's producer closes a batch only when it drains it:
        sealed, each record would wait in a batch of its own. ``now`` is time.monotonic().
        Lock held."""
        linger = self.config.linger_ms / 1000
        for key, batch in list(self.open.items()):
            if self.flushing or self.closed or (now - batch.created >= linger and can_take(key)):
                self.seal(batch)

    def begin_flush(self) -> list[ProducerBatch]:
        """Seal every open batch and count a flush in progress (the sender then sends
        without lingering, as Kafka's ``beginFlush``); returns the batches the flush waits
        for: those not done now. Pair with ``end_flush``. Lock held."""
        self.flushing += 1
        self.seal_all()
        return list(self.incomplete)

    def end_flush(self) -> None:
        """Lock held."""
        self.flushing -= 1

    def begin_close(self) -> None:
        """Refuse appends from now on, and seal the open batches so that no record joins
        them on send()'s fast path (which appends only to a batch not yet sealed). Lock
        held."""
        self.closing = True
        self.seal_all()
        self.wake.notify_all()  # a send waiting for buffer room fails now (see wait_for_buffer)

    def queue(self, topic: str, partition: int) -> PartitionQueue:
        queue = self.queues.get((topic, partition))
        if queue is None:
            queue = self.queues[(topic, partition)] = PartitionQueue()
        return queue

    def wait_for_buffer(self, size: int) -> None:
        """Block until ``size`` more bytes fit in buffer_memory (RequestTimedOut after
        max_block_ms). Lock held; released while waiting."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        self.seal_all()  # send what we hold, it frees the buffer
        while self.buffered + size > self.buffer_memory and self.buffered > 0:
            self.check_open()  # close() began while this waited
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOut(
                    f"buffer_memory={self.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}; the cluster is slower than the "
                    "application: raise buffer_memory or max_block_ms, or send less"
                )
            self.wake.wait(remaining)

    def replace(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """``parts`` take the place of ``batch`` (split): they are counted as batches of
        their own, it no longer is (its sizes are theirs). Lock held."""
        self.incomplete.discard(batch)
        self.incomplete.update(parts)

    def release(self, batch: ProducerBatch) -> None:
        """Forget a batch that is done (acknowledged or failed). Lock held."""
        self.incomplete.discard(batch)
        self.buffered -= batch.size
        self.wake.notify_all()
