"""One seeded run (``Simulation``): the cluster drawn from the seed, the clients and the
faults, healing, the failure report; ``replay`` and the command line."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import random
from collections import Counter, deque
from typing import Callable

from rafka.cluster.metadata import NO_LEADER
from tests.unit.cluster.sim.broker import Broker
from tests.unit.cluster.sim.checker import Checker
from tests.unit.cluster.sim.config import (
    BROKEN_RULES,
    CLIENT,
    CONTROLLER,
    FLUSH_RULES,
    LOSSY_RULES,
    PROPOSALS,
    InvariantViolation,
    SimConfig,
    State,
)
from tests.unit.cluster.sim.controller import Controller, ControllerCrashed, ControllerMetadata
from tests.unit.cluster.sim.network import Network, Scheduler
from tests.unit.cluster.sim.producer import Producers
from tests.unit.cluster.sim.replica import Replica


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
        if self.cfg.flush not in FLUSH_RULES:
            raise ValueError(f"flush must be one of {FLUSH_RULES}")
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
        n_brokers = self.rng.choice((3, 4))
        n_partitions = self.rng.choice((1, 2, 3))
        rf = self.cfg.replication_factor
        self.partitions = {p: [(p + k) % n_brokers for k in range(rf)] for p in range(n_partitions)}
        self.brokers = {
            b: Broker(self, b, [p for p, rs in self.partitions.items() if b in rs])
            for b in range(n_brokers)
        }
        self.metadata = ControllerMetadata(self.partitions)  # survives controller restarts
        self.checker = Checker(self)
        self.controller = Controller(self, self.metadata)
        self.producers = Producers(self)

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def uniform(self, low: int, high: int) -> int:
        """``rng.randint``, faster."""
        return low + int(self.rng.random() * (high - low + 1))

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
        sched.after(self.cfg.heartbeat_ms, self.producers.tick)
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
        try:
            action(*args)
        except ControllerCrashed:
            pass  # the controller died in the middle of this event (``crash_controller``)
        if self.dirty:
            for p in self.dirty:
                self.checker.check_partition(p)
            self.dirty.clear()

    def node(self, address: int) -> Broker | Controller:
        return self.controller if address == CONTROLLER else self.brokers[address]

    def deliver_answer(self, src: int, src_process: int, dst: int, process: int | None,
                       kind: str, payload: tuple) -> None:  # fmt: skip
        sender = self.node(src)
        if kind == "produce_answer" and self.faulty and self.rng.random() < self.cfg.answer_loss:
            self.faults["lost_produce_answer"] += 1  # the producer times out and resends
            return
        if not sender.up or sender.process != src_process:
            self.faults["lost_from_dead"] += 1
            if kind != "fetch_answer":
                return
            p, req, *_ = payload  # the follower's call fails (RayActorError)
            payload = (p, req, "ActorDied", -1, None, None)
        self.deliver(dst, process, kind, payload)

    def deliver(self, dst: int, process: int | None, kind: str, payload: tuple) -> None:
        if dst == CLIENT:
            getattr(self.producers, "on_" + kind)(*payload)
            return
        if dst == CONTROLLER:
            if not self.controller.up or self.controller.process != process:
                self.faults["lost_to_dead"] += 1
                return
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
        """The idempotent producer (acks=all) gets a batch of a few records for one
        partition."""
        if not self.faulty:
            return
        p = self.rng.randrange(len(self.partitions))
        count = 1 + self.rng.randrange(self.cfg.batch_records)
        self.stats["appends"] += 1
        self.producers.send(p, tuple(self.next_id() for _ in range(count)))
        self.scheduler.after(self._gap(self.cfg.append_every_ms), self.client_append)

    def inject_fault(self) -> None:
        if not self.faulty:
            return
        cfg = self.cfg
        self.scheduler.after(self._gap(cfg.fault_every_ms), self.inject_fault)
        self.recovering = {b for b in self.recovering if not self._back_in_sync(b)}
        if cfg.correlated and self._correlated_fault():
            return
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
        lossy = self.rng.random() < cfg.lossy_share and (
            cfg.lossy_rule == "any" or self._may_lose_tail(b)
        )
        self.faults["lossy_crash" if lossy else "crash"] += 1
        self.note(f"broker {b} crashes{' losing its unflushed tail' if lossy else ''}")
        if lossy:
            self.recovering.add(b)
        broker.crash(lossy)
        self.scheduler.after(self.rng.randint(*cfg.downtime_ms), self.restart, b)

    def _correlated_fault(self) -> bool:
        """A controller restart or a power loss of several brokers at once (each loses its
        unflushed tails), or neither; True if one was injected."""
        cfg = self.cfg
        roll = self.rng.random()
        if roll < cfg.controller_restart_share:
            if not self.controller.up:
                return False
            self.crash_controller("controller_restart")
            return True
        if roll >= cfg.controller_restart_share + cfg.power_loss_share:
            return False
        fine = [b for b in sorted(self.brokers) if self._fine(b)]
        if len(fine) < 2:
            return False
        hit = self.rng.sample(fine, self.rng.randint(2, len(fine)))
        self.faults["power_loss"] += 1
        self.note(f"power loss of brokers {sorted(hit)}")
        for b in sorted(hit):
            self.recovering.add(b)
            self.brokers[b].crash(True)
            self.scheduler.after(self.rng.randint(*cfg.downtime_ms), self.restart, b)
        return True

    def crash_controller(self, fault: str, how: str = "") -> None:
        """The controller process dies (``fault`` counts it; ``how`` says where, for the
        trace) and a new one starts after a random downtime."""
        self.faults[fault] += 1
        self.note(f"the controller crashes{how}")
        self.controller.crash()
        self.scheduler.after(self.rng.randint(*self.cfg.controller_downtime_ms),
                             self.restart_controller)  # fmt: skip

    def restart_controller(self) -> None:
        if not self.controller.up:
            self.note("the controller restarts")
            self.controller.start()

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
        holds its leader's whole log, committed, and the state the controller recorded; then
        check the acknowledged records. Not converged in time: the replicas left on another
        state than the recorded one (invariant ``convergence``), else ``liveness``."""
        self.faulty = False
        self.network.faulty = False
        self.restart_controller()
        for b in sorted(self.brokers):
            self.restart(b)
        deadline = self.scheduler.now + self.cfg.heal_limit_ms
        while (leaders := self._converged()) is None:
            if self.scheduler.now > deadline:
                stale = self.checker.stale_states()
                if stale:
                    raise InvariantViolation("convergence", "the cluster did not converge "
                                             f"within {self.cfg.heal_limit_ms} ms of healing: "
                                             + "; ".join(stale))  # fmt: skip
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
                if r.state != State.of(state):
                    return None
            leaders[p] = leader
        return leaders

    # -- reporting -------------------------------------------------------------------------------

    def replay_command(self) -> str:
        """The command line that runs this seed again with this configuration."""
        return f"python -m tests.unit.cluster.simulation --seed {self.seed}{cli_options(self.cfg)}"

    def _report(self, v: InvariantViolation) -> str:
        cfg = self.cfg
        lines = [
            f"{self.describe()}; event {self.event} at {self.scheduler.now} ms: {v}",
            f"replay: {self.replay_command()} --verbose",
            f"    or: simulation.replay({self.seed}, {replay_arguments(cfg)})",
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


#: Knobs with their own command-line option; any other goes through ``--set name=value``.
NAMED_OPTIONS = ("events", "lossy_rule", "broken", "flush", "correlated", "min_insync_replicas")


def _changed(cfg: SimConfig) -> dict:
    return {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(SimConfig)
        if getattr(cfg, f.name) != f.default or f.name == "events"
    }


def cli_options(cfg: SimConfig) -> str:
    """The command-line options that give ``cfg``."""
    out = []
    for name, value in _changed(cfg).items():
        flag = "--" + name.replace("_", "-")
        if name == "proposed":
            out.append(f"--proposed {','.join(sorted(value)) or 'none'}")
        elif name == "correlated":
            out.append(flag if value else f"--set correlated=False")
        elif name in NAMED_OPTIONS:
            out.append(f"{flag} {value}")
        else:
            out.append("--set " + f"{name}={value!r}".replace(" ", ""))
    return "".join(" " + o for o in out)


def replay_arguments(cfg: SimConfig) -> str:
    """The keyword arguments of ``replay`` that give ``cfg``."""
    return ", ".join(f"{name}={value!r}" for name, value in _changed(cfg).items())


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
    parser.add_argument("--flush", default=SimConfig.flush, choices=FLUSH_RULES)
    parser.add_argument("--correlated", action="store_true", help="power losses of several "
                        "brokers at once and controller restarts")  # fmt: skip
    parser.add_argument("--min-insync-replicas", type=int, default=SimConfig.min_insync_replicas)
    parser.add_argument("--proposed", default="all", help="rules to apply: 'all', 'none' or "
                        f"some of {', '.join(sorted(PROPOSALS))}, comma-separated")  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="any other SimConfig field, as a Python literal")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print the whole trace")
    args = parser.parse_args()
    proposed = {"all": PROPOSALS, "none": frozenset()}.get(args.proposed) or frozenset(
        filter(None, args.proposed.split(","))
    )  # fmt: skip
    if not proposed <= PROPOSALS:
        parser.error(f"unknown proposed rules {sorted(proposed - PROPOSALS)}")
    config = dict(lossy_rule=args.lossy_rule, broken=args.broken, flush=args.flush,
                  correlated=args.correlated, min_insync_replicas=args.min_insync_replicas,
                  proposed=proposed)  # fmt: skip
    fields = {f.name for f in dataclasses.fields(SimConfig)}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in fields:
            parser.error(f"--set: SimConfig has no field {name!r}")
        config[name] = ast.literal_eval(value)
    if isinstance(config.get("proposed"), (set, list, tuple)):
        config["proposed"] = frozenset(config["proposed"])
    try:
        replay(args.seed, args.events, args.verbose, **config)
    except AssertionError as failure:
        raise SystemExit(str(failure)) from None
