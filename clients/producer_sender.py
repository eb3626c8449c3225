"""The producer's sender thread: takes sealed batches from the accumulator, sends each
partition's batches to its leader replica (one actor call per request), and turns the
answers into completed futures or retries.

Requests to one partition are numbered from 0 per session and the leader appends them in that
order; a failure starts a new session. Retriable errors are retried with backoff after a
metadata refresh; with idempotence each batch carries the producer id and a sequence number.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.clients.producer_accumulator import RecordAccumulator
from rafka.clients.producer_batches import PartitionQueue, ProducerBatch
from rafka.clients.producer_config import ProducerConfig
from rafka.errors import (
    IllegalState,
    NotLeaderOrFollower,
    OutOfOrderSequence,
    RafkaError,
    RecordTooLarge,
    RequestTimedOut,
    error_class,
)
from rafka.storage import record_batch as rb
from rafka.storage.producer_state import BATCHES_KEPT

log = logging.getLogger(__name__)


class Sender:
    """The background thread of one Producer. ``start`` once; it runs until the accumulator
    is closed and every batch is done."""

    def __init__(
        self,
        accumulator: RecordAccumulator,
        gateway,
        metadata,
        config: ProducerConfig,
        producer_id: int,
        producer_epoch: int,
        client_id: str,
    ) -> None:
        self._acc = accumulator
        self._gateway = gateway
        self._metadata = metadata
        self.config = config
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.client_id = client_id
        self._lock = accumulator.lock
        self._wake = accumulator.wake
        self._queues = accumulator.queues
        self._completions: collections.deque = collections.deque()
        self._requests: set[_SentRequest] = set()  # produce calls awaiting an answer
        self._thread = threading.Thread(target=self._run, name="rafka-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        acc = self._acc
        while True:
            if self._requests:
                self._abandon_stalled()
            if self._renewing:
                self._renew_producer_ids()
            with self._lock:
                to_send = self._collect_sendable()
                while not to_send and not self._completions:
                    if acc.closed and not acc.outstanding:
                        return
                    self._wake.wait(self._next_wakeup())
                    to_send = self._collect_sendable()
                    if self._requests and time.monotonic() - min(
                        r.sent_at for r in self._requests
                    ) > SUSPECT_AFTER_S:
                        break  # look for requests stuck at a leader that moved
                completions = list(self._completions)
                self._completions.clear()
            for batch, answer, error in completions:
                self._handle_answer(batch, answer, error)
            for request in to_send:
                self._dispatch(request)

    def _next_wakeup(self) -> float | None:
        now = time.monotonic()
        deadlines = [b.created + self.config.linger_ms / 1000 for b in self._acc.open.values()]
        deadlines += [q.ready[0].retry_at for q in self._queues.values() if q.ready]
        if self._requests:
            deadlines.append(now + RECHECK_INTERVAL_S)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now) + 0.0005

    def _collect_sendable(self) -> list[list[ProducerBatch]]:
        """Requests to send now: per partition, ready batches in sequence order, as many per
        request as fit in max_request_size (one actor call carries them all). Lock held."""
        now = time.monotonic()
        self._acc.seal_lingering(now)
        out = []
        limit = self.config.max_in_flight
        budget = self.config.max_request_size
        idempotent = self.config.enable_idempotence
        for queue in self._queues.values():
            if queue.renew_id:
                continue  # nothing goes out until the partition has its new producer id
            while queue.ready and queue.requests_in_flight < limit:
                if queue.ready[0].retry_at > now:
                    break
                if queue.retrying and queue.in_flight:
                    break  # resend in order: wait until everything older has answered
                request: list[ProducerBatch] = []
                size = 0
                while queue.ready and queue.ready[0].retry_at <= now:
                    head = queue.ready[0]
                    if request and (size + head.size > budget or head.attempts):
                        break
                    if idempotent and not head.attempts and queue.unacked >= BATCHES_KEPT:
                        # The leader remembers its last BATCHES_KEPT batches per producer:
                        # more unacknowledged ones and a resent one could not be recognised.
                        break
                    if not head.attempts:
                        queue.unacked += 1
                    queue.ready.popleft()
                    queue.in_flight += 1
                    queue.sent.add(head)
                    request.append(head)
                    size += head.size
                    if head.attempts:
                        break  # a retried batch travels alone
                if not request:
                    break
                queue.requests_in_flight += 1
                queue.retrying = any(b.attempts for b in queue.ready)
                out.append(request)
        return out

    # -- requests ------------------------------------------------------------------------------

    def _dispatch(self, request: list[ProducerBatch]) -> None:
        config = self.config
        first = request[0]
        queue = self._queues[(first.topic, first.partition)]
        try:
            for batch in request:
                if batch.encoded is None:
                    batch.encoded = self._encode(batch)
                batch.attempts += 1
                batch.resequenced = False
            if len(request) == 1 and first.count > 1 and (
                len(first.encoded) > config.max_request_size
            ):
                raise RecordTooLarge(
                    f"batch of {first.count} records encodes to {len(first.encoded)} bytes,"
                    f" over max_request_size={config.max_request_size}; lower batch_size"
                )
            meta = self._metadata.topic(first.topic)
            replica = self._metadata.replica(meta, first.partition)
            request_no = queue.next_request
            queue.next_request += 1
            payload = first.encoded if len(request) == 1 else b"".join(
                b.encoded for b in request
            )
            ref = self._gateway.produce(
                replica, payload, config.acks, config.request_timeout_ms,
                f"{self.client_id}.{queue.session}", request_no,
            )  # fmt: skip
        except RafkaError as e:
            self._post_request(request, None, e)
            return
        if config.acks == 0:
            self._post_request(request, (0, "", -1, [(0, "", -1, -1)] * len(request)), None)
            return
        sent = _SentRequest(request, time.monotonic(), meta.partitions[first.partition])
        with self._lock:
            self._requests.add(sent)
        future = self._gateway.future(ref)
        future.add_done_callback(lambda f, r=sent: self._post_request(r, *_outcome(f)))

    @property
    def _renewing(self) -> bool:
        return any(q.renew_id for q in self._queues.values())

    def _renew_producer_ids(self) -> None:
        """For each partition whose batch failed for good after it may have been written,
        once nothing of it is in flight: a fresh producer id, batches still waiting renumbered
        from sequence 0 under it, and waiting batches that may have been written failed (a
        resend under the new id could write them twice). Sender thread, lock not held."""
        with self._lock:
            idle = [q for q in self._queues.values() if q.renew_id and not q.in_flight]
        for queue in idle:
            try:
                producer_id, epoch = self._gateway.call_controller("allocate_producer_id")
            except RafkaError as e:
                log.warning("could not get a new producer id (%r); trying again", e)
                return
            doomed = []
            with self._lock:
                queue.producer_id, queue.producer_epoch = producer_id, epoch
                sequence = 0
                for batch in list(queue.ready):
                    if batch.maybe_written:
                        queue.ready.remove(batch)
                        doomed.append(batch)
                        continue
                    batch.sequence, batch.encoded = sequence, None
                    sequence = rb.increment_sequence(sequence, batch.count)
                queue.next_sequence = sequence
                queue.retrying = any(b.attempts for b in queue.ready)
                queue.renew_id = False
                self._wake.notify_all()
            for batch in doomed:
                self._complete(batch, RequestTimedOut(
                    f"a batch of {batch.topic}-{batch.partition} may or may not have been "
                    "written: the leader's answer was lost and a later resend was refused"
                ))  # fmt: skip

    def _abandon_stalled(self) -> None:
        """Requests outstanding for long whose partition's leader has moved since they were
        sent are failed with NotLeaderOrFollower, so they are retried at the new leader: a
        call to a dead node's actor may not fail for seconds. Sender thread, lock not held."""
        now = time.monotonic()
        with self._lock:
            stalled = [r for r in self._requests if now - r.sent_at > SUSPECT_AFTER_S]
        for sent in stalled:
            first = sent.batches[0]
            if self._metadata.leader_moved(first.topic, first.partition, sent.leader):
                log.info("%s-%d: the leader moved during a produce; resending",
                         first.topic, first.partition)  # fmt: skip
                self._post_request(sent, None, NotLeaderOrFollower(
                    f"the leader of {first.topic}-{first.partition} moved from broker "
                    f"{sent.leader.leader} while the request was outstanding"
                ))  # fmt: skip

    def _post_request(self, request, answer, error) -> None:
        """Turn one request's answer into one completion per batch. ``request`` is a list of
        batches, or a _SentRequest (answered once: a late answer to an abandoned request is
        dropped)."""
        with self._lock:
            if isinstance(request, _SentRequest):
                if request.settled:
                    return
                request.settled = True
                self._requests.discard(request)
                request = request.batches
            queue = self._queues[(request[0].topic, request[0].partition)]
            queue.requests_in_flight -= 1
            if error is None and (answer[0] != 0 or len(answer[3]) != len(request)):
                if answer[0] == 0:
                    error = IllegalState(
                        f"the leader answered {len(answer[3])} results for {len(request)} batches"
                    )
                else:
                    error = error_class(answer[0])(answer[1])
            for i, batch in enumerate(request):
                if error is not None:
                    self._completions.append((batch, None, error))
                else:
                    errno, message, base_offset, append_time = answer[3][i]
                    self._completions.append(
                        (batch, (errno, message, base_offset, append_time, answer[2]), None)
                    )
            self._wake.notify_all()

    def _encode(self, batch: ProducerBatch) -> bytes:
        queue = self._queues[(batch.topic, batch.partition)]
        own = queue.producer_id is None
        common = dict(
            codec=self.config.compression,
            producer_id=self.producer_id if own else queue.producer_id,
            producer_epoch=self.producer_epoch if own else queue.producer_epoch,
            base_sequence=batch.sequence,
        )  # fmt: skip
        if batch.packed is not None:
            keys, values = batch.packed
            return rb.encode_batch(values, keys, batch.timestamp, count=batch.count, **common)
        return rb.encode_batch(
            batch.values, batch.keys,
            batch.timestamps if batch.timestamps is not None else batch.timestamp,
            batch.headers, **common,
        )  # fmt: skip

    # -- answers -------------------------------------------------------------------------------

    def _handle_answer(self, batch: ProducerBatch, answer, error: BaseException | None) -> None:
        if error is not None:
            # A request-level failure or no answer at all: the batch may be in the log.
            # (Per-batch errors in an answer mean the append refused it.)
            batch.maybe_written = True
        elif answer[0] != 0:
            error = error_class(answer[0])(answer[1])
        key = (batch.topic, batch.partition)
        if error is None:
            batch.base_offset, batch.append_time = answer[2], answer[3]
            with self._lock:
                queue = self._queues[key]
                queue.in_flight -= 1
                queue.sent.discard(batch)
            self._complete(batch, None)
            return
        with self._lock:
            queue = self._queues[key]
            queue.in_flight -= 1
            queue.sent.discard(batch)
            queue.session += 1
            queue.next_request = 0
            retry = self._should_retry(batch, error, queue)
            if retry:
                batch.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
                queue.retrying = True
                _insert_by_sequence(queue.ready, batch)
                self._wake.notify_all()
            elif batch.maybe_written and batch.sequence != rb.NO_SEQUENCE:
                queue.renew_id = True
            else:
                self._release_sequence(queue, batch)
        if retry:
            log.debug("retrying %s-%d after %r", batch.topic, batch.partition, error)
            self._metadata.invalidate(batch.topic)
        else:
            self._complete(batch, error)

    def _should_retry(
        self, batch: ProducerBatch, error: BaseException, queue: PartitionQueue
    ) -> bool:
        if self._acc.closed and not self._acc.flushing:
            return False
        if time.monotonic() - batch.created > self.config.delivery_timeout_ms / 1000:
            return False
        if batch.attempts > self.config.retries:
            return False
        if isinstance(error, OutOfOrderSequence):
            # An earlier batch failed (and is being resent, or gave its sequence numbers
            # back): this one is in order again once resent after it.
            return batch.resequenced or any(
                b.sequence < batch.sequence for b in (*queue.ready, *queue.sent)
            )
        return isinstance(error, RafkaError) and error.retriable

    def _release_sequence(self, queue: PartitionQueue, failed: ProducerBatch) -> None:
        """A batch failed for good and was not written: later batches move down into its
        sequence numbers, so the leader sees no gap (Kafka's client does the same)."""
        if failed.sequence == rb.NO_SEQUENCE:
            return
        for b in (*queue.ready, *queue.sent):
            if b.sequence > failed.sequence:
                b.sequence = rb.increment_sequence(b.sequence, -failed.count)
                b.encoded = None
                b.resequenced = True
        queue.next_sequence = rb.increment_sequence(queue.next_sequence, -failed.count)

    def _complete(self, batch: ProducerBatch, error: BaseException | None) -> None:
        batch.error = error
        batch.done.set()
        if batch.callbacks:
            for index, callback in batch.callbacks:
                try:
                    callback(None if error else batch.metadata(index), error)
                except Exception:  # a user callback must not stop the sender
                    log.exception("producer callback raised")
        batch.values = batch.keys = batch.headers = batch.encoded = batch.packed = None
        with self._lock:
            self._acc.release(batch)


class _SentRequest:
    """One produce call awaiting its answer, and the leader it went to."""

    __slots__ = ("batches", "sent_at", "leader", "settled")

    def __init__(self, batches: list[ProducerBatch], sent_at: float, leader) -> None:
        self.batches = batches
        self.sent_at = sent_at
        self.leader = leader
        self.settled = False


def _outcome(future) -> tuple:
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)


def _insert_by_sequence(ready: collections.deque, batch: ProducerBatch) -> None:
    """Put a batch back for resending: before every later sequence (idempotent), or first
    (no sequences: the failed batch was the oldest sent)."""
    if batch.sequence == rb.NO_SEQUENCE:
        ready.appendleft(batch)
        return
    for i, other in enumerate(ready):
        if other.sequence > batch.sequence:
            ready.insert(i, batch)
            return
    ready.append(batch)
