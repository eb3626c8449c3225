"""Micro-batch streams of a topic into Spark, with progress kept as a consumer group's
committed offsets (so ``rafka groups describe`` shows a stream's lag like any consumer's).

A new stream first commits where it starts (``starting_offsets`` resolved once, as Spark
writes batch 0's start to its offset log), so a stream from 'latest' reads what arrives
after that moment, however long it waits for it. Each batch then runs in three steps, as
Spark's offset log and commit log do:

1. plan: from the group's committed offsets to each partition's high watermark (at most
   ``max_records_per_batch`` in all), and commit the *start* offsets again with the plan
   (batch id and end offset) in their metadata;
2. read the ranges as a DataFrame and call ``fn(df, batch_id)``;
3. commit the end offsets, marked done.

A stream that stops between 1 and 3 (a crash, an exception in ``fn``) repeats the same batch
with the same ranges when it comes back, so a sink that writes each batch id once (replacing
what an earlier attempt of that id wrote) sees every record exactly once.

With a ``sink`` (``spark_sink.TransactionalSink``) ``fn`` returns the batch's output as a
DataFrame, and step 3 is the sink's transaction: the output and the end offsets commit
together, so the output topic holds each batch's output once for read_committed readers.
Plans read the group's offsets as stable ones (a transaction still completing is waited for).

The stream commits as an administrator of its group: the group must have no members
(NonEmptyGroup otherwise). Give each stream its own group id.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rafka.clients.spark_offsets import (
    MicroBatch,
    check_isolation_level,
    parse_offsets,
    plan_micro_batch,
    progress_metadata,
    unrecorded_starts,
)
from rafka.clients.topic_snapshot import (
    DEFAULT_RECORDS_PER_BLOCK,
    partition_bounds,
    snapshot_ranges,
)
from rafka.errors import IllegalState
from rafka.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


def read_batch(stream: "TopicStream", ranges: dict[int, tuple[int, int]]) -> tuple[Any, int]:
    """A batch's ranges as a DataFrame over a snapshot of them, and its row count."""
    from rafka.clients.spark import snapshot_dataframe

    snapshot = snapshot_ranges(
        stream.cluster, stream.topic, ranges, stream.max_records_per_partition,
        committed_only=stream.committed_only,
    )
    return snapshot_dataframe(stream.spark, snapshot), snapshot.rows


def release_batch(df: Any) -> None:
    from rafka.clients.spark import release

    release(df)


@dataclass(frozen=True)
class BatchProgress:
    """What one batch did: its id, ranges, records, and seconds spent reading and in ``fn``."""

    batch_id: int
    ranges: dict[int, tuple[int, int]]
    records: int
    replayed: bool
    read_s: float
    process_s: float


class TopicStream:
    """A running (or startable) stream; the counterpart of Spark's StreamingQuery.

    ``process_available()`` runs batches in this thread until the group has caught up with
    the high watermarks it saw; ``start()`` runs them on a thread, one every
    ``trigger_interval_s`` at most (at once when a batch took longer), until ``stop()``.

    One batch runs at a time (``run_once`` holds a lock through plan, ``fn`` and commit), and
    one loop at most runs per stream: a ``start()`` while the loop of an earlier ``start()``
    still runs (a ``stop(timeout_s)`` that timed out) raises IllegalState."""

    def __init__(
        self,
        spark,
        cluster,
        topic: str,
        group_id: str,
        fn: Callable[[Any, int], Any],
        *,
        starting_offsets: Any = "earliest",
        max_records_per_batch: int | None = None,
        trigger_interval_s: float = 1.0,
        isolation_level: str = "read_committed",
        max_records_per_partition: int = DEFAULT_RECORDS_PER_BLOCK,
        sink: Any = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable as fn(df, batch_id), not {fn!r}")
        if max_records_per_batch is not None and max_records_per_batch < 1:
            raise ValueError(
                f"max_records_per_batch must be >= 1 or None, not {max_records_per_batch}"
            )
        if trigger_interval_s < 0:
            raise ValueError(f"trigger_interval_s must be >= 0, not {trigger_interval_s}")
        self.spark = spark
        self.cluster = cluster
        self.topic = topic
        self.group_id = group_id
        self.fn = fn
        self.starting = parse_offsets(starting_offsets, topic, "starting_offsets")
        self.max_records_per_batch = max_records_per_batch
        self.trigger_interval_s = trigger_interval_s
        self.committed_only = check_isolation_level(isolation_level) == "read_committed"
        self.max_records_per_partition = max_records_per_partition
        self.sink = sink
        self.last_progress: BatchProgress | None = None
        self.exception: BaseException | None = None
        self._admin = cluster.admin()
        # Each loop has its own stop event: a start() after stop() must not un-stop the
        # loop that stop() asked to end.
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._batch_lock = threading.Lock()
        self._running_batch: int | None = None
        cluster.metadata.topic(topic)  # UnknownTopicOrPartition now, not in a thread later

    # -- running -------------------------------------------------------------------------------

    def run_once(self) -> BatchProgress | None:
        """Plan, run and commit one batch; None when there is nothing new. A call while
        another batch of this stream runs waits for it (and then plans the next)."""
        with self._batch_lock:
            try:
                return self._run_batch()
            finally:
                self._running_batch = None

    def _run_batch(self) -> BatchProgress | None:
        batch = self._plan()
        if batch is None:
            return None
        self._running_batch = batch.batch_id
        if not batch.replay:
            self._commit({p: OffsetAndMetadata(start, progress_metadata(batch.batch_id, end))
                          for p, (start, end) in batch.ranges.items()})  # fmt: skip
        began = time.monotonic()
        df, records = read_batch(self, batch.ranges)
        read = time.monotonic()
        ends = {p: OffsetAndMetadata(end, progress_metadata(batch.batch_id))
                for p, (_start, end) in batch.ranges.items()}  # fmt: skip
        try:
            output = self.fn(df, batch.batch_id)
            if self.sink is not None:
                self.sink.commit_batch(output, {TopicPartition(self.topic, p): o
                                                for p, o in ends.items()})  # fmt: skip
        finally:
            release_batch(df)
        done = time.monotonic()
        if self.sink is None:
            self._commit(ends)
        progress = BatchProgress(
            batch.batch_id, batch.ranges, records, batch.replay, read - began, done - read
        )
        self.last_progress = progress
        log.info("stream %s of %s: batch %d, %d records%s", self.group_id, self.topic,
                 batch.batch_id, progress.records, " (replayed)" if batch.replay else "")
        return progress

    def process_available(self) -> int:
        """Run batches until none is left (``max_records_per_batch`` may need several);
        returns how many ran."""
        ran = 0
        while not self._stopping.is_set() and self.run_once() is not None:
            ran += 1
        return ran

    def start(self) -> "TopicStream":
        """Run batches on a thread until ``stop()``. IllegalState while a loop runs: an
        earlier start's (even one asked to stop whose batch has not finished yet)."""
        if self._thread is not None and self._thread.is_alive():
            if not self._stopping.is_set():
                raise IllegalState("the stream is already started; stop() it first")
            running = self._running_batch
            doing = "between batches" if running is None else f"still running batch {running}"
            raise IllegalState(
                f"the stream's previous loop was asked to stop but is {doing}; wait for it "
                "(stop() without a timeout, or await_termination()) before starting again"
            )
        self.exception = None
        self._stopping = stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(stopping,), name=f"rafka-stream-{self.group_id}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        return self

    def _loop(self, stopping: threading.Event) -> None:
        try:
            while not stopping.is_set():
                began = time.monotonic()
                self.run_once()
                wait = self.trigger_interval_s - (time.monotonic() - began)
                if wait > 0:
                    stopping.wait(wait)
        except BaseException as e:  # handed to await_termination, as Spark does
            log.exception("stream %s of %s stopped", self.group_id, self.topic)
            self.exception = e

    @property
    def is_active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the batch in progress (which commits first), waiting up to
        ``timeout_s`` for it. When that runs out the loop ends on its own after its batch;
        ``is_active`` stays true and ``start()`` is refused until then."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._thread = None
                # The loop is over: process_available() and run_once() work again.
                self._stopping = threading.Event()

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait for the stream to end; re-raises the exception that ended it. Returns whether
        it has ended."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.exception is not None:
            raise self.exception
        return not self.is_active

    # -- offsets -------------------------------------------------------------------------------

    def _plan(self) -> MicroBatch | None:
        """The next batch. Partitions without a committed offset have their start
        committed first (once: later plans start from it), after the plan has checked it."""
        bounds = partition_bounds(self.cluster, self.topic)
        listed = self._admin.list_group_offsets(
            self.group_id, [TopicPartition(self.topic, p) for p in bounds], require_stable=True
        )
        committed = {tp.partition: (o.offset, o.metadata) for tp, o in listed.items()}
        starts = unrecorded_starts(committed, bounds, self.starting, self.committed_only)
        batch = plan_micro_batch(
            self.topic, {**committed, **starts}, bounds, self.starting,
            self.max_records_per_batch, self.committed_only,
        )  # fmt: skip
        if starts:
            self._commit({p: OffsetAndMetadata(o, m) for p, (o, m) in starts.items()})
        return batch

    def _commit(self, offsets: dict[int, OffsetAndMetadata]) -> None:
        self._admin.alter_group_offsets(
            self.group_id, {TopicPartition(self.topic, p): o for p, o in offsets.items()}
        )
