"""The consumer's fetch pipeline: one long-poll fetch in flight per partition to its leader,
answers buffered as raw batch bytes, errors retried or turned into an offset reset.

When an answer arrives the next fetch (from the offset after the last batch received) is sent
at once, so the cluster works on the next chunk while the application handles this one. A
fetch is never sent for a paused partition, nor while a whole answer is buffered beyond the
one being read. Times are seconds of ``clock`` (``time.monotonic`` unless a test sets it).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from rafka.clients.consumer_buffer import PartitionState
from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.errors import OffsetOutOfRange, RafkaError, error_class
from rafka.storage import record_batch as rb
from rafka.storage.read_committed import ReadCommittedFilter, committed_batches

log = logging.getLogger(__name__)

#: After a retriable fetch error, no new fetch of that partition for this long (seconds).
RETRY_BACKOFF_S = 0.05


class Fetcher:
    """Sends and collects the fetches of the states it is given (the consumer owns them).
    ``reset(state)`` moves a partition whose fetch offset left the log per
    ``auto_offset_reset``."""

    def __init__(
        self, gateway, metadata, *, fetch_min_bytes: int, fetch_max_wait_ms: int,
        max_partition_fetch_bytes: int, request_timeout_s: float, auto_offset_reset: str,
        reset: Callable[[PartitionState], None], clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep, read_committed: bool = False,
    ) -> None:  # fmt: skip
        self.gateway = gateway
        self.metadata = metadata
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.request_timeout_s = request_timeout_s
        self.auto_offset_reset = auto_offset_reset
        self.reset = reset
        self.clock = clock
        self.sleep = sleep
        self.read_committed = read_committed

    # -- sending -------------------------------------------------------------------------------

    def send_fetches(self, states: Iterable[PartitionState]) -> None:
        """A fetch for each unpaused partition with a position, none in flight, not backing
        off, and at most the answer being read buffered (none at all after an out-of-range
        answer to a fetch ahead of the buffer)."""
        now = self.clock()
        for state in states:
            if state.paused or state.in_flight is not None or state.retry_at > now:
                continue
            if state.position is None:
                self.reset(state)
            if len(state.chunks) > 1:
                continue  # a whole answer is buffered beyond the one being read: enough ahead
            if state.fetch_after_drain:
                if state.buffered():
                    continue
                state.fetch_after_drain = False
            self._fetch(state)

    def _fetch(self, state: PartitionState) -> None:
        try:
            meta = self.metadata.topic(state.tp.topic)
            replica = self.metadata.replica(meta, state.tp.partition)
        except RafkaError as e:
            if not e.retriable:
                raise
            self._retry_later(state)
            return
        fetch = self.gateway.fetch_committed if self.read_committed else self.gateway.fetch
        ref = fetch(
            replica, state.fetch_offset, self.max_partition_fetch_bytes, self.fetch_min_bytes,
            self.fetch_max_wait_ms,
        )  # fmt: skip
        leader = meta.partitions[state.tp.partition]
        state.in_flight = (ref, state.generation, self.clock(), leader)

    def _retry_later(self, state: PartitionState) -> None:
        """A retriable failure (leader moving or restarting): fresh metadata, short backoff."""
        self.metadata.invalidate(state.tp.topic)
        state.retry_at = self.clock() + RETRY_BACKOFF_S

    # -- answers -------------------------------------------------------------------------------

    def _abandon_stalled(self, states: Iterable[PartitionState]) -> None:
        """Give up unanswered fetches that are late, as Kafka's request.timeout.ms does:
        every fetch once its long-poll time plus request_timeout_s has passed, and sooner
        (past SUSPECT_AFTER_S) one whose leader moved, since a request to a dead node may not
        fail for seconds. The partition is fetched again from the same fetch offset and an
        answer to the abandoned fetch, if one ever comes, is never read: nothing is lost or
        handed out twice."""
        now = self.clock()
        wait_s = self.fetch_max_wait_ms / 1000
        late_after = wait_s + min(SUSPECT_AFTER_S, self.request_timeout_s)
        late = [s for s in states if s.in_flight is not None and now - s.in_flight[2] >= late_after]
        if not late:
            return
        # An answer already here (the application polled late) is used, not thrown away.
        answered, _ = self.gateway.wait([s.in_flight[0] for s in late], len(late), timeout_s=0)
        answered = set(answered)
        for state in late:
            ref, _generation, sent_at, leader = state.in_flight
            if ref in answered:
                continue
            if now - sent_at >= wait_s + self.request_timeout_s:
                log.warning(
                    "%s: a fetch sent %.1f s ago has no answer (fetch_max_wait_ms=%d, "
                    "request_timeout_ms=%d); fetching again", state.tp, now - sent_at,
                    self.fetch_max_wait_ms, round(self.request_timeout_s * 1000),
                )  # fmt: skip
                state.in_flight = None
                self._retry_later(state)
            elif self.metadata.leader_moved(state.tp.topic, state.tp.partition, leader):
                log.info("%s: the leader moved during a fetch; fetching again", state.tp)
                state.in_flight = None

    def await_answers(
        self, states: list[PartitionState], deadline: float, also_wake_on=None
    ) -> bool:
        """Wait (until ``deadline``) for fetch answers of ``states`` and buffer them; False on
        timeout. ``also_wake_on``: another ref whose answer ends the wait (a group join)."""
        self._abandon_stalled(states)
        pending = {s.in_flight[0]: s for s in states if s.in_flight}
        if also_wake_on is not None:
            pending[also_wake_on] = None
        if not pending:
            remaining = deadline - self.clock()
            if remaining > 0:
                self.sleep(min(remaining, 0.05))  # everything paused or failing: do not spin
            return self.clock() < deadline
        # Wake at least every RECHECK_INTERVAL_S to look for stalled fetches.
        remaining = max(0.0, min(deadline - self.clock(), RECHECK_INTERVAL_S))
        ready, waiting = self.gateway.wait(list(pending), 1, timeout_s=remaining)
        if ready and waiting:
            more, _ = self.gateway.wait(waiting, len(waiting), timeout_s=0)
            ready += more
        for ref in ready:
            state = pending[ref]
            if state is None:
                continue  # the other ref's answer: its owner takes it
            generation = state.in_flight[1]
            state.in_flight = None
            try:
                answer = self.gateway.get(ref, self.request_timeout_s)
            except RafkaError as e:
                if not e.retriable:
                    raise
                self._retry_later(state)
                continue
            if generation == state.generation:
                self._on_answer(state, answer)
        return bool(ready) or self.clock() < deadline

    def _on_answer(self, state: PartitionState, answer: tuple) -> None:
        errno, message, high_watermark, log_start, _log_end, data, *committed = answer
        if errno:
            error = error_class(errno)(message)
            if isinstance(error, OffsetOutOfRange):
                if state.buffered():
                    # The fetch went ahead of records not handed out yet. As Kafka drops an
                    # out-of-range answer for an offset that is not the position, those
                    # records go out first; a fetch from where they end decides the reset.
                    log.info("%s: %s; fetching again after the buffered records", state.tp,
                             message)  # fmt: skip
                    state.fetch_after_drain = True
                    return
                if self.auto_offset_reset == "none":
                    raise error
                log.info("%s: %s; resetting to %s", state.tp, message, self.auto_offset_reset)
                self.reset(state)
                return
            if not error.retriable:
                raise error
            self._retry_later(state)
            return
        state.high_watermark = high_watermark
        state.log_start_offset = log_start
        if len(data):
            end = state.fetch_offset = rb.next_offset(data)
            if committed:
                _, aborted = committed
                data = _committed_only(state, data, aborted)
            # The answer's end travels with what is kept of it: the position moves past
            # batches that return no record (markers, aborted ones) once it is read.
            state.chunks.append([data, 0, end])


def _committed_only(state: PartitionState, data, aborted: list):
    """The batches of a read_committed answer the consumer returns: those of aborted
    transactions are dropped (``ReadCommittedFilter``; markers are skipped when read)."""
    if state.txn_filter is None:
        state.txn_filter = ReadCommittedFilter()
    state.txn_filter.add_aborted((producer_id, first) for producer_id, first in aborted)
    return committed_batches(state.txn_filter, data)
