"""A seeded, deterministic simulation of rafka's replication protocol.

In the spirit of Kafka's ``RaftEventSimulationTest``: one ``random.Random(seed)`` drives a
small cluster (a controller, 3-4 brokers, 1-3 partitions of three replicas) through a few
hundred events on a simulated clock: no threads, no wall clock, no Ray. The decisions are
rafka's own plain-Python modules, called as the actors call them:

- ``rafka.cluster.elections`` (``fence_broker``, ``elect_if_leaderless``,
  ``replica_restarted``, ``preferred_leader``, ``alter_isr`` with the incarnations) and
  ``rafka.cluster.liveness.BrokerLiveness`` decide the controller's partition states;
- ``rafka.cluster.replication`` (``LeaderState``, ``diverging_epoch``, ``truncation_offset``)
  decides the leaders' high watermarks and ISR proposals and the followers' truncation;
- ``rafka.storage.leader_epoch.LeaderEpochCache`` (kept in memory) answers epoch lookups.

Only the glue the actors provide is written here, after ``actors/controller.py`` and
``actors/partition_replica.py``: heartbeats, the probe of a silent broker and fencing; state
pushes to live brokers only, and the push of every hosted partition's state to a fenced
broker that comes back; the check-in of a restarted replica (with its incarnation, which the
controller keeps per replica); the follower fetch loop (with its incarnation), its state pull
after a second without progress (leaders never pull), truncation on divergence (also
forgetting epochs recorded but never written); a new leader's epoch recorded at election;
acks=all, failed with NotEnoughReplicasAfterAppend when the leader's ISR is below
``min.insync.replicas`` once the high watermark passes the record; a restarted log truncates
its epoch cache to its log end, as ``Log`` does on every load.

Failure model, after Ray's delivery guarantees. Messages between live actors are never lost;
they are delayed at random (a few, while faults are on, by up to 1.5 s), so they arrive out of
order. A request (or push) to a broker is bound to the broker process running when it is
sent, and is lost if that process is down or dies before it arrives (Ray fails calls to a dead
actor instance; rafka's replicas have ``max_task_retries=0``): a follower's fetch then fails
at once (RayActorError), other callers wait for their timeout. An answer is lost if the
process that answers dies before it arrives (a fetch then fails the same way). A request
sent before its sender died still arrives (a late fetch from a replica's earlier life). The
controller never fails. A broker

- crashes (its process dies, its log survives), or crashes lossily (each log loses its
  unflushed tail, as in a power failure), and restarts after a random downtime;
- or stalls (a long pause, as in a GC pause or an overloaded node): it handles nothing, and
  messages to it wait, until the pause ends; a long stall gets it fenced while it is alive,
  so that it comes back to the controller and is told what it missed.

At most RF-1 brokers are down or stalled at once. A replicated log keeps a committed record
only while some holder of it survives, so a lossy crash is injected only while another holder
of every committed record is sure to survive it, chosen by ``SimConfig.lossy_rule``:

- ``"others_checked_in"``: every other replica of the broker's partitions is up and checked
  in (the rule first proposed). Too weak: those replicas may be out of the ISR and lack
  records the crashing broker alone holds;
- ``"others_in_sync"``: they are also in the controller's ISR, so they hold every committed
  record (invariant 4), and where the crashing broker leads it has no ISR proposal in
  flight (which could take them out of the ISR after it crashed);
- ``"one_holder_at_a_time"`` (the default): as ``others_in_sync``, and no broker crashes or
  stalls while one that lost its tail has not yet rejoined the ISR of all its partitions.
  Without this, losing the last intact holder can leave the broker that lost records as the
  last ISR member, and rafka, like Kafka before KIP-966, elects it (design gap C in the test
  module).

Invariants, checked after every event (``Checker``):

1. at most one replica (one replica incarnation) ever leads a given (partition, leader epoch);
2. the controller's leader epoch and partition epoch never decrease; nor does the leader
   epoch a replica knows, within one incarnation;
3. a replica's high watermark never decreases within one incarnation, as leader or follower;
4. every record below the committed point (the highest high watermark any leader exposed)
   is, at the same offset with the same id, in the log of every live, checked-in member of
   the controller's current ISR; a committed record is never replaced;
5. every live replica's log agrees with the committed log below that replica's own high
   watermark, and no replica exposes a high watermark above the committed point. (Between
   its high watermark and the committed point a replica outside the ISR may still hold a
   stale tail from an old epoch, as in Kafka, until its next fetch truncates it.)
6. an acknowledged record was received by at least ``min.insync.replicas`` replicas when it
   is acknowledged (Kafka's acks=all promise).

At the end the faults stop, every broker restarts, producing stops and the cluster
converges; then every acknowledged record must be in the final leader's log, exactly once,
at its acknowledged offset, and no record whose append was refused may be there.

``SimConfig.broken`` breaks a rule on purpose, to prove the checker can fail.
``SimConfig.proposed`` holds the rules that fixed bugs G and H (in the test module): Kafka's
monotonic ``LeaderEpochCache.assign`` and the check-in that keeps the newest state pushed
while it was under way. They are rafka's rules, on by default; switching one off replays
the bug it fixed.

Replay one seed: ``python -m tests.unit.cluster.simulation --seed 7 --events 300 --verbose``.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from rafka.cluster import elections
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import NO_LEADER, PartitionState
from rafka.cluster.replication import (
    UNDEFINED_EPOCH,
    LeaderState,
    diverging_epoch,
    truncation_offset,
)
from rafka.errors import RafkaError
from rafka.storage.leader_epoch import EpochEntry, LeaderEpochCache

CONTROLLER = -100  # the controller's network address

LOSSY_RULES = ("others_checked_in", "others_in_sync", "one_holder_at_a_time")
BROKEN_RULES = ("unclean_election", "skip_divergence_check")

# Rules that fixed the last bugs this simulation found (see the test module's docstring).
# They are rafka's now and on by default; switching one off reproduces the bug it fixed.
MONOTONIC_EPOCH_CACHE = "monotonic_epoch_cache"  # bug G
CHECKIN_KEEPS_NEWEST = "checkin_keeps_newest_state"  # bug H
PROPOSALS = frozenset({MONOTONIC_EPOCH_CACHE, CHECKIN_KEEPS_NEWEST})


@dataclass(frozen=True)
class SimConfig:
    """Timings are simulated milliseconds, scaled down from production (a 1 s lag window
    instead of 30 s) so that a few hundred events see crashes, fencing and recovery.
    ``broken`` breaks one rule on purpose: "unclean_election" gives a dead leader's partition
    to its first live replica, in sync or not; "skip_divergence_check" makes leaders serve
    records without the KIP-320 check, so followers never truncate."""

    events: int = 300
    replication_factor: int = 3
    min_insync_replicas: int = 2
    heartbeat_ms: int = 200  # also the period of each broker's timers
    session_timeout_ms: int = 1_000
    controller_tick_ms: int = 200  # how often the controller looks for silent brokers
    probe_timeout_ms: int = 500  # the controller probes for half a session
    preferred_leader_ms: int = 5_000
    lag_time_max_ms: int = 1_000
    fetch_timeout_ms: int = 5_500  # replica.fetch.wait.max.ms + 5 s
    controller_timeout_ms: int = 10_000  # _call_controller's timeout
    state_pull_ms: int = 1_000  # STATE_PULL_AFTER_S
    max_fetch_records: int = 20
    append_every_ms: int = 60  # mean gap between client appends
    fault_every_ms: int = 700  # mean gap between fault attempts
    downtime_ms: tuple[int, int] = (200, 3_000)
    stall_ms: tuple[int, int] = (300, 3_000)
    delay: float = 0.03
    latency_ms: tuple[int, int] = (1, 10)
    delayed_ms: tuple[int, int] = (100, 1_500)
    flush_chance: float = 0.3  # per replica per timer tick
    lossy_share: float = 0.4  # of faults, when the lossy rule allows a lossy crash
    stall_share: float = 0.25  # of faults
    lossy_rule: str = "one_holder_at_a_time"
    heal_limit_ms: int = 60_000
    broken: str | None = None
    proposed: frozenset = PROPOSALS


class State(NamedTuple):
    """A partition state as it travels over the network (immutable)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    @classmethod
    def of(cls, p: PartitionState) -> "State":
        return cls(p.leader, p.leader_epoch, p.partition_epoch, tuple(p.isr), tuple(p.replicas))

    @property
    def version(self) -> tuple[int, int]:
        return self.leader_epoch, self.partition_epoch


class InvariantViolation(Exception):
    def __init__(self, invariant: int | str, message: str) -> None:
        super().__init__(f"invariant {invariant}: {message}")
        self.invariant = invariant


# -- clock and network ---------------------------------------------------------------------------


class Scheduler:
    """The simulated clock and its queue of pending actions, ordered by (time, insertion
    order): the only source of time and of ordering, so one seed always runs the same way."""

    def __init__(self) -> None:
        self.now = 0
        self._queue: list = []
        self._seq = 0

    def at(self, time: int, action: Callable, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time, self._seq, action, args))

    def after(self, delay: int, action: Callable, *args) -> None:
        self.at(self.now + delay, action, *args)

    def pop(self) -> tuple[Callable, tuple]:
        time, _, action, args = heapq.heappop(self._queue)
        self.now = time
        return action, args


class Network:
    """Delivers each message after a random latency; while faults are on, a few are held back
    long enough to arrive after later ones. Nothing between live processes is lost. A message
    to a broker is bound to the broker process running when it is sent: it is lost if that
    process is down by then or dies before it arrives, and waits while it is stalled
    (``Simulation.deliver``); an answer is also lost if the process that answers dies before
    it arrives (``Simulation.deliver_answer``)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.rng = sim.rng
        self.cfg = sim.cfg
        self.faulty = True

    def latency(self) -> int:
        rng, cfg = self.rng, self.cfg
        if self.faulty and rng.random() < cfg.delay:
            self.sim.faults["delayed_message"] += 1
            return self.sim.uniform(*cfg.delayed_ms)
        return self.sim.uniform(*cfg.latency_ms)

    def _process(self, dst: int) -> int | None:
        if dst == CONTROLLER:
            return None
        broker = self.sim.brokers[dst]
        return broker.process if broker.up else None

    def send(self, dst: int, kind: str, *payload) -> None:
        """A request (or a push): it arrives even if its sender dies meanwhile."""
        process = self._process(dst)
        self.sim.scheduler.after(self.latency(), self.sim.deliver, dst, process, kind, payload)

    def answer(self, src: "Broker", dst: int, kind: str, *payload) -> None:
        """The answer to a call ``src`` served: lost if ``src``'s process dies before it
        arrives (Ray then fails the call)."""
        process = self._process(dst)
        self.sim.scheduler.after(self.latency(), self.sim.deliver_answer, src.id, src.process,
                                 dst, process, kind, payload)  # fmt: skip


# -- the controller ------------------------------------------------------------------------------


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


# -- replicas ------------------------------------------------------------------------------------


class MemoryEpochCache(LeaderEpochCache):
    """The real leader-epoch cache, written nowhere: "on disk" here means in ``Disk``."""

    def __init__(self) -> None:  # nothing to load
        self.path = "<memory>"
        self.entries = []

    def _persist(self) -> None:
        pass


class IgnoringEpochCache(MemoryEpochCache):
    """The cache as it was before bug G was fixed (rule MONOTONIC_EPOCH_CACHE off): an epoch
    not above the latest was ignored instead of replacing the entries it contradicts."""

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))


@dataclass
class Disk:
    """What survives a crash of one replica: the log (``(epoch, id)`` per offset), how much of
    it is flushed, the epoch cache (persisted on every change, like its checkpoint file) and
    the last checkpointed high watermark. The checker's bookkeeping: ``agree``, the length of
    the log's prefix known to equal the committed log, and ``lost``, the tail the last power
    failure took (its records were received, which is what acks=all counts)."""

    log: list[tuple[int, int]] = field(default_factory=list)
    flushed: int = 0
    cache: MemoryEpochCache = field(default_factory=MemoryEpochCache)
    hw_checkpoint: int = 0
    agree: int = 0
    lost: dict[int, tuple[int, int]] = field(default_factory=dict)

    def truncate(self, end: int) -> None:
        """``Log.truncate_to`` and then, as the follower always does, the epoch cache (it
        forgets epochs that start at ``end`` though nothing was written in them)."""
        if end < len(self.log):
            del self.log[end:]
            self.flushed = min(self.flushed, end)
            self.agree = min(self.agree, end)
        self.cache.truncate_from_end(end)

    def lose_unflushed(self) -> None:
        """A power failure: the unflushed tail is gone."""
        self.lost = dict(enumerate(self.log[self.flushed :], self.flushed))
        self.truncate(self.flushed)


class Broker:
    """One broker process (its node agent and its replica actors): its heartbeat, one timer
    for its replicas, and the replicas. ``process`` grows with every start; a crash drops
    every ``Replica`` (memory) and keeps every ``Disk``. A stalled broker runs nothing until
    ``stalled_until``."""

    def __init__(self, sim: "Simulation", broker_id: int, partitions: list[int]) -> None:
        self.sim = sim
        self.id = broker_id
        self.up = False
        self.process = 0
        self.stalled_until = 0
        monotonic = MONOTONIC_EPOCH_CACHE in sim.cfg.proposed
        cache = MemoryEpochCache if monotonic else IgnoringEpochCache
        self.disks = {p: Disk(cache=cache()) for p in partitions}
        self.replicas: dict[int, Replica] = {}

    def start(self, fresh: bool) -> None:
        """Fresh: the replicas are created with the controller's state; else they restart
        from their logs and check in."""
        self.up = True
        self.process += 1
        self.stalled_until = 0
        self.replicas = {}
        for p, disk in self.disks.items():
            state = State.of(self.sim.controller.states[p]) if fresh else None
            self.replicas[p] = Replica(self, p, disk, state)
        self.sim.dirty.update(self.disks)
        self.tick(self.process)

    def crash(self, lossy: bool) -> None:
        self.up = False
        self.replicas = {}
        for p, disk in self.disks.items():
            if lossy and disk.flushed < len(disk.log):
                self.sim.note(f"broker {self.id} p{p} log {len(disk.log)} -> {disk.flushed}")
                disk.lose_unflushed()
            disk.cache.truncate_from_end(len(disk.log))  # as Log does whenever it loads
        self.sim.dirty.update(self.disks)

    def stalled(self) -> bool:
        return self.stalled_until > self.sim.scheduler.now

    def tick(self, process: int) -> None:
        if not self.up or process != self.process:
            return
        sched = self.sim.scheduler
        if self.stalled():
            sched.at(self.stalled_until, self.tick, process)
            return
        self.sim.network.send(CONTROLLER, "heartbeat", self.id)
        for replica in self.replicas.values():
            replica.tick()
        sched.after(self.sim.cfg.heartbeat_ms, self.tick, process)

    def on_probe(self, probe: int) -> None:
        self.sim.network.answer(self, CONTROLLER, "probe_answer", self.id, probe)


class Replica:
    """One replica's memory (lost in a crash) over its ``Disk``, following
    ``PartitionReplica``: each start is a new ``incarnation``; after a restart it checks in
    and ignores pushed states until the answer; it leads with a ``LeaderState`` while the
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
        self.incarnation = self.sim.next_incarnation()  # time.time_ns() at the start
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
        self.pending_acks: deque[tuple[int, int]] = deque()
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
        self._send(CONTROLLER, "replica_started", self.b, False, self.incarnation,
                   self.checkin_req)  # fmt: skip

    def on_checkin_answer(self, req: int, state: State) -> None:
        if self.checked_in or req != self.checkin_req:
            return
        self.checked_in = True
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
                                  self.cfg.lag_time_max_ms, s.partition_epoch)  # fmt: skip
        self.sim.checker.on_leadership(self, s.leader_epoch)
        self.sim.note(f"broker {self.b} leads p{self.p} in epoch {s.leader_epoch} (log end "
                      f"{log_end}, high watermark {self.hw}, ISR {list(s.isr)})")  # fmt: skip
        self._set_leader_hw(self.leader.on_local_append(log_end))

    def _step_down(self) -> None:
        self.leader = None
        self.isr_req = None
        self.pending_acks.clear()  # their producers get NotLeaderOrFollower: outcome unknown

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
        enough = self.leader.enough_in_sync(self.cfg.min_insync_replicas)
        while self.pending_acks and self.pending_acks[0][0] < hw:
            offset, rid = self.pending_acks.popleft()
            if enough:
                self.sim.checker.on_ack(self.p, offset, rid)
            else:  # written, but the ISR shrank below min.insync.replicas
                self.sim.stats["failed_after_append"] += 1

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

    def on_append(self, rid: int) -> None:
        leader = self.leader
        if leader is None or not leader.enough_in_sync(self.cfg.min_insync_replicas):
            self.sim.checker.refused.add(rid)
            self.sim.stats["refused"] += 1
            return
        log = self.disk.log
        offset = len(log)
        log.append((leader.leader_epoch, rid))
        self.disk.cache.assign(leader.leader_epoch, offset)
        self.sim.dirty.add(self.p)
        self.pending_acks.append((offset, rid))
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
        records = tuple(log[fetch_offset : fetch_offset + self.cfg.max_fetch_records])
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
            self.fetch()
            return
        first, records = data
        if records and first == len(log):  # (always: one fetch at a time)
            for epoch, rid in records:
                disk.cache.assign(epoch, len(log))
                log.append((epoch, rid))
        hw = min(leader_hw, len(log))
        if hw > self.hw:  # forward only, as PartitionReplica._set_high_watermark
            self._set_hw(hw)
        if records:
            self.fetch()


# -- the checker ---------------------------------------------------------------------------------


class Checker:
    """The truth the invariants are checked against: each partition's committed log
    (records below the highest high watermark a leader exposed, taken from that leader's
    log), every acknowledged and refused record, and who led each epoch."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.committed: dict[int, list[tuple[int, int]]] = {p: [] for p in sim.partitions}
        self.acked: dict[int, dict[int, int]] = {p: {} for p in sim.partitions}
        self.refused: set[int] = set()
        self.leaders: dict[tuple[int, int], tuple[int, int]] = {}

    def on_leadership(self, replica: Replica, epoch: int) -> None:
        me = (replica.b, replica.incarnation)
        holder = self.leaders.setdefault((replica.p, epoch), me)
        if holder != me:
            raise InvariantViolation(1, f"broker {me[0]} (incarnation {me[1]}) leads p{replica.p} "
                                        f"in epoch {epoch}, already led by broker {holder[0]} "
                                        f"(incarnation {holder[1]})")  # fmt: skip

    def on_leader_high_watermark(self, replica: Replica) -> None:
        """A leader exposed a new high watermark: what lies below it is committed."""
        committed = self.committed[replica.p]
        log = replica.disk.log
        if replica.hw > len(log):
            raise InvariantViolation(3, f"{replica!r} high watermark {replica.hw} is past its "
                                        f"log end {len(log)}")  # fmt: skip
        if replica.hw <= len(committed):
            return
        agree = _agreement(replica.disk, committed)
        if agree < len(committed):
            raise InvariantViolation(4, f"leader {replica!r} exposes high watermark {replica.hw} "
                                        f"but holds {log[agree]} at offset {agree} where "
                                        f"{committed[agree]} is committed")  # fmt: skip
        committed.extend(log[len(committed) : replica.hw])
        self.sim.dirty.add(replica.p)

    def on_ack(self, p: int, offset: int, rid: int) -> None:
        sim = self.sim
        record = self.committed[p][offset]
        if record[1] != rid:
            raise InvariantViolation(4, f"p{p} acknowledged id {rid} at offset {offset} where "
                                        f"{record} is committed")  # fmt: skip
        self.acked[p][offset] = rid
        sim.stats["acknowledged"] += 1
        disks = [sim.brokers[b].disks[p] for b in sim.partitions[p]]
        holders = [d for d in disks if _at(d.log, offset) == record or d.lost.get(offset) == record]
        if len(holders) < sim.cfg.min_insync_replicas:
            raise InvariantViolation(6, f"p{p} acknowledged id {rid} at offset {offset}, "
                                        f"received by {len(holders)} replica(s) only")

    def check_partition(self, p: int) -> None:
        """Invariants 4 and 5 for every live replica of ``p``."""
        sim = self.sim
        committed = self.committed[p]
        isr = sim.controller.states[p].isr
        for b in sim.partitions[p]:
            broker = sim.brokers[b]
            if not broker.up:
                continue
            replica = broker.replicas[p]
            log = replica.disk.log
            agree = _agreement(replica.disk, committed)
            if replica.hw > len(committed):
                raise InvariantViolation(5, f"{replica!r} exposes high watermark {replica.hw} "
                                            f"above the committed point {len(committed)}")
            if replica.checked_in and b in isr and agree < len(committed):
                raise InvariantViolation(4, f"ISR member {replica!r} lacks committed record "
                                            f"{committed[agree]} at offset {agree} (it has "
                                            f"{_at(log, agree)}; committed point "
                                            f"{len(committed)}, ISR {isr})")  # fmt: skip
            if agree < min(replica.hw, len(log)):
                raise InvariantViolation(5, f"{replica!r} holds {log[agree]} at offset {agree} "
                                            f"below its high watermark {replica.hw}; "
                                            f"committed there: {committed[agree]}")  # fmt: skip

    def final_check(self, leaders: dict[int, Replica]) -> None:
        """After healing: every acknowledged record once at its offset, no refused one."""
        for p, leader in leaders.items():
            log = leader.disk.log
            ids = [rid for _, rid in log]
            if len(set(ids)) != len(ids):
                twice = sorted(rid for rid, n in Counter(ids).items() if n > 1)
                raise InvariantViolation(4, f"p{p}: ids {twice[:5]} are in the final log twice")
            for offset, rid in sorted(self.acked[p].items()):
                if _at(log, offset) is None or log[offset][1] != rid:
                    raise InvariantViolation(4, f"p{p}: acknowledged id {rid} at offset {offset} "
                                                f"is not in the final log of {leader!r}, which "
                                                f"has {_at(log, offset)} there")  # fmt: skip
            refused = self.refused.intersection(ids)
            if refused:
                raise InvariantViolation(4, f"p{p}: refused ids {sorted(refused)[:5]} are in "
                                            "the final log")  # fmt: skip


def _agreement(disk: Disk, committed: list) -> int:
    """Extend (and return) how long a prefix of the disk's log equals the committed log."""
    log = disk.log
    agree = disk.agree
    limit = min(len(log), len(committed))
    while agree < limit and log[agree] == committed[agree]:
        agree += 1
    disk.agree = agree
    return agree


def _at(log: list, offset: int):
    return log[offset] if 0 <= offset < len(log) else None


# -- the simulation ------------------------------------------------------------------------------


class Simulation:
    """One seeded run: draws the cluster from the seed, runs ``cfg.events`` events with
    faults, then heals and checks the final logs. ``run`` raises AssertionError naming the
    seed, the event, the invariant and the last events."""

    TRACE_TAIL = 30

    def __init__(self, seed: int, cfg: SimConfig | None = None, record: bool = False) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        if self.cfg.lossy_rule not in LOSSY_RULES:
            raise ValueError(f"lossy_rule must be one of {LOSSY_RULES}")
        if self.cfg.broken not in (None, *BROKEN_RULES):
            raise ValueError(f"broken must be None or one of {BROKEN_RULES}")
        if not self.cfg.proposed <= PROPOSALS:
            raise ValueError(f"proposed rules must be some of {sorted(PROPOSALS)}")
        self.rng = random.Random(seed)
        self.scheduler = Scheduler()
        self.network = Network(self)
        self.stats: Counter = Counter()
        self.faults: Counter = Counter()
        self.dirty: set[int] = set()
        self.event = 0
        self.tail: deque = deque(maxlen=self.TRACE_TAIL)
        self.trace: list[str] | None = [] if record else None
        self.faulty = True
        self.recovering: set[int] = set()  # brokers that lost a tail, until back in every ISR
        self._ids = 0
        self._incarnations = 0
        n_brokers = self.rng.choice((3, 4))
        n_partitions = self.rng.choice((1, 2, 3))
        rf = self.cfg.replication_factor
        self.partitions = {p: [(p + k) % n_brokers for k in range(rf)] for p in range(n_partitions)}
        self.brokers = {
            b: Broker(self, b, [p for p, rs in self.partitions.items() if b in rs])
            for b in range(n_brokers)
        }
        self.checker = Checker(self)
        self.controller = Controller(self)

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def uniform(self, low: int, high: int) -> int:
        """``rng.randint``, faster."""
        return low + int(self.rng.random() * (high - low + 1))

    def next_incarnation(self) -> int:
        self._incarnations += 1
        return self._incarnations

    def describe(self) -> str:
        return f"seed {self.seed}: {len(self.brokers)} brokers, replicas {self.partitions}"

    def summary(self) -> dict[str, int]:
        return {"events": self.event, **self.faults, **self.stats}

    # -- driving ---------------------------------------------------------------------------------

    def run(self) -> "Simulation":
        sched = self.scheduler
        for broker in self.brokers.values():
            sched.after(self.rng.randrange(self.cfg.heartbeat_ms), broker.start, True)
        self.controller.start()
        sched.after(self._gap(self.cfg.append_every_ms), self.client_append)
        sched.after(self._gap(self.cfg.fault_every_ms), self.inject_fault)
        try:
            while self.event < self.cfg.events:
                self.step()
            self.heal()
        except InvariantViolation as v:
            raise AssertionError(self._report(v)) from None
        return self

    def step(self) -> None:
        action, args = self.scheduler.pop()
        self.event += 1
        entry = (self.event, self.scheduler.now, action, args)
        self.tail.append(entry)
        if self.trace is not None:
            self.trace.append(_describe(*entry))
        action(*args)
        if self.dirty:
            for p in self.dirty:
                self.checker.check_partition(p)
            self.dirty.clear()

    def deliver_answer(self, src: int, src_process: int, dst: int, process: int | None,
                       kind: str, payload: tuple) -> None:  # fmt: skip
        sender = self.brokers[src]
        if not sender.up or sender.process != src_process:
            self.faults["lost_from_dead"] += 1
            if kind != "fetch_answer":
                return
            p, req, *_ = payload  # the follower's call fails (RayActorError)
            payload = (p, req, "ActorDied", -1, None, None)
        self.deliver(dst, process, kind, payload)

    def deliver(self, dst: int, process: int | None, kind: str, payload: tuple) -> None:
        if dst == CONTROLLER:
            getattr(self.controller, "on_" + kind)(*payload)
            return
        broker = self.brokers[dst]
        if not broker.up or broker.process != process:
            self.faults["lost_to_dead"] += 1
            if kind == "fetch":  # the follower's call fails (RayActorError)
                p, follower, *_, req = payload
                self.network.send(follower, "fetch_answer", p, req, "ActorDied", -1, None, None)
            return
        if broker.stalled():  # it waits in the actor's queue
            self.scheduler.at(broker.stalled_until + self.network.latency(), self.deliver, dst,
                              process, kind, payload)  # fmt: skip
            return
        if kind == "probe":
            broker.on_probe(*payload)
            return
        getattr(broker.replicas[payload[0]], "on_" + kind)(*payload[1:])

    def note(self, text: str) -> None:
        """Add what an event did to the trace."""
        entry = (self.event, self.scheduler.now, None, text)
        self.tail.append(entry)
        if self.trace is not None:
            self.trace.append(_describe(*entry))

    def _gap(self, mean_ms: int) -> int:
        return 1 + int(self.rng.expovariate(1 / mean_ms))

    # -- clients and faults ----------------------------------------------------------------------

    def client_append(self) -> None:
        """A producer (acks=all) sends one record to the leader its metadata names."""
        if not self.faulty:
            return
        p = self.rng.randrange(len(self.partitions))
        leader = self.controller.states[p].leader
        if leader != NO_LEADER:
            self.stats["appends"] += 1
            self.network.send(leader, "append", p, self.next_id())
        self.scheduler.after(self._gap(self.cfg.append_every_ms), self.client_append)

    def inject_fault(self) -> None:
        if not self.faulty:
            return
        cfg = self.cfg
        self.scheduler.after(self._gap(cfg.fault_every_ms), self.inject_fault)
        self.recovering = {b for b in self.recovering if not self._back_in_sync(b)}
        if self.recovering and cfg.lossy_rule == "one_holder_at_a_time":
            return
        fine = [b for b in sorted(self.brokers) if self._fine(b)]
        if len(self.brokers) - len(fine) >= cfg.replication_factor - 1:
            return
        b = self.rng.choice(fine)
        broker = self.brokers[b]
        if self.rng.random() < cfg.stall_share:
            self.faults["stall"] += 1
            broker.stalled_until = self.scheduler.now + self.rng.randint(*cfg.stall_ms)
            self.note(f"broker {b} stalls until {broker.stalled_until} ms")
            return
        lossy = self.rng.random() < cfg.lossy_share and self._may_lose_tail(b)
        self.faults["lossy_crash" if lossy else "crash"] += 1
        self.note(f"broker {b} crashes{' losing its unflushed tail' if lossy else ''}")
        if lossy:
            self.recovering.add(b)
        broker.crash(lossy)
        self.scheduler.after(self.rng.randint(*cfg.downtime_ms), self.restart, b)

    def _fine(self, b: int) -> bool:
        broker = self.brokers[b]
        return broker.up and not broker.stalled()

    def _may_lose_tail(self, b: int) -> bool:
        """The failure model (see the module docstring): another holder of every committed
        record of ``b``'s partitions survives."""
        in_sync = self.cfg.lossy_rule != "others_checked_in"
        for p, replicas in self.partitions.items():
            if b not in replicas:
                continue
            isr = self.controller.states[p].isr
            leader = self.brokers[b].replicas[p].leader
            if in_sync and leader is not None and leader.pending_isr is not None:
                return False  # it may still take the others out of the ISR after it crashed
            for other in replicas:
                if other == b:
                    continue
                if not self._fine(other) or not self.brokers[other].replicas[p].checked_in:
                    return False
                if in_sync and other not in isr:
                    return False
        return True

    def _back_in_sync(self, b: int) -> bool:
        broker = self.brokers[b]
        return broker.up and all(
            broker.replicas[p].checked_in and b in self.controller.states[p].isr
            for p in broker.disks
        )

    def restart(self, b: int) -> None:
        broker = self.brokers[b]
        if not broker.up:
            self.faults["restart"] += 1
            broker.start(fresh=False)

    # -- healing ---------------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop faults and producing, bring every broker back, and run until every replica
        holds its leader's whole log, committed; then check the acknowledged records."""
        self.faulty = False
        self.network.faulty = False
        for b in sorted(self.brokers):
            self.restart(b)
        deadline = self.scheduler.now + self.cfg.heal_limit_ms
        while (leaders := self._converged()) is None:
            if self.scheduler.now > deadline:
                raise InvariantViolation("liveness", "the cluster did not converge within "
                                                     f"{self.cfg.heal_limit_ms} ms of healing")
            for _ in range(50):
                self.step()
        self.checker.final_check(leaders)

    def _converged(self) -> dict[int, Replica] | None:
        leaders = {}
        for p, replicas in self.partitions.items():
            state = self.controller.states[p]
            if state.leader == NO_LEADER:
                return None
            leader = self.brokers[state.leader].replicas.get(p)
            if leader is None or leader.leader is None:
                return None
            if leader.leader.leader_epoch != state.leader_epoch:
                return None
            log = leader.disk.log
            for b in replicas:
                r = self.brokers[b].replicas.get(p)
                if r is None or not r.checked_in or r.disk.log != log or r.hw != len(log):
                    return None
            leaders[p] = leader
        return leaders

    # -- reporting -------------------------------------------------------------------------------

    def _report(self, v: InvariantViolation) -> str:
        cfg = self.cfg
        options = "".join(
            f" --{name.replace('_', '-')} {getattr(cfg, name)}"
            for name in ("lossy_rule", "broken")
            if getattr(cfg, name) != getattr(SimConfig, name)
        )
        options += f" --proposed {','.join(sorted(cfg.proposed))}" if cfg.proposed else ""
        lines = [
            f"{self.describe()}; event {self.event} at {self.scheduler.now} ms: {v}",
            f"replay: python -m tests.unit.cluster.simulation --seed {self.seed} "
            f"--events {cfg.events}{options} --verbose",
            "controller: " + ", ".join(f"p{p}={tuple(State.of(s))}"
                                       for p, s in self.controller.states.items()),
            f"last {len(self.tail)} events:",
        ]  # fmt: skip
        lines += [_describe(*entry) for entry in self.tail]
        return "\n".join(lines)


def _describe(event: int, now: int, action: Callable | None, args) -> str:
    if action is None:
        return f"        {args}"
    if action.__name__ in ("deliver", "deliver_answer"):
        dst, _, kind, payload = args[-4:]
        to = "controller" if dst == CONTROLLER else f"broker {dst}"
        return f"#{event} {now}ms {kind}{payload} -> {to}"
    owner = getattr(action, "__self__", None)
    who = f" broker {owner.id}" if isinstance(owner, Broker) else ""
    return f"#{event} {now}ms {action.__name__}{who}{args if args else ''}"


def replay(seed: int, events: int = 300, verbose: bool = False, **config) -> Simulation:
    """Run one seed again, recording its trace; print the trace when ``verbose``."""
    sim = Simulation(seed, SimConfig(events=events, **config), record=True)
    try:
        sim.run()
    finally:
        if verbose:
            print(sim.describe())
            print("\n".join(sim.trace))
        print(sim.summary())
    return sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--events", type=int, default=SimConfig.events)
    parser.add_argument("--lossy-rule", default=SimConfig.lossy_rule, choices=LOSSY_RULES)
    parser.add_argument("--broken", choices=BROKEN_RULES)
    parser.add_argument("--proposed", default="", help="rules rafka lacks, to apply: 'all' or "
                        f"some of {', '.join(sorted(PROPOSALS))}, comma-separated")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print the whole trace")
    args = parser.parse_args()
    proposed = PROPOSALS if args.proposed == "all" else frozenset(
        filter(None, args.proposed.split(","))
    )  # fmt: skip
    if not proposed <= PROPOSALS:
        parser.error(f"unknown proposed rules {sorted(proposed - PROPOSALS)}")
    try:
        replay(args.seed, args.events, args.verbose, lossy_rule=args.lossy_rule,
               broken=args.broken, proposed=proposed)  # fmt: skip
    except AssertionError as failure:
        raise SystemExit(str(failure)) from None


if __name__ == "__main__":
    main()
