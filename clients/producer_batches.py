"""What the producer keeps per batch and per partition, and the futures it hands out."""

from __future__ import annotations

import collections
import threading
import time
from typing import NamedTuple

from rafka.errors import RequestTimedOut
from rafka.storage import record_batch as rb
from rafka.types import RecordMetadata

#: The producer's monotonic clock, in seconds: batch creation times, lingers, backoffs and
#: timeouts are all read from it. Tests replace it (before making the Producer) to drive
#: time by hand.
clock = time.monotonic


class ProducerBatch:
    """Records bound for one partition, sent (and retried) as one record batch.

    A batch the leader refuses as too large is split: it becomes the ``parent`` of two
    halves (``parts``, each with the index of its first record) and is done once both are;
    the futures handed out for it read each record's outcome from the half that holds it."""

    __slots__ = (
        "topic", "partition", "values", "keys", "headers", "timestamps", "timestamp",
        "size", "count", "created", "order", "producer_id", "producer_epoch", "sequence",
        "encoded", "attempts", "retry_at", "callbacks", "done", "error", "base_offset",
        "append_time", "packed", "closed", "plain", "maybe_written", "parent", "parts",
        "pending_parts", "last_error",
    )  # fmt: skip

    def __init__(self, topic: str, partition: int, timestamp: int) -> None:
        self.topic = topic
        self.partition = partition
        self.values: list = []
        self.keys: list | None = None
        self.headers: list | None = None
        self.timestamps: list | None = None  # only when a record gave its own
        self.timestamp = timestamp
        self.size = 0
        self.count = 0
        self.created = clock()  # the delivery timeout counts from here
        # Send order within the partition, a tuple so a split batch's halves sort between
        # it and the next batch: (n,) for the n-th batch sealed, (n, 0) and (n, 1) for its
        # halves. Batches waiting to be resent go back into the queue by this order.
        self.order: tuple = ()
        # The stamp it carries while it may be on the leader (see producer_idempotence).
        self.producer_id = rb.NO_PRODUCER_ID
        self.producer_epoch = rb.NO_PRODUCER_EPOCH
        self.sequence = rb.NO_SEQUENCE
        self.encoded: bytes | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.callbacks: list | None = None
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.base_offset = -1
        self.append_time = -1
        self.packed: tuple | None = None  # (keys column, values column) from send_batch
        self.closed = False
        self.plain = True  # only values so far: send()'s fast path may append here
        # An attempt ended without a clear answer (timeout, lost leader, dead actor): the
        # leader may have written it, so its stamp can never be given away.
        self.maybe_written = False
        self.parent: ProducerBatch | None = None
        self.parts: list[tuple[int, ProducerBatch]] | None = None
        self.pending_parts = 0
        # The error its last attempt ended with, while it waits to be sent again: a batch
        # that expires there fails with it (it says more than the timeout).
        self.last_error: BaseException | None = None

    def record_timestamp(self, index: int) -> int:
        if self.append_time >= 0:
            return self.append_time
        return self.timestamps[index] if self.timestamps is not None else self.timestamp

    def metadata(self, index: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        return RecordMetadata(self.topic, self.partition, offset, self.record_timestamp(index))

    def leaf(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch that was sent with record ``index`` (itself unless it was split), and
        the record's index there."""
        batch = self
        while batch.parts is not None:
            for first, part in reversed(batch.parts):
                if index >= first:
                    batch, index = part, index - first
                    break
        return batch, index

    def leaves(self) -> list[ProducerBatch]:
        """The batches its records were sent in, in record order."""
        if self.parts is None:
            return [self]
        return [leaf for _, part in self.parts for leaf in part.leaves()]


def split_in_halves(batch: ProducerBatch) -> list[ProducerBatch]:
    """Two batches with the first and the second half of ``batch``'s records, decoded from
    its encoded bytes (so batches of both paths, ``send`` and ``send_batch``, split alike).
    ``batch`` becomes their parent: its callbacks move to them and its futures follow them.
    Their sizes add up to its size (the buffer accounting releases each)."""
    records = rb.decode_records(batch.encoded)
    count = len(records)
    cut = count // 2
    halves = []
    for number, (first, stop) in enumerate(((0, cut), (cut, count))):
        half = ProducerBatch(batch.topic, batch.partition, batch.timestamp)
        half.values = records.values[first:stop]
        half.keys = None if records.keys is None else records.keys[first:stop]
        half.headers = None if records.headers is None else records.headers[first:stop]
        half.timestamps = records.timestamps[first:stop]
        half.count = stop - first
        half.created = batch.created  # the delivery timeout runs from the first send()
        half.order = batch.order + (number,)
        half.closed = True
        half.plain = False
        half.parent = batch
        halves.append(half)
    halves[0].size = batch.size * cut // count
    halves[1].size = batch.size - halves[0].size
    for index, callback in batch.callbacks or ():
        number = 0 if index < cut else 1
        half = halves[number]
        if half.callbacks is None:
            half.callbacks = []
        half.callbacks.append((index - number * cut, callback))
    batch.parts = [(0, halves[0]), (cut, halves[1])]
    batch.pending_parts = 2
    batch.callbacks = None
    return halves


class RecordFuture(tuple):
    """The outcome of one ``send``: ``result()`` gives its RecordMetadata or raises its error.

    A (batch, index) tuple underneath: ``send`` makes one per record, and a tuple is the
    cheapest object Python can make (no ``__init__`` frame)."""

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch, index = self
        if not batch.done.wait(timeout):
            raise RequestTimedOut(f"record not acknowledged within {timeout} s")
        if batch.parts is not None:
            batch, index = batch.leaf(index)
        if batch.error is not None:
            raise batch.error
        return batch.metadata(index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        batch, index = self
        if not batch.done.wait(timeout):
            raise RequestTimedOut(f"record not acknowledged within {timeout} s")
        if batch.parts is not None:
            batch, index = batch.leaf(index)
        return batch.error

    def __repr__(self) -> str:
        return f"RecordFuture(done={self.done()})"


_new_tuple = tuple.__new__


def new_future(fields: tuple) -> RecordFuture:
    """A RecordFuture over (batch, index), made without a Python frame."""
    return _new_tuple(RecordFuture, fields)


class BulkResult(NamedTuple):
    """Where a ``send_batch`` column landed: per partition, the offset ranges it was given
    (first, last), in send order. Offsets are -1 with acks=0."""

    topic: str
    records: int
    ranges: dict  # partition -> list of (first_offset, last_offset)


class BulkFuture:
    def __init__(self, topic: str, batches: list[ProducerBatch]) -> None:
        self._topic = topic
        self._batches = batches

    def done(self) -> bool:
        return all(b.done.is_set() for b in self._batches)

    def result(self, timeout: float | None = None) -> BulkResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        ranges: dict[int, list] = {}
        for sealed in self._batches:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sealed.done.wait(left):
                raise RequestTimedOut(f"bulk send not acknowledged within {timeout} s")
            for b in sealed.leaves():
                if b.error is not None:
                    raise b.error
                last = b.base_offset + b.count - 1 if b.base_offset >= 0 else -1
                ranges.setdefault(b.partition, []).append((b.base_offset, last))
        return BulkResult(self._topic, sum(b.count for b in self._batches), ranges)


class PartitionQueue:
    """One partition's sealed batches waiting to be sent (``ready``, in send order) and its
    requests in flight. With idempotence, ``idempotence`` (a PartitionIdempotence, made by
    the sender) decides the stamps."""

    __slots__ = (
        "ready", "in_flight", "requests_in_flight", "retrying", "next_request", "session",
        "next_order", "idempotence",
    )  # fmt: skip

    def __init__(self) -> None:
        self.ready: collections.deque[ProducerBatch] = collections.deque()
        self.in_flight = 0  # batches
        self.requests_in_flight = 0
        # Requests to the partition are numbered from 0 per session and the leader appends
        # them in that order. A failure starts a new session (the leader may have changed).
        self.next_request = 0
        self.session = 0
        self.retrying = False  # a batch awaits resending: send nothing newer until it is out
        self.next_order = 0  # ProducerBatch.order of the next batch sealed
        self.idempotence = None
