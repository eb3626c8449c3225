"""The sender's timeouts (Kafka's KIP-91): a request unanswered for request_timeout_ms is
given up (its batches may have been written: they are resent under the idempotence rules,
or resent as they are without idempotence, until retries or the delivery timeout run out);
a batch not delivered delivery_timeout_ms after its creation fails with RequestTimedOut,
whether it waits in the queue or is in flight. A request outstanding for long whose
partition's leader has moved is given up too (a dead node's actor call may not fail for
seconds).

All times are the sender's clock, in seconds.
"""

from __future__ import annotations

import logging
from typing import Callable

from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.clients.producer_answers import delivery_expired
from rafka.errors import NotLeaderOrFollower, RequestTimedOut

log = logging.getLogger(__name__)


class ExpiryMixin:
    """Expiring requests and batches. Part of ``Sender`` (its fields)."""

    _clock: Callable[[], float]

    def _expire_requests(self, now: float) -> None:
        """Give up requests past request_timeout_ms, holding a batch past its delivery
        timeout, or stalled at a leader that moved. Sender thread, lock not held."""
        timeout_s = self.config.request_timeout_ms / 1000
        with self._lock:
            requests = list(self._requests)
        check_leaders = now >= self._next_stall_check
        for sent in requests:
            first = sent.batches[0]
            where = f"{first.topic}-{first.partition}"
            if now - sent.sent_at >= timeout_s:
                self._post_request(sent, None, RequestTimedOut(
                    f"no answer from the leader of {where} within request_timeout_ms="
                    f"{self.config.request_timeout_ms}; the records may have been written"
                ))  # fmt: skip
            elif any(delivery_expired(b, now, self.config) for b in sent.batches):
                earlier = next((b.last_error for b in sent.batches if b.last_error), None)
                self._post_request(sent, None, RequestTimedOut(
                    f"no answer from the leader of {where} within delivery_timeout_ms="
                    f"{self.config.delivery_timeout_ms} of the records' creation"
                    + (f"; the attempt before failed with {type(earlier).__name__}: {earlier}"
                       if earlier is not None else "")
                ))  # fmt: skip
            elif check_leaders and now - sent.sent_at >= SUSPECT_AFTER_S:
                try:
                    moved = self._metadata.leader_moved(first.topic, first.partition, sent.leader)
                except Exception:  # noqa: BLE001 - checked again at the next look
                    log.exception("could not check the leader of %s", where)
                    moved = False
                if moved:
                    log.info("%s: the leader moved during a produce; resending", where)
                    self._post_request(sent, None, NotLeaderOrFollower(
                        f"the leader of {where} moved from broker {sent.leader.leader} while "
                        "the request was outstanding"
                    ))  # fmt: skip
        if check_leaders:
            self._next_stall_check = now + RECHECK_INTERVAL_S

    def _expire_queued(self, now: float) -> None:
        """Fail the batches waiting in a ready queue past their delivery timeout (every
        one: a queue is in send order, which is not always creation order, e.g. a bulk
        batch built while a send() batch lingered). Sender thread, lock not held."""
        expired = []
        with self._lock:
            for queue in self._queues.values():
                late = [b for b in queue.ready if delivery_expired(b, now, self.config)]
                for batch in late:
                    queue.ready.remove(batch)
                    expired.append((queue, batch))
                if late:
                    queue.retrying = any(self._is_resend(b) for b in queue.ready)
        for queue, batch in expired:
            if batch.last_error is not None:  # its last attempt failed: say how
                self._settle_failure(queue, batch, batch.last_error, False, now)
                continue
            error = RequestTimedOut(
                f"{batch.count} record(s) of {batch.topic}-{batch.partition} were not sent "
                f"within delivery_timeout_ms={self.config.delivery_timeout_ms} of their "
                "creation; the partition's leader may be unavailable, or the producer sends "
                "more than the cluster takes (raise delivery_timeout_ms or send less)"
            )
            self._settle_failure(queue, batch, error, False, now)

    def _expiry_deadlines(self, now: float) -> list[float]:
        """When the next request or batch expires. Lock held."""
        delivery_s = self.config.delivery_timeout_ms / 1000
        out = []
        for sent in self._requests:
            out.append(sent.sent_at + self.config.request_timeout_ms / 1000)
            out.append(min(b.created for b in sent.batches) + delivery_s)
            out.append(max(self._next_stall_check, sent.sent_at + SUSPECT_AFTER_S))
        for queue in self._queues.values():
            if queue.ready:
                out.append(min(b.created for b in queue.ready) + delivery_s)
        return out
