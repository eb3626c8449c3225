"""A seeded simulation of one consumer group: consumers built on the real member code
(``GroupMember`` behind ``GroupConsumerMixin``, as ``FakeConsumer``) against the real group
state machine (``Group``, on a ``FakeCoordinator``), under events chosen by a seeded
``random.Random``, with three properties checked after every event.

Events (``Event.kind``):

    join              a new consumer subscribes (dynamic, or static with a group_instance_id)
    leave             a consumer closes, or unsubscribes
    pause             the application stops polling for a while (shorter than its session
                      timeout, longer, or longer than max_poll_interval_ms); its heartbeat
                      thread goes on
    stall             the whole process stops (no polls, no heartbeats), then runs again
    read              a polling consumer consumes records of what it owns (positions advance)
    commit            a synchronous commit of everything or of some partitions, or an
                      asynchronous one; consumers also commit in on_partitions_revoked
                      (synchronously or asynchronously, as each was created) and auto-commit
    auto_commit_due   an auto-committing consumer's interval is up (its next poll commits)
    resubscribe       a consumer subscribes to another topic list
    grow              a topic gets more partitions
    static_restart    a static member's process is replaced by a new one with the same
                      group_instance_id; the old one is abandoned, or runs on as a zombie
    coordinator_restart
                      the coordinator dies and reloads its groups from what it wrote; calls
                      waiting on it fail with CoordinatorNotAvailable or get no answer
    hold, lose        for a while the coordinator delays calls of one method, unprocessed
                      until released (so a consumer's later call of another method may
                      overtake one: Ray does not order the calls of an async actor), or
                      processes them without answering
    hold_writes       for a while the coordinator's writes wait, in order (group records,
                      and commits it accepted: applied once written, as the actor does);
                      then they all succeed or all fail
    step, wait        time passes: consumers poll and run heartbeat rounds (in a random
                      order), the coordinator's timer runs

A consumer blocked in a sleep (a synchronous commit retrying, for one) lets the world go on:
the other consumers poll, every heartbeat thread runs (its own too), the coordinator ticks.
FencedInstanceId is fatal: the application closes that consumer.

Checks:

1. One owner. Counted: open consumers whose process runs and whose application polls (not
   paused, stalled, or blocked in a call); a paused or stalled consumer counts again as soon
   as it runs. Two counted consumers that hold one partition while both are current members
   (the coordinator has each under its member id and, if static, its instance id) are a
   finding at once. A holder that is no longer a current member and has not heard yet is
   the classic protocol's window (a zombie, a member expelled while stalled or while its
   join got no answer; Kafka has it too): it must give the partition up within
   ``STALE_GRACE_S`` of steps in which it polled and ran a heartbeat round while every call
   was answered and no call it may still wait for was dropped, or it is a finding.
2. Commits: the coordinator's committed offset of a partition never goes down (across
   coordinator restarts too), and is never below an offset a member had acknowledged.
3. Every rebalance completes: once events stop (faults lifted, every consumer not abandoned
   running and polling), within a bound computed from the members' timeouts the group is
   Stable, its members are the running consumers, each a stable member, and every partition
   of every subscribed topic is owned by exactly one consumer that subscribes to it.

``python -m tests.unit.clients.group_simulation --seeds 1000`` runs many seeds;
``--seed N`` replays one with its event log; ``--shrink N`` looks for a shorter event
sequence with the same finding.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import traceback
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from rafka.clients.rebalance_listener import ConsumerRebalanceListener
from rafka.cluster.group import GroupState
from rafka.errors import FencedInstanceId, NotEnoughReplicas, RafkaError
from rafka.types import OffsetAndMetadata, TopicPartition
from tests.unit.clients.group_fakes import (
    Clock,
    FakeConsumer,
    FakeCoordinator,
    FakeGateway,
    FakeMetadata,
)

GROUP = "g"
TOPICS = ("t0", "t1", "t2")
MAX_CONSUMERS = 6
MAX_PARTITIONS = 8
INSTANCES = ("i-0", "i-1", "i-2")
HEARTBEAT_MS = 300
REQUEST_TIMEOUT_S = 2.0
METADATA_MAX_AGE_MS = 2000
#: How long (seconds of polls and heartbeat rounds while every call is answered) a stale
#: holder may keep a disputed partition (check 1): the member's next heartbeat round or
#: poll tells it, and a rejoin after a refusal waits a retry backoff (0.1 s).
STALE_GRACE_S = 1.0
#: The smallest step of time, and the one used while converging (seconds).
TICK_S = 0.1
#: Nested sleeps deeper than this advance the clock without running the world.
MAX_DEPTH = 8

WEIGHTS = {
    "step": 30, "wait": 8, "join": 7, "leave": 3, "pause": 4, "stall": 3, "read": 10,
    "commit": 8, "auto_commit_due": 3, "resubscribe": 3, "grow": 2, "static_restart": 3,
    "coordinator_restart": 2, "hold": 5, "lose": 3, "hold_writes": 3,
}  # fmt: skip
HELD_METHODS = ("commit_offsets", "join_group", "sync_group", "heartbeat", "fetch_offsets",
                "leave_group")  # fmt: skip
LOST_METHODS = ("commit_offsets", "join_group", "sync_group", "heartbeat", "leave_group")


@dataclass(frozen=True)
class Event:
    """One injected event: its kind and the random choices it carries (``pick`` values in
    [0, 1) choose among the consumers eligible when it runs, so a shortened sequence still
    means something)."""

    kind: str
    args: tuple = ()

    def __str__(self) -> str:
        shown = ", ".join(f"{a:.3f}" if isinstance(a, float) else repr(a) for a in self.args)
        return f"{self.kind}({shown})"


def generate_events(rng: random.Random, count: int) -> list[Event]:
    """``count`` events, two joins first. Depends on ``rng`` only, not on the world."""
    kinds, weights = zip(*WEIGHTS.items())
    events = [_event(rng, "join"), _event(rng, "join")]
    while len(events) < count:
        events.append(_event(rng, rng.choices(kinds, weights)[0]))
    return events[:count]


def _event(rng: random.Random, kind: str) -> Event:
    r = rng.random
    if kind == "step":
        return Event(kind, (round(rng.uniform(0.05, 0.5), 3),))
    if kind == "wait":
        return Event(kind, (round(rng.uniform(0.5, 6.0), 3),))
    if kind == "join":
        topics = tuple(t for t in TOPICS if r() < 0.6) or (rng.choice(TOPICS),)
        return Event(kind, (
            r() < 0.35, r() < 0.3, rng.choice(["sync", "sync", "async", "none", "none"]),
            topics, rng.choice([1000, 1500, 2000, 3000]), rng.choice([3000, 4000, 6000]),
            r(),
        ))  # fmt: skip
    if kind == "leave":
        return Event(kind, (r(), rng.choice(["close", "unsubscribe"])))
    if kind == "pause":
        return Event(kind, (r(), rng.choice(["within-session", "past-session", "past-max-poll"]),
                            r()))  # fmt: skip
    if kind == "stall":
        return Event(kind, (r(), rng.choice(["short", "long"]), r()))
    if kind == "read":
        return Event(kind, (r(), rng.randint(1, 5)))
    if kind == "commit":
        return Event(kind, (r(), rng.choice(["sync", "sync-some", "async"]), r()))
    if kind == "auto_commit_due":
        return Event(kind, (r(),))
    if kind == "resubscribe":
        topics = tuple(t for t in TOPICS if r() < 0.5) or (rng.choice(TOPICS),)
        return Event(kind, (r(), topics))
    if kind == "grow":
        return Event(kind, (rng.choice(TOPICS), rng.randint(1, 2)))
    if kind == "static_restart":
        return Event(kind, (r(), rng.choice(["abandoned", "zombie"])))
    if kind == "coordinator_restart":
        return Event(kind, (r() < 0.6, r() < 0.5))
    if kind == "hold":
        return Event(kind, (rng.choice(HELD_METHODS), round(rng.uniform(0.3, 6.0), 3)))
    if kind == "lose":
        return Event(kind, (rng.choice(LOST_METHODS), round(rng.uniform(0.3, 4.0), 3)))
    if kind == "hold_writes":
        return Event(kind, (round(rng.uniform(0.2, 4.0), 3), r() < 0.3))
    raise ValueError(kind)


@dataclass
class Finding:
    kind: str
    message: str
    event: int  # index of the event it was found at (-1: while converging at the end)
    time: float

    def __str__(self) -> str:
        where = f"event #{self.event}" if self.event >= 0 else "converging"
        return f"[{self.kind}] at {where}, t={self.time:.3f}: {self.message}"


@dataclass
class Report:
    seed: int
    strategy: str
    injected: Counter = field(default_factory=Counter)  # event kinds that ran
    outcomes: Counter = field(default_factory=Counter)  # what happened (errors, windows)
    findings: list[Finding] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    converged_after_s: float | None = None
    longest_stale_window_s: float = 0.0

    def summary(self) -> str:
        lines = [
            f"seed {self.seed} ({self.strategy}): injected {dict(sorted(self.injected.items()))}",
            f"  outcomes {dict(sorted(self.outcomes.items()))}",
            f"  converged after {self.converged_after_s} s; longest stale window "
            f"{self.longest_stale_window_s:.2f} s",
        ]
        lines += [f"  FINDING {f}" for f in self.findings]
        return "\n".join(lines)


class Listener(ConsumerRebalanceListener):
    """Commits what is revoked (Kafka's documented pattern): synchronously, asynchronously,
    or not at all; ``on_partitions_lost`` is the default (it calls on_partitions_revoked, whose
    commit the member refuses itself)."""

    def __init__(self, sim: "Simulation", proc: "Process", mode: str) -> None:
        self.sim, self.proc, self.mode = sim, proc, mode

    def on_partitions_revoked(self, revoked: set) -> None:
        self.sim.outcomes["revoked"] += 1
        if self.mode != "none":
            self.sim.commit(self.proc, sorted(revoked), asynchronous=self.mode == "async",
                            where="in on_partitions_revoked")  # fmt: skip

    def on_partitions_lost(self, lost: set) -> None:
        self.sim.outcomes["lost"] += 1
        super().on_partitions_lost(lost)


class Process:
    """One consumer process and what the simulation does to it."""

    def __init__(self, name: str, consumer: FakeConsumer, instance: str | None,
                 settings: dict[str, Any], revoke_mode: str) -> None:  # fmt: skip
        self.name = name
        self.consumer = consumer
        self.instance = instance
        self.settings = settings
        self.revoke_mode = revoke_mode
        self.paused_until = 0.0
        self.stalled_until = 0.0  # math.inf: abandoned
        self.closed = False
        self.zombie = False  # a newer process took its group_instance_id
        self.blocked = 0  # sleeps its polling thread is in
        self.subscribed = True
        self.auto_commit_due = False
        self.stale_quiet_s = 0.0  # of its stale window, time it polled and heartbeated quietly
        self.stale_since: float | None = None

    @property
    def member(self):
        return self.consumer._member

    def runs(self, now: float) -> bool:
        return not self.closed and now >= self.stalled_until

    def polls(self, now: float) -> bool:
        return self.runs(now) and now >= self.paused_until and not self.blocked

    def __repr__(self) -> str:
        return self.name


@contextmanager
def seeded_member_ids(rng: random.Random) -> Iterator[None]:
    """Member ids come from ``uuid.uuid4``; seeded here so a run replays exactly (dynamic
    members are ordered by member id in the assignors)."""
    real = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = real


class Simulation:
    """One run: ``Simulation(seed).run()`` returns its ``Report``."""

    def __init__(self, seed: int, events: int = 150, events_list: list[Event] | None = None,
                 keep_log: bool = False, strategy: str | None = None,
                 topics: dict[str, int] | None = None) -> None:  # fmt: skip
        self.seed = seed
        rng = random.Random(seed)
        self.strategy = "range" if rng.random() < 0.2 else "cooperative-sticky"
        self.topics = {t: rng.randint(1, 4) for t in TOPICS}
        self.strategy = strategy or self.strategy
        self.topics = dict(topics or self.topics)
        self.events = events_list if events_list is not None else generate_events(rng, events)
        self.rng = random.Random(seed * 7919 + 1)  # interleavings, not events
        self.ids = random.Random(seed * 104729 + 2)
        self.keep_log = keep_log
        self.clock = Clock()
        self.coordinator = FakeCoordinator(self.clock)
        self.gateway = FakeGateway(self.coordinator)
        self.metadata = FakeMetadata(dict(self.topics))
        self.procs: list[Process] = []
        self.report = Report(seed, self.strategy)
        self.outcomes = self.report.outcomes
        self.faults: dict[tuple, tuple[float, Any]] = {}  # fault -> (lift at, detail)
        self.quiet_after = 0.0  # answers lost before this may still be awaited
        self.seen: dict[tuple[str, int], int] = {}  # highest committed offset observed
        self.acked: dict[tuple[str, int], int] = {}  # highest commit acknowledged to a member
        self.event_index = -1
        self.depth = 0
        self._finding_keys: set[str] = set()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> Report:
        with seeded_member_ids(self.ids):
            for i, event in enumerate(self.events):
                self.event_index = i
                self.report.injected[event.kind] += 1
                self.note(f"#{i} {event}")
                try:
                    getattr(self, f"_do_{event.kind}")(*event.args)
                except Exception as e:  # the simulation's own bug, or an uncaught one
                    self.find("unexpected-error", f"{event} raised {_describe(e)}")
                self.check_owners()
                self.check_commits()
            self.event_index = -1
            self.converge()
        return self.report

    def note(self, line: str) -> None:
        if self.keep_log:
            self.report.log.append(f"{self.clock.now - 1000:9.3f} {line}")

    def find(self, kind: str, message: str, key: str | None = None) -> None:
        key = f"{kind}:{key or message}"
        if key in self._finding_keys:
            return
        self._finding_keys.add(key)
        finding = Finding(kind, message, self.event_index, self.clock.now - 1000)
        self.report.findings.append(finding)
        self.note(f"FINDING {finding}")

    # -- the world -----------------------------------------------------------------------------

    def step(self, dt: float) -> None:
        """Time passes: every polling consumer polls and every running one runs a heartbeat
        round, in a random order; then the coordinator's timer."""
        self.clock.now += dt
        self._lift_faults()
        actions = []
        for p in self.procs:
            if p.polls(self.clock.now) and p.subscribed:
                actions.append((p, "poll"))
            if p.runs(self.clock.now) and p.member is not None:
                actions.append((p, "heartbeat"))
        self.rng.shuffle(actions)
        done: dict[Process, set[str]] = {}
        for p, what in actions:
            if what == "poll" and p.polls(self.clock.now) and p.subscribed:
                self.poll(p)
            elif what == "heartbeat" and p.runs(self.clock.now) and p.member is not None:
                self.heartbeat(p)
            else:
                continue
            done.setdefault(p, set()).add(what)
        try:
            self.coordinator.tick()
        except Exception as e:
            self.find("unexpected-error", f"the coordinator's tick raised {_describe(e)}")
        self.check_owners(done, dt)
        self.check_commits()

    def run_for(self, seconds: float, dt: float = TICK_S) -> None:
        end = self.clock.now + seconds
        while self.clock.now < end - 1e-9:
            self.step(min(dt, end - self.clock.now))

    def sleeper(self, proc: Process):
        """The ``sleep`` of a consumer's polling thread: the world goes on meanwhile."""

        def sleep(seconds: float) -> None:
            if self.depth >= MAX_DEPTH:
                self.clock.now += seconds
                return
            proc.blocked += 1
            self.depth += 1
            try:
                self.run_for(seconds)
            finally:
                proc.blocked -= 1
                self.depth -= 1

        return sleep

    def poll(self, p: Process) -> None:
        c = p.consumer
        if p.auto_commit_due:
            c._next_auto_commit = -math.inf
            p.auto_commit_due = False
        try:
            c.poll()
        except FencedInstanceId as e:
            self.fenced(p, e, "poll")
        except RafkaError as e:
            self.outcomes[f"poll raised {type(e).__name__}"] += 1
            if not e.retriable:
                self.find("unexpected-error", f"{p}'s poll raised {_describe(e)}",
                          key=f"poll:{type(e).__name__}")  # fmt: skip
        except Exception as e:
            self.find("unexpected-error", f"{p}'s poll raised {_describe(e)}",
                      key=f"poll:{type(e).__name__}")  # fmt: skip
        finally:
            c._next_auto_commit = math.inf  # auto-commit only when an event says it is due

    def heartbeat(self, p: Process) -> None:
        try:
            p.member.heartbeat_once()
        except Exception as e:
            self.find("unexpected-error", f"{p}'s heartbeat round raised {_describe(e)}",
                      key=f"heartbeat:{type(e).__name__}")  # fmt: skip

    def fenced(self, p: Process, error: FencedInstanceId, where: str) -> None:
        """FencedInstanceId is fatal: the application closes the consumer."""
        self.outcomes["fenced"] += 1
        if not p.zombie:  # an older process of its instance joined after it
            self.outcomes["fenced the newest process of an instance"] += 1
        self.note(f"{p} fenced ({where}); closing it")
        self.close(p)

    def close(self, p: Process) -> None:
        try:
            p.consumer.close()
        except Exception as e:
            self.find("unexpected-error", f"closing {p} raised {_describe(e)}",
                      key=f"close:{type(e).__name__}")  # fmt: skip
        p.closed = True

    def commit(self, p: Process, partitions: list | None, asynchronous: bool,
               where: str = "") -> None:  # fmt: skip
        """Commit the positions of ``partitions`` (None: all), recording what is
        acknowledged."""
        c = p.consumer
        owned = c._partitions
        chosen = sorted(owned) if partitions is None else [tp for tp in partitions if tp in owned]
        offsets = {tp: owned[tp].position for tp in chosen if owned[tp].position is not None}
        if not offsets:
            return
        kind = "async" if asynchronous else "sync"
        self.outcomes[f"commit {kind}"] += 1
        self.note(f"{self._who(p)} sends a {kind} commit {where} {_offsets(offsets)}")

        def acknowledged(offsets_: dict, error: BaseException | None) -> None:
            if error is None:
                self.acknowledge(p, offsets_)
            else:
                self.outcomes[f"commit {kind} failed: {type(error).__name__}"] += 1
                self.note(f"{p}'s {kind} commit {_offsets(offsets_)} failed: {error!r}")

        try:
            if asynchronous:
                c.commit(offsets, asynchronous=True, callback=acknowledged)
                return
            c.commit(offsets)
        except FencedInstanceId as e:
            self.outcomes[f"commit {kind} failed: FencedInstanceId"] += 1
            if not where:  # in a listener, the member hears it again from its heartbeat
                self.fenced(p, e, "commit")
            return
        except RafkaError as e:
            self.outcomes[f"commit {kind} failed: {type(e).__name__}"] += 1
            self.note(f"{p}'s {kind} commit {_offsets(offsets)} failed: {e!r}")
            return
        self.acknowledge(p, offsets)

    def acknowledge(self, p: Process, offsets: dict) -> None:
        for tp, offset in offsets.items():
            offset = offset.offset if isinstance(offset, OffsetAndMetadata) else offset
            key = (tp.topic, tp.partition)
            self.acked[key] = max(self.acked.get(key, -1), offset)
        self.note(f"{p} commit acknowledged {_offsets(offsets)}")

    # -- faults --------------------------------------------------------------------------------

    def _lift_faults(self) -> None:
        for fault, (until, detail) in list(self.faults.items()):
            if self.clock.now >= until:
                self.lift(fault, detail)

    def lift(self, fault: tuple, detail: Any) -> None:
        del self.faults[fault]
        kind = fault[0]
        self.note(f"lift {fault}")
        if kind == "hold":
            self.coordinator.held.discard(fault[1])
            self.coordinator.release(fault[1])
        elif kind == "lose":
            self.coordinator.lost.discard(fault[1])
            self.quiet_after = max(self.quiet_after, self.clock.now + self.answer_timeout())
        elif kind == "writes":
            self.coordinator.hold_writes = False
            self.coordinator.finish_writes(detail)

    def faults_quiet(self) -> bool:
        return not self.faults and self.clock.now >= self.quiet_after

    def answer_timeout(self) -> float:
        return max((p.member._answer_timeout_s() for p in self.procs if p.member is not None),
                   default=0.0)  # fmt: skip

    # -- events --------------------------------------------------------------------------------

    def _pick(self, pick: float, candidates: list[Process]) -> Process | None:
        if not candidates:
            self.outcomes["events with nobody to act"] += 1
            return None
        return candidates[int(pick * len(candidates))]

    def _polling(self) -> list[Process]:
        return [p for p in self.procs if p.polls(self.clock.now)]

    def _do_step(self, dt: float) -> None:
        self.step(dt)

    def _do_wait(self, seconds: float) -> None:
        self.run_for(seconds, dt=self.rng.choice([0.1, 0.2, 0.25]))

    def _do_join(self, static, auto_commit, revoke_mode, topics, session_ms, max_poll_ms,
                 slot) -> None:  # fmt: skip
        live = [p for p in self.procs if not p.closed and p.stalled_until != math.inf]
        if len(live) >= MAX_CONSUMERS:
            self.outcomes["joins skipped (group full)"] += 1
            return
        instance = None
        if static:
            taken = {p.instance for p in live}
            free = [i for i in INSTANCES if i not in taken]
            instance = free[int(slot * len(free))] if free else None
        settings = dict(
            strategy=self.strategy, auto_commit=auto_commit, instance=instance,
            session_ms=session_ms, heartbeat_ms=HEARTBEAT_MS, max_poll_ms=max_poll_ms,
        )  # fmt: skip
        self.start(settings, revoke_mode, list(topics))

    def start(self, settings: dict, revoke_mode: str, topics: list[str]) -> Process:
        name = f"c{len(self.procs)}"
        consumer = FakeConsumer(
            self.gateway, self.metadata, self.clock, client=name,
            metadata_max_age_ms=METADATA_MAX_AGE_MS, request_timeout_s=REQUEST_TIMEOUT_S,
            **settings,
        )  # fmt: skip
        proc = Process(name, consumer, settings["instance"], settings, revoke_mode)
        consumer._member_args["sleep"] = self.sleeper(proc)
        consumer._next_auto_commit = math.inf
        consumer.subscribe(topics, listener=Listener(self, proc, revoke_mode))
        self.procs.append(proc)
        self.note(f"{name} subscribes to {topics} ({settings['strategy']}, instance "
                  f"{settings['instance']}, session {settings['session_ms']} ms, max poll "
                  f"{settings['max_poll_ms']} ms, auto-commit {settings['auto_commit']}, "
                  f"commits in on_partitions_revoked: {revoke_mode})")  # fmt: skip
        return proc

    def _do_leave(self, pick, how) -> None:
        p = self._pick(pick, [p for p in self._polling() if p.subscribed])
        if p is None:
            return
        self.note(f"{p} {how}s")
        if how == "close":
            self.close(p)
            return
        try:
            p.consumer.unsubscribe()
        except FencedInstanceId as e:
            self.fenced(p, e, "unsubscribe")
        except Exception as e:
            self.find("unexpected-error", f"unsubscribing {p} raised {_describe(e)}",
                      key=f"unsubscribe:{type(e).__name__}")  # fmt: skip
        p.subscribed = False

    def _do_pause(self, pick, length, fraction) -> None:
        p = self._pick(pick, self._polling())
        if p is None:
            return
        session, max_poll = p.settings["session_ms"] / 1000, p.settings["max_poll_ms"] / 1000
        seconds = {
            "within-session": session * (0.3 + 0.6 * fraction),
            "past-session": session + (max_poll - session) * 0.9 * fraction,
            "past-max-poll": max_poll * (1.1 + 0.5 * fraction),
        }[length]  # fmt: skip
        p.paused_until = self.clock.now + seconds
        self.note(f"{p} stops polling for {seconds:.2f} s ({length})")

    def _do_stall(self, pick, length, fraction) -> None:
        p = self._pick(pick, [p for p in self.procs if p.runs(self.clock.now)])
        if p is None:
            return
        session = p.settings["session_ms"] / 1000
        seconds = session * (0.2 + 0.6 * fraction if length == "short" else 1.2 + 2 * fraction)
        p.stalled_until = self.clock.now + seconds
        self.note(f"{p}'s process stalls for {seconds:.2f} s ({length})")

    def _do_read(self, pick, records) -> None:
        p = self._pick(pick, [p for p in self._polling() if p.consumer._partitions])
        if p is None:
            return
        for state in p.consumer._partitions.values():
            if state.position is not None:
                state.position += records
        self.note(f"{p} reads {records} from {_positions(p)}")

    def _do_commit(self, pick, mode, fraction) -> None:
        p = self._pick(pick, [p for p in self._polling() if p.consumer._partitions])
        if p is None:
            return
        partitions = None
        if mode == "sync-some":
            owned = sorted(p.consumer._partitions)
            partitions = owned[: max(1, int(len(owned) * fraction))]
        self.note(f"{p} commits {mode}: {_positions(p, partitions)}")
        self.commit(p, partitions, asynchronous=mode == "async")

    def _do_auto_commit_due(self, pick) -> None:
        p = self._pick(pick, [p for p in self.procs if p.settings["auto_commit"]
                              and not p.closed])  # fmt: skip
        if p is not None:
            p.auto_commit_due = True

    def _do_resubscribe(self, pick, topics) -> None:
        p = self._pick(pick, self._polling())
        if p is None:
            return
        self.note(f"{p} subscribes to {list(topics)}")
        try:
            p.consumer.subscribe(list(topics))
        except Exception as e:
            self.find("unexpected-error", f"resubscribing {p} raised {_describe(e)}",
                      key=f"subscribe:{type(e).__name__}")  # fmt: skip
        p.subscribed = True

    def _do_grow(self, topic, more) -> None:
        count = self.metadata.topics[topic]
        if count + more > MAX_PARTITIONS:
            self.outcomes["grows skipped (at most partitions)"] += 1
            return
        self.metadata.topics[topic] = count + more
        self.note(f"{topic} grows to {count + more} partitions")

    def _do_static_restart(self, pick, old_fate) -> None:
        candidates = [
            p for p in self.procs if p.instance is not None and not p.closed and not p.zombie
            and p.stalled_until != math.inf and p.subscribed
        ]  # fmt: skip
        old = self._pick(pick, candidates)
        if old is None:
            return
        topics = sorted(old.consumer.subscription())
        if old_fate == "abandoned":
            old.stalled_until = math.inf
        else:
            old.zombie = True
        new = self.start(dict(old.settings), old.revoke_mode, topics)
        self.note(f"{new} restarts static member {old.instance} of {old} ({old} {old_fate})")

    def _do_coordinator_restart(self, answer, reached_log) -> None:
        for fault, (until, detail) in list(self.faults.items()):
            if fault[0] == "writes":  # its writes die with it
                del self.faults[fault]
                self.coordinator.hold_writes = False
        self.note(f"the coordinator restarts (waiting calls {'fail' if answer else 'unanswered'}"
                  f", writes in flight {'reached' if reached_log else 'did not reach'} the log)")
        self.coordinator.restart(answer=answer, reached_log=reached_log)
        if not answer:
            self.quiet_after = max(self.quiet_after, self.clock.now + self.answer_timeout())

    def _do_hold(self, method, seconds) -> None:
        if ("hold", method) in self.faults:
            return
        self.coordinator.held.add(method)
        self.faults[("hold", method)] = (self.clock.now + seconds, None)

    def _do_lose(self, method, seconds) -> None:
        if ("lose", method) in self.faults:
            return
        self.coordinator.lost.add(method)
        self.faults[("lose", method)] = (self.clock.now + seconds, None)

    def _do_hold_writes(self, seconds, fail) -> None:
        if ("writes",) in self.faults:
            return
        self.coordinator.hold_writes = True
        error = NotEnoughReplicas("too few in-sync replicas") if fail else None
        self.faults[("writes",)] = (self.clock.now + seconds, error)

    # -- checks --------------------------------------------------------------------------------

    def is_current(self, p: Process) -> bool:
        """Whether the coordinator still has ``p`` as a member, under its member id and (a
        static member) its group_instance_id."""
        member = p.member
        group = self.coordinator.groups.get(GROUP)
        if member is None or not member.member_id or group is None:
            return False
        if member.member_id not in group.members:
            return False
        instance = member.group_instance_id
        return instance is None or group.static_members.get(instance) == member.member_id

    def check_owners(self, done: dict | None = None, dt: float = 0.0) -> None:
        """Check 1 (see the module docstring)."""
        now = self.clock.now
        holders: dict[TopicPartition, list[Process]] = {}
        for p in self.procs:
            if p.polls(now):
                for tp in p.consumer._partitions:
                    holders.setdefault(tp, []).append(p)
        disputed: set[Process] = set()
        for tp, ps in holders.items():
            if len(ps) < 2:
                continue
            current = [p for p in ps if self.is_current(p)]
            if len(current) >= 2:
                self.find("two-owners", f"{tp.topic}-{tp.partition} is held by current members "
                          f"{', '.join(self._who(p) for p in current)}",
                          key=f"{tp}")  # fmt: skip
            disputed.update(p for p in ps if p not in current)
        for p in self.procs:
            if p not in disputed:
                if p.stale_since is not None:
                    self.outcomes["stale windows"] += 1
                    self.report.longest_stale_window_s = max(
                        self.report.longest_stale_window_s, now - p.stale_since
                    )
                p.stale_since, p.stale_quiet_s = None, 0.0
                continue
            if p.stale_since is None:
                p.stale_since = now
                self.note(f"{p} ({self._who(p)}) holds {_positions(p)}, disputed, and is "
                          "no longer a member")  # fmt: skip
            if done is not None and done.get(p) == {"poll", "heartbeat"} and self.faults_quiet():
                p.stale_quiet_s += dt
                if p.stale_quiet_s > STALE_GRACE_S:
                    self.find("stale-owner", f"{self._who(p)} keeps fetching {_positions(p)} "
                              f"for {now - p.stale_since:.2f} s ({p.stale_quiet_s:.2f} s of it "
                              "polling and heartbeating with every call answered) after the "
                              "group moved on without it", key=p.name)  # fmt: skip

    def _who(self, p: Process) -> str:
        m = p.member
        if m is None:
            return f"{p} (no member)"
        return f"{p} (member {m.member_id[:12] or '-'} gen {m.generation} {m.state})"

    def check_commits(self) -> None:
        """Check 2 (see the module docstring)."""
        group = self.coordinator.groups.get(GROUP)
        offsets = group.offsets if group is not None else {}
        for tp in sorted(set(self.seen) | set(self.acked)):
            committed = offsets.get(tp)
            now = committed.offset if committed is not None else -1
            before = self.seen.get(tp, -1)
            if now < before:
                self.find("commit-went-back", f"{tp[0]}-{tp[1]} committed {before} -> {now}",
                          key=f"{tp}")  # fmt: skip
            if now < self.acked.get(tp, -1):
                self.find("acknowledged-commit-lost",
                          f"{tp[0]}-{tp[1]} committed {now}, below {self.acked[tp]} which a "
                          "member had acknowledged", key=f"{tp}")  # fmt: skip
        for tp, committed in offsets.items():
            self.seen[tp] = max(self.seen.get(tp, -1), committed.offset)

    def converge(self) -> None:
        """Check 3: lift every fault, let every consumer run and poll, and wait for a stable
        group that owns every subscribed partition once."""
        for fault, (_, detail) in list(self.faults.items()):
            self.lift(fault, None if fault[0] == "writes" else detail)
        self.coordinator.held, self.coordinator.lost = set(), set()
        self.coordinator.release()
        for p in self.procs:
            p.paused_until = 0.0
            if p.stalled_until != math.inf:
                p.stalled_until = 0.0
        started = self.clock.now
        bound = self.convergence_bound()
        self.note(f"events end; converging (bound {bound:.1f} s)")
        while self.clock.now - started < bound:
            self.step(TICK_S)
            problem = self.convergence_problem()
            if problem is None:
                self.report.converged_after_s = round(self.clock.now - started, 2)
                self.note(f"converged after {self.report.converged_after_s} s")
                return
        self.find("no-convergence", f"after {bound:.1f} s: {self.convergence_problem()}; "
                  f"{self.describe_group()}")

    def describe_group(self) -> str:
        group = self.coordinator.groups.get(GROUP)
        if group is None:
            return "no group"
        leader = next((
            p for p in self.procs
            if p.member is not None and p.member.member_id == group.leader_id and not p.closed
        ), None)  # fmt: skip
        counts = leader.member._assigned_counts if leader is not None else None
        return (f"group {group.state.value} generation {group.generation}, leader "
                f"{leader or group.leader_id}, whose last assignment saw partition counts "
                f"{counts}; topics now {self.metadata.topics}")

    def convergence_bound(self) -> float:
        """The longest a correct group may take: an answer given up at its deadline, a
        session expiring, two rebalances (cooperative: the follow-up), a metadata refresh."""
        settings = [p.settings for p in self.procs] or [dict(session_ms=0, max_poll_ms=0)]
        session = max(s["session_ms"] for s in settings) / 1000
        max_poll = max(s["max_poll_ms"] for s in settings) / 1000
        return self.answer_timeout() + session + 2 * max_poll + 2 * METADATA_MAX_AGE_MS / 1000 + 5

    def convergence_problem(self) -> str | None:
        live = [p for p in self.procs if p.runs(self.clock.now) and p.subscribed]
        group = self.coordinator.groups.get(GROUP)
        members = set(group.members) if group is not None else set()
        if not live:
            return f"no consumer runs, yet the group has members {sorted(members)}" if members \
                else None
        if group is None or group.state != GroupState.STABLE:
            return f"the group is {group.state.value if group else 'missing'}"
        ids = {p.member.member_id for p in live}
        if members != ids:
            return (f"the group's members {sorted(m[:12] for m in members)} are not the running "
                    f"consumers' {sorted(m[:12] for m in ids)}")  # fmt: skip
        unstable = [self._who(p) for p in live if not p.member.stable]
        if unstable:
            return f"not stable: {unstable}"
        owners: dict[TopicPartition, list[Process]] = {}
        for p in live:
            subscribed = p.consumer.subscription()
            for tp in p.consumer._partitions:
                owners.setdefault(tp, []).append(p)
                if tp.topic not in subscribed or tp.partition >= self.metadata.topics[tp.topic]:
                    return f"{p} owns {tp}, outside its subscription"
        wanted = {TopicPartition(t, i) for p in live for t in p.consumer.subscription()
                  for i in range(self.metadata.topics[t])}  # fmt: skip
        missing = sorted(wanted - set(owners))
        if missing:
            return f"nobody owns {', '.join(f'{t}-{i}' for t, i in missing)}"
        shared = {tp: ps for tp, ps in owners.items() if len(ps) > 1}
        if shared:
            return f"shared: {shared}"
        return None


def _describe(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = next((f"{f.filename.split('/main/')[-1]}:{f.lineno}" for f in reversed(frames)),
                 "?")  # fmt: skip
    return f"{type(error).__name__}: {error} (at {where})"


def _positions(p: Process, partitions=None) -> str:
    owned = p.consumer._partitions
    chosen = sorted(owned) if partitions is None else partitions
    return "{" + ", ".join(f"{tp.topic}-{tp.partition}@{owned[tp].position}"
                           for tp in chosen if tp in owned) + "}"  # fmt: skip


def _offsets(offsets: dict) -> str:
    return "{" + ", ".join(
        f"{tp.topic}-{tp.partition}@{o.offset if isinstance(o, OffsetAndMetadata) else o}"
        for tp, o in sorted(offsets.items())
    ) + "}"  # fmt: skip


def run_seed(seed: int, events: int = 150, keep_log: bool = False) -> Report:
    return Simulation(seed, events, keep_log=keep_log).run()


def shrink(seed: int, events: int = 150, kind: str | None = None) -> list[Event]:
    """A shorter event list of ``seed`` that still gives a finding of ``kind`` (the first
    finding's kind by default): delta debugging over the generated events."""
    sim = Simulation(seed, events)
    current = list(sim.events)
    report = sim.run()
    if not report.findings:
        return current
    kind = kind or report.findings[0].kind

    def fails(candidate: list[Event]) -> bool:
        found = Simulation(seed, events_list=candidate).run().findings
        return any(f.kind == kind for f in found)

    chunks = 2
    while len(current) >= 2:
        size = math.ceil(len(current) / chunks)
        for start in range(0, len(current), size):
            candidate = current[:start] + current[start + size:]
            if candidate and fails(candidate):
                current = candidate
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(chunks * 2, len(current))
    return current


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--events", type=int, default=150)
    parser.add_argument("--seed", type=int, help="replay one seed and print its event log")
    parser.add_argument("--shrink", type=int, help="shorten the events of a failing seed")
    args = parser.parse_args()
    logging.getLogger("rafka").setLevel(logging.CRITICAL)  # the members' warnings are expected
    if args.shrink is not None:
        events = shrink(args.shrink, args.events)
        report = Simulation(args.shrink, events_list=events, keep_log=True).run()
        print("\n".join(report.log))
        print(report.summary())
        return
    if args.seed is not None:
        report = run_seed(args.seed, args.events, keep_log=True)
        print("\n".join(report.log))
        print(report.summary())
        return
    totals: Counter = Counter()
    outcomes: Counter = Counter()
    found: dict[str, list[int]] = {}
    for seed in range(args.first, args.first + args.seeds):
        report = run_seed(seed, args.events)
        totals.update(report.injected)
        outcomes.update(report.outcomes)
        for kind in sorted({f.kind for f in report.findings}):
            found.setdefault(kind, []).append(seed)
    print(f"{args.seeds} seeds x {args.events} events; injected {dict(sorted(totals.items()))}")
    print(f"outcomes {dict(sorted(outcomes.items()))}")
    for kind, seeds in sorted(found.items()):
        print(f"  {kind}: {len(seeds)} seed(s), e.g. {sorted(set(seeds))[:10]}")
    if not found:
        print("  no findings")


if __name__ == "__main__":
    main()
