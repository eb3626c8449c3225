"""The controller model: partition states changed only through ``rafka.cluster.elections``,
with the glue of ``actors/controller.py``; what it persists (``ControllerMetadata``) survives
its restarts, its liveness view and requests in flight do not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import NO_LEADER, LogPosition, MetadataImage, PartitionState
from rafka.errors import RafkaError
from tests.unit.cluster.sim.config import (
    CONTROLLER,
    CONTROLLER_RECONCILES,
    CONTROLLER_RESTART_PUSHES,
    LIVE_AFTER_CHECKIN,
    InvariantViolation,
    State,
)

if TYPE_CHECKING:
    from tests.unit.cluster.sim.runner import Simulation

TOPIC_ID = "sim-topic"


class ControllerCrashed(Exception):
    """The controller process died in the middle of a change: the event that ran it ends
    there (``Simulation.step``), as Ray ends a call whose actor died."""


class ControllerMetadata:
    """What the controller keeps in its metadata log, so it survives a controller restart:
    every partition's state, and the replica epochs (one growing counter, and each
    replica's current epoch) in a real ``MetadataImage`` changed only through
    ``rafka.cluster.controller``. Replicas created with the topic share one reserved epoch."""

    def __init__(self, partitions: dict[int, list[int]]) -> None:
        self.states = {
            p: PartitionState(p, list(replicas), list(replicas), replicas[0], 0, 0)
            for p, replicas in partitions.items()
        }
        self.image = MetadataImage()
        self.created_epoch, records = decide.reserve_replica_epoch(self.image)
        self._append(records)
        # (partition, broker) -> the broker process whose replica last checked in (the
        # first process created the replicas), and broker -> its newest process seen: rafka
        # records the Ray nodes of both in its metadata log (``rafka.cluster.node_restarts``).
        self.checked_in = {(p, b): 1 for p, replicas in partitions.items() for b in replicas}
        self.processes: dict[int, int] = {}

    def _append(self, records: list[dict]) -> None:
        for record in records:
            self.image.apply(record, self.image.offset + 1)

    def start_replica(self, p: int, b: int) -> int:
        """A new replica epoch for ``b``'s replica of ``p``, recorded."""
        epoch, records = decide.start_replica(self.image, TOPIC_ID, p, b)
        self._append(records)
        return epoch

    def replica_epochs(self, p: int) -> dict[int, int]:
        return decide.replica_epochs_of(self.image, TOPIC_ID, p)


class Controller:
    """One controller process at a time over the persisted ``ControllerMetadata``; changes a
    partition's state only through ``rafka.cluster.elections`` (with the topic's
    ``min.insync.replicas``), as ``actors/controller.py``. Learns that a broker died only from
    its missed heartbeats and an unanswered probe; pushes every change to the partition's live
    replicas, and everything a fenced broker missed when it speaks again; answers check-ins
    (handing out a new replica epoch), ISR proposals (checked against the current replica
    epochs) and state pulls. A restart forgets liveness (every broker gets one session to
    speak up) and loses requests in flight; with ``CONTROLLER_RESTART_PUSHES`` the new process
    pushes every partition's state once, as a reconciling controller does, and with
    ``CONTROLLER_RECONCILES`` every ``reconcile_ms`` too. A batch of decisions is recorded in
    one append (``_change``), then pushed; the controller may die in between (with
    ``crash_before_push_per_mille``). Invariant 2 is checked in ``_change``, invariants 1
    and 2 on what it records by the checker."""

    id = CONTROLLER

    def __init__(self, sim: "Simulation", metadata: ControllerMetadata) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.metadata = metadata
        self.states = metadata.states
        self.up = False
        self.process = 0
        self.liveness = BrokerLiveness(sim.cfg.session_timeout_ms)
        self.probing: dict[int, int] = {}  # broker -> id of the probe waiting for its answer
        # The rule switched off on purpose ("no_eligible_leaders"): min ISR 1 for elections,
        # so no replica is ever eligible and the last ISR member leads even after it lost
        # its tail, as before KIP-966.
        self.min_isr = 1 if self.cfg.broken == "no_eligible_leaders" else self.cfg.min_insync_replicas

    def start(self) -> None:
        sched = self.sim.scheduler
        self.up = True
        self.process += 1
        self.liveness = BrokerLiveness(self.cfg.session_timeout_ms)
        self.liveness.track(sorted(self.sim.brokers), sched.now)
        self.probing = {}
        self.heard: set[int] = set()  # brokers this controller process has heard from
        sched.after(self.sim.rng.randrange(self.cfg.controller_tick_ms), self.tick, self.process)
        sched.after(self.cfg.preferred_leader_ms, self.preferred_leader_tick, self.process)
        if CONTROLLER_RECONCILES in self.cfg.proposed:
            sched.after(self.cfg.reconcile_ms, self.reconcile_tick, self.process)
        if self.process > 1 and CONTROLLER_RESTART_PUSHES in self.cfg.proposed:
            # ``Controller.start``; a partition the crash left without a leader gets one at the
            # first heartbeat of a broker that may lead it (``_alive``).
            self._push_all()

    def crash(self) -> None:
        self.up = False

    def live(self) -> set[int]:
        return self.liveness.live()

    def live_for(self, p: int, live: set[int]) -> set[int]:
        """The live brokers that may lead ``p``: with ``LIVE_AFTER_CHECKIN``, not one whose
        process restarted and whose replica of ``p`` has not checked in since (it may have
        lost its tail, and the controller does not know it yet)."""
        if LIVE_AFTER_CHECKIN not in self.cfg.proposed:
            return live
        checked_in, processes = self.metadata.checked_in, self.metadata.processes
        return {b for b in live if checked_in.get((p, b), 0) >= processes.get(b, 0)}

    def _apply(self, new: PartitionState | None) -> None:
        self._change([new])

    def _change(self, decisions: list[PartitionState | None]) -> None:
        """``PartitionChanges.change``: one batch of decisions (at most one per partition)
        recorded in one append to the metadata log, then pushed partition by partition. With
        correlated faults the controller may die after the append, before the first push or
        between two pushes (``crash_before_push_per_mille`` of the batches): the states are
        recorded, the pushes sent so far arrive, the rest are never sent."""
        changed = []
        for new in decisions:
            if new is None:
                continue
            old = self.states[new.partition]
            if new == old:
                continue
            if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
                raise InvariantViolation(2, f"controller state of p{new.partition} went from "
                                            f"{State.of(old)} to {State.of(new)}")  # fmt: skip
            self.sim.stats["elections"] += new.leader != old.leader
            self.sim.stats["isr_changes"] += new.isr != old.isr
            self.sim.stats["eligible_leaders"] += len(new.elr) > len(old.elr)
            changed.append(new)
        for new in changed:  # the append
            self.states[new.partition] = new
            self.sim.checker.on_recorded(new)
            self.sim.dirty.add(new.partition)
        crash_at = self._crash_point(len(changed))
        for i, new in enumerate(changed):
            if i == crash_at:
                self.sim.crash_controller(
                    "crash_before_push" if i == 0 else "crash_between_pushes",
                    f" after recording {_names(changed)}, having pushed "
                    f"{_names(changed[:i]) or 'none'}, not {_names(changed[i:])}",
                )  # fmt: skip
                raise ControllerCrashed
            self._push(new.partition)

    def _crash_point(self, changes: int) -> int | None:
        """Where the controller dies in a batch of ``changes`` recorded changes: before push
        number ``i`` (0: before any), or None (it pushes them all)."""
        cfg, sim = self.cfg, self.sim
        if not (changes and cfg.correlated and cfg.crash_before_push_per_mille and sim.faulty):
            return None
        if sim.rng.random() * 1000 >= cfg.crash_before_push_per_mille:
            return None
        return sim.rng.randrange(changes)

    def _push_all(self) -> None:
        for p in sorted(self.states):
            self._push(p)

    def _push(self, p: int) -> None:
        """``_push_state``: to live brokers only."""
        state = State.of(self.states[p])
        for b in state.replicas:
            if self.liveness.is_live(b):
                self.sim.network.send(b, "update_state", p, state)

    def _answer(self, b: int, kind: str, *payload) -> None:
        self.sim.network.answer(self, b, kind, *payload)

    def _alive(self, b: int) -> None:
        """``BrokerWatch.alive``: a heartbeat (or a probe answer, or a check-in); a fenced
        broker that speaks again, and any broker this controller process hears for the first
        time, gets a leader where nobody leads and the state of every partition it hosts
        (``_broker_back``)."""
        back = self.liveness.heartbeat(b, self.sim.scheduler.now)
        first = b not in self.heard
        self.heard.add(b)
        if not back and not (first and CONTROLLER_RESTART_PUSHES in self.cfg.proposed):
            return
        if back:
            self.sim.stats["unfenced"] += 1
            self.sim.note(f"controller: broker {b} is back")
        live = self.live()
        hosted = [p for p, replicas in self.sim.partitions.items() if b in replicas]
        self._change([elections.elect_if_leaderless(self.states[p], self.live_for(p, live), False,
                                                    self.min_isr)
                      for p in hosted])  # fmt: skip
        for p, replicas in self.sim.partitions.items():
            if b in replicas:
                self.sim.network.send(b, "update_state", p, State.of(self.states[p]))

    # -- timers ----------------------------------------------------------------------------------

    def tick(self, process: int) -> None:
        """``_watch_brokers``: probe every broker silent for a whole session."""
        if not self.up or process != self.process:
            return
        now = self.sim.scheduler.now
        for b in self.liveness.suspects(now):
            if b not in self.probing:
                probe = self.probing[b] = self.sim.next_id()
                self.sim.network.send(b, "probe", probe)
                self.sim.scheduler.after(self.cfg.probe_timeout_ms, self.probe_expired, b, probe)
        self.sim.scheduler.after(self.cfg.controller_tick_ms, self.tick, process)

    def reconcile_tick(self, process: int) -> None:
        """The periodic reconcile (``CONTROLLER_RECONCILES``): every partition's whole state
        to its live replicas."""
        if not self.up or process != self.process:
            return
        self.sim.stats["reconciles"] += 1
        self._push_all()
        self.sim.scheduler.after(self.cfg.reconcile_ms, self.reconcile_tick, process)

    def on_probe_answer(self, b: int, probe: int) -> None:
        if self.probing.get(b) == probe:
            del self.probing[b]
            self._alive(b)  # only slow: its heartbeats will resume

    def probe_expired(self, b: int, probe: int) -> None:
        """``fence_broker``: no answer in time. (Fenced even if a heartbeat came meanwhile, as
        the actor does; the next heartbeat brings it back.)"""
        if not self.up or self.probing.get(b) != probe:
            return
        del self.probing[b]
        self.liveness.fence(b)
        self.sim.stats["fenced"] += 1
        self.sim.note(f"controller: fences broker {b}")
        live = self.live()
        self._change([self._fence(self.states[p], b, self.live_for(p, live))
                      for p in list(self.states)])  # fmt: skip

    def _fence(self, p: PartitionState, b: int, live: set[int]) -> PartitionState | None:
        if self.cfg.broken == "unclean_election" and p.leader == b:
            return _elect_outside_isr(p, b, live)
        return elections.fence_broker(p, b, live, False, self.min_isr)

    def preferred_leader_tick(self, process: int) -> None:
        if not self.up or process != self.process:
            return
        live = self.live()
        self._change([elections.preferred_leader(self.states[p], self.live_for(p, live))
                      for p in list(self.states)])  # fmt: skip
        self.sim.scheduler.after(self.cfg.preferred_leader_ms, self.preferred_leader_tick, process)

    # -- requests --------------------------------------------------------------------------------

    def _seen(self, b: int, process: int) -> None:
        """``PartitionChanges.broker_seen_on``: a newer process of ``b`` (its node restarted)
        is recorded, and with ``LIVE_AFTER_CHECKIN`` its replicas leave every ISR until each
        checks in from it."""
        known = self.metadata.processes.get(b)
        if known is not None and process <= known:
            return
        self.metadata.processes[b] = process
        if known is None or LIVE_AFTER_CHECKIN not in self.cfg.proposed:
            return
        live = self.live()
        self._change([elections.fence_broker(self.states[p], b, self.live_for(p, live) - {b},
                                             False, self.min_isr)
                      for p, replicas in self.sim.partitions.items() if b in replicas])  # fmt: skip

    def on_heartbeat(self, b: int, process: int) -> None:
        self._seen(b, process)
        self._alive(b)

    def on_replica_started(self, p: int, b: int, clean: bool, position: LogPosition,
                           process: int, req: int) -> None:  # fmt: skip
        """A replica's check-in after a restart: a new replica epoch, and the election
        rules for a replica that may have lost its unflushed tail. A check-in from an older
        process of the broker than one already seen is a dead life's, late: ignored, as
        rafka's controller does once the broker's agent names its current node."""
        if LIVE_AFTER_CHECKIN in self.cfg.proposed and process < self.metadata.processes.get(b, 0):
            self.sim.stats["stale_checkins"] += 1
            return
        self._seen(b, process)
        self.metadata.checked_in[p, b] = max(self.metadata.checked_in[p, b], process)
        self._alive(b)
        epoch = self.metadata.start_replica(p, b)
        live = self.live_for(p, self.live()) | {b}
        self._apply(elections.replica_restarted(self.states[p], b, live, False, clean,
                                                position, self.min_isr))  # fmt: skip
        self._answer(b, "checkin_answer", p, req, epoch, State.of(self.states[p]))

    def on_alter_isr(self, p: int, b: int, leader_epoch: int, partition_epoch: int,
                     isr: tuple[int, ...], incarnations: dict[int, int],
                     req: int) -> None:  # fmt: skip
        """``incarnations``: the replica epochs the leader saw each proposed member fetch in."""
        current = self.metadata.replica_epochs(p)
        error = None
        try:
            new = elections.alter_isr(self.states[p], b, leader_epoch, partition_epoch,
                                      list(isr), self.live_for(p, self.live()), incarnations,
                                      current,
                                      self.min_isr)  # fmt: skip
            self._apply(new)
        except RafkaError as e:
            error = type(e).__name__
            self.sim.stats["isr_refused"] += 1
            # ``PartitionChanges.alter_isr``: a joiner seen in an older replica epoch than the
            # recorded one is asked to confirm it (a late check-in of a dead life may have
            # recorded the newer one, and the live replica would never join again).
            for j in elections.joiners_seen_in_an_earlier_life(self.states[p], list(isr),
                                                               incarnations, current):
                self.sim.network.send(j, "confirm_epoch", p, current[j])
        self._answer(b, "isr_answer", p, req, error, State.of(self.states[p]))

    def on_pull_state(self, p: int, b: int, req: int) -> None:
        self._answer(b, "state_answer", p, req, State.of(self.states[p]))


def _names(states: list[PartitionState]) -> str:
    return ", ".join(f"p{s.partition}" for s in states)


def _elect_outside_isr(p: PartitionState, dead: int, live: set[int]) -> PartitionState:
    """The deliberately broken rule: a dead leader's first live replica takes over, in sync
    or not, and joins the ISR."""
    isr = [b for b in p.isr if b != dead] or [dead]
    leader = next((b for b in p.replicas if b != dead and b in live), NO_LEADER)
    if leader != NO_LEADER and leader not in isr:
        isr.append(leader)
    return PartitionState(p.partition, list(p.replicas), isr, leader, p.leader_epoch + 1,
                          p.partition_epoch + 1)  # fmt: skip
