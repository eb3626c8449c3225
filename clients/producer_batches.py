"""What the producer keeps per batch and per partition, and the futures it hands out."""

from __future__ import annotations

import collections
import threading
import time
from typing import NamedTuple

from rafka.errors import RequestTimedOut
from rafka.storage import record_batch as rb
from rafka.types import RecordMetadata

class ProducerBatch:
    """Records bound for one partition, sent (and retried) as one record batch."""

    __slots__ = (
        "topic", "partition", "values", "keys", "headers", "timestamps", "timestamp",
        "size", "count", "created", "sequence", "encoded", "attempts", "retry_at", "callbacks",
        "done", "error", "base_offset", "append_time", "packed", "closed", "plain",
        "resequenced", "maybe_written",
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
        self.created = time.monotonic()
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
        self.resequenced = False  # its sequence moved down after an earlier batch failed
        # An attempt ended without a clear answer (timeout, lost leader, dead actor): the
        # leader may have written it, so its sequence numbers can never be given away.
        self.maybe_written = False

    def record_timestamp(self, index: int) -> int:
        if self.append_time >= 0:
            return self.append_time
        return self.timestamps[index] if self.timestamps is not None else self.timestamp

    def metadata(self, index: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        return RecordMetadata(self.topic, self.partition, offset, self.record_timestamp(index))


class RecordFuture(tuple):
    """The outcome of one ``send``: ``result()`` gives its RecordMetadata or raises its error.

    A (batch, index) tuple underneath: ``send`` makes one per record, and a tuple is the
    cheapest object Python can make (no ``__init__`` frame)."""

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch = self[0]
        if not batch.done.wait(timeout):
            raise RequestTimedOut(f"record not acknowledged within {timeout} s")
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self[1])

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self[0].done.wait(timeout):
            raise RequestTimedOut(f"record not acknowledged within {timeout} s")
        return self[0].error

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
        for b in self._batches:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not b.done.wait(left):
                raise RequestTimedOut(f"bulk send not acknowledged within {timeout} s")
            if b.error is not None:
                raise b.error
            last = b.base_offset + b.count - 1 if b.base_offset >= 0 else -1
            ranges.setdefault(b.partition, []).append((b.base_offset, last))
        return BulkResult(self._topic, sum(b.count for b in self._batches), ranges)


class PartitionQueue:
    __slots__ = (
        "ready", "in_flight", "requests_in_flight", "sent", "next_sequence", "retrying",
        "next_request", "session", "unacked", "producer_id", "producer_epoch", "renew_id",
    )  # fmt: skip

    def __init__(self) -> None:
        self.ready: collections.deque[ProducerBatch] = collections.deque()
        self.in_flight = 0  # batches
        self.requests_in_flight = 0
        self.sent: set[ProducerBatch] = set()  # in flight
        self.next_sequence = 0
        # Requests to the partition are numbered from 0 per session and the leader appends
        # them in that order. A failure starts a new session (the leader may have changed).
        self.next_request = 0
        self.session = 0
        self.retrying = False  # a batch awaits resending: send nothing newer until it is out
        self.unacked = 0  # batches sent at least once and not yet done
        # The producer id this partition's batches carry (None: the producer's own). It is
        # renewed when a batch that may have been written fails for good, since its
        # sequence numbers can then neither be reused nor skipped (Kafka's KIP-360 bump).
        self.producer_id: int | None = None
        self.producer_epoch = 0
        self.renew_id = False
