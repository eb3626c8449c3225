"""PartitionReplica: one replica of one partition, hosted by a ``ReplicaHost`` actor.

A thin shell over ``rafka.storage.log.Log`` (the files) and ``rafka.cluster.replication``
(in-sync replicas, the high watermark, divergence). It runs on its host's event loop, with
the other replicas that host holds: produce, long-poll fetch and the follower fetch loop
share that loop, so an append wakes waiting fetches directly. The host runs the timers
(maintenance, ISR lag checks, log gauges) for all its replicas and routes every call here.

Roles come from the controller, as partition states ``{leader, leader_epoch, isr, replicas,
partition_epoch, ...}``; a state older than the one held is ignored. The leader appends
client batches and answers followers' ``replicate`` calls; a follower pulls from the leader
in a loop, truncating where its log diverged. A replica that restarts (its host restarted,
or it found its files) checks in with the controller before it leads or follows again, and
ignores every pushed state until then: its log may have lost unflushed records, and only the
controller may decide what it is now.

This module holds the replica's life (start, close, delete), its role (check-in, adopting
states, becoming leader) and the methods its host routes to it; the work is done by the
parts it owns:

- ``ProduceHandler`` (``replica_produce``): client batches in, acks;
- ``FetchHandler`` (``replica_fetch``): consumer and follower fetches, offsets, Spark blocks;
- ``ReplicaFollower`` (``replica_follower``): the follower fetch loop and truncation;
- ``IsrProposer`` (``isr_proposer``): the leader's ISR proposals to the controller;
- ``ReplicaCheckIn`` (``replica_check_in``): the check-in after a restart;
- ``ControllerLink`` (``controller_link``) and ``replica_state`` (``partition.metadata``).

The parts read and change the replica through the members under "shared with the parts"
(and its public attributes), never through Ray.

Calls answer with tuples whose first two fields are an error code and message (0, "" on
success), so an expected error costs no exception across Ray; clients turn codes back into
``rafka.errors`` types. Record bytes travel as numpy uint8 arrays: Ray moves those through
the object store without copying, never as ``bytes``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any, Awaitable, Callable

from rafka.actors import metrics, stage_trace
from rafka.actors.controller_link import ControllerLink
from rafka.actors.fetch_batcher import FetchBatcher
from rafka.actors.isr_proposer import IsrProposer
from rafka.actors.logs import actor_logger
from rafka.actors.replica_check_in import ReplicaCheckIn, current_node_id
from rafka.actors.replica_fetch import FetchHandler, WaitCutoff
from rafka.actors.replica_follower import ReplicaFollower
from rafka.actors.replica_produce import ProduceHandler
from rafka.actors.replica_transactions import TransactionHandler
from rafka.actors.replica_state import (
    is_stale,
    newer_topic_holds,
    read_state,
    set_aside_stray_directory,
    state_version,
    stray_path,
    with_defaults,
    write_state,
)
from rafka.cluster.replication import LeaderState
from rafka.cluster.settings import setting
from rafka.errors import FencedLeaderEpoch, NotLeaderOrFollower, UnknownLeaderEpoch
from rafka.storage.compaction import compact, dirty_ratio
from rafka.storage.config import LogConfig
from rafka.storage.log import Log, now_ms, partition_dir
from rafka.storage.retention import delete_expired_segments



class PartitionReplica:
    """One replica. ``state`` is the controller's view at creation; the replica keeps its own
    latest copy in ``partition.metadata``, so a restart resumes from what it last knew (and
    then checks in with the controller) rather than from the creation arguments."""

    def __init__(
        self,
        data_dir: str,
        state: dict[str, Any],
        namespace: str | None = None,
        reconstructed: bool = False,
        on_retired: Callable[[PartitionReplica], Awaitable[None]] | None = None,
        fetches: FetchBatcher | None = None,
    ):
        """``reconstructed``: this replica ran before and its host restarted (so it may
        have lost unflushed records whatever its files say); ``on_retired`` is awaited once
        it deleted itself because the controller no longer assigns it here; ``fetches``
        sends its follower fetches with those of its host's other replicas (None: alone)."""
        self.fetches = fetches
        self.logger = actor_logger(__name__, "PartitionReplica", topic=state["topic"],
                                   partition=state["partition"], broker=state["broker_id"])
        self.on_retired = on_retired
        self.partition_metrics = metrics.PartitionMetrics(
            state["topic"], state["partition"], state["broker_id"]
        )
        self.directory = partition_dir(data_dir, state["topic"], state["partition"])
        os.makedirs(self.directory, exist_ok=True)
        saved = read_state(self.directory)
        if saved is not None and saved["topic_id"] != state["topic_id"]:
            if newer_topic_holds(saved, state) or reconstructed:
                # This replica's topic was deleted and a newer topic of the same name holds
                # the directory (Ray restarted this actor while its node was away, or its
                # creation arrived late): never touch it; this replica's own files, if any,
                # were set aside; it checks in (or is deleted) and goes.
                self.directory = stray_path(self.directory, state["topic_id"])
                os.makedirs(self.directory, exist_ok=True)
                saved = read_state(self.directory)
            else:
                # A new replica finds an earlier topic of the same name, deleted while this
                # broker was away: its segments, epochs and producer state must not become
                # the new topic's (KIP-516).
                set_aside_stray_directory(self.directory, saved["topic_id"], self.logger)
                os.makedirs(self.directory, exist_ok=True)
                saved = None
        known = saved is not None
        # Ray re-runs this constructor with the creation arguments after a crash; with or
        # without files (a wiped disk), such a replica must ask what it is now.
        # Also one the controller knows ran before (re-created after its host or files
        # were lost): never trusted as new, whatever its directory holds.
        restarted = known or reconstructed or bool(state.get("must_check_in"))
        if known:
            state = {**state, **saved, "settings": state.get("settings", {})}
        self.state = with_defaults(state)
        self.topic = state["topic"]
        self.topic_id = state["topic_id"]
        self.partition = state["partition"]
        self.broker_id = state["broker_id"]
        self.namespace = namespace
        # This life's replica epoch, handed out by the controller (at creation, or at the
        # check-in of a restarted replica) from a counter that only grows: fetches carry it,
        # so a leader never counts progress made before a restart that may have lost data.
        self.replica_epoch = int(state.get("replica_epoch", 0))
        self.log = Log(self.directory, LogConfig.from_dict(state["config"]))
        self.leader: LeaderState | None = None
        # A restarted replica neither leads nor follows until the controller has answered
        # its check-in; a new one starts from the state it was created with.
        self.checked_in = not restarted
        self._pushed: dict[str, Any] | None = None  # newest state pushed before check-in
        if self.checked_in:
            self._become_leader_if_named()
        write_state(self.directory, self.state)
        self.log_changed = False  # since the log gauges were last set (appends, truncation)
        self._refresh_log_gauges()
        self._appended: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task] = []
        self.closed = False
        self.deleted = False
        self.controller = ControllerLink(namespace, self.logger)
        self.check_in = ReplicaCheckIn(self)
        self.follower = ReplicaFollower(self)
        self.isr = IsrProposer(self)
        self.produce_handler = ProduceHandler(self)
        self.transactions = TransactionHandler(self)
        self.fetch_handler = FetchHandler(self)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def settings(self) -> dict[str, Any]:
        return self.state.get("settings") or {}

    async def ready(self) -> dict[str, Any]:
        self.loop_ready()
        return self.describe_sync()

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
        self.log_changed = False
        self.partition_metrics.log_gauges(self.log.size_bytes, len(self.log.segments))

    def report_log_gauges(self) -> None:
        """Refresh the log gauges if appends or truncations changed the log since the last
        refresh (the host calls this once a second: a burst of appends costs one refresh)."""
        if self.log_changed and not self.closed:
            self._refresh_log_gauges()

    async def maintain_now(self) -> dict[str, int]:
        return self.run_maintenance()

    async def close(self) -> None:
        """Flush and close the log cleanly (a clean-shutdown marker spares recovery)."""
        if not self.closed:
            self.closed = True
            for task in self._tasks:
                task.cancel()
            self.follower.stop()
            self.isr.stop()
            self.leader = None
            self.fetch_handler.close()
            if self._appended is not None:
                async with self._appended:
                    self._appended.notify_all()
            self.log.close()

    async def delete(self) -> None:
        """Close and remove this replica's files (its topic was deleted or it was moved)."""
        await self.close()
        self.deleted = True
        saved = read_state(self.directory)
        if saved is None or saved["topic_id"] == self.topic_id:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:  # a newer topic of the same name took the directory; ours was set aside
            shutil.rmtree(stray_path(self.directory, self.topic_id), ignore_errors=True)
        # Ray keeps exporting a gauge's last value while this process lives.
        self.partition_metrics.log_gauges(0, 0)

    # -- the controller's view -----------------------------------------------------------------

    async def confirm_replica_epoch(self, recorded: int) -> None:
        """The controller recorded ``recorded`` as this replica's epoch, newer than the one
        this life holds: see ``ReplicaCheckIn.confirm``."""
        await self.check_in.confirm(recorded)

    async def update_state(self, state: dict[str, Any]) -> None:
        """The controller's new view of this partition: a whole state, or a config change."""
        if self.closed:
            return
        self.loop_ready()
        if is_stale(state, self.state):
            self.logger.warning("ignores a state from controller epoch %s (it heard from %s)",
                                state.get("controller_epoch"),
                                self.state.get("controller_epoch"))  # fmt: skip
            return
        if "leader_epoch" not in state:
            self.state = {**self.state, **state}
            self.log.config = LogConfig.from_dict(self.state["config"])
            write_state(self.directory, self.state)
            leader = self.leader
            if leader is not None:
                self.set_high_watermark(
                    leader.set_min_insync_replicas(self.log.config.min_insync_replicas)
                )
                self.wake_waiters()
            return
        if self.checked_in:
            self.adopt(state)
        elif self._pushed is None or state_version(state) > state_version(self._pushed):
            self._pushed = state  # newer than the check-in answer, perhaps: see _check_in

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
            s["partition_epoch"], self.log.config.min_insync_replicas,
        )  # fmt: skip
        self.log.update_high_watermark(self.leader.on_local_append(self.log.log_end_offset))
        self.logger.info("leads in epoch %d (ISR %s, log end %d)", s["leader_epoch"], s["isr"],
                         self.log.log_end_offset)  # fmt: skip

    def wake_waiters(self) -> None:
        """Wake every fetch and acks=all produce waiting on this replica (from a task of
        its own, so the caller never waits for the condition's lock)."""
        appended = self._appended
        if appended is not None:
            asyncio.get_running_loop().create_task(_notify(appended))

    # -- shared with the parts (never called through Ray) --------------------------------------

    def loop_ready(self) -> asyncio.Condition:
        """The condition every append, high watermark move and role change notifies. Made
        on first use, with the check-in or the follower loop: they need the host's running
        loop, which __init__ lacks. The timers (maintenance, ISR lag checks, gauges) are the
        host's, one per host for all its replicas."""
        if self._appended is None:
            self._appended = asyncio.Condition()
            loop = asyncio.get_running_loop()
            if not self.checked_in:
                self._tasks.append(loop.create_task(self.check_in.run()))
            else:
                self.follower.start_if_needed()
        return self._appended

    def adopt(self, new: dict[str, Any], force: bool = False) -> None:
        """Take on the controller's state ``new`` (ignored when older than the one held,
        unless ``force``): persist it, then lead or follow as it says."""
        old = self.state
        if self.closed or is_stale(new, old) or (
            not force and state_version(new) < state_version(old)
        ):
            return
        self.state = with_defaults({**old, **new})
        self.log.config = LogConfig.from_dict(self.state["config"])
        if self.state != old:  # the reconcile re-sends states already held
            write_state(self.directory, self.state)
        s = self.state
        if s["leader"] == self.broker_id:
            leader = self.leader
            if leader is not None and leader.leader_epoch == s["leader_epoch"]:
                if leader.replicas != s["replicas"]:
                    leader.update_replicas(s["replicas"], now_ms())
                self.set_high_watermark(leader.on_isr_committed(s["isr"], s["partition_epoch"]))
                # Waiting acks=all produces check the ISR against min.insync.replicas too.
                self.wake_waiters()
            else:
                self._become_leader_if_named()
                self.wake_waiters()
            self.follower.stop()
        else:
            if self.leader is not None:
                self.logger.info("gives up leadership to broker %d (epoch %d)", s["leader"],
                                 s["leader_epoch"])  # fmt: skip
                self.leader = None
                self.wake_waiters()
            moved = (s["leader"], s["leader_epoch"]) != (old["leader"], old["leader_epoch"])
            if moved or not self.follower.started:
                self.follower.stop()  # an outstanding fetch may be to the old leader
            self.follower.start_if_needed()  # also a loop that ended: it must always run

    def set_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to ``offset``; True when it moved (the caller
        wakes waiting fetches and acks=all produces)."""
        if offset > self.log.high_watermark:
            self.log.update_high_watermark(offset)
            if stage_trace.ENABLED and self.leader is not None:
                stage_trace.mark("leader.committed", self.log.high_watermark)
            return True
        return False

    def require_leader(self, epoch: int | None = None) -> LeaderState:
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

    # -- produce and fetch ---------------------------------------------------------------------

    async def produce(
        self, batches, acks: int, timeout_ms: int, client_id: str = "", request_no: int = -1,
        transactional_id: str | None = None,
    ) -> tuple:  # fmt: skip
        """Append client batches (one or more, back to back), each on its own: one may fail
        while the others are written. Answers (errno, message, log_start_offset, [(errno,
        message, base_offset, log_append_time) per batch]); a request-level error (not the
        leader, too few in-sync replicas, a transaction its coordinator does not confirm)
        fails every batch. With acks=-1 the answer waits until the high watermark passes the
        batches. ``request_no`` numbers one client's requests to this partition from 0; they
        are appended in that order (-1: no order). ``transactional_id``: the producer's, for
        transactional batches."""
        return await self.produce_handler.produce(batches, acks, timeout_ms, client_id,
                                                  request_no, transactional_id)  # fmt: skip

    async def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        timeout_ms: int, transaction_version: int = 2,
    ) -> tuple:  # fmt: skip
        """A transaction coordinator ends a producer's transaction here (see
        ``replica_transactions``). Answers (errno, message, offset of the marker)."""
        return await self.transactions.write_marker(producer_id, producer_epoch, commit,
                                                    coordinator_epoch, timeout_ms,
                                                    transaction_version)  # fmt: skip

    async def describe_producers(self) -> tuple:
        """The leader's producer state, for the admin tooling of transactions (see
        ``replica_transactions``). Answers (errno, message, [row per producer])."""
        return self.transactions.describe_producers()

    async def fetch(
        self, offset: int, max_bytes: int, min_bytes: int = 1, max_wait_ms: int = 500
    ) -> tuple:
        """A consumer's fetch: whole batches from ``offset`` up to the high watermark. Waits
        up to ``max_wait_ms`` for ``min_bytes``. Answers (errno, message, high_watermark,
        log_start_offset, log_end_offset, records)."""
        return await self.fetch_handler.fetch(offset, max_bytes, min_bytes, max_wait_ms)

    async def fetch_committed(
        self, offset: int, max_bytes: int, min_bytes: int = 1, max_wait_ms: int = 500
    ) -> tuple:
        """A read_committed consumer's fetch: whole batches from ``offset`` up to the last
        stable offset (markers included). Answers (errno, message, high_watermark,
        log_start_offset, log_end_offset, records, last_stable_offset, aborted), ``aborted``
        being [producer id, first offset] of each aborted transaction the records overlap:
        the consumer drops those producers' batches from there to their ABORT marker."""
        return await self.fetch_handler.fetch_committed(offset, max_bytes, min_bytes,
                                                        max_wait_ms)  # fmt: skip

    async def replicate(
        self,
        follower: int,
        leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int,
        max_wait_ms: int,
        incarnation: int | None = None,
        log_end_offset: int | None = None,
        cutoff: WaitCutoff | None = None,
    ) -> tuple:
        """A follower's fetch: it has fetched everything below ``fetch_offset`` (its last
        batch from ``last_fetched_epoch``) and written everything below ``log_end_offset``
        (``fetch_offset`` when None; less while it appends an answer after sending this fetch,
        see ``prefetch_offset``), and it believes this replica leads in ``leader_epoch``;
        ``incarnation`` is the follower replica's replica epoch (its current life).
        Answers (errno, message, high_watermark, log_start_offset, log_end_offset,
        diverging_epoch, diverging_end_offset, records): a diverging end offset >= 0 tells the
        follower to truncate (KIP-320); otherwise records from ``fetch_offset`` up to the log
        end, waiting up to ``max_wait_ms`` for some (or until ``cutoff``, see
        ``ReplicaHost.replicate_many``)."""
        return await self.fetch_handler.replicate(
            follower, leader_epoch, fetch_offset, last_fetched_epoch, max_bytes, max_wait_ms,
            incarnation, log_end_offset, cutoff,
        )  # fmt: skip

    async def export_block(self, start: int, end: int, committed_only: bool = False) -> tuple:
        """A Spark read's range: the committed records in [start, end) as one Arrow block
        that this process puts in the object store (so it is owned on this node). Any
        replica whose high watermark has reached ``end`` can serve it. ``committed_only``: a
        read_committed read, up to the last stable offset, without aborted transactions'
        records. Answers (errno, message, [object ref], rows); the ref is in a list so the
        caller receives the ref, not the block."""
        return await self.fetch_handler.export_block(start, end, committed_only)

    async def list_offset(self, timestamp: int, read_committed: bool = False) -> tuple:
        """(errno, message, offset, timestamp): EARLIEST (-2) gives the log start, LATEST (-1)
        the high watermark (the last stable offset when ``read_committed``), otherwise the
        first offset whose timestamp is >= ``timestamp`` (offset -1 when there is none)."""
        return await self.fetch_handler.list_offset(timestamp, read_committed)

    # -- status --------------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        return self.describe_sync()

    def describe_sync(self) -> dict[str, Any]:
        log_ = self.log
        return {
            "topic": self.topic, "topic_id": self.topic_id, "partition": self.partition,
            "broker_id": self.broker_id, "node_id": current_node_id(),
            "leader": self.state["leader"], "leader_epoch": self.state["leader_epoch"],
            "isr": list(self.leader.isr) if self.leader else list(self.state["isr"]),
            "role": "leader" if self.leader else ("follower" if self.checked_in else "starting"),
            "log_start_offset": log_.log_start_offset, "high_watermark": log_.high_watermark,
            "last_stable_offset": log_.last_stable_offset,
            "log_end_offset": log_.log_end_offset, "size_bytes": log_.size_bytes,
            "segments": len(log_.segments), "pid": os.getpid(),
            "replica_epoch": self.replica_epoch,
            "throttle": self.follower.throttle.describe(),  # replication.throttled.rate
            "recovery": log_.recovery_report.summary() if log_.recovery_report else "",
        }  # fmt: skip


async def _notify(condition: asyncio.Condition) -> None:
    async with condition:
        condition.notify_all()
