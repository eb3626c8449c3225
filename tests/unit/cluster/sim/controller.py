"""The controller model: partition states changed only through ``rafka.cluster.elections``,
with the glue of ``actors/controller.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.cluster import elections
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import NO_LEADER, PartitionState
from rafka.errors import RafkaError
from tests.unit.cluster.sim.config import InvariantViolation, State

if TYPE_CHECKING:
    from tests.unit.cluster.sim.runner import Simulation


class Controller:
    """Holds every partition's state and changes it only through ``rafka.cluster.elections``,
    as ``actors/controller.py``. Learns that a broker died only from its missed heartbeats and
    an unanswered probe; pushes every change to the partition's live replicas, and everything
    a fenced broker missed when it speaks again; answers check-ins (recording the replica's
    incarnation), ISR proposals (checked against those incarnations) and state pulls. It never
    crashes here. Invariant 2 is checked in ``_apply``."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.states = {
            p: PartitionState(p, list(replicas), list(replicas), replicas[0], 0, 0)
            for p, replicas in sim.partitions.items()
        }
        self.liveness = BrokerLiveness(sim.cfg.session_timeout_ms)
        self.liveness.track(sorted(sim.brokers), 0)
        # (partition, broker) -> newest incarnation of that replica that checked in.
        self.incarnations: dict[tuple[int, int], int] = {}
        self.probing: dict[int, int] = {}  # broker -> id of the probe waiting for its answer

    def start(self) -> None:
        self.sim.scheduler.after(self.sim.rng.randrange(self.cfg.controller_tick_ms), self.tick)
        self.sim.scheduler.after(self.cfg.preferred_leader_ms, self.preferred_leader_tick)

    def live(self) -> set[int]:
        return self.liveness.live()

    def _apply(self, new: PartitionState | None) -> None:
        if new is None:
            return
        old = self.states[new.partition]
        if new == old:
            return
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            raise InvariantViolation(2, f"controller state of p{new.partition} went from "
                                        f"{State.of(old)} to {State.of(new)}")  # fmt: skip
        self.sim.stats["elections"] += new.leader != old.leader
        self.sim.stats["isr_changes"] += new.isr != old.isr
        self.states[new.partition] = new
        self.sim.dirty.add(new.partition)
        self._push(new.partition)

    def _push(self, p: int) -> None:
        """``_push_state``: to live brokers only."""
        state = State.of(self.states[p])
        for b in state.replicas:
            if self.liveness.is_live(b):
                self.sim.network.send(b, "update_state", p, state)

    def _alive(self, b: int) -> None:
        """``_broker_alive``: a heartbeat (or a probe answer, or a check-in); a fenced broker
        that speaks again gets a leader where nobody leads and the state of every partition
        it hosts (``_broker_back``)."""
        if not self.liveness.heartbeat(b, self.sim.scheduler.now):
            return
        self.sim.stats["unfenced"] += 1
        self.sim.note(f"controller: broker {b} is back")
        live = self.live()
        for p, replicas in self.sim.partitions.items():
            if b in replicas:
                self._apply(elections.elect_if_leaderless(self.states[p], live, False))
        for p, replicas in self.sim.partitions.items():
            if b in replicas:
                self.sim.network.send(b, "update_state", p, State.of(self.states[p]))

    # -- timers ----------------------------------------------------------------------------------

    def tick(self) -> None:
        """``_watch_brokers``: probe every broker silent for a whole session."""
        now = self.sim.scheduler.now
        for b in self.liveness.suspects(now):
            if b not in self.probing:
                probe = self.probing[b] = self.sim.next_id()
                self.sim.network.send(b, "probe", probe)
                self.sim.scheduler.after(self.cfg.probe_timeout_ms, self.probe_expired, b, probe)
        self.sim.scheduler.after(self.cfg.controller_tick_ms, self.tick)

    def on_probe_answer(self, b: int, probe: int) -> None:
        if self.probing.get(b) == probe:
            del self.probing[b]
            self._alive(b)  # only slow: its heartbeats will resume

    def probe_expired(self, b: int, probe: int) -> None:
        """``fence_broker``: no answer in time. (Fenced even if a heartbeat came meanwhile, as
        the actor does; the next heartbeat brings it back.)"""
        if self.probing.get(b) != probe:
            return
        del self.probing[b]
        self.liveness.fence(b)
        self.sim.stats["fenced"] += 1
        self.sim.note(f"controller: fences broker {b}")
        live = self.live()
        for p in list(self.states):
            self._apply(self._fence(self.states[p], b, live))

    def _fence(self, p: PartitionState, b: int, live: set[int]) -> PartitionState | None:
        if self.cfg.broken == "unclean_election" and p.leader == b:
            return _elect_outside_isr(p, b, live)
        return elections.fence_broker(p, b, live, False)

    def preferred_leader_tick(self) -> None:
        live = self.live()
        for p in list(self.states):
            self._apply(elections.preferred_leader(self.states[p], live))
        self.sim.scheduler.after(self.cfg.preferred_leader_ms, self.preferred_leader_tick)

    # -- requests --------------------------------------------------------------------------------

    def on_heartbeat(self, b: int) -> None:
        self._alive(b)

    def on_replica_started(self, p: int, b: int, clean: bool, incarnation: int,
                           req: int) -> None:  # fmt: skip
        self._alive(b)
        key = (p, b)
        self.incarnations[key] = max(self.incarnations.get(key, incarnation), incarnation)
        live = self.live() | {b}
        self._apply(elections.replica_restarted(self.states[p], b, live, False, clean))
        self.sim.network.send(b, "checkin_answer", p, req, State.of(self.states[p]))

    def on_alter_isr(self, p: int, b: int, leader_epoch: int, partition_epoch: int,
                     isr: tuple[int, ...], incarnations: dict[int, int],
                     req: int) -> None:  # fmt: skip
        """``incarnations``: those the leader saw each proposed member fetch in."""
        current = {x: self.incarnations[p, x] for x in isr if (p, x) in self.incarnations}
        error = None
        try:
            new = elections.alter_isr(self.states[p], b, leader_epoch, partition_epoch,
                                      list(isr), self.live(), incarnations, current)  # fmt: skip
            self._apply(new)
        except RafkaError as e:
            error = type(e).__name__
            self.sim.stats["isr_refused"] += 1
        self.sim.network.send(b, "isr_answer", p, req, error, State.of(self.states[p]))

    def on_pull_state(self, p: int, b: int, req: int) -> None:
        self.sim.network.send(b, "state_answer", p, req, State.of(self.states[p]))


def _elect_outside_isr(p: PartitionState, dead: int, live: set[int]) -> PartitionState:
    """The deliberately broken rule: a dead leader's first live replica takes over, in sync
    or not, and joins the ISR."""
    isr = [b for b in p.isr if b != dead] or [dead]
    leader = next((b for b in p.replicas if b != dead and b in live), NO_LEADER)
    if leader != NO_LEADER and leader not in isr:
        isr.append(leader)
    return PartitionState(p.partition, list(p.replicas), isr, leader, p.leader_epoch + 1,
                          p.partition_epoch + 1)  # fmt: skip
