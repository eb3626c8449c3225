"""A seeded simulation of the real controller under concurrent requests and its own deaths.

The controller's real parts (``build_parts``) run over a real metadata log and the fake Ray
layer of ``controller_fakes``. Each event starts a request without waiting for it (admin
requests from several clients at once, ISR proposals from the leaders as the replicas see
themselves, check-ins, fencing and returns of brokers, reconcile rounds, a slow step holding
the controller's lock so that requests queue behind it) or injects a fault:
the controller dying right after an append (between recording a change and carrying it
out), in the middle of a snapshot, or at any await; pushes lost on their way; a broker's
node going down and coming back. After every event the checker verifies:

1. one leader per leader epoch, in every state the controller ever recorded and every
   state a replica ever held;
2. per partition, recorded leader epochs never go back and partition epochs only grow;
3. the controller always starts again from its metadata log.

At the end the faults stop, every node comes back, the brokers heartbeat and the
controller reconciles: 4. every replica actor the metadata names runs with its partition's
state, and no other replica actor runs.

``RAFKA_CONTROLLER_SIM_SEEDS`` / ``_EVENTS`` size the sweep; ``run_seed(seed)`` replays one.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter

from rafka.errors import InvalidRecord, RafkaError
from tests.unit.actors.controller_fakes import (
    ControllerProcess,
    ProcessDied,
    Registry,
    differences,
    node_of,
)

DISKS = ["d0", "d1", "d2", "d3"]
NAMES = ["a", "b", "c"]


class SimulationFailure(AssertionError):
    pass


class ControllerSimulation:
    def __init__(self, seed: int, directory: str, events: int = 120) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.directory = directory
        self.events = events
        self.registry = Registry()
        self.appended: list[dict] = []
        self.process: ControllerProcess | None = None
        self.stats: Counter = Counter()
        self.trace: list[str] = []
        self.leaders: dict[tuple[str, int, int], int] = {}  # (topic, partition, epoch) -> leader
        self.epochs: dict[tuple[str, int], tuple[int, int]] = {}
        self._checked = 0
        self._requests = 0

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> Counter:
        await self.start()
        for event in range(self.events):
            self.event = event
            await self.step()
            await self.check()
        await self.heal()
        self.process.store.close()
        return self.stats

    async def start(self) -> None:
        try:
            self.process = ControllerProcess(self.directory, self.registry, self.appended,
                                             snapshot_every=self.rng.choice((7, 50)))  # fmt: skip
        except Exception as e:
            raise self.failure(3, f"the controller did not start again: {e!r}") from e
        if not self.registry.actors:
            for i, disk in enumerate(DISKS):
                broker_id, _ = await self.process.brokers.heartbeat(disk, None, None, node_of(i))
                self.registry.add_agent(broker_id, disk)
        self.stats["controller_starts"] += 1

    async def restart(self) -> None:
        if self.process.alive:
            await self.process.die()
        await self.start()
        self.process.run(self.process.reconciler.reconcile())

    async def step(self) -> None:
        rng, process = self.rng, self.process
        roll = rng.random()
        if roll < 0.06:
            self.note("controller dies now")
            self.stats["deaths_now"] += 1
            await self.restart()
        elif roll < 0.12:
            self.note("controller will die after its next append")
            process.store.die_after_append = True
        elif roll < 0.14:
            process.store.die_in_snapshot = True
        elif roll < 0.45:
            self.admin_request()
        elif roll < 0.60:
            self.isr_proposal()
        elif roll < 0.68:
            self.broker_fault()
        elif roll < 0.72:
            self.check_in()
        elif roll < 0.74:
            process.run(self.hold_lock(rng.randrange(5, 40)))
        elif roll < 0.78:
            process.run(process.reconciler.reconcile())
        else:
            lose = rng.random() < 0.2
            await process.ray.deliver(keep=lambda m: not lose or rng.random() < 0.5)
            for broker_id, broker in sorted(process.image.brokers.items()):
                if broker_id not in self.registry.down and rng.random() < 0.5:
                    process.run(process.brokers.heartbeat(broker.disk, broker_id, None,
                                                         node_of(broker_id)))
        for _ in range(rng.randrange(1, 12)):
            await asyncio.sleep(0)
        await self.collect()

    async def collect(self) -> None:
        """Restart a controller that died; fail on an exception no request may raise."""
        process = self.process
        for task in [t for t in list(process.tasks) if t.done()]:
            process.tasks.discard(task)
            if task.cancelled():
                continue
            error = task.exception()
            if isinstance(error, InvalidRecord):  # a decision the metadata log refused
                raise self.failure(0, f"a request decided on a stale state: {error!r}")
            if error is None or isinstance(error, (RafkaError, ProcessDied)):
                self.stats["refused" if isinstance(error, RafkaError) else "answered"] += 1
                continue
            raise self.failure(0, f"a request raised {error!r}") from error
        if process.store.died:
            self.note("controller died (after an append or in a snapshot)")
            self.stats["deaths_at_append"] += 1
            await self.restart()

    # -- events --------------------------------------------------------------------------------

    def request_id(self) -> str:
        self._requests += 1
        return f"{self.seed}-{self._requests}"

    def admin_request(self) -> None:
        rng, process = self.rng, self.process
        name = rng.choice(NAMES)
        kind = rng.choice(("create", "create", "delete", "grow", "reassign", "reassign",
                           "cancel", "elect"))  # fmt: skip
        self.note(f"admin {kind} {name}")
        self.stats[f"admin_{kind}"] += 1
        if kind == "create":
            call = process.topics.create_topic(name, rng.randint(1, 3), rng.randint(1, 3), None,
                                               False, self.request_id())  # fmt: skip
        elif kind == "delete":
            call = process.topics.delete_topic(name, self.request_id())
        elif kind == "grow":
            call = process.topics.create_partitions(name, rng.randint(2, 4), self.request_id())
        elif kind == "reassign":
            target = rng.sample(range(len(DISKS)), rng.randint(1, 3))
            call = process.reassignments.reassign_partitions(name, {rng.randrange(2): target})
        elif kind == "cancel":
            call = process.reassignments.cancel_reassignment(name, None)
        else:
            call = process.changes.elect_leaders("preferred", name, None)
        process.run(call)

    def isr_proposal(self) -> None:
        """A leader replica, as it sees itself, proposes every live replica into the ISR (they
        caught up), or drops one (it lags)."""
        leaders = [r for r in self.registry.replicas().values()
                   if r.leads and r.key[2] not in self.registry.down]  # fmt: skip
        if not leaders:
            return
        r = self.rng.choice(sorted(leaders, key=lambda r: r.key))
        s = r.state
        replicas = [b for b in s["replicas"] if b not in self.registry.down]
        if self.rng.random() < 0.7:
            isr = sorted(set(s["isr"]) | set(replicas))
        else:
            isr = [b for b in s["isr"] if b == s["leader"] or self.rng.random() < 0.5]
        self.stats["isr_proposals"] += 1
        self.process.run(self.process.changes.alter_isr(
            r.key[0], r.key[1], r.key[2], s["leader_epoch"], s["partition_epoch"], isr, None,
        ))  # fmt: skip

    def broker_fault(self) -> None:
        process = self.process
        broker = self.rng.randrange(len(DISKS))
        if broker in self.registry.down:
            self.note(f"broker {broker} comes back")
            self.registry.down.discard(broker)
            process.run(process.brokers.heartbeat(DISKS[broker], broker, None, node_of(broker)))
        elif len(self.registry.down) < 2:
            self.note(f"broker {broker} goes down and is fenced")
            self.stats["brokers_down"] += 1
            self.registry.down.add(broker)
            process.run(process.brokers.fence(broker))

    async def hold_lock(self, turns: int) -> None:
        """A slow step under the controller's lock (a long fsync, say): requests queue behind
        it, each having read the metadata before it waited."""
        self.stats["lock_holds"] += 1
        async with self.process.core.lock:
            for _ in range(turns):
                await asyncio.sleep(0)

    def check_in(self) -> None:
        """A replica restarted (cleanly) and checks in."""
        replicas = [r for r in self.registry.replicas().values()
                    if r.key[2] not in self.registry.down]  # fmt: skip
        if replicas:
            r = self.rng.choice(sorted(replicas, key=lambda r: r.key))
            self.stats["check_ins"] += 1
            self.process.run(self.process.changes.replica_started(
                *r.key, True, (r.state["leader_epoch"], 0), None))  # fmt: skip

    # -- checks --------------------------------------------------------------------------------

    async def check(self) -> None:
        for record in self.appended[self._checked:]:
            if record["type"] != "partition":
                continue
            key = (record["topic_id"], record["partition"])
            self._leader(key, record["leader_epoch"], record["leader"], "recorded")
            epochs = (record["leader_epoch"], record["partition_epoch"])
            before = self.epochs.get(key)
            if before is not None and (epochs[0] < before[0] or epochs[1] <= before[1]):
                raise self.failure(2, f"{key} went from epochs {before} to {epochs}")
            self.epochs[key] = epochs
        self._checked = len(self.appended)
        for r in self.registry.replicas().values():
            s = r.state
            self._leader((s["topic_id"], s["partition"]), s["leader_epoch"], s["leader"],
                         f"held by replica {r.key}")  # fmt: skip

    def _leader(self, key: tuple[str, int], epoch: int, leader: int, where: str) -> None:
        if leader < 0:
            return
        known = self.leaders.setdefault((*key, epoch), leader)
        if known != leader:
            raise self.failure(1, f"{key} leader epoch {epoch}: leader {known}, and {leader} "
                                  f"{where}")  # fmt: skip

    async def heal(self) -> None:
        """No more faults: every node back, heartbeats, a reconcile, pushes delivered."""
        for _ in range(50):
            if not self.process.tasks:
                break
            await asyncio.sleep(0)
            await self.collect()
        process = self.process
        process.store.die_after_append = process.store.die_in_snapshot = False
        self.registry.down.clear()
        for _ in range(3):
            await process.heartbeat_all()
            for _ in range(20):
                await asyncio.sleep(0)
            await asyncio.gather(*list(process.tasks), return_exceptions=True)
            await process.reconciler.reconcile()
            await process.ray.deliver()
            await self.collect()
            process = self.process
        await self.check()
        found = differences(self.registry, process.image)
        if found:
            raise self.failure(4, found[0])

    # -- reporting -----------------------------------------------------------------------------

    def note(self, line: str) -> None:
        self.trace.append(f"[{getattr(self, 'event', -1)}] {line}")

    def failure(self, invariant: int, message: str) -> SimulationFailure:
        tail = "\n".join(self.trace[-25:])
        return SimulationFailure(
            f"seed {self.seed}, event {getattr(self, 'event', -1)}: invariant {invariant}: "
            f"{message}\nlast events:\n{tail}\nreplay: RAFKA_CONTROLLER_SIM_SEED={self.seed}"
        )


def run_seed(seed: int, directory: str, events: int | None = None) -> Counter:
    events = events or int(os.environ.get("RAFKA_CONTROLLER_SIM_EVENTS", "120"))
    return asyncio.run(ControllerSimulation(seed, directory, events).run())
