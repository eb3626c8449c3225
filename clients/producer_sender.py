"""The producer's sender thread: takes sealed batches from the accumulator, sends each
partition's batches to its leader replica (one actor call per request), and turns the
answers into completed futures or retries.

Requests to one partition are numbered from 0 per session and the leader appends them in that
order; a failure starts a new session. Retriable errors are retried with backoff after a
metadata refresh. A batch the leader refuses as too large is split in two and each half sent
in its place. With idempotence each batch carries a stamp (producer id, epoch, sequence), and
``PartitionIdempotence`` decides the stamps, what may be sent, and what a failed batch becomes
(see its module for the rules).

The work is split by responsibility: ``producer_requests`` (what goes out, and sending it),
``producer_answers`` (what an answer does), ``producer_expiry`` (request and delivery
timeouts); this module is the loop, its wakeups and the epoch bumps. The thread never dies of
an error: a failure fails the batches it concerns.

Times are the sender's clock (``producer_batches.clock`` unless given), in seconds.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Callable

from rafka.clients import producer_batches
from rafka.clients.metadata import SUSPECT_AFTER_S
from rafka.clients.producer_accumulator import RecordAccumulator
from rafka.clients.producer_answers import AnswersMixin
from rafka.clients.producer_batches import PartitionQueue, ProducerBatch
from rafka.clients.producer_config import ProducerConfig
from rafka.clients.producer_expiry import ExpiryMixin
from rafka.clients.producer_idempotence import SendMode
from rafka.clients.producer_requests import RequestsMixin, SentRequest
from rafka.errors import IllegalState, TransactionAbortable
from rafka.storage.producer_state import BATCHES_KEPT

log = logging.getLogger(__name__)

#: The longest wait between two attempts to get a new producer id (Kafka's
#: retry.backoff.max.ms); the first wait is retry_backoff_ms, doubled per failure.
MAX_ID_BACKOFF_S = 1.0


class Sender(RequestsMixin, AnswersMixin, ExpiryMixin):
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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._acc = accumulator
        self._gateway = gateway
        self._metadata = metadata
        self.config = config
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.client_id = client_id
        self._clock = clock or producer_batches.clock
        self._lock = accumulator.lock
        self._wake = accumulator.wake
        self._queues = accumulator.queues
        # (batches, answer, error, reached) per request answered and not yet handled.
        self._completions: collections.deque = collections.deque()
        self._requests: set[SentRequest] = set()  # produce calls awaiting an answer
        self._ending: set[PartitionQueue] = set()  # partitions whose epoch awaits its bump
        self._next_id_request = 0.0  # clock time before which not to ask again
        self._id_failures = 0  # producer id requests failed in a row
        self._next_stall_check = 0.0  # clock time of the next look for moved leaders
        self.passes = 0  # loop passes made (a count for tests and debugging)
        # A transactional producer's hook: a batch failed for good (any thread, lock held or
        # not). Its epoch belongs to the transaction coordinator: never bumped here.
        self.on_failed_batch: Callable[[ProducerBatch, BaseException], None] | None = None
        self._thread = threading.Thread(target=self._run, name="rafka-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_current_thread(self) -> bool:
        """True on the sender's own thread (in a send callback)."""
        return threading.current_thread() is self._thread

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if self._pass():
                    return
            except Exception:  # noqa: BLE001 - a bug must not stop every future for good
                log.exception("the producer's sender pass failed; carrying on")
                with self._lock:
                    self._wake.wait(self.config.retry_backoff_ms / 1000 or 0.01)

    def _pass(self) -> bool:
        """One pass: expire, bump, collect, handle answers, send. True once closed and
        everything is done."""
        self.passes += 1
        acc = self._acc
        now = self._clock()
        self._expire_requests(now)
        self._expire_queued(now)
        if self._ending:
            self._bump_epochs()
        with self._lock:
            to_send = self._collect_sendable()
            while not to_send and not self._completions:
                if acc.closed and not acc.outstanding:
                    return True
                wait = self._next_wakeup()
                if wait is not None and wait <= 0:
                    break  # a deadline passed: expire or bump in a full pass
                self._wake.wait(wait)
                to_send = self._collect_sendable()
            completions = list(self._completions)
            self._completions.clear()
        for batches, answer, error, reached in completions:
            self._handle_request(batches, answer, error, reached)
        for request in to_send:
            self._dispatch(request)
        return False

    def _next_wakeup(self) -> float | None:
        """Seconds until the next linger, backoff or expiry deadline (None: none); 0 when
        one has passed. Everything else the sender waits for (answers, new batches, room in
        the queues) notifies ``wake``. A queue that cannot send (at its in-flight limit, or
        waiting for answers) sets no deadline: an answer wakes the sender. Lock held."""
        now = self._clock()
        linger = self.config.linger_ms / 1000
        # The same comparison as ``seal_lingering`` (not ``created + linger <= now``, which
        # rounds differently): a batch this calls due is one the next pass seals. One whose
        # partition cannot take it waits for an answer, which wakes the sender.
        lingers = []
        for key, batch in self._acc.open.items():
            if now - batch.created < linger:
                lingers.append(batch.created + linger)
            elif self._takes_batch(key):
                return 0.0  # a linger that ran out since the last pass: the next pass seals it
        deadlines = lingers + self._expiry_deadlines(now)
        for queue in self._queues.values():
            if queue.ready and not self._blocked(queue):
                deadlines.append(queue.ready[0].retry_at)
                if queue.idempotence is not None and queue.idempotence.stamped:
                    deadlines.extend(b.retry_at for b in queue.idempotence.stamped)
        if self._ending and any(q.idempotence.bump_due for q in self._ending):
            deadlines.append(self._next_id_request)
        passed = [d for d in deadlines if d <= now]
        future = [d for d in deadlines if d > now]
        if passed and self._due(now):
            return 0.0
        if not future:
            return None
        return min(future) - now + 0.0005

    def _takes_batch(self, key: tuple[str, int]) -> bool:
        """Whether partition ``key`` could send a batch sealed now: not blocked, and with
        room in its idempotence window. Lock held."""
        queue = self._queues.get(key)
        if queue is None:
            return True
        if self._blocked(queue):
            return False
        return queue.idempotence is None or len(queue.idempotence.window) < BATCHES_KEPT

    def _blocked(self, queue: PartitionQueue) -> bool:
        """Nothing of ``queue`` may go out before an answer arrives. Lock held."""
        if queue.requests_in_flight >= self.config.max_in_flight:
            return True
        if queue.idempotence is not None:
            mode, _ = queue.idempotence.next_send()
            return mode is SendMode.NOTHING or (
                mode in (SendMode.RESOLVE, SendMode.PROBE) and queue.requests_in_flight > 0
            )
        return queue.retrying and queue.requests_in_flight > 0

    def _due(self, now: float) -> bool:
        """Whether a passed deadline still needs a full pass: an expiry, or a bump waiting
        only for its producer id request. Lock held."""
        delivery_s = self.config.delivery_timeout_ms / 1000
        timeout_s = self.config.request_timeout_ms / 1000
        for sent in self._requests:
            if now - sent.sent_at >= timeout_s or any(
                now - b.created >= delivery_s for b in sent.batches
            ):
                return True
        for queue in self._queues.values():
            if any(now - b.created >= delivery_s for b in queue.ready):
                return True
        if now >= self._next_stall_check and any(
            now - s.sent_at >= SUSPECT_AFTER_S for s in self._requests
        ):
            return True
        return self._bump_overdue(now)

    # -- epoch bumps ---------------------------------------------------------------------------

    def _bump_epochs(self) -> None:
        """Start the next epoch of every partition whose epoch has ended and is due (see
        PartitionIdempotence.bump); a partition past the last epoch first gets a new producer
        id from the controller, asked again with growing backoff while that fails. Sender
        thread, lock not held."""
        if self.config.transactional_id is not None:
            self._end_transactional_epochs()
            return
        with self._lock:
            due = [q for q in self._ending if q.idempotence.bump_due]
            exhausted = [q for q in due if q.idempotence.needs_producer_id]
            for queue in due:
                if queue not in exhausted:
                    self._bump(queue, None)
        if not exhausted or self._clock() < self._next_id_request:
            return
        for queue in exhausted:
            try:
                new_producer = tuple(self._gateway.call_controller("allocate_producer_id"))
                if len(new_producer) != 2:
                    raise ValueError(f"expected (producer id, epoch), got {new_producer!r}")
            except Exception as e:  # noqa: BLE001 - any failure: ask again later
                self._id_failures += 1
                backoff = min(
                    max(MAX_ID_BACKOFF_S, self.config.retry_backoff_ms / 1000),
                    self.config.retry_backoff_ms / 1000 * 2 ** (self._id_failures - 1),
                )
                log.warning("could not get a new producer id (%r); asking again in %.3f s",
                            e, backoff)  # fmt: skip
                self._next_id_request = self._clock() + backoff
                return
            self._id_failures = 0
            with self._lock:
                self._bump(queue, new_producer)

    def _end_transactional_epochs(self) -> None:
        """A transactional producer's partition whose epoch ended (a batch failed for good)
        sends nothing more in this transaction: its waiting batches fail, and the epoch
        waits for the abort, after which the coordinator's new epoch replaces it
        (``restart_epochs``). Sender thread, lock not held."""
        failed = []
        with self._lock:
            for queue in self._ending:
                failed.extend((queue, b) for b in queue.ready)
                queue.ready.clear()
        error = TransactionAbortable(
            "an earlier write of this transaction to the partition failed; call "
            "abort_transaction(), then begin_transaction() again"
        )
        for _, batch in failed:
            self._complete(batch, error)

    def fail_unsent(self, error: BaseException) -> int:
        """Fail every batch not sent yet (the open ones too) with ``error``: an abort drops
        them. Returns how many. Any thread but the sender's; takes the lock."""
        failed = []
        with self._lock:
            self._acc.seal_all()
            for queue in self._queues.values():
                failed.extend((queue, b) for b in queue.ready if b.attempts == 0)
                queue.ready = collections.deque(b for b in queue.ready if b.attempts)
        for _, batch in failed:
            self._complete(batch, error)
        return len(failed)

    def restart_epochs(self, producer_id: int, epoch: int) -> None:
        """Every partition goes on as ``producer_id``/``epoch`` from sequence 0: a
        transactional producer's identity after ``init_transactions`` and after each
        transaction ends. Only when no batch is in flight or waiting (after a flush)."""
        with self._lock:
            busy = [k for k, q in self._queues.items() if q.in_flight or q.ready]
            if busy:
                raise IllegalState(
                    f"the producer's epoch cannot change with batches out for {busy[:3]}"
                )
            self.producer_id, self.producer_epoch = producer_id, epoch
            for queue in self._queues.values():
                queue.idempotence = None  # made again, from the new identity, at next send
            self._ending.clear()

    def _bump_overdue(self, now: float) -> bool:
        """A bump is due that waits only for a new producer id, and it is time to ask (never
        for a transactional producer: its epochs wait for the abort)."""
        return (
            bool(self._ending)
            and self.config.transactional_id is None
            and now >= self._next_id_request
            and any(q.idempotence.bump_due for q in self._ending)
        )

    def _bump(self, queue: PartitionQueue, new_producer: tuple[int, int] | None) -> None:
        """Lock held."""
        queue.idempotence.bump(new_producer)
        self._ending.discard(queue)
        queue.retrying = any(self._is_resend(b) for b in queue.ready)
        self._wake.notify_all()
