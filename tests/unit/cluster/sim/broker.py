"""What a broker is made of: its disks (log, flushed prefix, epoch cache) that survive a
crash, and the process (heartbeat, timer, replicas) that does not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rafka.storage.leader_epoch import EpochEntry, LeaderEpochCache
from tests.unit.cluster.sim.config import CONTROLLER, MONOTONIC_EPOCH_CACHE, State
from tests.unit.cluster.sim.replica import Replica

if TYPE_CHECKING:
    from tests.unit.cluster.sim.runner import Simulation


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


