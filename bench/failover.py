"""Failover: how long acks=all writes stop when a partition's leader dies, and what acks=all
on RF=3 costs next to acks=1 on RF=1, on one multi-node LocalCluster.

Two workloads of the harness, ``produce-all`` (1) and ``failover`` (2), which share one
LocalCluster when run together: ``python -m bench produce-all failover [--failover-runs 5]
[--failover-disks 3] [--failover-records 300000] [--failover-rounds 2]``. In one run:

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
   the new leader (polled every 50 ms), and a timeline: acknowledgements per 100 ms from
   the warm-up to ``AFTER_S`` past the first acknowledgement after the kill (drawn as
   failover_timeline.png). Between runs the node comes back, its replica catches up and
   rejoins the ISR, and a preferred-leader election (``admin.elect_leaders``) gives it the
   leadership back, so every run kills a leader in the same state.

The results are printed as tables and saved to bench/results/produce-all.json and
failover.json with the machine.
The aim is a median failover under ``TARGET_S``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rafka.actors.local_cluster import LocalCluster, wait_for

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
TIMELINE_BUCKET_S = 0.1  # the timeline counts acknowledgements per 100 ms
# After the first acknowledgement following the kill, the producer sends this long more, so
# the timeline shows the write rate after the failover as well as before it.
AFTER_S = 1.0


TINY = {"failover_runs": 1, "failover_records": 5_000, "failover_rounds": 1}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--failover-runs", type=int, default=5, help="leader kills (default 5)")
    group.add_argument("--failover-disks", type=int, default=3, help="disk nodes (default 3)")
    group.add_argument("--failover-records", type=int, default=300_000,
                       help="records per throughput round (default 300000)")  # fmt: skip
    group.add_argument("--failover-rounds", type=int, default=2,
                       help="produce-all rounds, best kept (default 2)")  # fmt: skip


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
    if first_ack is not None:
        time.sleep(max(0.0, first_ack[0] + AFTER_S - time.monotonic()))
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
        "timeline": timeline([t for t, _, _ in sender.acks], killed),
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


def timeline(ack_times: list[float], killed: float,
             bucket_s: float = TIMELINE_BUCKET_S) -> dict[str, Any]:  # fmt: skip
    """Acknowledgements per ``bucket_s`` around the kill: ``start_s`` (seconds from the kill
    to the first bucket's start, negative before it) and ``acks`` (a count per bucket, from
    the first acknowledgement to the last), small enough to keep in the report."""
    if not ack_times:
        return {"bucket_s": bucket_s, "start_s": 0.0, "acks": []}
    indexes = [math.floor((t - killed) / bucket_s) for t in ack_times]
    first = min(indexes)
    acks = [0] * (max(indexes) - first + 1)
    for i in indexes:
        acks[i - first] += 1
    return {"bucket_s": bucket_s, "start_s": round(first * bucket_s, 6), "acks": acks}


# -- the run -----------------------------------------------------------------------------------


def start_local(disks: int, data_dir: Path) -> tuple[LocalCluster, Any]:
    """A LocalCluster with ``disks`` disk nodes (at least 3, for RF=3) and SETTINGS, its data
    under ``data_dir``; answers (LocalCluster, rafka Cluster)."""
    if disks < 3:
        raise SystemExit("produce-all and failover need --failover-disks >= 3 (RF=3)")
    shutil.rmtree(data_dir, ignore_errors=True)
    local = LocalCluster(str(data_dir), [f"d{i + 1}" for i in range(disks)], namespace=NAMESPACE,
                         settings=SETTINGS)  # fmt: skip
    try:
        cluster = local.start()
    except BaseException:
        local.shutdown()
        raise
    return local, cluster


def stop_local(local: LocalCluster) -> None:
    try:
        local.shutdown()
    finally:
        shutil.rmtree(local.data_dir, ignore_errors=True)


def _topic(cluster, prefix: str, replicas: int, config: dict | None = None) -> str:
    admin = cluster.admin()
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin.create_topic(name, 1, replicas, config)
    wait_for(lambda: len(admin.describe_topic(name).partitions[0].isr) == replicas, 60,
             f"{name}'s {replicas} replicas in the ISR")  # fmt: skip
    return name


def produce_all_workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``produce-all``: rounds of acks=all on RF=3 (min.insync.replicas=2, idempotent) next to
    acks=1 on RF=1, one producer, one partition, per record and in bulk."""
    from bench.harness import row

    local, cluster = ctx.local()
    value = os.urandom(args.value_size)
    rf3 = _topic(cluster, "rf3", 3, {"min.insync.replicas": 2})
    rf1 = _topic(cluster, "rf1", 1)
    rounds = []
    try:
        for i in range(args.failover_rounds):
            r = {
                "acks_all_rf3": throughput(cluster, rf3, args.failover_records, value,
                                           acks="all", enable_idempotence=True),
                "acks_1_rf1": throughput(cluster, rf1, args.failover_records, value, acks=1),
            }  # fmt: skip
            rounds.append(r)
            print(f"produce-all round {i + 1}: " + json.dumps(r), file=sys.stderr)
    finally:
        admin = cluster.admin()
        for topic in (rf3, rf1):
            admin.delete_topic(topic)
    best = {f"{side}.{path}": max(r[side][path] for r in rounds)
            for side in rounds[0] for path in rounds[0][side]}  # fmt: skip
    report = {
        "disks": len(local.disks), "settings": SETTINGS, "value_size": args.value_size,
        "records": args.failover_records, "throughput_rounds": rounds, "throughput": best,
        "peer": "none: Tansu (memory storage) does not replicate, so RF=3 has no peer here",
    }  # fmt: skip
    print(render_throughput(report))
    rows = [
        row("acks=all RF=3, per record", "records/s", best["acks_all_rf3.per_record"],
            baseline=best["acks_1_rf1.per_record"], baseline_label="acks=1 RF=1"),
        row("acks=all RF=3, bulk (send_batch)", "records/s", best["acks_all_rf3.bulk"],
            baseline=best["acks_1_rf1.bulk"], baseline_label="acks=1 RF=1"),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def failover_workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``failover``: ``--failover-runs`` leader kills of a RF=3 partition."""
    from bench.harness import row

    local, cluster = ctx.local()
    value = os.urandom(args.value_size)
    admin = cluster.admin()
    disk_of = {b.broker_id: b.disk for b in admin.brokers()}
    topic = _topic(cluster, "failover", 3, {"min.insync.replicas": 2})
    runs = []
    try:
        for i in range(args.failover_runs):
            runs.append(one_failover(local, cluster, topic, value, disk_of))
            shown = {k: v for k, v in runs[-1].items() if k != "timeline"}  # that is for the chart
            print(f"failover run {i + 1}: " + json.dumps(shown), file=sys.stderr)
    finally:
        admin.delete_topic(topic)
    report = {
        "disks": len(local.disks), "settings": SETTINGS, "value_size": args.value_size,
        "send_interval_s": SEND_INTERVAL_S, "runs": runs,
        "failover": summarise([r["failover_s"] for r in runs if r["failover_s"] is not None]),
        "elected": summarise([r["elected_s"] for r in runs if r["elected_s"] is not None]),
        "target_s": TARGET_S,
        "peer": "none: a single Tansu broker has no leader to fail over",
    }  # fmt: skip
    median = report["failover"]["median"]
    report["met"] = median is not None and median < TARGET_S and all(
        r["failover_s"] is not None for r in runs
    )
    print(render_failover(report))
    failed = [r for r in runs if r["failover_s"] is None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(runs)} failovers never acknowledged a write: "
                           f"{failed[0].get('error')}")  # fmt: skip
    rows = [
        row("first ack after leader kill, median", "s", median),
        row("new leader in metadata, median", "s", report["elected"]["median"]),
    ]
    return {"rows": rows, "report": report}


def summarise(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "max": None, "min": None}
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render_throughput(report: dict[str, Any]) -> str:
    tput = report["throughput"]
    lines = [
        f"\nproduce-all: LocalCluster with {report['disks']} disk nodes, one producer, one "
        f"partition, {report['records']:,} records of {report['value_size']} bytes (best of "
        f"{len(report['throughput_rounds'])})",
        f"{'path':<28}{'acks=all RF=3':>16}{'acks=1 RF=1':>14}{'ratio':>8}",
    ]
    for path, label in (("per_record", "per record (send, flush)"),
                        ("bulk", "bulk (send_batch)")):  # fmt: skip
        rf3, rf1 = tput[f"acks_all_rf3.{path}"], tput[f"acks_1_rf1.{path}"]
        lines.append(f"{label:<28}{rf3:>16,.0f}{rf1:>14,.0f}{rf3 / rf1:>8.2f}")
    return "\n".join(lines)


def render_failover(report: dict[str, Any]) -> str:
    lines = [
        f"\nfailover: LocalCluster with {report['disks']} disk nodes, broker.session.timeout.ms="
        f"{report['settings']['broker.session.timeout.ms']}",
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
    lines.append(
        f"first ack after the kill: median {_seconds(f['median'])}, max {_seconds(f['max'])} "
        f"(new leader in metadata: median {_seconds(e['median'])}); aim: median < "
        f"{report['target_s']:g} s: {'met' if report['met'] else 'NOT met'}"
    )
    return "\n".join(lines)
