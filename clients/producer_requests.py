"""The sender's requests: which ready batches go out now (per partition, in send order, as
many per request as fit in max_request_size), one actor call per request, and each answer
turned into one pending completion per request.

Invariants: a partition's ``requests_in_flight`` counts a request from the moment it is taken
until its answer has been handled (not merely received), so nothing newer is taken while a
failed request's batches are on their way back into the ready queue. An exception of any kind
while building or sending a request fails that request alone (``request_failure``).
"""

from __future__ import annotations

import time
from typing import Callable

from rafka.actors import stage_trace
from rafka.clients.producer_batches import PartitionQueue, ProducerBatch
from rafka.clients.producer_idempotence import PartitionIdempotence, SendMode
from rafka.errors import (
    IllegalState,
    InvalidRecord,
    RafkaError,
    RecordTooLarge,
    UnknownTopicOrPartition,
    error_class,
)
from rafka.storage import record_batch as rb


class SentRequest:
    """One produce call: its batches (in send order), when it was sent (the sender's clock,
    seconds) and the leader it went to. ``settled`` once an outcome was recorded: a late
    answer to a request already expired or abandoned is dropped. ``traced``: (encode start,
    call) in monotonic ns while ``stage_trace`` is on."""

    __slots__ = ("batches", "sent_at", "leader", "settled", "traced")

    def __init__(self, batches: list[ProducerBatch], sent_at: float, leader) -> None:
        self.batches = batches
        self.sent_at = sent_at
        self.leader = leader
        self.settled = False
        self.traced: tuple[int, int] | None = None


class RequestsMixin:
    """Building, sending and settling requests. Part of ``Sender`` (its fields)."""

    _clock: Callable[[], float]

    def _collect_sendable(self) -> list[list[ProducerBatch]]:
        """Requests to send now: per partition, ready batches in send order, as many per
        request as fit in max_request_size (one actor call carries them all). Lock held."""
        now = self._clock()
        self._acc.seal_lingering(now, self._takes_batch)
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
                    if not queue.in_flight and not queue.requests_in_flight and (
                        chosen.retry_at <= now
                    ):
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
                if (queue.retrying or alone) and queue.requests_in_flight:
                    break  # resend in order: wait until everything older has answered
                request: list[ProducerBatch] = []
                size = 0
                while queue.ready and queue.ready[0].retry_at <= now:
                    head = queue.ready[0]
                    resend = self._is_resend(head)
                    if request and size + head.size > budget:
                        break
                    if request and resend and idempotent:
                        break  # an idempotent resend travels alone (its stamp is old)
                    if idempotent and not queue.idempotence.may_send(head):
                        break  # the window is full (see PartitionIdempotence)
                    queue.ready.popleft()
                    self._take(queue, head)
                    request.append(head)
                    size += head.size
                    if (resend and idempotent) or alone:
                        break  # a resent stamped batch, or a probe, travels alone
                if not request:
                    break
                queue.retrying = any(self._is_resend(b) for b in queue.ready)
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

    def _dispatch(self, request: list[ProducerBatch]) -> None:
        """Send one request. Sender thread, lock not held. Never raises: a failure of any
        kind before the call left becomes the request's outcome."""
        config = self.config
        first = request[0]
        queue = self._queues[(first.topic, first.partition)]
        encode_ns = time.monotonic_ns() if stage_trace.ENABLED else 0
        try:
            for batch in request:
                if batch.encoded is None:
                    batch.encoded = self._encode(batch)
                batch.attempts += 1
            if len(request) == 1 and first.count > 1 and (
                len(first.encoded) > config.max_request_size
            ):
                raise RecordTooLarge(  # not sent: the batch is split (see the verdict)
                    f"batch of {first.count} records encodes to {len(first.encoded)} bytes,"
                    f" over max_request_size={config.max_request_size}"
                )
            meta = self._metadata.topic(first.topic)
            if first.partition >= len(meta.partitions):
                raise UnknownTopicOrPartition(
                    f"{first.topic} has {len(meta.partitions)} partition(s) now, so partition "
                    f"{first.partition} is gone (the topic was re-created with fewer?)"
                )
            replica = self._metadata.replica(meta, first.partition)
            request_no = queue.next_request
            queue.next_request += 1
            payload = first.encoded if len(request) == 1 else b"".join(
                b.encoded for b in request
            )
            ref = self._gateway.produce(
                replica, payload, config.acks, config.request_timeout_ms,
                f"{self.client_id}.{queue.session}", request_no, config.transactional_id,
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the request fails, never the sender
            self._post_request(request, None, request_failure(request, e), reached=False)
            return
        if config.acks == 0:
            self._post_request(request, (0, "", -1, [(0, "", -1, -1)] * len(request)), None)
            return
        sent = SentRequest(request, self._clock(), meta.partitions[first.partition])
        if stage_trace.ENABLED:
            sent.traced = (encode_ns, time.monotonic_ns())
        with self._lock:
            self._requests.add(sent)
        try:
            future = self._gateway.future(ref)
            future.add_done_callback(lambda f, r=sent: self._post_request(r, *_outcome(f)))
        except Exception as e:  # noqa: BLE001
            self._post_request(sent, None, request_failure(request, e))

    def _post_request(self, request, answer, error, reached: bool = True) -> None:
        """Record one request's outcome for the sender thread. ``request`` is a list of
        batches, or a SentRequest (settled once: a late answer to an expired request is
        dropped). ``reached``: False when the request failed before it left the client.
        Any thread; takes the lock."""
        with self._lock:
            if isinstance(request, SentRequest):
                if request.settled:
                    return
                request.settled = True
                self._requests.discard(request)
                if request.traced is not None and error is None:
                    _trace_answer(request, answer)
                request = request.batches
            if error is None and (answer[0] != 0 or len(answer[3]) != len(request)):
                if answer[0] == 0:
                    error = IllegalState(
                        f"the leader answered {len(answer[3])} results for {len(request)} batches"
                    )
                else:
                    error = error_class(answer[0])(answer[1])
            self._completions.append((request, answer, error, reached))
            self._wake.notify_all()

    def _encode(self, batch: ProducerBatch) -> bytes:
        common = dict(
            codec=self.config.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.sequence,
            is_transactional=self.config.transactional_id is not None,
        )  # fmt: skip
        try:
            if batch.packed is not None:
                keys, values = batch.packed
                return rb.encode_batch(values, keys, batch.timestamp, count=batch.count, **common)
            return rb.encode_batch(
                batch.values, batch.keys,
                batch.timestamps if batch.timestamps is not None else batch.timestamp,
                batch.headers, **common,
            )  # fmt: skip
        except RafkaError:
            raise
        except Exception as e:  # noqa: BLE001 - e.g. a header name no codec can encode
            raise InvalidRecord(
                f"a batch of {batch.count} record(s) for {batch.topic}-{batch.partition} "
                f"could not be encoded ({type(e).__name__}: {e}); check its keys, values "
                "and headers (header names must be encodable as UTF-8)"
            ) from e


def request_failure(request: list[ProducerBatch], error: BaseException) -> BaseException:
    """The error a request that raised ``error`` fails with: a RafkaError as it is, anything
    else wrapped in IllegalState naming it (not retried: nothing says a retry would help)."""
    if isinstance(error, RafkaError):
        return error
    first = request[0]
    wrapped = IllegalState(
        f"sending {len(request)} batch(es) to {first.topic}-{first.partition} failed with "
        f"{type(error).__name__}: {error}; those records were not retried"
    )
    wrapped.__cause__ = error
    return wrapped


def _trace_answer(request: SentRequest, answer) -> None:
    """The client's stage marks of an acknowledged request (see ``stage_trace``)."""
    if answer[0] != 0 or not answer[3] or answer[3][-1][0] != 0:
        return
    end = answer[3][-1][2] + request.batches[-1].count
    encode_ns, call_ns = request.traced
    stage_trace.mark("client.encode", end, encode_ns)
    stage_trace.mark("client.call", end, call_ns)
    stage_trace.mark("client.answered", end)


def _outcome(future) -> tuple:
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)
