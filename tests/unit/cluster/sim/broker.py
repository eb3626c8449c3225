"""A broker: its disks (``log.Disk``), which survive a crash, and its process (heartbeat,
timer, replicas), which does not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.unit.cluster.sim.config import CONTROLLER, MONOTONIC_EPOCH_CACHE, State
from tests.unit.cluster.sim.log import Disk, IgnoringEpochCache, MemoryEpochCache
from tests.unit.cluster.sim.replica import Replica

if TYPE_CHECKING:
    from tests.unit.cluster.sim.runner import Simulation


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
        every_append = sim.cfg.flush == "every_append"
        self.disks = {p: Disk(cache=cache(), flush_every_append=every_append) for p in partitions}
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
        self.sim.network.send(CONTROLLER, "heartbeat", self.id, self.process)
        for replica in self.replicas.values():
            replica.tick()
        sched.after(self.sim.cfg.heartbeat_ms, self.tick, process)

    def on_probe(self, probe: int) -> None:
        self.sim.network.answer(self, CONTROLLER, "probe_answer", self.id, probe)


