"""Failover: how long acks=all writes stop when a partition's leader dies, and what acks=all
on RF=3 costs next to acks=1 on RF=1, on one multi-node LocalCluster.

Run ``python -m bench failover [--failover-runs 5] [--failover-disks 3]
[--failover-records 300000]``. In one run:

1. A LocalCluster (``ray.cluster_utils``: a head node with the controller and this driver, one
   node per disk) with ``broker.session.timeout.ms=1000`` (the default), and two throughput
   figures, each the best of ``--failover-rounds`` rounds, one producer, one partition,
   100-byte values, ``--failover-records`` records:
     acks=all, RF=3, min.insync.replicas=2, idempotent   vs.   acks=1, RF=1,
   both per record (``send`` in a loop, then ``flush``) and in bulk (``send_batch`` of one
   Arrow column, then its ``result()``).
2. ``--failover-runs`` failovers of a RF=3 partition (min.insync.replicas=2). A fresh
   idempotent acks=all producer sends a record every ``SEND_INTERVAL_S``; once it has had
   acknowledgements for a second, the node of the partition's leader is killed. The figure
   is the time from the kill call to the first acknowledgement of a record sent after it
   (a request already on its way may be answered by the dying leader), so it holds
   detection (missed heartbeats and a probe), the election, the producer noticing the move,
   and the new ISR replicating. Also recorded: when the controller's metadata first showed
   the new leader (polled every 50 ms). Between runs the node comes back, its replica catches up and
   rejoins the ISR, and a preferred-leader election (``admin.elect_leaders``) gives it the
   leadership back, so every run kills a leader in the same state.

The results are printed as a table and saved to bench/results/failover.json with the machine.
The aim is a median failover under ``TARGET_S``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rafka.actors.local_cluster import LocalCluster, wait_for

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "failover.json"
DATA_DIR = Path(__file__).resolve().parent.parent / "bench-data" / "failover"
NAMESPACE = "rafka-bench-failover"
SETTINGS = {
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "leader.imbalance.check.interval.seconds": 5,
}
TARGET_S = 2.0
SEND_INTERVAL_S = 0.002  # one record every 2 ms while a failover is measured: 2 ms resolution
WARM_UP_S = 1.0
GIVE_UP_S = 60.0


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--failover-runs", type=int, default=5, help="leader kills (default 5)")
    group.add_argument("--failover-disks", type=int, default=3, help="disk nodes (default 3)")
    group.add_argument("--failover-records", type=int, default=300_000,
                       help="records per throughput round (default 300000)")  # fmt: skip
    group.add_argument("--failover-rounds", type=int, default=2,
                       help="throughput rounds, best kept (default 2)")  # fmt: skip
    group.add_argument("--failover-value-size", type=int, default=100, help="bytes per value")


# -- throughput --------------------------------------------------------------------------------


def throughput(cluster, topic: str, count: int, value: bytes, **producer_settings) -> dict:
    """Records/s of one producer into partition 0 of ``topic``: per record and in bulk."""
    import pyarrow as pa

    out = {}
    producer = cluster.producer(linger_ms=5, **producer_settings)
    send = producer.send
    started = time.perf_counter()
    for _ in range(count):
        send(topic, value)
    producer.flush()
    out["per_record"] = count / (time.perf_counter() - started)
    column = pa.array([value] * count, pa.binary())
    started = time.perf_counter()
    producer.send_batch(topic, column, partition=0).result()
    out["bulk"] = count / (time.perf_counter() - started)
    producer.close()
    return out


# -- failover ----------------------------------------------------------------------------------


class _Sender(threading.Thread):
    """Sends one record every SEND_INTERVAL_S and keeps (ack time, offset, send time) of
    every ack."""

    def __init__(self, producer, topic: str, value: bytes) -> None:
        super().__init__(name="failover-sender", daemon=True)
        self.producer = producer
        self.topic = topic
        self.value = value
        self.acks: list[tuple[float, int]] = []
        self.errors: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SEND_INTERVAL_S):
            sent = time.monotonic()
            self.producer.send(self.topic, self.value, partition=0,
                               callback=lambda m, e, sent=sent: self._done(m, e, sent))

    def _done(self, metadata, error, sent: float) -> None:  # on the producer's sender thread
        if error is None:
            self.acks.append((time.monotonic(), metadata.offset, sent))
        else:
            self.errors.append((time.monotonic(), type(error).__name__))


def one_failover(local, cluster, topic: str, value: bytes, disk_of: dict[int, str]) -> dict:
    admin = cluster.admin()
    before = admin.describe_topic(topic).partitions[0]
    victim = disk_of[before.leader]
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=1,
                                request_timeout_ms=10_000, delivery_timeout_ms=120_000)  # fmt: skip
    sender = _Sender(producer, topic, value)
    sender.start()
    wait_for(lambda: sender.acks and time.monotonic() - sender.acks[0][0] > WARM_UP_S,
              30, "acknowledgements before the kill", 0.01)  # fmt: skip

    killed = time.monotonic()
    local.kill(victim)
    kill_returned = time.monotonic()
    seen = len(sender.acks)
    first_ack = elected = None
    after = before
    deadline = killed + GIVE_UP_S
    while (first_ack is None or elected is None) and time.monotonic() < deadline:
        if first_ack is None:
            # A write sent after the kill: a request already on its way may still be
            # answered by the dying leader in the first milliseconds.
            first_ack = next(((t, o) for t, o, sent in sender.acks[seen:] if sent >= killed),
                             None)  # fmt: skip
        if elected is None:
            p = admin.describe_topic(topic).partitions[0]
            if p.leader != before.leader and p.leader is not None and p.leader >= 0:
                elected, after = time.monotonic(), p
        time.sleep(0.05 if elected is None else 0.005)
    sender.stop.set()
    sender.join()
    producer.close(30)
    run = {
        "killed_disk": victim, "old_leader": before.leader, "new_leader": after.leader,
        "epoch": [before.leader_epoch, after.leader_epoch], "isr_after": after.isr,
        "kill_call_s": kill_returned - killed,
        "failover_s": None if first_ack is None else first_ack[0] - killed,
        "elected_s": None if elected is None else elected - killed,
        "errors_seen": sorted({name for _, name in sender.errors}),
        "acks": len(sender.acks),
    }  # fmt: skip
    if first_ack is None:
        run["error"] = f"no acknowledgement within {GIVE_UP_S:g} s of killing {victim}"

    # Back to the starting state: the node returns, rejoins the ISR and leads again.
    revived = time.monotonic()
    local.revive(victim)
    wait_for(lambda: len(admin.describe_topic(topic).partitions[0].isr) == len(before.replicas),
              120, f"{victim} to rejoin the ISR", 0.2)  # fmt: skip
    run["rejoin_s"] = time.monotonic() - revived

    def preferred_leads():
        p = admin.describe_topic(topic).partitions[0]
        if p.leader == p.replicas[0]:
            return True
        admin.elect_leaders(topic)  # an error result (not alive yet, say) is retried
        return False

    wait_for(preferred_leads, 60, "the preferred leader to lead again", 0.5)
    run["preferred_back_s"] = time.monotonic() - revived
    return run


# -- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    from bench.storage import environment

    value = os.urandom(args.failover_value_size)
    disks = [f"d{i + 1}" for i in range(args.failover_disks)]
    if len(disks) < 3:
        raise SystemExit("the failover benchmark needs --failover-disks >= 3 (RF=3)")
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    local = LocalCluster(str(DATA_DIR), disks, namespace=NAMESPACE, settings=SETTINGS)
    began = time.monotonic()
    print(f"failover benchmark: starting a LocalCluster with {len(disks)} disk nodes",
          file=sys.stderr)  # fmt: skip
    cluster = local.start()
    started_s = time.monotonic() - began
    try:
        admin = cluster.admin()
        disk_of = {b.broker_id: b.disk for b in admin.brokers()}
        admin.create_topic("rf3", 1, 3, {"min.insync.replicas": 2})
        admin.create_topic("rf1", 1, 1)
        wait_for(lambda: len(admin.describe_topic("rf3").partitions[0].isr) == 3, 60, "rf3")
        rounds = []
        for i in range(args.failover_rounds):
            row = {
                "acks_all_rf3": throughput(cluster, "rf3", args.failover_records, value,
                                           acks="all", enable_idempotence=True),
                "acks_1_rf1": throughput(cluster, "rf1", args.failover_records, value, acks=1),
            }  # fmt: skip
            rounds.append(row)
            print(f"throughput round {i + 1}: " + json.dumps(row), file=sys.stderr)

        admin.create_topic("failover", 1, 3, {"min.insync.replicas": 2})
        wait_for(lambda: len(admin.describe_topic("failover").partitions[0].isr) == 3, 60,
                  "the failover topic")  # fmt: skip
        runs = []
        for i in range(args.failover_runs):
            runs.append(one_failover(local, cluster, "failover", value, disk_of))
            print(f"failover run {i + 1}: " + json.dumps(runs[-1]), file=sys.stderr)
    finally:
        local.shutdown()
        shutil.rmtree(DATA_DIR, ignore_errors=True)
    report = {
        "command": reproduce_command(args),
        "environment": environment(str(DATA_DIR)),
        "disks": len(disks),
        "settings": SETTINGS,
        "value_size": args.failover_value_size,
        "records": args.failover_records,
        "start_s": started_s,
        "total_s": time.monotonic() - began,
        "throughput_rounds": rounds,
        "throughput": {
            f"{side}.{path}": max(r[side][path] for r in rounds)
            for side in rounds[0] for path in rounds[0][side]
        },
        "runs": runs,
        "failover": summarise([r["failover_s"] for r in runs if r["failover_s"] is not None]),
        "elected": summarise([r["elected_s"] for r in runs if r["elected_s"] is not None]),
        "target_s": TARGET_S,
    }  # fmt: skip
    median = report["failover"]["median"]
    report["met"] = median is not None and median < TARGET_S and all(
        r["failover_s"] is not None for r in runs
    )
    print(render(report))
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {RESULTS_PATH}")


def summarise(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "max": None, "min": None}
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def reproduce_command(args: argparse.Namespace) -> str:
    return shlex.join([
        "python", "-m", "bench", "failover", "--failover-runs", str(args.failover_runs),
        "--failover-disks", str(args.failover_disks), "--failover-records",
        str(args.failover_records), "--failover-rounds", str(args.failover_rounds),
    ])  # fmt: skip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render(report: dict[str, Any]) -> str:
    tput = report["throughput"]
    lines = [
        f"rafka failover benchmark: LocalCluster with {report['disks']} disk nodes on "
        f"{report['environment']['cpus']} CPUs, broker.session.timeout.ms="
        f"{report['settings']['broker.session.timeout.ms']}",
        "",
        f"throughput, one producer, one partition, {report['records']:,} records of "
        f"{report['value_size']} bytes (best of {len(report['throughput_rounds'])})",
        f"{'path':<28}{'acks=all RF=3':>16}{'acks=1 RF=1':>14}{'ratio':>8}",
    ]
    for path, label in (("per_record", "per record (send, flush)"),
                        ("bulk", "bulk (send_batch)")):  # fmt: skip
        rf3, rf1 = tput[f"acks_all_rf3.{path}"], tput[f"acks_1_rf1.{path}"]
        lines.append(f"{label:<28}{rf3:>16,.0f}{rf1:>14,.0f}{rf3 / rf1:>8.2f}")
    lines += [
        "",
        "leader's node killed -> first acks=all ack of a write sent after the kill",
        f"{'run':>4}{'disk':>6}{'leader':>9}{'epoch':>8}{'elected s':>11}{'first ack s':>13}"
        f"{'rejoin s':>10}  errors seen by the producer",
    ]
    for i, r in enumerate(report["runs"], 1):
        elected = "-" if r["elected_s"] is None else f"{r['elected_s']:.2f}"
        first = "none" if r["failover_s"] is None else f"{r['failover_s']:.2f}"
        lines.append(
            f"{i:>4}{r['killed_disk']:>6}{r['old_leader']:>5}->{r['new_leader']:<2}"
            f"{r['epoch'][0]:>4}->{r['epoch'][1]:<2}{elected:>11}{first:>13}"
            f"{r['rejoin_s']:>10.1f}  {', '.join(r['errors_seen']) or '-'}"
        )
    f, e = report["failover"], report["elected"]
    lines += [
        f"first ack after the kill: median {_seconds(f['median'])}, max {_seconds(f['max'])} "
        f"(new leader in metadata: median {_seconds(e['median'])}); aim: median < "
        f"{report['target_s']:g} s: {'met' if report['met'] else 'NOT met'}",
        f"reproduce: {report['command']}   ({report['total_s']:.0f} s)",
    ]
    return "\n".join(lines)
