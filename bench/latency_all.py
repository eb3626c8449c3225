"""acks=all on RF=3: end-to-end latency, and where one record's acknowledgement time goes.

The harness's ``latency-all`` workload, on the shared LocalCluster (three disk nodes and a
controller node as separate Ray nodes, see ``bench.failover``):

1. Latency as ``bench.latency`` measures it (``send()`` to the consumer's poll, over every
   record) at each rate of ``--latency-rates``: acks=all on a RF=3 topic
   (min.insync.replicas=2, idempotent) and, as the baseline in the same run, acks=1 on a RF=1
   topic of the same cluster. A record reaches a consumer once the high watermark passes it,
   so the acks=all figure holds the replication.
2. The breakdown: ``--breakdown-records`` lone records (linger 0, each sent once the last was
   acknowledged) with acks=all, traced stage by stage across the client, the leader and the
   followers (``rafka.actors.stage_trace``), and acks=1 on RF=1 the same way. Each segment
   is the time between two stages for one record; the report gives each segment's median
   and p90 and the median total. For acks=all the follower is the one whose progress
   report committed the record (the high watermark waits for every in-sync replica).

The marks are on only while this workload runs: the harness starts the LocalCluster with
the trace directory set, and the switch file turns them on and off.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import latency

TINY = {"breakdown_records": 40}

#: acks=all: (segment, stage it starts at, stage it ends at), in the order a record passes.
ACKS_ALL_SEGMENTS = (
    ("client: encode the batch and submit the call", "client.encode", "client.call"),
    ("produce call reaches the leader", "client.call", "leader.received"),
    ("leader: checks and append", "leader.received", "leader.appended"),
    ("leader: wakes the follower's fetch", "leader.appended", "leader.sent"),
    ("fetch answer reaches the follower", "leader.sent", "follower.received"),
    ("follower: append", "follower.received", "follower.appended"),
    ("follower's next fetch reaches the leader", "follower.appended", "leader.fetched"),
    ("leader: high watermark moves", "leader.fetched", "leader.committed"),
    ("leader: wakes the produce and answers", "leader.committed", "leader.answered"),
    ("produce answer reaches the client", "leader.answered", "client.answered"),
    ("client: completes the futures", "client.answered", "client.completed"),
)  # fmt: skip
#: acks=1: the same path without the followers.
ACKS_ONE_SEGMENTS = (
    ACKS_ALL_SEGMENTS[:3]
    + (("leader: answers", "leader.appended", "leader.answered"),)
    + ACKS_ALL_SEGMENTS[-2:]
)
FOLLOWER_STAGES = ("leader.sent", "follower.received", "follower.appended", "leader.fetched")


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--breakdown-records", type=int, default=300,
                       help="lone records traced stage by stage per side (default 300)")


# -- the breakdown, from the marks ---------------------------------------------------------------


class Marks:
    """The marks of one traced run (``stage_trace.read``), searchable by stage, end offset
    and time."""

    def __init__(self, marks: dict[str, list[tuple[int, int, int]]]) -> None:
        self.marks = marks
        self._times = {stage: [m[1] for m in found] for stage, found in marks.items()}

    def first(self, stage: str, end: int, after_ns: int, peer: int | None = None) -> int | None:
        """The time (ns) ``stage`` first reached ``end`` (an end offset >= it) at or after
        ``after_ns``, for ``peer`` when given; None when it never did."""
        found = self.marks.get(stage, [])
        for i in range(bisect.bisect_left(self._times.get(stage, []), after_ns), len(found)):
            offset, at, who = found[i]
            if offset >= end and (peer is None or who == peer):
                return at
        return None


def record_segments(marks: Marks, end: int, acks_all: bool) -> dict[str, float] | None:
    """One record's segments in ms (the record ending at offset ``end``), or None when a
    stage is missing (a mark lost, or a retry that took another path)."""
    start = marks.first("client.encode", end, 0)
    if start is None:
        return None
    at: dict[str, int] = {"client.encode": start}
    segments = ACKS_ALL_SEGMENTS if acks_all else ACKS_ONE_SEGMENTS
    follower = None
    if acks_all:
        appended = marks.first("leader.appended", end, start)
        if appended is None:
            return None
        # The follower that committed it: its progress report came last.
        reports = {}
        for found in marks.marks.get("leader.fetched", []):
            offset, time_ns, who = found
            if offset >= end and time_ns >= appended and who not in reports:
                reports[who] = time_ns
        committed = marks.first("leader.committed", end, appended)
        if committed is None or not reports:
            return None
        before = {who: t for who, t in reports.items() if t <= committed}
        follower = max(before or reports, key=lambda who: (before or reports)[who])
    for _, begins, ends in segments:
        if ends in at:
            continue
        peer = follower if ends in FOLLOWER_STAGES else None
        found = marks.first(ends, end, at[begins], peer)
        if found is None:
            return None
        at[ends] = found
    out = {label: (at[ends] - at[begins]) / 1e6 for label, begins, ends in segments}
    out["total"] = (at[segments[-1][2]] - start) / 1e6
    return out


def summarise(per_record: list[dict[str, float]], acks_all: bool) -> dict[str, Any]:
    """Median and p90 of each segment over the records, in ms, in path order."""
    segments = ACKS_ALL_SEGMENTS if acks_all else ACKS_ONE_SEGMENTS
    out: dict[str, Any] = {"records": len(per_record), "segments": []}
    if not per_record:
        return out
    for label in [s[0] for s in segments] + ["total"]:
        values = sorted(r[label] for r in per_record)
        out["segments"].append({
            "segment": label, "p50_ms": statistics.median(values),
            "p90_ms": values[min(len(values) - 1, int(0.9 * len(values)))],
        })  # fmt: skip
    return out


# -- the runs ------------------------------------------------------------------------------------


def lone_records(cluster, topic: str, count: int, value: bytes, **settings: Any) -> list[int]:
    """Send ``count`` records one at a time (each after the last was acknowledged); answers
    their end offsets."""
    producer = cluster.producer(linger_ms=0, **settings)
    ends = []
    try:
        for _ in range(count):
            metadata = producer.send(topic, value, partition=0).result(timeout=30)
            ends.append(metadata.offset + 1)
            time.sleep(0.002)  # let the followers' fetches settle into their long poll
    finally:
        producer.close()
    return ends


def traced_breakdown(cluster, trace_dir: str, topic: str, count: int, value: bytes,
                     acks_all: bool, **settings: Any) -> dict[str, Any]:  # fmt: skip
    from rafka.actors import stage_trace

    for name in os.listdir(trace_dir):
        if name.endswith(".trace"):
            os.remove(os.path.join(trace_dir, name))
    stage_trace.switch(trace_dir, True)
    time.sleep(2 * stage_trace.SWITCH_CHECK_NS / 1e9)  # every process sees the switch
    try:
        lone_records(cluster, topic, max(5, count // 10), value, **settings)  # warm-up
        ends = lone_records(cluster, topic, count, value, **settings)
        time.sleep(0.5)  # the followers' last marks
    finally:
        stage_trace.switch(trace_dir, False)
    found = stage_trace.read(trace_dir)
    marks = Marks(found)
    per_record = [s for s in (record_segments(marks, end, acks_all) for end in ends) if s]
    return {**summarise(per_record, acks_all), "sent": len(ends),
            "marks": {stage: len(m) for stage, m in sorted(found.items())}}  # fmt: skip


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``latency-all``: latency of acks=all RF=3 beside acks=1 RF=1 on one LocalCluster, and
    the stage breakdown of lone records on both."""
    from bench.failover import _topic
    from bench.harness import row

    local, cluster = ctx.local()
    trace_dir = ctx.stage_trace_dir
    rates, seconds, size = latency.parse_rates(args.latency_rates), args.latency_seconds, \
        args.value_size  # fmt: skip
    linger, wait = args.latency_linger_ms, args.latency_fetch_wait_ms
    made: list[str] = []

    def fresh(replicas: int) -> str:
        """A new one-partition topic: the consumer of a measurement reads its topic from
        the start, so records of an earlier measurement must not be there."""
        config = {"min.insync.replicas": 2} if replicas == 3 else None
        made.append(_topic(cluster, f"lat-rf{replicas}", replicas, config))
        return made[-1]

    report: dict[str, Any] = {
        "disks": len(local.disks), "rates": rates, "seconds": seconds, "value_size": size,
        "linger_ms": linger, "fetch_max_wait_ms": wait, "runs": [], "series": [],
        "rf3": "acks=all, min.insync.replicas=2, idempotent", "rf1": "acks=1",
    }  # fmt: skip
    rows = []
    try:
        for rate in rates:
            count = max(1, round(rate * seconds))
            run: dict[str, Any] = {"rate": rate, "records": count}
            run["acks_all_rf3"] = rf3_side = latency.run_rafka(
                cluster, rate, count, size, linger, wait, topic=fresh(3), acks="all",
                enable_idempotence=True,
            )  # fmt: skip
            run["acks_1_rf1"] = rf1_side = latency.run_rafka(cluster, rate, count, size, linger,
                                                             wait, topic=fresh(1))  # fmt: skip
            for name, side in (("acks=all RF=3", rf3_side), ("acks=1 RF=1", rf1_side)):
                print(f"{name} at {rate:,.0f}/s: " + latency._line(side), file=sys.stderr)
                if side.get("lost"):
                    raise RuntimeError(f"{side['lost']} records never reached the consumer "
                                       f"({name} at {rate:,.0f}/s)")  # fmt: skip
            report["runs"].append(run)
            report["series"] += [
                latency.series(f"rafka acks=all RF=3 @ {rate:,.0f}/s", rate, rf3_side),
                latency.series(f"rafka acks=1 RF=1 (3 nodes) @ {rate:,.0f}/s", rate, rf1_side),
            ]  # fmt: skip
            rows += [
                row(f"acks=all RF=3 {label} at {rate:,.0f}/s", "ms", rf3_side.get(name),
                    baseline=rf1_side.get(name), baseline_label="acks=1 RF=1",
                    higher_is_better=False)
                for name, _, label in latency.PERCENTILES
            ]  # fmt: skip
        value = os.urandom(size)
        report["breakdown"] = {
            "acks_all_rf3": traced_breakdown(cluster, trace_dir, fresh(3),
                                             args.breakdown_records, value, True, acks="all",
                                             enable_idempotence=True),
            "acks_1_rf1": traced_breakdown(cluster, trace_dir, fresh(1), args.breakdown_records,
                                           value, False, acks=1),
        }  # fmt: skip
    finally:
        admin = cluster.admin()
        for topic in made:
            admin.delete_topic(topic)
    print(render_breakdown(report["breakdown"]))
    totals = {}
    for side, found in report["breakdown"].items():
        total = next((s for s in found["segments"] if s["segment"] == "total"), None)
        if total is None:
            raise RuntimeError(f"no traced record of {side} had every stage marked: "
                               f"{json.dumps(found)}")  # fmt: skip
        totals[side] = total["p50_ms"]
    rows.append(row("lone record acks=all RF=3, produce to ack, p50", "ms",
                    totals["acks_all_rf3"], baseline=totals["acks_1_rf1"],
                    baseline_label="acks=1 RF=1", higher_is_better=False))  # fmt: skip
    return {"rows": rows, "report": report}


def render_breakdown(breakdown: dict[str, Any]) -> str:
    """The two breakdowns as one table: segment, then p50 / p90 per side, ms."""
    all_, one = breakdown["acks_all_rf3"], breakdown["acks_1_rf1"]
    ones = {s["segment"]: s for s in one["segments"]}
    lines = [
        f"\nwhere a lone record's acknowledgement time goes (ms; acks=all RF=3: "
        f"{all_['records']} of {all_['sent']} records traced; acks=1 RF=1: {one['records']} "
        f"of {one['sent']})",
        f"{'segment':<44}{'acks=all p50':>13}{'p90':>8}{'acks=1 p50':>12}{'p90':>8}",
    ]
    for s in all_["segments"]:
        mine = ones.get(s["segment"])
        lines.append(f"{s['segment']:<44}{s['p50_ms']:>13.3f}{s['p90_ms']:>8.3f}"
                     + (f"{mine['p50_ms']:>12.3f}{mine['p90_ms']:>8.3f}" if mine else ""))
    if "leader: answers" in ones:
        mine = ones["leader: answers"]
        lines.append(f"{'leader: answers (acks=1)':<44}{'':>13}{'':>8}"
                     f"{mine['p50_ms']:>12.3f}{mine['p90_ms']:>8.3f}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":  # print a saved report again
    saved = json.loads(Path(sys.argv[1]).read_text())
    print(render_breakdown(saved["report"]["breakdown"]))
