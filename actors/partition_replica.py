"""PartitionReplica: the Ray actor that owns one replica of one partition.

A thin shell over ``rafka.storage.log.Log`` (the files) and ``rafka.cluster.replication``
(in-sync replicas, the high watermark, divergence). It is an async actor: produce, long-poll
fetch, the follower fetch loop and the timers share one event loop, so an append wakes
waiting fetches directly.

Roles come from the controller, as partition states ``{leader, leader_epoch, isr, replicas,
partition_epoch, ...}``; a state older than the one held is ignored. The leader appends
client batches and answers followers' ``replicate`` calls; a follower pulls from the leader
in a loop, truncating where its log diverged. A replica that restarts (Ray re-runs this
constructor) checks in with the controller before it leads or follows again, and ignores
every pushed state until then: its log may have lost unflushed records, and only the
controller may decide what it is now.

Calls answer with tuples whose first two fields are an error code and message (0, "" on
success), so an expected error costs no exception across Ray; clients turn codes back into
``rafka.errors`` types. Record bytes travel as numpy uint8 arrays: Ray moves those through
the object store without copying, never as ``bytes``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import warnings
from typing import Any

import msgpack
import numpy as np
import ray

from rafka.actors import metrics
from rafka.actors.block_export import BlockExporter
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.placement import CONTROLLER_NAME, replica_name
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.replication import (
    UNDEFINED_EPOCH,
    LeaderState,
    diverging_epoch,
    truncation_offset,
)
from rafka.cluster.settings import setting
from rafka.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    RafkaError,
    RequestTimedOut,
    UnknownLeaderEpoch,
)
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically
from rafka.storage.compaction import compact, dirty_ratio
from rafka.storage.config import LogConfig
from rafka.storage.log import Log, now_ms, partition_dir
from rafka.storage.retention import delete_expired_segments

STATE_FILE = "partition.metadata"
EARLIEST = -2
LATEST = -1
_EMPTY = np.zeros(0, dtype=np.uint8)
UNKNOWN_CLIENT_WAIT_MS = 200

#: A follower that has heard nothing useful from its leader for this long asks the
#: controller for the partition's state (a pushed state may have been lost).
STATE_PULL_AFTER_S = 1.0


class PartitionReplica:
    """One replica. ``state`` is the controller's view at creation; the replica keeps its own
    latest copy in ``partition.metadata``, so a restart resumes from what it last knew (and
    then checks in with the controller) rather than from the creation arguments."""

    def __init__(
        self,
        data_dir: str,
        state: dict[str, Any],
        maintenance_interval_s: float = 30.0,
        namespace: str | None = None,
    ):
        self.logger = actor_logger(__name__, "PartitionReplica", topic=state["topic"],
                                   partition=state["partition"], broker=state["broker_id"])
        if namespace is not None:  # in a Ray actor: this process is this replica
            # Before the log opens, so recovery's lines carry the replica too.
            label_process_logs(self.logger.prefix)
        self.partition_metrics = metrics.PartitionMetrics(
            state["topic"], state["partition"], state["broker_id"]
        )
        self.directory = partition_dir(data_dir, state["topic"], state["partition"])
        os.makedirs(self.directory, exist_ok=True)
        saved = _read_state(self.directory)
        known = saved is not None and saved["topic_id"] == state["topic_id"]
        # Ray re-runs this constructor with the creation arguments after a crash; with or
        # without files (a wiped disk), such a replica must ask what it is now.
        restarted = known or (namespace is not None and _reconstructed())
        if known:
            state = {**state, **saved, "settings": state.get("settings", {})}
        self.state = _with_defaults(state)
        self.topic = state["topic"]
        self.topic_id = state["topic_id"]
        self.partition = state["partition"]
        self.broker_id = state["broker_id"]
        self.namespace = namespace
        # Grows with every start of this replica (wall-clock ns): its fetches carry it, so a
        # leader never counts progress made before a restart that may have lost data.
        self.incarnation = time.time_ns()
        self.log = Log(self.directory, LogConfig.from_dict(state["config"]))
        self.leader: LeaderState | None = None
        # A restarted replica neither leads nor follows until the controller has answered
        # its check-in; a new one starts from the state it was created with.
        self.checked_in = not restarted
        self._pushed: dict[str, Any] | None = None  # newest state pushed before check-in
        if self.checked_in:
            self._become_leader_if_named()
        _write_state(self.directory, self.state)
        self._log_changed = False  # since the log gauges were last set (appends, truncation)
        self._refresh_log_gauges()
        self._appended: asyncio.Condition | None = None
        self._maintenance_interval_s = maintenance_interval_s
        self._tasks: list[asyncio.Task] = []
        self._follower: asyncio.Task | None = None
        self._isr_sender: asyncio.Task | None = None
        self._handles: dict[int, Any] = {}
        self._controller = None
        self._closed = False
        self.deleted = False
        self._exporter = BlockExporter(self.topic, self.partition, self.partition_metrics)
        # Ray starts an async actor's calls in arrival order but does not promise to run
        # them in the order one client sent them, so each producer numbers its requests to
        # this partition and they are appended in that order (see _wait_turn).
        self._next_request: dict[str, list] = {}  # client id -> [next number, last used]
        self._turn_changed: asyncio.Condition | None = None
        # Start the loops (check-in, follower fetch, timers) without waiting for a caller.
        if namespace is not None:
            ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return self.state.get("settings") or {}

    def _loop_ready(self) -> asyncio.Condition:
        # The conditions and timers need the actor's running loop, which __init__ lacks.
        if self._appended is None:
            self._appended = asyncio.Condition()
            self._turn_changed = asyncio.Condition()
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._maintain()))
            self._tasks.append(loop.create_task(self._watch_isr()))
            self._tasks.append(loop.create_task(self._report_log_gauges()))
            if not self.checked_in:
                self._tasks.append(loop.create_task(self._check_in()))
            else:
                self._follow_if_needed()
        return self._appended

    async def ready(self) -> dict[str, Any]:
        self._loop_ready()
        return self.describe_sync()

    async def _maintain(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._maintenance_interval_s)
            try:
                self.run_maintenance()
            except Exception:  # a failed cleanup must not kill the replica; retry next round
                self.logger.exception("maintenance of %s failed", self.directory)

    def run_maintenance(self) -> dict[str, int]:
        """Flush (flush.ms), retention and compaction, as Kafka's log manager does on a timer."""
        now = now_ms()
        self.log.maybe_flush()
        self.log.checkpoint_high_watermark()
        freed = delete_expired_segments(self.log, now) if self.log.config.delete else 0
        cleaned = 0
        if self.log.config.compact and dirty_ratio(self.log) >= (
            self.log.config.min_cleanable_dirty_ratio
        ):
            result = compact(self.log, now)
            cleaned = result.bytes_in - result.bytes_out
        self._refresh_log_gauges()
        return {"retention_bytes_freed": freed, "compaction_bytes_removed": cleaned}

    def _refresh_log_gauges(self) -> None:
        """Set the log size and segment count gauges (a sum over the segments)."""
        self._log_changed = False
        self.partition_metrics.log_gauges(self.log.size_bytes, len(self.log.segments))

    async def _report_log_gauges(self) -> None:
        """Refresh the log gauges once a second while appends or truncations change the log:
        the append paths only raise a flag, so a burst of appends costs one refresh."""
        while not self._closed:
            await asyncio.sleep(metrics.LOG_GAUGES_INTERVAL_S)
            if self._log_changed and not self._closed:
                self._refresh_log_gauges()

    async def maintain_now(self) -> dict[str, int]:
        return self.run_maintenance()

    async def close(self) -> None:
        """Flush and close the log cleanly (a clean-shutdown marker spares recovery)."""
        if not self._closed:
            self._closed = True
            for task in [*self._tasks, self._follower, self._isr_sender]:
                if task is not None:
                    task.cancel()
            self.leader = None
            self._exporter.close()
            if self._appended is not None:
                async with self._appended:
                    self._appended.notify_all()
            self.log.close()

    async def delete(self) -> None:
        """Close and remove this replica's files (its topic was deleted or it was moved)."""
        await self.close()
        self.deleted = True
        shutil.rmtree(self.directory, ignore_errors=True)
        # Ray keeps exporting a gauge's last value while this process lives.
        self.partition_metrics.log_gauges(0, 0)

    # -- the controller's view -----------------------------------------------------------------

    def _controller_handle(self):
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        return self._controller

    async def _call_controller(self, method: str, *args, timeout_s: float = 10.0):
        """One controller call; None when it could not be made (the caller retries)."""
        try:
            ref = getattr(self._controller_handle(), method).remote(*args)
            return await asyncio.wait_for(ref, timeout_s)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
            self.logger.info("controller %s failed: %r", method, e)
            self._controller = None
            return None

    async def _check_in(self) -> None:
        """Tell the controller this replica restarted (and whether its log was closed
        cleanly); adopt the state it answers. Retried until the controller answers."""
        report = self.log.recovery_report
        clean = bool(report and report.clean_shutdown and not report.dropped_data)
        delay = 0.05
        while not self._closed:
            answer = await self._call_controller(
                "replica_started", self.topic_id, self.partition, self.broker_id, clean,
                self.incarnation,
            )  # fmt: skip
            if answer is not None:
                state, exists = answer
                if not exists:
                    # Deleted or moved away while this node was down: remove the stray files
                    # and this actor, as Kafka deletes stray logs.
                    self.logger.warning("no longer assigned to this broker; deleting it")
                    await self.delete()
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                    return
                self.checked_in = True
                self._adopt(state, force=True)
                pushed, self._pushed = self._pushed, None
                if pushed is not None and _version(pushed) > _version(state):
                    self._adopt(pushed)  # a newer state was pushed while the answer travelled
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def update_state(self, state: dict[str, Any]) -> None:
        """The controller's new view of this partition: a whole state, or a config change."""
        if self._closed:
            return
        self._loop_ready()
        if "leader_epoch" not in state:
            self.state = {**self.state, **state}
            self.log.config = LogConfig.from_dict(self.state["config"])
            _write_state(self.directory, self.state)
            return
        if self.checked_in:
            self._adopt(state)
        elif self._pushed is None or _version(state) > _version(self._pushed):
            self._pushed = state  # newer than the check-in answer, perhaps: see _check_in

    def _adopt(self, new: dict[str, Any], force: bool = False) -> None:
        old = self.state
        if not force and _version(new) < _version(old):
            return
        self.state = _with_defaults({**old, **new})
        self.log.config = LogConfig.from_dict(self.state["config"])
        _write_state(self.directory, self.state)
        s = self.state
        if s["leader"] == self.broker_id:
            leader = self.leader
            if leader is not None and leader.leader_epoch == s["leader_epoch"]:
                if leader.replicas != s["replicas"]:
                    leader.update_replicas(s["replicas"], now_ms())
                if self._set_high_watermark(
                    leader.on_isr_committed(s["isr"], s["partition_epoch"])
                ):
                    self._wake_waiters()
            else:
                self._become_leader_if_named()
                self._wake_waiters()
            self._stop_following()
        else:
            if self.leader is not None:
                self.logger.info("gives up leadership to broker %d (epoch %d)", s["leader"],
                                 s["leader_epoch"])  # fmt: skip
                self.leader = None
                self._wake_waiters()
            moved = (s["leader"], s["leader_epoch"]) != (old["leader"], old["leader_epoch"])
            if moved or self._follower is None:
                self._stop_following()  # an outstanding fetch may be to the old leader
                self._follow_if_needed()

    def _become_leader_if_named(self) -> None:
        s = self.state
        if s["leader"] != self.broker_id:
            self.leader = None
            return
        # Kafka's makeLeader: the new epoch starts at the log end, so a follower whose last
        # epoch this leader never wrote is told where that epoch ends here.
        self.log.epoch_cache.assign(s["leader_epoch"], self.log.log_end_offset)
        self.leader = LeaderState(
            self.broker_id, s["replicas"], s["isr"], s["leader_epoch"],
            self.log.log_end_offset, self.log.high_watermark, now_ms(),
            setting(self.settings, "replica.lag.time.max.ms"),
            s["partition_epoch"],
        )  # fmt: skip
        self.log.update_high_watermark(self.leader.on_local_append(self.log.log_end_offset))
        self.logger.info("leads in epoch %d (ISR %s, log end %d)", s["leader_epoch"], s["isr"],
                         self.log.log_end_offset)  # fmt: skip

    def _wake_waiters(self) -> None:
        appended = self._appended
        if appended is not None:
            asyncio.get_running_loop().create_task(_notify(appended))

    def _set_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to ``offset``; True when it moved (the caller
        wakes waiting fetches and acks=all produces)."""
        if offset > self.log.high_watermark:
            self.log.update_high_watermark(offset)
            return True
        return False

    # -- the leader's ISR ----------------------------------------------------------------------

    async def _watch_isr(self) -> None:
        """A leader re-checks its followers' lag a few times per lag window, so a follower
        that stopped fetching leaves the ISR even when nothing else happens."""
        while not self._closed:
            lag_ms = setting(self.settings, "replica.lag.time.max.ms")
            await asyncio.sleep(min(max(lag_ms / 4000, 0.05), 1.0))
            self._maybe_propose_isr()

    def _maybe_propose_isr(self) -> None:
        leader = self.leader
        if leader is None or self._closed:
            return
        proposal = leader.proposed_isr(now_ms())
        if proposal is None:
            return
        leader.propose(proposal)
        self._isr_sender = asyncio.get_running_loop().create_task(
            self._send_isr(leader, proposal)
        )

    async def _send_isr(self, leader: LeaderState, proposal: list[int]) -> None:
        """Send one ISR proposal until the controller answers, or this leader is replaced."""
        delay = 0.05
        while self.leader is leader and leader.pending_isr == proposal and not self._closed:
            self.logger.info("proposes ISR %s (was %s)", proposal, leader.isr)
            answer = await self._call_controller(
                "alter_isr", self.topic_id, self.partition, self.broker_id,
                leader.leader_epoch, leader.partition_epoch, proposal,
                leader.incarnations(proposal),
            )  # fmt: skip
            if answer is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            errno, message, state = answer
            if self.leader is not leader:
                return
            if errno:
                self.logger.info("ISR proposal refused: %s", message)
                leader.on_proposal_refused()
            if state is not None:
                self._adopt(state)
            return

    # -- following -----------------------------------------------------------------------------

    def _follow_if_needed(self) -> None:
        if self._closed or not self.checked_in or self.leader is not None:
            return
        if self._follower is None or self._follower.done():
            self._follower = asyncio.get_running_loop().create_task(self._follow())

    def _stop_following(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            self._follower = None

    def _leader_handle(self, broker_id: int):
        handle = self._handles.get(broker_id)
        if handle is None:
            handle = ray.get_actor(
                replica_name(self.topic_id, self.partition, broker_id), namespace=self.namespace
            )
            self._handles[broker_id] = handle
        return handle

    async def _follow(self) -> None:
        """Pull from the leader until this replica is told it leads or is closed."""
        wait_ms = setting(self.settings, "replica.fetch.wait.max.ms")
        max_bytes = setting(self.settings, "replica.fetch.max.bytes")
        last_progress = time.monotonic()
        delay = 0.02
        while not self._closed and self.leader is None:
            s = self.state
            leader_id = s["leader"]
            if time.monotonic() - last_progress > STATE_PULL_AFTER_S:
                last_progress = time.monotonic()
                state = await self._call_controller("partition_state", self.topic_id,
                                                    self.partition, self.broker_id)  # fmt: skip
                if state is not None:
                    self._adopt(state)  # may cancel this task and start a fresh one
                    if self.state["leader"] != leader_id:
                        continue
            if leader_id == NO_LEADER or leader_id == self.broker_id:
                await asyncio.sleep(0.1)
                continue
            try:
                handle = self._leader_handle(leader_id)
                ref = handle.replicate.remote(
                    self.broker_id, s["leader_epoch"], self.log.log_end_offset,
                    self.log.latest_epoch, max_bytes, wait_ms, self.incarnation,
                )  # fmt: skip
                answer = await asyncio.wait_for(ref, wait_ms / 1000 + 5.0)
            except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
                self.logger.debug("fetch from leader %d failed: %r", leader_id, e)
                self._handles.pop(leader_id, None)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            if self.leader is not None or self.state["leader_epoch"] != s["leader_epoch"]:
                continue  # the role changed while the fetch was out
            errno, message, hw, log_start, _, div_epoch, div_end, records = answer
            if errno == OffsetOutOfRange.errno:
                self.logger.warning("below the leader's log start %d; starting there",
                                    log_start)  # fmt: skip
                self.log.truncate_fully_and_start_at(log_start)
                self._log_changed = True
                continue
            if errno:
                await asyncio.sleep(delay)  # a stale or newer epoch: the state is on its way
                delay = min(delay * 2, 0.5)
                continue
            delay = 0.02
            last_progress = time.monotonic()
            if div_end >= 0:
                self._truncate(hw, div_epoch, div_end)
                continue
            if len(records):
                self._append_from_leader(records, log_start)
            self._set_high_watermark(min(hw, self.log.log_end_offset))

    def _truncate(self, leader_hw: int, epoch: int, end_offset: int) -> None:
        log_ = self.log
        target = truncation_offset(
            lambda e: log_.epoch_cache.end_offset_for(e, log_.log_end_offset),
            log_.log_end_offset, log_.high_watermark, epoch, end_offset,
        )  # fmt: skip
        if target < log_.log_end_offset:
            self.logger.warning("diverged from the leader after epoch %d; truncating %d -> %d",
                                epoch, log_.log_end_offset, target)  # fmt: skip
            log_.truncate_to(target)
            self._log_changed = True
        # Also forget epochs that start at the target but were never written to (recorded
        # when this replica was elected and led nothing), as Kafka's truncateTo does;
        # otherwise the next fetch would name them again.
        log_.epoch_cache.truncate_from_end(target)

    def _append_from_leader(self, records: np.ndarray, leader_log_start: int) -> None:
        log_ = self.log
        first = rb.read_header(memoryview(records), 0, check_codec=False)
        if first.base_offset < log_.log_end_offset and log_.log_end_offset == log_.log_start_offset:
            # An empty log starting inside the leader's first batch (the leader's log start
            # lies inside it): start where that batch starts.
            log_.truncate_fully_and_start_at(first.base_offset)
        log_.append_as_follower(records)
        log_.maybe_flush()
        self._log_changed = True

    # -- produce -------------------------------------------------------------------------------

    async def _wait_turn(self, client_id: str, request_no: int, timeout_ms: int) -> None:
        """Wait until every earlier request of ``client_id`` has been appended. A request
        that never arrives (its sender died) is given up on after ``timeout_ms``."""
        turn = self._next_request.get(client_id)
        wait_ms = timeout_ms
        if turn is None:
            turn = self._next_request[client_id] = [0, 0.0]
            if len(self._next_request) > 10_000:
                self._forget_idle_clients()
            # A client this replica has not seen: either its first requests raced each other
            # (wait a little for number 0) or this replica restarted mid-session (go on).
            wait_ms = min(timeout_ms, UNKNOWN_CLIENT_WAIT_MS)
        turn[1] = time.monotonic()
        if request_no <= turn[0]:
            return
        deadline = time.monotonic() + wait_ms / 1000
        changed = self._turn_changed
        async with changed:
            while turn[0] < request_no:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.logger.warning(
                        "request %d of client %s waited %d ms for request %d; going on",
                        request_no, client_id, wait_ms, turn[0],
                    )  # fmt: skip
                    turn[0] = request_no
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    async def _end_turn(self, client_id: str, request_no: int) -> None:
        turn = self._next_request.get(client_id)
        if turn is not None and request_no >= turn[0]:
            turn[0] = request_no + 1
            async with self._turn_changed:
                self._turn_changed.notify_all()

    def _forget_idle_clients(self) -> None:
        idle = time.monotonic() - 3600
        for client_id in [c for c, t in self._next_request.items() if t[1] < idle]:
            del self._next_request[client_id]

    async def produce(
        self, batches, acks: int, timeout_ms: int, client_id: str = "", request_no: int = -1
    ) -> tuple:
        """Append client batches (one or more, back to back), each on its own: one may fail
        while the others are written. Answers (errno, message, log_start_offset, [(errno,
        message, base_offset, log_append_time) per batch]); a request-level error (not the
        leader, too few in-sync replicas) fails every batch. With acks=-1 the answer waits
        until the high watermark passes the batches. ``request_no`` numbers one client's
        requests to this partition from 0; they are appended in that order (-1: no order)."""
        started = time.perf_counter()
        appended = self._loop_ready()
        if request_no >= 0:
            await self._wait_turn(client_id, request_no, timeout_ms)
        results = []
        last_offset = -1
        records_in = bytes_in = 0  # for the metrics: what this call appended
        try:
            try:
                leader = self._leader()
                min_isr = self.log.config.min_insync_replicas
                if acks == -1 and not leader.enough_in_sync(min_isr):
                    raise NotEnoughReplicas(
                        f"{self.topic}-{self.partition} has {len(leader.isr)} in-sync "
                        f"replica(s), below min.insync.replicas={min_isr}; wait for replicas "
                        "to catch up or produce with acks=1"
                    )
                for batch in _split_batches(batches):
                    try:
                        info = self.log.append_as_leader(batch, leader.leader_epoch)
                    except RafkaError as e:
                        results.append((e.errno, str(e), -1, -1))
                        continue
                    results.append((0, "", info.first_offset, info.log_append_time))
                    last_offset = max(last_offset, info.last_offset)
                    if not info.duplicate:
                        records_in += info.record_count
                        bytes_in += len(batch)
            finally:
                if request_no >= 0:
                    await self._end_turn(client_id, request_no)
            if self.log.log_end_offset > leader.log_end_offset:
                self._set_high_watermark(leader.on_local_append(self.log.log_end_offset))
                self.log.maybe_flush()
                self._log_changed = True
                async with appended:
                    appended.notify_all()
            if acks == -1 and self.log.high_watermark <= last_offset:
                await self._await_high_watermark(leader, last_offset + 1, timeout_ms)
        except RafkaError as e:
            self._produced(records_in, bytes_in, acks, started)
            return (e.errno, str(e), -1, [])
        self._produced(records_in, bytes_in, acks, started)
        return (0, "", self.log.log_start_offset, results)

    def _produced(self, records: int, size: int, acks: int, started: float) -> None:
        """One produce call's metrics: what it appended (records, bytes) and how long it
        took (``started``: time.perf_counter() at its start)."""
        elapsed = metrics.elapsed_ms(started, time.perf_counter())
        self.partition_metrics.produced(records, size, acks, elapsed)

    async def _await_high_watermark(self, leader: LeaderState, offset: int, timeout_ms: int):
        """Wait until the high watermark reaches ``offset``, while ``leader`` still leads."""
        appended = self._loop_ready()
        deadline = time.monotonic() + timeout_ms / 1000
        async with appended:
            while self.log.high_watermark < offset:
                if self.leader is not leader:
                    raise NotLeaderOrFollower(
                        f"broker {self.broker_id} lost the leadership of {self.topic}-"
                        f"{self.partition} before the batch ending at offset {offset - 1} was "
                        "replicated; retry with the new leader"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOut(
                        f"the batch ending at offset {offset - 1} of {self.topic}-"
                        f"{self.partition} was appended but not replicated to every in-sync "
                        f"replica within {timeout_ms} ms"
                    )
                try:
                    await asyncio.wait_for(appended.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        min_isr = self.log.config.min_insync_replicas
        if not leader.enough_in_sync(min_isr):
            raise NotEnoughReplicasAfterAppend(
                f"the batch ending at offset {offset - 1} of {self.topic}-{self.partition} was "
                f"written, but the ISR shrank to {leader.isr}, below min.insync.replicas="
                f"{min_isr}, before it was replicated"
            )

    def _leader(self, epoch: int | None = None) -> LeaderState:
        """This replica's leader state; NotLeaderOrFollower when it does not lead, and
        FencedLeaderEpoch/UnknownLeaderEpoch when ``epoch`` (the caller's) is older/newer."""
        leader = self.leader
        if leader is None:
            raise NotLeaderOrFollower(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader is {self.state['leader']}); refresh metadata and retry"
            )
        if epoch is not None and epoch != leader.leader_epoch:
            error = FencedLeaderEpoch if epoch < leader.leader_epoch else UnknownLeaderEpoch
            raise error(
                f"leader epoch {epoch} of {self.topic}-{self.partition} does not match the "
                f"leader's {leader.leader_epoch}; refresh metadata and retry"
            )
        return leader

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(
        self, offset: int, max_bytes: int, min_bytes: int = 1, max_wait_ms: int = 500
    ) -> tuple:
        """A consumer's fetch: whole batches from ``offset`` up to the high watermark. Waits
        up to ``max_wait_ms`` for ``min_bytes``. Answers (errno, message, high_watermark,
        log_start_offset, log_end_offset, records)."""
        started = time.perf_counter()
        try:
            self._leader()
            data = await self._read_waiting(offset, max_bytes, min_bytes, max_wait_ms, True)
        except RafkaError as e:
            self._fetched(metrics.CONSUMER, _EMPTY, started)
            return (e.errno, str(e), -1, -1, -1, _EMPTY)
        self._fetched(metrics.CONSUMER, data, started)
        records = np.frombuffer(data, dtype=np.uint8) if len(data) else _EMPTY
        log_ = self.log
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset, records)

    async def replicate(
        self,
        follower: int,
        leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int,
        max_wait_ms: int,
        incarnation: int | None = None,
    ) -> tuple:
        """A follower's fetch: it holds everything below ``fetch_offset``, its last batch is
        from ``last_fetched_epoch``, and it believes this replica leads in ``leader_epoch``;
        ``incarnation`` identifies the follower replica's current life.
        Answers (errno, message, high_watermark, log_start_offset, log_end_offset,
        diverging_epoch, diverging_end_offset, records): a diverging end offset >= 0 tells the
        follower to truncate (KIP-320); otherwise records from ``fetch_offset`` up to the log
        end, waiting up to ``max_wait_ms`` for some."""
        started = time.perf_counter()
        appended = self._loop_ready()
        log_ = self.log
        try:
            leader = self._leader(leader_epoch)
            if follower not in leader.followers:
                raise NotLeaderOrFollower(
                    f"broker {follower} is not a replica of {self.topic}-{self.partition} "
                    f"(replicas {leader.replicas})"
                )
            if fetch_offset < log_.log_start_offset:
                raise OffsetOutOfRange(
                    f"offset {fetch_offset} is below the log start {log_.log_start_offset}"
                )
            if fetch_offset > log_.log_end_offset and last_fetched_epoch == UNDEFINED_EPOCH:
                return self._diverged(log_.latest_epoch, log_.log_end_offset)
            diverged = diverging_epoch(
                lambda e: log_.end_offset_for_epoch(e), fetch_offset, last_fetched_epoch
            )
            if diverged is not None:
                return self._diverged(*diverged)
            if self._set_high_watermark(
                leader.on_follower_fetch(follower, fetch_offset, now_ms(), incarnation)
            ):
                async with appended:
                    appended.notify_all()
            self._maybe_propose_isr()
            data = await self._read_waiting(fetch_offset, max_bytes, 1, max_wait_ms, False)
        except RafkaError as e:
            self._fetched(metrics.REPLICATION, _EMPTY, started)
            return (e.errno, str(e), -1, log_.log_start_offset, -1, -1, -1, _EMPTY)
        self._fetched(metrics.REPLICATION, data, started)
        records = np.frombuffer(data, dtype=np.uint8) if len(data) else _EMPTY
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset, -1, -1,
                records)  # fmt: skip

    def _fetched(self, kind: str, data, started: float) -> None:
        """One fetch's metrics: what it sent (``data``, whole batches) and how long it took,
        including the long-poll wait (``started``: time.perf_counter() at its start)."""
        elapsed = metrics.elapsed_ms(started, time.perf_counter())
        self.partition_metrics.fetched(kind, data, elapsed)

    def _diverged(self, epoch: int, end_offset: int) -> tuple:
        log_ = self.log
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset,
                epoch, max(end_offset, 0), _EMPTY)  # fmt: skip

    async def _read_waiting(
        self, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int, committed: bool
    ):
        """Batches from ``offset`` (below the high watermark when ``committed``), waiting up to
        ``max_wait_ms`` for ``min_bytes``, while this replica keeps leading."""
        appended = self._loop_ready()
        leader = self.leader
        data = self._read(offset, max_bytes, committed)
        if len(data) < min_bytes and max_wait_ms > 0:
            deadline = time.monotonic() + max_wait_ms / 1000
            async with appended:
                while len(data) < min_bytes and self.leader is leader:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(appended.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass
                    data = self._read(offset, max_bytes, committed)
        return data

    def _read(self, offset: int, max_bytes: int, committed: bool):
        limit = self.log.high_watermark if committed else None
        return self.log.read(offset, max_bytes, limit).records

    async def export_block(self, start: int, end: int) -> tuple:
        """A Spark read's range: the committed records in [start, end) as one Arrow block
        that this process puts in the object store (so it is owned on this node). Any
        replica whose high watermark has reached ``end`` can serve it. Answers (errno,
        message, [object ref], rows); the ref is in a list so the caller receives the ref,
        not the block."""
        self._loop_ready()
        log_ = self.log
        try:
            if self.deleted or self._closed:
                raise NotLeaderOrFollower(
                    f"the replica of {self.topic}-{self.partition} on broker {self.broker_id} "
                    "is closed; refresh metadata and retry"
                )
            if not log_.log_start_offset <= start <= end <= log_.high_watermark:
                raise OffsetOutOfRange(
                    f"range [{start}, {end}) of {self.topic}-{self.partition} is outside the "
                    f"committed log [{log_.log_start_offset}, {log_.high_watermark}) of broker "
                    f"{self.broker_id}; plan the read again"
                )
            ref, rows = await self._exporter.export(
                lambda offset, max_bytes: self._read(offset, max_bytes, True), start, end
            )
        except RafkaError as e:
            return (e.errno, str(e), [], 0)
        return (0, "", [ref], rows)

    async def list_offset(self, timestamp: int) -> tuple:
        """(errno, message, offset, timestamp): EARLIEST (-2) gives the log start, LATEST (-1)
        the high watermark, otherwise the first offset whose timestamp is >= ``timestamp``
        (offset -1 when there is none)."""
        try:
            self._leader()
            if timestamp == EARLIEST:
                return (0, "", self.log.log_start_offset, -1)
            if timestamp == LATEST:
                return (0, "", self.log.high_watermark, -1)
            found = self.log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= self.log.high_watermark:
                return (0, "", -1, -1)
            return (0, "", found[0], found[1])
        except RafkaError as e:
            return (e.errno, str(e), -1, -1)

    # -- status --------------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        return self.describe_sync()

    def describe_sync(self) -> dict[str, Any]:
        log_ = self.log
        return {
            "topic": self.topic, "partition": self.partition, "broker_id": self.broker_id,
            "leader": self.state["leader"], "leader_epoch": self.state["leader_epoch"],
            "isr": list(self.leader.isr) if self.leader else list(self.state["isr"]),
            "role": "leader" if self.leader else ("follower" if self.checked_in else "starting"),
            "log_start_offset": log_.log_start_offset, "high_watermark": log_.high_watermark,
            "log_end_offset": log_.log_end_offset, "size_bytes": log_.size_bytes,
            "segments": len(log_.segments), "pid": os.getpid(),
            "recovery": log_.recovery_report.summary() if log_.recovery_report else "",
        }  # fmt: skip


def _split_batches(buffer) -> list:
    """The batches in a request buffer, as views, split on their length fields only (each is
    fully checked when it is appended). A malformed tail becomes one more piece, so its
    append fails with CorruptRecord."""
    view = memoryview(buffer).cast("B")
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        try:
            size = rb.read_header(view, pos, check_codec=False).size
        except RafkaError:
            size = end - pos
        out.append(view[pos : pos + size])
        pos += size
    return out


def _read_state(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, STATE_FILE), "rb") as f:
            return msgpack.unpackb(f.read())
    except (FileNotFoundError, ValueError, msgpack.UnpackException):
        return None


def _write_state(directory: str, state: dict[str, Any]) -> None:
    write_atomically(os.path.join(directory, STATE_FILE), msgpack.packb(state))


def _reconstructed() -> bool:
    try:
        with warnings.catch_warnings():  # Ray 2.50 warns about its own use of actor_id
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside an actor
        return False


def _version(state: dict[str, Any]) -> tuple[int, int]:
    return state.get("leader_epoch", -1), state.get("partition_epoch", -1)


def _with_defaults(state: dict[str, Any]) -> dict[str, Any]:
    """States written before partition epochs and reassignments existed lack those fields."""
    out = dict(state)
    out.setdefault("partition_epoch", 0)
    out.setdefault("adding", [])
    out.setdefault("removing", [])
    out.setdefault("settings", {})
    return out


async def _notify(condition: asyncio.Condition) -> None:
    async with condition:
        condition.notify_all()
