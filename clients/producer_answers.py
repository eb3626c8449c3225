"""The sender's answers: each request's outcome turned into acknowledged batches, batches put
back for a resend, split batches, or failed ones with their futures completed.

Invariants: a request's batches are handled together, in send order, before the partition's
request count drops (so a retried request's batches go back as a group, ahead of anything
sent after them); a batch's delivery timeout counts from its creation (the sender's clock).
"""

from __future__ import annotations

import collections
import logging
from typing import Callable

from rafka.actors import stage_trace
from rafka.clients.producer_batches import PartitionQueue, ProducerBatch, split_in_halves
from rafka.clients.producer_config import ProducerConfig
from rafka.clients.producer_idempotence import EpochState, Verdict
from rafka.errors import (
    IllegalState,
    NotEnoughReplicas,
    OutOfOrderSequence,
    RafkaError,
    RecordTooLarge,
    RequestTimedOut,
    error_class,
)

log = logging.getLogger(__name__)

#: Request-level errors that by their contract come before any append, so the request's
#: batches are not written (Kafka's NOT_ENOUGH_REPLICAS; a failure after the append is
#: NotEnoughReplicasAfterAppend). Any other request-level error may follow an append.
_BEFORE_APPEND = (NotEnoughReplicas,)


class AnswersMixin:
    """Handling answers. Part of ``Sender`` (its fields)."""

    _clock: Callable[[], float]

    def _handle_request(self, batches: list[ProducerBatch], answer, error, reached: bool) -> None:
        """One request's outcome: every batch handled in send order, then the request no
        longer counts as in flight. Sender thread, lock not held."""
        retry_at = self._clock() + self.config.retry_backoff_ms / 1000
        for i, batch in enumerate(batches):
            try:
                result = None
                if error is None:
                    errno, message, base_offset, append_time = answer[3][i]
                    result = (errno, message, base_offset, append_time, answer[2])
                self._handle_answer(batch, result, error, reached, retry_at)
            except Exception as e:  # noqa: BLE001 - fail the batch, never the sender
                log.exception("handling the answer for %s-%d failed", batch.topic, batch.partition)
                if not batch.done.is_set():
                    failure = IllegalState(
                        f"the answer for {batch.count} record(s) of {batch.topic}-"
                        f"{batch.partition} could not be handled ({type(e).__name__}: {e})"
                    )
                    failure.__cause__ = e
                    self._complete(batch, failure)
        if stage_trace.ENABLED and batches[-1].base_offset >= 0 and error is None:
            stage_trace.mark("client.completed", batches[-1].base_offset + batches[-1].count)
        with self._lock:
            queue = self._queues[(batches[0].topic, batches[0].partition)]
            queue.requests_in_flight -= 1
            self._wake.notify_all()

    def _handle_answer(
        self, batch: ProducerBatch, answer, error: BaseException | None, reached: bool,
        retry_at: float,
    ) -> None:  # fmt: skip
        # A request-level failure, or no answer at all, after the request left: the batch
        # may be in the log. (A per-batch error in an answer means the append refused it.)
        maybe_written = error is not None and reached and not isinstance(error, _BEFORE_APPEND)
        if error is None and answer[0] != 0:
            error = error_class(answer[0])(answer[1])
        key = (batch.topic, batch.partition)
        if error is None:
            batch.base_offset, batch.append_time = answer[2], answer[3]
            with self._lock:
                queue = self._queues[key]
                queue.in_flight -= 1
                if queue.idempotence is not None:
                    queue.idempotence.acknowledged(batch)
            self._complete(batch, None)
            return
        with self._lock:
            queue = self._queues[key]
            queue.in_flight -= 1
            queue.session += 1
            queue.next_request = 0
        self._settle_failure(queue, batch, error, maybe_written, retry_at)

    def _settle_failure(
        self, queue: PartitionQueue, batch: ProducerBatch, error: BaseException,
        maybe_written: bool, retry_at: float,
    ) -> None:  # fmt: skip
        """Decide what becomes of a failed batch (not in the ready queue, not counted in
        flight) and do it. Sender thread, lock not held."""
        now = self._clock()
        with self._lock:
            out_of_time = self._out_of_time(batch, now)
            verdict = self._verdict(queue, batch, error, maybe_written, out_of_time)
            if verdict is Verdict.SPLIT:
                halves = split_in_halves(batch)
                if queue.idempotence is not None:
                    queue.idempotence.split(batch, halves)
                self._acc.replace(batch, halves)
                for half in reversed(halves):
                    _insert_by_order(queue.ready, half)
            elif verdict is not Verdict.FAIL:
                batch.retry_at = retry_at
                batch.last_error = error
                if verdict is Verdict.RESEND:
                    queue.retrying = True
                _insert_by_order(queue.ready, batch)
            if queue.idempotence is not None and queue.idempotence.state is EpochState.ENDING:
                self._ending.add(queue)
            self._wake.notify_all()
        if verdict is Verdict.FAIL:
            self._complete(batch, _final_error(batch, error, out_of_time, self.config, now))
        elif verdict is Verdict.SPLIT:
            log.info("%s-%d: a batch of %d records is too large for the topic; splitting it",
                     batch.topic, batch.partition, batch.count)  # fmt: skip
        else:
            log.debug("resending %s-%d after %r", batch.topic, batch.partition, error)
            if not isinstance(error, OutOfOrderSequence):
                try:
                    self._metadata.invalidate(batch.topic)
                except Exception:  # noqa: BLE001 - a stale cache is refreshed later anyway
                    log.exception("could not invalidate the metadata of %s", batch.topic)

    def _verdict(
        self,
        queue: PartitionQueue,
        batch: ProducerBatch,
        error: BaseException,
        maybe_written: bool,
        out_of_time: bool,
    ) -> Verdict:
        if queue.idempotence is not None:
            return queue.idempotence.failed(
                batch, error, maybe_written=maybe_written, out_of_time=out_of_time
            )
        if maybe_written:
            batch.maybe_written = True
        if out_of_time:
            return Verdict.FAIL
        if isinstance(error, RecordTooLarge) and batch.count > 1 and not maybe_written:
            return Verdict.SPLIT
        if isinstance(error, RafkaError) and error.retriable:
            return Verdict.RESEND
        return Verdict.FAIL

    def _out_of_time(self, batch: ProducerBatch, now: float) -> bool:
        """Whether ``batch`` may not be sent again: the producer closed without flushing,
        its delivery timeout passed, or its retries are spent."""
        return (
            (self._acc.closed and not self._acc.flushing)
            or delivery_expired(batch, now, self.config)
            or batch.attempts > self.config.retries
        )

    def _complete(self, batch: ProducerBatch, error: BaseException | None) -> None:
        batch.error = error
        if error is not None and self.on_failed_batch is not None:
            self.on_failed_batch(batch, error)  # a transaction's write failed: it must abort
        # Callbacks run before the futures (and flush) see the batch done, as in Kafka: code
        # that counts acknowledgements in callbacks reads the count after flush().
        if batch.callbacks:
            for index, callback in batch.callbacks:
                try:
                    callback(None if error else batch.metadata(index), error)
                except Exception:  # a user callback must not stop the sender
                    log.exception("producer callback raised")
        batch.done.set()
        batch.values = batch.keys = batch.headers = batch.encoded = batch.packed = None
        with self._lock:
            self._acc.release(batch)
        # A split batch is done when its last part is (its futures wait on it).
        parent = batch.parent
        while parent is not None:
            parent.pending_parts -= 1
            if parent.pending_parts:
                break
            parent.done.set()
            parent = parent.parent


def delivery_expired(batch: ProducerBatch, now: float, config: ProducerConfig) -> bool:
    """Whether delivery_timeout_ms has passed since ``batch`` was created (Kafka's rule:
    expired once the whole timeout has elapsed)."""
    return now - batch.created >= config.delivery_timeout_ms / 1000


def _insert_by_order(ready: collections.deque, batch: ProducerBatch) -> None:
    """Put a batch back into the ready queue, before every batch sent after it."""
    for i, other in enumerate(ready):
        if other.order > batch.order:
            ready.insert(i, batch)
            return
    ready.append(batch)


def _final_error(
    batch: ProducerBatch, error: BaseException, out_of_time: bool, config: ProducerConfig,
    now: float,
) -> BaseException:  # fmt: skip
    """The error a batch that failed for good completes with: its last error, unless it
    may have been written, which the error must then say."""
    if not batch.maybe_written:
        return error
    if not out_of_time:
        why = "the leader refused a resend"
    elif delivery_expired(batch, now, config):
        why = f"no clear answer within delivery_timeout_ms={config.delivery_timeout_ms}"
    elif batch.attempts > config.retries:
        why = f"no clear answer in {batch.attempts} attempts (retries={config.retries})"
    else:
        why = "the producer was closed before the leader answered"
    unclear = RequestTimedOut(
        f"{batch.count} record(s) of {batch.topic}-{batch.partition} may or may not have been "
        f"written: {why}; the last attempt ended with {type(error).__name__}: {error}. Read "
        "the partition to find out before sending them again"
    )
    unclear.__cause__ = error
    return unclear
