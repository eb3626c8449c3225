"""The producer's sender thread: takes sealed batches from the accumulator, sends each
partition's batches to its leader replica (one actor call per request), and turns the
answers into completed futures or retries.

Requests to one partition are numbered from 0 per session and the leader appends them in that
order; a failure starts a new session. Retriable errors are retried with backoff after a
metadata refresh. A batch the leader refuses as too large is split in two and each half sent
in its place. With idempotence each batch carries a stamp (producer id, epoch, sequence), and
``PartitionIdempotence`` decides the stamps, what may be sent, and what a failed batch becomes
(see its module for the rules).
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.clients.producer_accumulator import RecordAccumulator
from rafka.clients.producer_batches import PartitionQueue, ProducerBatch, split_in_halves
from rafka.clients.producer_config import ProducerConfig
from rafka.clients.producer_idempotence import (
    EpochState,
    PartitionIdempotence,
    SendMode,
    Verdict,
)
from rafka.errors import (
    IllegalState,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    OutOfOrderSequence,
    RafkaError,
    RecordTooLarge,
    RequestTimedOut,
    error_class,
)
from rafka.storage import record_batch as rb

log = logging.getLogger(__name__)

#: Request-level errors that by their contract come before any append, so the request's
#: batches are not written (Kafka's NOT_ENOUGH_REPLICAS; a failure after the append is
#: NotEnoughReplicasAfterAppend). Any other request-level error may follow an append.
_BEFORE_APPEND = (NotEnoughReplicas,)


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
        self._ending: set[PartitionQueue] = set()  # partitions whose epoch awaits its bump
        self._next_id_request = 0.0  # time.monotonic() before which not to ask again
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
            if self._ending:
                self._bump_epochs()
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
                    if self._bump_overdue():
                        break  # ask the controller again for a producer id
                completions = list(self._completions)
                self._completions.clear()
            for batch, answer, error, reached in completions:
                self._handle_answer(batch, answer, error, reached)
            for request in to_send:
                self._dispatch(request)

    def _next_wakeup(self) -> float | None:
        """Seconds until the next linger or backoff deadline (None: none). Everything else
        the sender waits for (answers, room in the queues) notifies ``wake``."""
        now = time.monotonic()
        # A linger that ran out since the last pass is due now: the next pass seals it.
        lingers = [b.created + self.config.linger_ms / 1000 for b in self._acc.open.values()]
        if lingers and min(lingers) <= now:
            return 0.0
        deadlines = lingers
        for queue in self._queues.values():
            if queue.ready:
                deadlines.append(queue.ready[0].retry_at)
                if queue.idempotence is not None and queue.idempotence.stamped:
                    deadlines.extend(b.retry_at for b in queue.idempotence.stamped)
        if self._ending:
            deadlines.append(self._next_id_request)
        deadlines = [d for d in deadlines if d > now]
        if self._requests:
            deadlines.append(now + RECHECK_INTERVAL_S)
        if not deadlines:
            return None
        return min(deadlines) - now + 0.0005

    def _collect_sendable(self) -> list[list[ProducerBatch]]:
        """Requests to send now: per partition, ready batches in send order, as many per
        request as fit in max_request_size (one actor call carries them all). Lock held."""
        now = time.monotonic()
        self._acc.seal_lingering(now)
        out = []
        limit = self.config.max_in_flight
        budget = self.config.max_request_size
        idempotent = self.config.enable_idempotence
        for key, queue in self._queues.items():
            if not queue.ready:
                continue
            mode = SendMode.PIPELINE
            if idempotent:
                if queue.idempotence is None:
                    queue.idempotence = PartitionIdempotence(
                        self.producer_id, self.producer_epoch, f"{key[0]}-{key[1]}"
                    )
                mode, chosen = queue.idempotence.next_send()
                if mode is SendMode.NOTHING:
                    continue
                if mode is SendMode.RESOLVE:
                    if not queue.in_flight and chosen.retry_at <= now:
                        queue.ready.remove(chosen)
                        self._take(queue, chosen)
                        queue.requests_in_flight += 1
                        queue.retrying = any(self._is_resend(b) for b in queue.ready)
                        out.append([chosen])
                    continue
            alone = mode is SendMode.PROBE
            while queue.ready and queue.requests_in_flight < limit:
                if queue.ready[0].retry_at > now:
                    break
                if (queue.retrying or alone) and queue.in_flight:
                    break  # resend in order: wait until everything older has answered
                request: list[ProducerBatch] = []
                size = 0
                while queue.ready and queue.ready[0].retry_at <= now:
                    head = queue.ready[0]
                    resend = self._is_resend(head)
                    if request and (size + head.size > budget or resend):
                        break
                    if idempotent and not queue.idempotence.may_send(head):
                        break  # the window is full (see PartitionIdempotence)
                    queue.ready.popleft()
                    self._take(queue, head)
                    request.append(head)
                    size += head.size
                    if resend:
                        queue.retrying = any(self._is_resend(b) for b in queue.ready)
                    if resend or alone:
                        break  # a resent batch, or a probe, travels alone
                if not request:
                    break
                queue.requests_in_flight += 1
                out.append(request)
                if alone:
                    break
        return out

    def _take(self, queue: PartitionQueue, batch: ProducerBatch) -> None:
        """Count ``batch`` as sent (stamping it if it has no stamp). Lock held."""
        queue.in_flight += 1
        if queue.idempotence is not None:
            if batch.sequence == rb.NO_SEQUENCE:
                queue.idempotence.stamp(batch)
            queue.idempotence.sent(batch)

    def _is_resend(self, batch: ProducerBatch) -> bool:
        """A batch going out again as it was (an unstamped one goes out as if new)."""
        if not self.config.enable_idempotence:
            return batch.attempts > 0
        return batch.attempts > 0 and batch.sequence != rb.NO_SEQUENCE

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
            if len(request) == 1 and first.count > 1 and (
                len(first.encoded) > config.max_request_size
            ):
                raise RecordTooLarge(  # not sent: the batch is split (see _verdict)
                    f"batch of {first.count} records encodes to {len(first.encoded)} bytes,"
                    f" over max_request_size={config.max_request_size}"
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
            self._post_request(request, None, e, reached=False)
            return
        if config.acks == 0:
            self._post_request(request, (0, "", -1, [(0, "", -1, -1)] * len(request)), None)
            return
        sent = _SentRequest(request, time.monotonic(), meta.partitions[first.partition])
        with self._lock:
            self._requests.add(sent)
        future = self._gateway.future(ref)
        future.add_done_callback(lambda f, r=sent: self._post_request(r, *_outcome(f)))

    def _bump_epochs(self) -> None:
        """Start the next epoch of every partition whose epoch has ended and is due (see
        PartitionIdempotence.bump); a partition past the last epoch first gets a new producer
        id from the controller. Sender thread, lock not held."""
        with self._lock:
            due = [q for q in self._ending if q.idempotence.bump_due]
            exhausted = [q for q in due if q.idempotence.needs_producer_id]
            for queue in due:
                if queue not in exhausted:
                    self._bump(queue, None)
        if not exhausted or time.monotonic() < self._next_id_request:
            return
        for queue in exhausted:
            try:
                new_producer = self._gateway.call_controller("allocate_producer_id")
            except RafkaError as e:
                log.warning("could not get a new producer id (%r); asking again", e)
                self._next_id_request = time.monotonic() + self.config.retry_backoff_ms / 1000
                return
            with self._lock:
                self._bump(queue, tuple(new_producer))

    def _bump_overdue(self) -> bool:
        """A bump is due that waits only for a new producer id, and it is time to ask."""
        return (
            bool(self._ending)
            and time.monotonic() >= self._next_id_request
            and any(q.idempotence.bump_due for q in self._ending)
        )

    def _bump(self, queue: PartitionQueue, new_producer: tuple[int, int] | None) -> None:
        """Lock held."""
        queue.idempotence.bump(new_producer)
        self._ending.discard(queue)
        queue.retrying = any(self._is_resend(b) for b in queue.ready)
        self._wake.notify_all()

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

    def _post_request(self, request, answer, error, reached: bool = True) -> None:
        """Turn one request's answer into one completion per batch. ``request`` is a list of
        batches, or a _SentRequest (answered once: a late answer to an abandoned request is
        dropped). ``reached``: False when the request failed before it left the client."""
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
                    self._completions.append((batch, None, error, reached))
                else:
                    errno, message, base_offset, append_time = answer[3][i]
                    self._completions.append(
                        (batch, (errno, message, base_offset, append_time, answer[2]), None, True)
                    )
            self._wake.notify_all()

    def _encode(self, batch: ProducerBatch) -> bytes:
        common = dict(
            codec=self.config.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
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

    def _handle_answer(
        self, batch: ProducerBatch, answer, error: BaseException | None, reached: bool
    ) -> None:
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
            out_of_time = self._out_of_time(batch)
            verdict = self._verdict(queue, batch, error, maybe_written, out_of_time)
            if verdict is Verdict.SPLIT:
                halves = split_in_halves(batch)
                if queue.idempotence is not None:
                    queue.idempotence.split(batch, halves)
                self._acc.replace(batch, halves)
                for half in reversed(halves):
                    _insert_by_order(queue.ready, half)
            elif verdict is not Verdict.FAIL:
                batch.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
                if verdict is Verdict.RESEND:
                    queue.retrying = True
                _insert_by_order(queue.ready, batch)
            if queue.idempotence is not None and queue.idempotence.state is EpochState.ENDING:
                self._ending.add(queue)
            self._wake.notify_all()
        if verdict is Verdict.FAIL:
            self._complete(batch, _final_error(batch, error, out_of_time, self.config))
        elif verdict is Verdict.SPLIT:
            log.info("%s-%d: a batch of %d records is too large for the topic; splitting it",
                     batch.topic, batch.partition, batch.count)  # fmt: skip
        else:
            log.debug("resending %s-%d after %r", batch.topic, batch.partition, error)
            if not isinstance(error, OutOfOrderSequence):
                self._metadata.invalidate(batch.topic)

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
        if out_of_time:
            return Verdict.FAIL
        if isinstance(error, RecordTooLarge) and batch.count > 1 and not maybe_written:
            return Verdict.SPLIT
        if isinstance(error, RafkaError) and error.retriable:
            return Verdict.RESEND
        return Verdict.FAIL

    def _out_of_time(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` may not be sent again: the producer closed without flushing,
        its delivery timeout passed, or its retries are spent."""
        return (
            (self._acc.closed and not self._acc.flushing)
            or time.monotonic() - batch.created > self.config.delivery_timeout_ms / 1000
            or batch.attempts > self.config.retries
        )

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
        # A split batch is done when its last part is (its futures wait on it).
        parent = batch.parent
        while parent is not None:
            parent.pending_parts -= 1
            if parent.pending_parts:
                break
            parent.done.set()
            parent = parent.parent


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


def _insert_by_order(ready: collections.deque, batch: ProducerBatch) -> None:
    """Put a batch back into the ready queue, before every batch sent after it."""
    for i, other in enumerate(ready):
        if other.order > batch.order:
            ready.insert(i, batch)
            return
    ready.append(batch)


def _final_error(
    batch: ProducerBatch, error: BaseException, out_of_time: bool, config: ProducerConfig
) -> BaseException:
    """The error a batch that failed for good completes with: its last error, unless it
    may have been written, which the error must then say."""
    if not batch.maybe_written:
        return error
    if not out_of_time:
        why = "the leader refused a resend"
    elif time.monotonic() - batch.created > config.delivery_timeout_ms / 1000:
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
