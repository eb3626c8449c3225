"""Controller restarts: what a killed controller costs the data path, how soon it answers
again, and what its reconcile costs.

One workload of the harness, ``controller`` (``python -m bench controller
[--controller-runs 3] [--controller-partitions 24]``), on the LocalCluster that produce-all and
failover share. Topics with ``--controller-partitions`` partitions in all (RF=3) are
created; an idempotent acks=all producer sends one record every 2 ms to one of them. Each run:

1. the producer's longest gap between two acknowledgements over a quiet window (the
   baseline: what the machine's scheduling alone gives);
2. the controller actor is killed (``ray.kill``, Ray restarts it) while an admin
   ``create_topic`` is sent; recorded: the time until the new process answers, until the
   create (retried by the client with its request id) answers, and the producer's longest
   ack gap over the same length of window around the kill. Produce and fetch never go
   through the controller, so the gap should be the baseline's;
3. one reconcile pass (every partition's state pushed to its replicas, replica actors
   listed and compared), timed from the driver.

Results are printed and saved to bench/results/controller.json with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from rafka.actors.local_cluster import wait_for

TINY = {"controller_runs": 1, "controller_partitions": 6}
WINDOW_S = 4.0  # the window over which the longest ack gap is taken, with and without a kill
SEND_INTERVAL_S = 0.002


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--controller-runs", type=int, default=3,
                       help="controller kills (default 3)")  # fmt: skip
    group.add_argument("--controller-partitions", type=int, default=24,
                       help="partitions in the cluster, RF=3 (default 24)")  # fmt: skip


class _Acks(threading.Thread):
    """Sends one record every SEND_INTERVAL_S; keeps the time of every acknowledgement."""

    def __init__(self, producer, topic: str) -> None:
        super().__init__(name="controller-bench-sender", daemon=True)
        self.producer, self.topic = producer, topic
        self.acks: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SEND_INTERVAL_S):
            self.producer.send(self.topic, b"x" * 100, partition=0, callback=self._done)

    def _done(self, metadata, error) -> None:
        if error is None:
            self.acks.append(time.monotonic())
        else:
            self.errors += 1

    def longest_gap(self, start: float, end: float) -> float:
        times = [t for t in self.acks if start <= t <= end]
        if len(times) < 2:
            return end - start
        return max(b - a for a, b in zip(times, times[1:]))


def _controller(namespace: str):
    import ray

    from rafka.actors.placement import CONTROLLER_NAME

    return ray.get_actor(CONTROLLER_NAME, namespace=namespace)


def one_kill(cluster, namespace: str, acks: _Acks) -> dict[str, Any]:
    import ray

    admin = cluster.admin()
    quiet_start = time.monotonic()
    time.sleep(WINDOW_S)
    baseline_gap = acks.longest_gap(quiet_start, time.monotonic())

    controller = _controller(namespace)
    old_pid = ray.get(controller.ping.remote(), timeout=30)["pid"]
    name = f"during-kill-{uuid.uuid4().hex[:6]}"
    created: dict[str, float] = {}

    def create() -> None:
        admin.create_topic(name, 1, 1)
        created["at"] = time.monotonic()

    creating = threading.Thread(target=create, daemon=True)
    creating.start()
    killed = time.monotonic()
    ray.kill(controller, no_restart=False)

    def answers_again():
        try:
            return ray.get(_controller(namespace).ping.remote(), timeout=5)["pid"] != old_pid
        except Exception:  # restarting
            return False

    wait_for(answers_again, 60, "the controller to answer again", 0.02)
    answered = time.monotonic()
    creating.join(120)
    time.sleep(max(0.0, killed + WINDOW_S - time.monotonic()))
    kill_gap = acks.longest_gap(killed, killed + WINDOW_S)

    began = time.monotonic()
    counts = ray.get(_controller(namespace).reconcile.remote(), timeout=120)
    reconcile_s = time.monotonic() - began
    admin.delete_topic(name)
    return {
        "baseline_gap_s": baseline_gap, "kill_gap_s": kill_gap,
        "controller_back_s": answered - killed,
        "create_across_kill_s": created["at"] - killed if "at" in created else None,
        "reconcile_s": reconcile_s, "reconciled": counts,
    }  # fmt: skip


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    from bench.failover import NAMESPACE, _topic
    from bench.harness import row

    local, cluster = ctx.local()
    admin = cluster.admin()
    per_topic = 4
    topics = [_topic(cluster, "ctl", 3) for _ in range(max(1, args.controller_partitions // 4))]
    for topic in topics:
        admin.create_partitions(topic, per_topic)
    wait_for(lambda: all(len(p.isr) == 3 for t in topics
                         for p in admin.describe_topic(t).partitions), 120,
             "every partition's replicas in the ISR")  # fmt: skip
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=1)
    acks = _Acks(producer, topics[0])
    acks.start()
    runs = []
    try:
        wait_for(lambda: len(acks.acks) > 100, 30, "acknowledgements before the first kill")
        for i in range(args.controller_runs):
            runs.append(one_kill(cluster, NAMESPACE, acks))
            print(f"controller run {i + 1}: " + json.dumps(runs[-1]), file=sys.stderr)
    finally:
        acks.stop.set()
        acks.join()
        producer.close(30)
        for topic in topics:
            admin.delete_topic(topic)

    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    report = {
        "disks": len(local.disks), "partitions": len(topics) * per_topic, "replication": 3,
        "window_s": WINDOW_S, "runs": runs, "producer_errors": acks.errors,
        "peer": "none: a single Tansu broker has no controller to restart",
        **{f"median_{k}": median(k) for k in ("baseline_gap_s", "kill_gap_s",
                                              "controller_back_s", "create_across_kill_s",
                                              "reconcile_s")},
    }  # fmt: skip
    print(render(report))
    rows = [
        row("longest producer ack gap, controller killed", "s", report["median_kill_gap_s"],
            baseline=report["median_baseline_gap_s"], baseline_label="no kill",
            higher_is_better=False),
        row("controller answers again after a kill", "s", report["median_controller_back_s"],
            higher_is_better=False),
        row("create_topic sent at the kill answers", "s", report["median_create_across_kill_s"],
            higher_is_better=False),
        row(f"reconcile pass, {report['partitions'] * 3} replicas", "s",
            report["median_reconcile_s"], higher_is_better=False),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def render(report: dict[str, Any]) -> str:
    def s(value):
        return "-" if value is None else f"{value:.2f}"

    lines = [
        f"\ncontroller: LocalCluster with {report['disks']} disk nodes, {report['partitions']} "
        f"partitions (RF=3), an acks=all producer sending every {SEND_INTERVAL_S * 1000:g} ms",
        f"{'run':>4}{'ack gap, quiet':>16}{'ack gap, kill':>15}{'back s':>8}{'create s':>10}"
        f"{'reconcile s':>13}",
    ]
    for i, r in enumerate(report["runs"], 1):
        lines.append(f"{i:>4}{s(r['baseline_gap_s']):>16}{s(r['kill_gap_s']):>15}"
                     f"{s(r['controller_back_s']):>8}{s(r['create_across_kill_s']):>10}"
                     f"{s(r['reconcile_s']):>13}")  # fmt: skip
    lines.append(f"producer errors: {report['producer_errors']}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - use `python -m bench controller`
    os.execvp(sys.executable, [sys.executable, "-m", "bench", "controller", *sys.argv[1:]])
