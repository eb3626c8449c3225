"""The nemesis of the transaction chaos run (txn_chaos_run.py): a fault schedule drawn from
a seed, and its player, which kills disk nodes (and revives them), transaction coordinators
and the host actors of data partitions' leaders, and records every fault it made.

- ``node``: the disk's Ray node is removed (``LocalCluster.kill``: its processes die, its
  files stay) and a new one with the same disk added ``downtime`` s later.
- ``coordinator``: ``ray.kill(coordinator, no_restart=False)`` of one
  ``__transaction_state`` shard's TransactionCoordinator: Ray starts it again at once and it
  reloads its partition (finishing what it finds prepared).
- ``host``: ``ray.kill(host, no_restart=False)`` of the host actor holding one data
  partition's leader (with the replicas packed, every replica of that broker): Ray starts it
  again, its replicas recover their logs and check in, and leadership moves meanwhile.
"""

from __future__ import annotations

import random
import time
import traceback
from typing import Any, Callable, NamedTuple

from rafka.actors.local_cluster import LocalCluster
from rafka.actors.placement import CONTROLLER_NAME, transaction_coordinator_name
from rafka.cluster.hosting import host_name

FAULT_KINDS = ("node", "coordinator", "host")


class Fault(NamedTuple):
    """One step: ``gap`` s after the previous step was due, a fault of ``kind`` on
    ``target`` (a disk index, a coordinator shard, or a data partition index over both
    topics), and for a node the ``downtime`` before it is revived."""

    gap: float
    kind: str
    target: int
    downtime: float


def fault_schedule(
    seed: int, duration: float, disks: int, shards: int, partitions: int,
    weights: tuple[float, float, float], gap: tuple[float, float],
    downtime: tuple[float, float],
) -> list[Fault]:  # fmt: skip
    """The faults to inject, in order: a pure function of its arguments (the player may
    start a node kill later than planned, never sooner)."""
    rng = random.Random(seed)
    steps: list[Fault] = []
    t = 0.0
    while True:
        step_gap = rng.uniform(*gap)
        t += step_gap
        if t >= duration:
            return steps
        kind = rng.choices(FAULT_KINDS, weights=weights)[0]
        target = rng.randrange({"node": disks, "coordinator": shards, "host": partitions}[kind])
        steps.append(Fault(round(step_gap, 2), kind, target, round(rng.uniform(*downtime), 2)))


class Nemesis:
    """Plays the schedule on the main thread (``ray.cluster_utils.Cluster.add_node``
    installs signal handlers, which only the main thread may do) and records each fault:
    what it hit, when it was planned and made, and for a node how long it was down. A node
    is killed only when no node is down and every partition has its full ISR (a revived
    node's replicas take a while to come back: Ray restarts a node's actors once it has
    declared the old node dead, about 15 s after the kill); coordinators and hosts are
    killed when due."""

    def __init__(
        self, local: LocalCluster, healthy: Callable[[], bool], disks: list[str],
        broker_of: dict[str, int], partitions: list[tuple[str, int]], started: float,
        log: Callable[[str], None],
    ) -> None:  # fmt: skip
        import ray

        self.ray = ray
        self.local = local
        self.is_healthy = healthy
        self.log = log
        self.disks = disks
        self.broker_of = broker_of
        self.partitions = partitions
        self.started = started
        self.namespace = local.namespace
        self.faults: list[dict[str, Any]] = []
        self.down: dict[str, dict[str, Any]] = {}  # disk -> its fault, while it is down
        self.revives: list[tuple[float, str]] = []
        self.unplayed: list[list] = []  # steps not due, or still waiting, at the end
        self.error: str | None = None

    def now(self) -> float:
        return time.monotonic() - self.started

    def play(self, schedule: list[Fault], until: float) -> None:
        """Each step when it is due; a node kill due while a node is down or a partition
        is short of its ISR waits its turn (the other steps do not wait for it)."""
        try:
            due: list[tuple[float, Fault]] = []
            planned = 0.0
            for step in schedule:
                planned += step.gap
                due.append((planned, step))
            nodes: list[tuple[float, Fault]] = []  # node kills due, in order
            checked = -1.0
            ready = False
            while self.now() < until:
                self.revive_due()
                while due and due[0][0] <= self.now():
                    planned, step = due.pop(0)
                    if step.kind == "node":
                        nodes.append((planned, step))
                    else:
                        self.inject(step, planned)
                if nodes and not self.down:
                    if self.now() - checked >= 0.5:  # the controller is asked twice a second
                        checked, ready = self.now(), self.healthy()
                    if ready:
                        planned, step = nodes.pop(0)
                        self.inject(step, planned)
                        ready = False
                time.sleep(0.05)
            self.unplayed = [[round(at, 2), *step] for at, step in nodes + due]
        except Exception as e:  # reported: the run then fails
            self.error = "".join(traceback.format_exception(e))

    def inject(self, step: Fault, planned: float) -> None:
        fault = {"kind": step.kind, "planned_s": round(planned, 2), "at_s": round(self.now(), 2),
                 "waited_s": round(self.now() - planned, 2)}  # fmt: skip
        try:
            getattr(self, f"_{step.kind}")(step, fault)
        except Exception as e:  # noqa: BLE001 - the controller busy, an actor gone: not made
            if step.kind == "node":  # a node kill that fails breaks the run's bookkeeping
                raise
            fault["skipped"] = f"{type(e).__name__}: {e}"[:200]
        self.faults.append(fault)
        self.log(f"fault at {fault['at_s']} s: {fault['kind']} {fault.get('what')}")

    def healthy(self) -> bool:
        """Every partition has a leader and its full ISR (``healthy`` of the run)."""
        try:
            return bool(self.is_healthy())
        except Exception:  # noqa: BLE001 - the controller restarting: not yet
            return False

    def _node(self, step: Fault, fault: dict[str, Any]) -> None:
        disk = self.disks[step.target]
        fault.update(what=disk, broker=self.broker_of[disk], downtime_planned_s=step.downtime)
        self.local.kill(disk)
        self.down[disk] = fault
        self.revives.append((self.now() + step.downtime, disk))

    def _coordinator(self, step: Fault, fault: dict[str, Any]) -> None:
        name = transaction_coordinator_name(step.target)
        fault["what"] = name
        try:
            handle = self.ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            fault["skipped"] = "not running"
            return
        self.ray.kill(handle, no_restart=False)

    def _host(self, step: Fault, fault: dict[str, Any]) -> None:
        topic, partition = self.partitions[step.target]
        controller = self.ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        (described,) = self.ray.get(controller.describe_topics.remote([topic]), timeout=30)
        p = described["partitions"][partition]
        fault["partition"] = f"{topic}-{partition}"
        if p["leader"] < 0:
            fault["skipped"] = "no leader"
            return
        name = host_name(p["leader"], p["hosts"][p["replicas"].index(p["leader"])])
        fault.update(what=name, broker=p["leader"])
        try:
            handle = self.ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            fault["skipped"] = "not running"
            return
        self.ray.kill(handle, no_restart=False)

    def revive_due(self) -> None:
        for at, disk in sorted(self.revives):
            if at <= self.now():
                self.revives.remove((at, disk))
                self.revive(disk, "schedule")

    def revive(self, disk: str, why: str) -> None:
        began = self.now()
        self.local.revive(disk)
        fault = self.down.pop(disk)
        fault.update(revived_s=round(began, 2), down_s=round(began - fault["at_s"], 2),
                     revive_call_s=round(self.now() - began, 2), revived_by=why)  # fmt: skip
        self.log(f"revived {disk} at {began:.1f} s ({why})")

    def revive_all(self) -> None:
        self.revives.clear()
        for disk in sorted(self.down):
            self.revive(disk, "end of faults")
