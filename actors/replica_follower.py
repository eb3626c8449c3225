"""The follower fetch loop of one partition replica.

A follower pulls from its leader: each ``replicate`` call carries its log end offset and the
epoch of its last batch, and the leader answers with batches to append or with the offset to
truncate to where the logs diverged (leader-epoch based, KIP-101/279/320). A follower that
hears nothing useful for ``STATE_PULL_AFTER_S`` asks the controller for the partition's state,
since a pushed state may have been lost. A local write that fails (a full or failing disk,
a refused append) does not end the loop: the follower reports itself failed to the
controller, which takes it out of the ISR, and retries with backoff; once its writes work
again it catches up and the leader proposes it back. A replica that a move is adding copies
at its share of ``replication.throttled.rate`` (``follower_throttle``): it waits out its
byte budget before each fetch until it catches up; other followers never wait.

While the leader holds more than an answer brought and the answer was cut by size, the
follower sends its next fetch (from the end of that answer) before appending it, so the
leader reads and sends while the follower writes (``prefetch_offset``). That fetch reports the log end from before the
append: the leader never counts unwritten records. A prefetched answer is used only if the
append reached exactly where it starts, under the same leader and epoch; otherwise (a failed
append, a new state) it is dropped and the loop fetches again from its log end.

Owned by one ``PartitionReplica`` and run on its event loop; the replica starts the loop when
it becomes a follower and stops it when it leads, closes, or the leader moves (an outstanding
fetch may be to the old leader). Nothing here is persisted: after a crash the replica checks
in with the controller first, then follows again from its recovered log.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from rafka.actors import stage_trace
from rafka.actors.follower_throttle import FollowerThrottle
from rafka.actors.replica_handle import find_replica
from rafka.cluster.hosting import NO_HOST
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.replication import prefetch_offset, truncation_offset
from rafka.cluster.settings import setting
from rafka.errors import BrokerNotAvailable, OffsetOutOfRange
from rafka.storage import record_batch as rb

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica

#: A follower that has heard nothing useful from its leader for this long asks the
#: controller for the partition's state (a pushed state may have been lost).
STATE_PULL_AFTER_S = 1.0

#: A follower whose leader had nothing new for it this many fetches in a row asks it to wait
#: longer (the leader answers at once when records come): idle replicas cost next to no CPU.
IDLE_AFTER_EMPTY_FETCHES = 2
#: The long-poll time of an idle follower's fetch, ms; at most a quarter of
#: ``replica.lag.time.max.ms``, so a parked fetch never looks like lag.
IDLE_FETCH_WAIT_MS = 5_000

#: Backoff between attempts while the local log refuses writes, s (doubling from the first).
WRITE_RETRY_FIRST_S = 0.05
WRITE_RETRY_MAX_S = 5.0


class ReplicaFollower:
    """The fetch loop of ``replica`` while it follows; at most one runs at a time."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self._task: asyncio.Task | None = None
        self._handles: dict[int, Any] = {}  # broker id -> (host slot, that broker's replica)
        # Kept across loops: the budget and its counters outlive a leader change.
        self.throttle = FollowerThrottle()

    @property
    def started(self) -> bool:
        """A loop was started and not stopped since (it may have ended on its own)."""
        return self._task is not None

    def start_if_needed(self) -> None:
        """Start the loop when the replica follows (checked in, not leading, open) and no
        loop runs."""
        r = self.replica
        if r.closed or not r.checked_in or r.leader is not None:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._follow())
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.replica.logger.error("the follower loop ended: %r (it starts again with the "
                                      "next state)", task.exception())  # fmt: skip

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _leader_handle(self, broker_id: int):
        """The leader's replica, through the host the state names (ValueError while it has
        none, or that host does not run)."""
        r = self.replica
        slots = dict(zip(r.state["replicas"], r.state.get("hosts") or ()))
        slot = slots.get(broker_id, NO_HOST)
        cached = self._handles.get(broker_id)
        if cached is not None and cached[0] == slot:
            return cached[1]
        handle = find_replica(r.topic_id, r.partition, broker_id, slot, r.namespace)
        if handle is None:
            raise ValueError(f"broker {broker_id}'s replica has no running host (slot {slot})")
        self._handles[broker_id] = (slot, handle)
        return handle

    async def _follow(self) -> None:
        """Pull from the leader until this replica is told it leads or is closed."""
        r = self.replica
        busy_wait_ms = setting(r.settings, "replica.fetch.wait.max.ms")
        idle_wait_ms = max(busy_wait_ms, min(
            IDLE_FETCH_WAIT_MS, setting(r.settings, "replica.lag.time.max.ms") // 4
        ))  # fmt: skip
        empty_answers = 0
        max_bytes = setting(r.settings, "replica.fetch.max.bytes")
        last_progress = time.monotonic()
        delay = 0.02
        write_delay = 0.0  # > 0 while local writes fail
        prefetch: _Prefetch | None = None  # a fetch sent before the last append finished
        me = asyncio.current_task()
        try:
            while not r.closed and r.leader is None and self._task is me:
                s = r.state
                leader_id = s["leader"]
                if time.monotonic() - last_progress > STATE_PULL_AFTER_S:
                    last_progress = time.monotonic()
                    state = await r.controller.call("partition_state", r.topic_id, r.partition,
                                                    r.broker_id)  # fmt: skip
                    if state is not None:
                        r.adopt(state)  # may cancel this task and start a fresh one
                        if r.state["leader"] != leader_id:
                            continue
                if leader_id == NO_LEADER or leader_id == r.broker_id:
                    await asyncio.sleep(0.1)
                    continue
                waited = await self.throttle.pay(r)
                if waited:
                    # Waiting for the budget is not the leader's silence; and the state may
                    # have changed meanwhile: look at it again.
                    last_progress += waited
                    continue
                idle = empty_answers >= IDLE_AFTER_EMPTY_FETCHES
                wait_ms = idle_wait_ms if idle else busy_wait_ms
                try:
                    if prefetch is not None and prefetch.usable(leader_id, s["leader_epoch"],
                                                                r.log.log_end_offset):
                        fetch = prefetch.task
                    else:
                        if prefetch is not None:
                            prefetch.drop()
                        fetch = self._send(leader_id, (
                            r.broker_id, s["leader_epoch"], r.log.log_end_offset,
                            r.log.latest_epoch, self.throttle.ask_size(max_bytes), wait_ms,
                            r.replica_epoch, r.log.log_end_offset,
                        ))  # fmt: skip
                    prefetch = None
                    answer = await fetch
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError,
                        asyncio.TimeoutError, ValueError, BrokerNotAvailable) as e:  # fmt: skip
                    # Gone, restarting, not hosting the leader (yet), or no host known (or the
                    # direct channel to its host ended).
                    r.logger.debug("fetch from leader %d failed: %r", leader_id, e)
                    self._handles.pop(leader_id, None)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                except Exception as e:  # anything else Ray raises: the loop must never end on it
                    r.logger.warning("fetch from leader %d failed: %r; retrying", leader_id, e)
                    self._handles.pop(leader_id, None)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                if self._task is not me:
                    # Replaced while the fetch was out; asyncio's wait_for may hand a cancelled
                    # task the answer instead of its cancellation: never write it, and stop.
                    return
                if r.leader is not None or r.state["leader_epoch"] != s["leader_epoch"]:
                    continue  # the role changed while the fetch was out
                errno, message, hw, log_start, leader_end, div_epoch, div_end, records = answer
                if stage_trace.ENABLED and len(records):
                    stage_trace.mark("follower.received", rb.next_offset(records),
                                     peer=r.broker_id)  # fmt: skip
                if errno and errno != OffsetOutOfRange.errno:
                    await asyncio.sleep(delay)  # a stale or newer epoch: the state is on its way
                    delay = min(delay * 2, 0.5)
                    continue
                delay = 0.02
                last_progress = time.monotonic()
                empty_answers = 0 if len(records) or div_end >= 0 else empty_answers + 1
                if not errno and div_end < 0 and len(records):
                    prefetch = self._prefetch(leader_id, s["leader_epoch"], records, leader_end,
                                              max_bytes, busy_wait_ms)  # fmt: skip
                try:
                    self._apply_answer(errno, hw, log_start, div_epoch, div_end, records)
                    if stage_trace.ENABLED and len(records):
                        stage_trace.mark("follower.appended", r.log.log_end_offset,
                                         peer=r.broker_id)  # fmt: skip
                except Exception as e:  # the disk, not the protocol: keep the loop, leave the ISR
                    if prefetch is not None:
                        prefetch.drop()  # it starts where nothing was written
                        prefetch = None
                    if not write_delay:
                        r.logger.exception("could not write what the leader sent; retrying")
                        await r.controller.call("replica_failed", r.topic_id, r.partition,
                                                r.broker_id, r.replica_epoch, repr(e))  # fmt: skip
                    write_delay = min(max(write_delay * 2, WRITE_RETRY_FIRST_S), WRITE_RETRY_MAX_S)
                    await asyncio.sleep(write_delay)
                    continue
                # Caught up: the leader may take it into the ISR now (its rule: the follower's
                # log reaches the high watermark), so it is no longer held back.
                self.throttle.took(len(records), not errno and div_end < 0
                                   and r.log.log_end_offset >= hw)  # fmt: skip
                if write_delay:
                    r.logger.warning("writes work again; catching up")
                    write_delay = 0.0
        finally:
            if prefetch is not None:
                prefetch.drop()

    def _send(self, leader_id: int, args: tuple, now: bool = False) -> asyncio.Task:
        """One fetch to ``leader_id``'s replica with ``replicate``'s ``args``, as a task that
        answers or raises (a timeout past its long poll included); ``now``: the call is
        submitted before this returns (else the host's batcher may send it a turn or two
        later, with other fetches)."""
        r = self.replica
        handle = self._leader_handle(leader_id)
        if r.fetches is None:
            fetch = handle.replicate.remote(*args)
        elif now:
            fetch = r.fetches.replicate_now(handle, *args)
        else:
            fetch = r.fetches.replicate(handle, *args)
        wait_s = args[5] / 1000 + 5.0
        call = asyncio.ensure_future(fetch)  # started now, whatever becomes of the wait
        task = asyncio.get_running_loop().create_task(asyncio.wait_for(call, wait_s))
        task.add_done_callback(lambda _: call.cancel())  # a no-op once it answered
        return task

    def _prefetch(self, leader_id: int, leader_epoch: int, records: np.ndarray, leader_end: int,
                  max_bytes: int, wait_ms: int) -> _Prefetch | None:  # fmt: skip
        """The next fetch, sent now, before ``records`` are appended, when
        ``prefetch_offset`` says so; None otherwise (or when it cannot be sent)."""
        r = self.replica
        try:
            last = None
            for _, last in rb.iter_batches(memoryview(records), verify=False):
                pass
            start = prefetch_offset(last.next_offset, leader_end, self.throttle.bucket.limited,
                                    len(records), max_bytes)  # fmt: skip
            if start is None:
                return None
            task = self._send(leader_id, (
                r.broker_id, leader_epoch, start, last.partition_leader_epoch, max_bytes,
                wait_ms, r.replica_epoch, r.log.log_end_offset,
            ), now=True)  # fmt: skip
        except Exception:  # noqa: BLE001 - a torn answer, no host known: the append decides
            return None
        return _Prefetch(task, leader_id, leader_epoch, start)

    def _apply_answer(self, errno: int, hw: int, log_start: int, div_epoch: int,
                      div_end: int, records: np.ndarray) -> None:  # fmt: skip
        """Write what the leader answered to the local log: start over at its log start,
        truncate where the logs diverged, or append."""
        r = self.replica
        if errno == OffsetOutOfRange.errno:
            r.logger.warning("below the leader's log start %d; starting there", log_start)
            r.log.truncate_fully_and_start_at(log_start)
            r.log_changed = True
            return
        if div_end >= 0:
            self._truncate(hw, div_epoch, div_end)
            return
        if len(records):
            self._append_from_leader(records, log_start)
        r.set_high_watermark(min(hw, r.log.log_end_offset))

    def _truncate(self, leader_hw: int, epoch: int, end_offset: int) -> None:
        log_ = self.replica.log
        target = truncation_offset(
            lambda e: log_.epoch_cache.end_offset_for(e, log_.log_end_offset),
            log_.log_end_offset, log_.high_watermark, epoch, end_offset,
        )  # fmt: skip
        if target < log_.log_end_offset:
            self.replica.logger.warning(
                "diverged from the leader after epoch %d; truncating %d -> %d",
                epoch, log_.log_end_offset, target,
            )  # fmt: skip
            log_.truncate_to(target)
            self.replica.log_changed = True
        # Also forget epochs that start at the target but were never written to (recorded
        # when this replica was elected and led nothing), as Kafka's truncateTo does;
        # otherwise the next fetch would name them again.
        log_.epoch_cache.truncate_from_end(target)

    def _append_from_leader(self, records: np.ndarray, leader_log_start: int) -> None:
        log_ = self.replica.log
        first = rb.read_header(memoryview(records), 0, check_codec=False)
        if first.base_offset < log_.log_end_offset and log_.log_end_offset == log_.log_start_offset:
            # An empty log starting inside the leader's first batch (the leader's log start
            # lies inside it): start where that batch starts.
            log_.truncate_fully_and_start_at(first.base_offset)
        log_.append_as_follower(records)
        log_.maybe_flush()
        self.replica.log_changed = True


class _Prefetch:
    """A fetch sent before the previous answer was appended: from ``start``, to the leader
    ``leader_id`` in ``leader_epoch``."""

    __slots__ = ("task", "leader_id", "leader_epoch", "start")

    def __init__(self, task: asyncio.Task, leader_id: int, leader_epoch: int, start: int):
        self.task = task
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.start = start
        # Its outcome may never be awaited (dropped): never let asyncio report it as lost.
        task.add_done_callback(_consume_outcome)

    def usable(self, leader_id: int, leader_epoch: int, log_end_offset: int) -> bool:
        """Whether its answer may be applied now: the same leader and epoch, and the append
        before it reached exactly where it starts."""
        return (self.leader_id, self.leader_epoch, self.start) == (
            leader_id, leader_epoch, log_end_offset)  # fmt: skip

    def drop(self) -> None:
        self.task.cancel()


def _consume_outcome(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()
