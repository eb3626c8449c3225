"""One seeded run (``TxnSimulation``): the cluster drawn from the seed, the faults, healing,
the failure report and ``replay``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import tempfile
from collections import Counter, deque
from typing import Callable, Iterator

from rafka.actors import replica_transactions
from rafka.cluster import transaction_state, transaction_types
from rafka.cluster.transaction_state import TxnDecision, TxnMetadata
from rafka.storage import files
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig
from tests.unit.cluster.sim.network import Scheduler
from tests.unit.cluster.txn_sim.checker import Checker
from tests.unit.cluster.txn_sim.config import InvariantViolation, TxnSimConfig
from tests.unit.cluster.txn_sim.coordinator import Coordinator, TxnStateLog
from tests.unit.cluster.txn_sim.network import Endpoint, Network
from tests.unit.cluster.txn_sim.partition import Partition
from tests.unit.cluster.txn_sim.producer import Producer, Slot

BASE_MS = 1_700_000_000_000  # the logs' time at the start of every run, ms

#: The coordinator's timers: left out of the trace (what they decide is noted).
_TICKS = frozenset({"_abort_tick", "_expire_tick"})


class TxnSimulation:
    """One seeded run in ``directory`` (see the package docstring). ``run`` raises
    AssertionError naming the seed, the event, the invariant and the events before it."""

    TRACE_TAIL = 30

    def __init__(self, seed: int, directory: str, cfg: TxnSimConfig | None = None,
                 record: bool = False) -> None:  # fmt: skip
        self.seed = seed
        self.cfg = cfg = cfg or TxnSimConfig()
        self.rng = random.Random(seed)
        self.scheduler = Scheduler()
        self.network = Network(self)
        self.faults: Counter = Counter()
        self.stats: Counter = Counter()
        self.event = 0
        self.faulty = True
        self.tail: deque = deque(maxlen=self.TRACE_TAIL)
        self.trace: list[str] | None = [] if record else None
        self.base_ms = BASE_MS  # the logs' clock: base_ms + the simulated time
        self._ids = self._rids = self._producer_ids = self._coordinator_epochs = 0
        rng = self.rng
        self.segment_bytes = rng.choice(cfg.segment_bytes)
        self.fetch_bytes = rng.choice(cfg.fetch_bytes)
        config = LogConfig(segment_bytes=self.segment_bytes,
                           producer_id_expiration_ms=cfg.producer_expiration_ms)
        self.partitions = [
            Partition(self, p, os.path.join(directory, f"{cfg.topic}-{p}"), config)
            for p in range(rng.choice((2, 3)))
        ]
        fresh = [True, False]  # one id of its own, one shared by producers over time
        if rng.random() < 0.6:
            fresh.append(rng.random() < 0.5)
        self.slots = [Slot(f"tid{n}", f) for n, f in enumerate(fresh)]
        self.txn_log = TxnStateLog()
        self.coordinator = Coordinator(self, 1)
        self._coordinator_due = False
        self.checker = Checker(self)

    # -- identities ------------------------------------------------------------------------------

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def next_rid(self) -> int:
        self._rids += 1
        return self._rids

    def allocate_producer_id(self) -> int:
        """The controller's producer-id allocator: never the same id twice."""
        self._producer_ids += 1
        self.stats["producer_ids"] += 1
        return 1000 + self._producer_ids

    def next_coordinator_epoch(self) -> int:
        self._coordinator_epochs += 1
        return self._coordinator_epochs

    def uniform(self, low: int, high: int) -> int:
        return low + int(self.rng.random() * (high - low + 1))

    def coordinator_now(self) -> Coordinator | None:
        """The incarnation a client finds by name (loading or serving), if one runs."""
        c = self.coordinator
        return c if c.up and not c.zombie else None

    @property
    def producers(self) -> list[Producer]:
        return [p for slot in self.slots for p in slot.producers]

    def describe(self) -> str:
        kinds = ", ".join(f"{s.transactional_id} ({'fresh' if s.fresh else 'shared'})"
                          for s in self.slots)  # fmt: skip
        return (f"seed {self.seed}: {len(self.partitions)} partitions (segment.bytes "
                f"{self.segment_bytes}, fetches of {self.fetch_bytes} bytes), ids {kinds}")

    def summary(self) -> dict[str, int]:
        return {"events": self.event, **self.faults, **self.stats}

    # -- driving -------------------------------------------------------------------------------

    def run(self) -> "TxnSimulation":
        with _max_epoch(self.cfg.max_epoch), _marker_clock(self), _syncs(self.cfg.syncs):
            try:
                for partition in self.partitions:
                    partition.open()
                self.coordinator.start()
                for slot in self.slots:
                    self.scheduler.after(self.uniform(0, 50), self._spawn, slot)
                self.scheduler.after(self._gap(self.cfg.fault_every_ms), self.inject_fault)
                while self.event < self.cfg.events:
                    self.step()
                self.heal()
            except InvariantViolation as v:
                raise AssertionError(self._report(v)) from None
            except Exception as e:  # noqa: BLE001 - the model's or the code's: report the seed
                raise AssertionError(self._report(InvariantViolation(
                    "no_exception", f"{type(e).__name__} escaped: {e}"))) from e
            finally:
                for partition in self.partitions:
                    partition.close()
        return self

    def step(self) -> None:
        action, args = self.scheduler.pop()
        self.event += 1
        entry = (self.event, self.scheduler.now, action, args)
        if action.__name__ not in _TICKS:  # a timer that finds nothing to do says nothing
            self.tail.append(entry)
            if self.trace is not None:
                self.trace.append(_describe(*entry))
        action(*args)
        if self.checker.dirty:
            self.checker.check_dirty()

    def note(self, text: str) -> None:
        """Add what an event did to the trace."""
        entry = (self.event, self.scheduler.now, None, text)
        self.tail.append(entry)
        if self.trace is not None:
            self.trace.append(_describe(*entry))

    def _gap(self, mean_ms: int) -> int:
        return 1 + int(self.rng.expovariate(1 / mean_ms))

    def _spawn(self, slot: Slot) -> None:
        if not self.faulty and slot.producers:
            return
        producer = Producer(self, slot, len(slot.producers) + 1)
        slot.producers.append(producer)
        if len(slot.producers) > 1:
            self.stats["new_producers"] += 1
        self.note(f"{producer} starts")
        producer.start()

    # -- faults --------------------------------------------------------------------------------

    def inject_fault(self) -> None:
        if not self.faulty:
            return
        cfg, rng = self.cfg, self.rng
        self.scheduler.after(self._gap(cfg.fault_every_ms), self.inject_fault)
        roll = rng.random()
        for share, fault in ((cfg.failover_share, self._failover),
                             (cfg.death_share, self._kill_producer),
                             (cfg.replace_share, self._replace_producer),
                             (cfg.stall_share, self._stall_producer),
                             (cfg.partition_restart_share, self._restart_partition)):  # fmt: skip
            if roll < share:
                fault()
                return
            roll -= share

    def _failover(self) -> None:
        old = self.coordinator_now()
        if old is None:
            return
        zombie = self.rng.random() < self.cfg.zombie_share
        self.faults["failover"] += 1
        if zombie:
            self.faults["zombie_coordinator"] += 1
        self.note(f"{old} fails over{' (a zombie for a while)' if zombie else ''}")
        old.fail(self.uniform(*self.cfg.zombie_ms) if zombie else None)
        self._coordinator_due = True
        self.scheduler.after(self.uniform(*self.cfg.coordinator_downtime_ms),
                             self._new_coordinator)  # fmt: skip

    def _new_coordinator(self) -> None:
        self._coordinator_due = False
        self.coordinator = Coordinator(self, self.coordinator.number + 1)
        self.note(f"{self.coordinator} starts at coordinator epoch {self.coordinator.epoch}")
        self.coordinator.start()

    def _live(self, shared_only: bool) -> list[Producer]:
        return [s.current for s in self.slots
                if s.current is not None and s.current.up and not (shared_only and s.fresh)
                and s.current.txn.state.value != "fatal"]  # fmt: skip

    def _kill_producer(self) -> None:
        live = self._live(shared_only=True)
        if not live:
            return
        producer = self.rng.choice(live)
        self.faults["producer_death"] += 1
        self.note(f"{producer} dies")
        producer.die()
        self.scheduler.after(self.uniform(*self.cfg.respawn_ms), self._spawn, producer.slot)

    def _replace_producer(self) -> None:
        live = self._live(shared_only=True)
        if not live:
            return
        producer = self.rng.choice(live)
        self.faults["producer_replaced"] += 1
        self.note(f"a new producer of {producer.tid} starts while {producer} runs on")
        self._spawn(producer.slot)

    def _stall_producer(self) -> None:
        """A pause of a producer not paused already, so none is cut off for longer than
        ``cfg.stall_ms`` (well below ``cfg.expiration_ms``: a fresh id must not expire)."""
        now = self.scheduler.now
        live = [p for p in self._live(shared_only=False) if p.stalled_until <= now]
        if not live:
            return
        producer = self.rng.choice(live)
        producer.stalled_until = now + self.uniform(*self.cfg.stall_ms)
        self.faults["producer_stall"] += 1
        self.note(f"{producer} stalls until {producer.stalled_until} ms")

    def _restart_partition(self) -> None:
        up = [p for p in self.partitions if p.up]
        if not up:
            return
        partition = self.rng.choice(up)
        clean = self.rng.random() < 0.5
        self.faults["partition_restart" if clean else "partition_crash"] += 1
        self.note(f"{partition} {'restarts' if clean else 'crashes and restarts'}")
        partition.restart(clean)

    # -- healing -------------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop the faults and new transactions; run until every producer is done, the
        coordinator idle and no partition down; then ``Checker.final_check``. Not settled in
        ``cfg.heal_limit_ms``: ``hanging`` if transactions stay open in partitions that
        nothing will end, else ``liveness``."""
        self.faulty = False
        self.network.faulty = False
        for producer in self.producers:
            producer.stopping = True
        if self.coordinator_now() is None and not self._coordinator_due:
            self._new_coordinator()
        deadline = self.scheduler.now + self.cfg.heal_limit_ms
        while not self._settled():
            if self.scheduler.now > deadline:
                raise self._unsettled()
            for _ in range(50):
                self.step()
        self.checker.final_check()

    def _settled(self) -> bool:
        c = self.coordinator_now()
        return (c is not None and c.idle and all(p.up for p in self.partitions)
                and all(p.idle for p in self.producers)
                and not any(p.log.producer_state.ongoing_transactions()
                            for p in self.partitions))  # fmt: skip

    def _unsettled(self) -> InvariantViolation:
        c = self.coordinator_now()
        busy = [p.name for p in self.producers if not p.idle]
        if c is not None and c.idle and not busy:
            open_txns = {p.name: p.log.producer_state.ongoing_transactions()
                         for p in self.partitions}  # fmt: skip
            return InvariantViolation("hanging", f"transactions open in partitions that "
                                                 f"nothing will end: {open_txns}")
        states = {} if c is None else {t: m.state.value for t, m in c.transactions.items()}
        return InvariantViolation("liveness", f"not settled {self.cfg.heal_limit_ms} ms after "
                                              f"healing: coordinator {c} states {states}, busy "
                                              f"producers {busy}")  # fmt: skip

    # -- reporting -------------------------------------------------------------------------------

    def _report(self, v: InvariantViolation) -> str:
        changed = replay_arguments(self.cfg)
        events = [entry for entry in self.tail if entry[2] is not None]
        event = _describe(*events[-1]) if events else "before the first event"
        lines = [
            f"{self.describe()}; event {self.event} at {self.scheduler.now} ms: {v}",
            f"    the event: {event.strip()}",
            f"replay: txn_sim.replay({self.seed}{', ' if changed else ''}{changed}, "
            f"verbose=True)",
            f"faults so far: {dict(self.faults)}",
            f"last {len(self.tail)} events:",
        ]
        lines += [_describe(*entry) for entry in self.tail]
        return "\n".join(lines)


class _Clock:
    """Stands for the ``time`` module in ``replica_transactions`` during a run: a leader
    stamps its markers with the simulated time, as the logs' own clock reads it."""

    def __init__(self, sim: TxnSimulation) -> None:
        self.sim = sim

    def time(self) -> float:
        return (self.sim.base_ms + self.sim.scheduler.now) / 1000


@contextlib.contextmanager
def _marker_clock(sim: TxnSimulation) -> Iterator[None]:
    saved = replica_transactions.time
    replica_transactions.time = _Clock(sim)
    try:
        yield
    finally:
        replica_transactions.time = saved


@contextlib.contextmanager
def _syncs(on: bool) -> Iterator[None]:
    """Unless ``on``, the storage engine's syncs (``rafka.storage.files``) do nothing for
    the run: its crashes are process crashes, which keep the page cache, so no outcome
    depends on them, and the runs stay CPU-bound."""
    if on:
        yield
        return
    saved = files.fdatasync, files.fsync_directory, files.create_file
    create = files.create_file
    files.fdatasync = files.fsync_directory = lambda _: None
    files.create_file = lambda path, data, sync: create(path, data, False)
    try:
        yield
    finally:
        files.fdatasync, files.fsync_directory, files.create_file = saved


@contextlib.contextmanager
def _max_epoch(value: int | None) -> Iterator[None]:
    """The decisions' MAX_EPOCH set to ``value`` for a run (None: left alone)."""
    if value is None:
        yield
        return
    saved = transaction_types.MAX_EPOCH, transaction_state.MAX_EPOCH
    transaction_types.MAX_EPOCH = transaction_state.MAX_EPOCH = value
    try:
        yield
    finally:
        transaction_types.MAX_EPOCH, transaction_state.MAX_EPOCH = saved


def _show(value) -> str:
    """A short form of an event's argument for the trace."""
    if isinstance(value, Endpoint):
        return value.name
    if isinstance(value, (bytes, bytearray)):
        h = rb.read_header(value)
        return f"batch(p{h.producer_id} e{h.producer_epoch} s{h.base_sequence} n{h.record_count})"
    if isinstance(value, TxnDecision):
        return _show(value.metadata)
    if isinstance(value, TxnMetadata):
        moving = value.next_producer_id >= 0
        return (f"{value.state.value}({value.producer_id}, {value.producer_epoch}"
                f"{', next ' + str(value.next_producer_id) if moving else ''}"
                f", {sorted(p for _, p in value.partitions)})")
    if callable(value):
        owner = getattr(value, "__self__", None)
        at = f"@{owner.name}" if isinstance(owner, Endpoint) else ""
        return getattr(value, "__name__", "?") + at
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return repr(value)


def _describe(event: int, now: int, action: Callable | None, args) -> str:
    if action is None:
        return f"        {args}"
    if action.__name__ == "_deliver":
        src, _, dst, _, kind, payload = args
        return (f"#{event} {now}ms {kind}({', '.join(_show(a) for a in payload)}) -> "
                f"{dst.name}{'' if src is None else ' (answer of ' + src.name + ')'}")
    owner = getattr(action, "__self__", None)
    if action.__name__ == "_run":  # a producer's own timer: show what it runs
        action, args = args
        owner = getattr(action, "__self__", None)
    who = f" {owner.name}" if isinstance(owner, Endpoint) else ""
    shown = ", ".join(_show(a) for a in args)
    return f"#{event} {now}ms {action.__name__}{who}({shown})"


def replay_arguments(cfg: TxnSimConfig) -> str:
    """The keyword arguments of ``replay`` that give ``cfg``."""
    default = TxnSimConfig()
    return ", ".join(f"{f.name}={getattr(cfg, f.name)!r}" for f in dataclasses.fields(cfg)
                     if getattr(cfg, f.name) != getattr(default, f.name))  # fmt: skip


def run_seed(seed: int, directory: str, record: bool = False,
             **config) -> tuple[TxnSimulation, str | None]:  # fmt: skip
    """Run one seed in a fresh subdirectory of ``directory`` (removed afterwards); the
    simulation and its failure report, if any."""
    where = tempfile.mkdtemp(prefix=f"seed{seed}-", dir=directory)
    try:
        sim = TxnSimulation(seed, where, TxnSimConfig(**config), record=record)
        try:
            sim.run()
        except AssertionError as failure:
            return sim, str(failure)
        return sim, None
    finally:
        shutil.rmtree(where, ignore_errors=True)


def replay(seed: int, verbose: bool = False, **config) -> TxnSimulation:
    """Run one seed again in a temporary directory, recording its trace; print the trace
    when ``verbose``; raise AssertionError as the run did."""
    with tempfile.TemporaryDirectory() as directory:
        sim = TxnSimulation(seed, directory, TxnSimConfig(**config), record=True)
        try:
            sim.run()
        finally:
            if verbose:
                print(sim.describe())
                print("\n".join(sim.trace))
            print(sim.summary())
    return sim
