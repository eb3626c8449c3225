"""The replica model: one replica's memory over its disk, after ``actors/partition_replica.py``:
check-in, adopting pushed states, leading (appends, fetches served, ISR proposals, acks) and
following (the fetch loop, truncation on divergence)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.replication import (
    UNDEFINED_EPOCH,
    LeaderState,
    diverging_epoch,
    truncation_offset,
)
from rafka.errors import RafkaError
from tests.unit.cluster.sim.config import (
    CHECKIN_KEEPS_NEWEST,
    CLIENT,
    CONTROLLER,
    InvariantViolation,
    State,
)
from tests.unit.cluster.sim.log import (
    PRODUCER_ID,
    BatchHeader,
    Entry,
    header_of,
    producer_state_of,
)

if TYPE_CHECKING:
    from tests.unit.cluster.sim.broker import Broker
    from tests.unit.cluster.sim.log import Disk


class PendingAck(NamedTuple):
    """A produce (acks=all) waiting for the high watermark to pass its last record."""

    last_offset: int
    base_offset: int
    rids: tuple[int, ...]
    req: int


class Replica:
    """One replica's memory (lost in a crash) over its ``Disk``, following
    ``PartitionReplica``: its ``incarnation`` is the replica epoch the controller handed it
    (at its check-in after a restart; the epoch reserved at creation for a created replica);
    after a restart it checks in and ignores pushed states until the answer; it rebuilds its
    producer state from its log at each start and truncation; it leads with a ``LeaderState`` while the
    state it holds names it, else it follows the named leader, pulling the state after a
    second without progress. Invariants 2 and 3 are checked where epochs and high
    watermarks change."""

    def __init__(self, broker: Broker, p: int, disk: Disk, state: State | None) -> None:
        self.sim = broker.sim
        self.cfg = broker.sim.cfg
        self.broker = broker
        self.b = broker.id
        self.p = p
        self.disk = disk
        # A restarted replica learns its replica epoch from the check-in answer.
        self.incarnation = self.sim.metadata.created_epoch if state is not None else -1
        self.producers = producer_state_of(disk.log)
        self.checked_in = state is not None
        self.state: State | None = None
        self.leader: LeaderState | None = None
        self.hw = min(disk.hw_checkpoint, len(disk.log))
        now = self.sim.scheduler.now
        self.following = False
        self.last_progress = now  # of the fetch loop, for the state pull
        self.fetch_req: int | None = None
        self.fetch_sent = now
        self.checkin_req: int | None = None
        self.checkin_sent = now
        self.pushed_early: State | None = None  # CHECKIN_KEEPS_NEWEST
        self.isr_req: int | None = None
        self.isr_sent = now
        self.pending_acks: deque[PendingAck] = deque()
        if state is not None:
            self.adopt(state)
        else:
            self._check_in()

    def __repr__(self) -> str:
        role = "L" if self.leader else ("F" if self.checked_in else "?")
        return f"{role}{self.b}/p{self.p}"

    def _send(self, dst: int, kind: str, *payload) -> None:
        self.sim.network.send(dst, kind, self.p, *payload)

    def _answer(self, dst: int, kind: str, *payload) -> None:
        self.sim.network.answer(self.broker, dst, kind, self.p, *payload)

    # -- state -----------------------------------------------------------------------------------

    def _check_in(self) -> None:
        self.checkin_req = self.sim.next_id()
        self.checkin_sent = self.sim.scheduler.now
        # Every restart here follows a crash: unclean, with the log's position.
        position = (self.disk.cache.latest_epoch, len(self.disk.log))
        self._send(CONTROLLER, "replica_started", self.b, False, position, self.broker.process,
                   self.checkin_req)  # fmt: skip

    def on_confirm_epoch(self, recorded: int) -> None:
        """``PartitionReplica.confirm_replica_epoch``: this live life holds an older replica
        epoch than the controller recorded, so the record came from a dead life's late
        check-in: check in again, cleanly (this life lost nothing), for a current epoch."""
        if not self.checked_in or recorded <= self.incarnation:
            return
        self.sim.stats["epoch_confirmations"] += 1
        self.checkin_req = self.sim.next_id()
        position = (self.disk.cache.latest_epoch, len(self.disk.log))
        self._send(CONTROLLER, "replica_started", self.b, True, position, self.broker.process,
                   self.checkin_req)  # fmt: skip

    def on_checkin_answer(self, req: int, replica_epoch: int, state: State) -> None:
        if req != self.checkin_req:
            return
        if self.checked_in:  # the answer to a confirmation
            self.incarnation = max(self.incarnation, replica_epoch)
            self.adopt(state)
            return
        self.checked_in = True
        self.incarnation = replica_epoch
        self.sim.dirty.add(self.p)
        early = self.pushed_early
        if early is not None and early.version > state.version:
            state = early  # proposed: a state pushed after the controller answered
        self.adopt(state)

    def on_update_state(self, state: State) -> None:
        if self.checked_in:
            self.adopt(state)
        elif CHECKIN_KEEPS_NEWEST in self.cfg.proposed:
            early = self.pushed_early
            if early is None or state.version > early.version:
                self.pushed_early = state

    def on_state_answer(self, req: int, state: State) -> None:
        if self.checked_in:
            self.adopt(state)

    def adopt(self, state: State) -> None:
        """``_adopt``: take the controller's state unless it is older than the one held."""
        old = self.state
        if old is not None and state.version < old.version:
            return
        if old is not None and state.leader_epoch < old.leader_epoch:
            raise InvariantViolation(2, f"{self!r} went back to leader epoch {state.leader_epoch}")
        self.state = state
        if state.leader == self.b:
            leader = self.leader
            if leader is not None and leader.leader_epoch == state.leader_epoch:
                self._set_leader_hw(leader.on_isr_committed(list(state.isr),
                                                            state.partition_epoch))  # fmt: skip
            else:
                self._become_leader()
            self._stop_following()
            return
        if self.leader is not None:
            self._step_down()
        moved = old is None or (old.leader, old.leader_epoch) != (state.leader, state.leader_epoch)
        if moved or not self.following:
            self._stop_following()
            self.following = True
            self.last_progress = self.sim.scheduler.now
            self.fetch()

    def _become_leader(self) -> None:
        s = self.state
        self._step_down()
        log_end = len(self.disk.log)
        # Kafka's makeLeader: the new epoch starts at the log end.
        self.disk.cache.assign(s.leader_epoch, log_end)
        self.leader = LeaderState(self.b, list(s.replicas), list(s.isr), s.leader_epoch,
                                  log_end, self.hw, self.sim.scheduler.now,
                                  self.cfg.lag_time_max_ms, s.partition_epoch,
                                  self.cfg.min_insync_replicas)  # fmt: skip
        self.sim.checker.on_leadership(self, s.leader_epoch)
        self.sim.note(f"broker {self.b} leads p{self.p} in epoch {s.leader_epoch} (log end "
                      f"{log_end}, high watermark {self.hw}, ISR {list(s.isr)})")  # fmt: skip
        self._set_leader_hw(self.leader.on_local_append(log_end))

    def _step_down(self) -> None:
        self.leader = None
        self.isr_req = None
        for ack in self.pending_acks:  # outcome unknown: the producer resends
            self._answer(CLIENT, "produce_answer", ack.req, "NotLeaderOrFollower", -1)
        self.pending_acks.clear()

    def _stop_following(self) -> None:
        self.following = False
        self.fetch_req = None

    def _set_hw(self, hw: int) -> None:
        if hw < self.hw:
            raise InvariantViolation(3, f"{self!r} high watermark went from {self.hw} to {hw}")
        self.hw = hw
        self.sim.dirty.add(self.p)

    def _set_leader_hw(self, hw: int) -> None:
        if hw == self.hw:
            return
        self._set_hw(hw)
        self.sim.checker.on_leader_high_watermark(self)
        while self.pending_acks and self.pending_acks[0].last_offset < hw:
            self._acknowledge(self.pending_acks.popleft())

    def _acknowledge(self, ack: PendingAck) -> None:
        """acks=all: the high watermark passed the batch."""
        if not self.leader.enough_in_sync(self.cfg.min_insync_replicas):
            # Written, but the ISR shrank below min.insync.replicas.
            self.sim.stats["failed_after_append"] += 1
            self._answer(CLIENT, "produce_answer", ack.req, "NotEnoughReplicasAfterAppend", -1)
            return
        for i, rid in enumerate(ack.rids):
            self.sim.checker.on_ack(self.p, ack.base_offset + i, rid)
        self._answer(CLIENT, "produce_answer", ack.req, None, ack.base_offset)

    # -- timers ----------------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.sim.scheduler.now
        cfg = self.cfg
        if not self.checked_in:
            if now - self.checkin_sent >= cfg.controller_timeout_ms:
                self._check_in()
            return
        if self.sim.rng.random() < cfg.flush_chance:
            self.disk.flushed = len(self.disk.log)
            self.disk.hw_checkpoint = self.hw
        leader = self.leader
        if leader is not None:
            self.maybe_propose_isr()  # _watch_isr
            if (leader.pending_isr is not None and self.isr_req is not None
                    and now - self.isr_sent >= cfg.controller_timeout_ms):  # fmt: skip
                self._send_isr()
            return
        if not self.following:
            return
        if now - self.last_progress > cfg.state_pull_ms:
            self.last_progress = now
            self.sim.stats["state_pulls"] += 1
            self._send(CONTROLLER, "pull_state", self.b, self.sim.next_id())
        if self.fetch_req is None or now - self.fetch_sent >= cfg.fetch_timeout_ms:
            self.fetch()

    # -- leading ---------------------------------------------------------------------------------

    def on_produce(self, producer_epoch: int, base_sequence: int, rids: tuple[int, ...],
                   too_large: bool, req: int) -> None:  # fmt: skip
        """``produce`` (acks=all) of one idempotent batch: refused for good when too large,
        refused while the ISR is below min ISR, checked with the producer state (a resent
        batch is answered with its original offsets, an out-of-order one refused), else
        written and answered once the high watermark passes it."""
        leader = self.leader
        error = None
        if leader is None:
            error = "NotLeaderOrFollower"
        elif too_large:
            error = "RecordTooLarge"
            self.sim.checker.refused.update(rids)
            self.sim.stats["too_large"] += 1
        elif not leader.enough_in_sync(self.cfg.min_insync_replicas):
            error = "NotEnoughReplicas"
            self.sim.stats["refused"] += 1
        if error is not None:
            self._answer(CLIENT, "produce_answer", req, error, -1)
            return
        log = self.disk.log
        header = BatchHeader(PRODUCER_ID, producer_epoch, base_sequence, len(log), len(rids))
        try:
            duplicate = self.producers.check(header)
        except RafkaError as e:
            self.sim.stats[type(e).__name__] += 1
            self._answer(CLIENT, "produce_answer", req, type(e).__name__, -1)
            return
        if duplicate is not None:
            self.sim.stats["duplicates"] += 1
            ack = PendingAck(duplicate.last_offset, duplicate.first_offset, rids, req)
            if ack.last_offset < self.hw:
                self._acknowledge(ack)
            else:  # acknowledged in offset order with the writes after it
                self.pending_acks.append(ack)
                self.pending_acks = deque(sorted(self.pending_acks))
            return
        for i, rid in enumerate(rids):
            self.disk.append(Entry(leader.leader_epoch, rid, producer_epoch, base_sequence,
                                   len(rids), i))  # fmt: skip
        self.producers.update(header)
        self.sim.dirty.add(self.p)
        self.pending_acks.append(PendingAck(header.last_offset, header.base_offset, rids, req))
        self._set_leader_hw(leader.on_local_append(len(log)))

    def on_fetch(self, follower: int, incarnation: int, leader_epoch: int, fetch_offset: int,
                 last_fetched_epoch: int, req: int) -> None:  # fmt: skip
        """``replicate``."""
        leader = self.leader
        if (leader is None or leader_epoch != leader.leader_epoch
                or follower not in leader.followers):  # fmt: skip
            self._answer(follower, "fetch_answer", req, "NotLeaderOrFollower", -1, None, None)
            return
        log = self.disk.log
        cache = self.disk.cache
        if fetch_offset > len(log) and last_fetched_epoch == UNDEFINED_EPOCH:
            diverged = (cache.latest_epoch, len(log))
        elif self.cfg.broken == "skip_divergence_check":
            diverged = None
        else:
            diverged = diverging_epoch(
                lambda e: cache.end_offset_for(e, len(log)), fetch_offset, last_fetched_epoch
            )
        if diverged is not None:
            epoch, end = diverged
            self._answer(follower, "fetch_answer", req, None, self.hw, (epoch, max(end, 0)), None)
            return
        now = self.sim.scheduler.now
        self._set_leader_hw(leader.on_follower_fetch(follower, fetch_offset, now, incarnation))
        self.maybe_propose_isr()
        end = min(fetch_offset + self.cfg.max_fetch_records, len(log))
        while end < len(log) and log[end].index:  # whole batches only
            end += 1
        records = tuple(log[fetch_offset:end])
        self._answer(follower, "fetch_answer", req, None, self.hw, None, (fetch_offset, records))

    def maybe_propose_isr(self) -> None:
        proposal = self.leader.proposed_isr(self.sim.scheduler.now)
        if proposal is None:
            return
        self.leader.propose(proposal)
        self.isr_req = self.sim.next_id()
        self._send_isr()

    def _send_isr(self) -> None:
        leader = self.leader
        self.isr_sent = self.sim.scheduler.now
        isr = tuple(leader.pending_isr)
        self._send(CONTROLLER, "alter_isr", self.b, leader.leader_epoch, leader.partition_epoch,
                   isr, leader.incarnations(list(isr)), self.isr_req)  # fmt: skip

    def on_isr_answer(self, req: int, error: str | None, state: State) -> None:
        if self.leader is None or req != self.isr_req:
            return
        self.isr_req = None
        if error is not None:
            self.leader.on_proposal_refused()
        self.adopt(state)

    # -- following -------------------------------------------------------------------------------

    def fetch(self) -> None:
        s = self.state
        if not self.following or s is None or s.leader in (NO_LEADER, self.b):
            return
        self.fetch_req = self.sim.next_id()
        self.fetch_sent = self.sim.scheduler.now
        self._send(s.leader, "fetch", self.b, self.incarnation, s.leader_epoch,
                   len(self.disk.log), self.disk.cache.latest_epoch, self.fetch_req)  # fmt: skip

    def on_fetch_answer(self, req: int, error: str | None, leader_hw: int,
                        diverged: tuple[int, int] | None, data: tuple | None) -> None:  # fmt: skip
        if req != self.fetch_req or not self.following:
            return
        self.fetch_req = None
        if error is not None:
            return  # a stale or newer epoch, or a dead leader: retried on the next tick
        self.last_progress = self.sim.scheduler.now
        self.sim.dirty.add(self.p)
        disk = self.disk
        log = disk.log
        if diverged is not None:
            target = truncation_offset(
                lambda e: disk.cache.end_offset_for(e, len(log)), len(log), self.hw, *diverged
            )
            if target < len(log):
                self.sim.note(f"{self!r} truncates {len(log)} -> {target}")
                self.sim.stats["truncations"] += 1
                if self.hw > target:
                    self._set_hw(target)  # the log clamps it; invariant 3 objects
            disk.truncate(target)
            self.producers = producer_state_of(log)  # as Log.truncate_to reloads it
            self.fetch()
            return
        first, records = data
        if records and first == len(log):  # (always: one fetch at a time)
            for entry in records:
                disk.append(entry)
                if entry.index == entry.count - 1:
                    self.producers.update(header_of(log, len(log) - 1))
        hw = min(leader_hw, len(log))
        if hw > self.hw:  # forward only, as PartitionReplica._set_high_watermark
            self._set_hw(hw)
        if records:
            self.fetch()
