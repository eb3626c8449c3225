"""Consumer groups: what a group of three consumers reads per second over six partitions,
and how long a rebalance takes when a member joins and when one dies; rafka next to the
peer (confluent-kafka consumers against a Tansu broker) in the same run.

Run ``python -m bench group [--groups-records 1200000] [--no-peer]`` (``groups`` is the older
name). Per side:

1. ``--groups-records`` 100-byte records are produced into a fresh six-partition topic.
2. Three consumers, each in its own process (Ray actors for rafka, OS processes for the
   peer), subscribe with one group id; each polls in a loop and stamps (wall clock) its
   first and last record and every change of its assignment. Throughput is the records
   read inside the timed window divided by its length: the window opens when the first
   member's first poll that returns records starts, if that member was assigned before the
   poll (else when that poll ends, and its records are not counted), and closes when the
   last record arrives. So the join (group.initial.rebalance.delay.ms, 3 s by default) is not
   counted, nor are records whose fetch time is not. rafka's
   members read with ``poll`` (a Record object per record, as the peer's ``consume`` makes
   a Message per record); a second group of three then reads the topic again with
   ``poll_columns`` (Arrow tables, the bulk path).
3. Join: a fourth consumer is started while the three are idle; the figure is the time from
   starting its process until all four own their share (2, 2, 1, 1) of the partitions.
4. Death: one consumer's process is killed (SIGKILL, no goodbye); the figure is the time from
   the kill until the survivors own all six partitions. It holds the session timeout, so it
   is also given minus ``session_timeout_ms``.

Each measurement also keeps a timeline (``timeline`` in its figures): every member's records
read per 50 ms and the partitions it owned, and when the fourth member started, when a
member was killed and when each rebalance settled; the harness draws it as
group_timeline.png.

Both sides use the same session timeout and heartbeat interval (``SESSION_TIMEOUT_MS``,
``HEARTBEAT_INTERVAL_MS``) and the brokers' default initial rebalance delay: the rebalance
figures are dominated by them (existing members learn of a rebalance on their next
heartbeat; a dead member is noticed when its session expires), not by the machinery.
Results are printed and saved to bench/results/group.json by the harness.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
import uuid
from typing import Any

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 500
GIVE_UP_S = 120.0
# Members count the records they read per 50 ms (group_timeline.png): a read of the default
# 1.2 M records takes about a second here, so that is some twenty points.
TIMELINE_BUCKET_S = 0.05


TINY = {"groups_records": 60_000}  # several polls per member: a first poll is not timed


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--groups-records", type=int, default=1_200_000,
                       help="records read by the group (default 1200000)")
    group.add_argument("--groups-no-rebalances", dest="groups_rebalances", action="store_false",
                       help="time the read only, not the rebalances on join and on death")
    group.add_argument("--groups-no-peer", dest="no_peer", action="store_true",
                       help="the same as --no-peer")  # fmt: skip


# -- one member, either side -------------------------------------------------------------------


class Stamps:
    """What a member reports: records read (all, and inside its timed window), when the
    window opened and when the last record came, its assignment history
    [(wall time, partitions owned)], and the records it read per TIMELINE_BUCKET_S
    [(bucket, records)], a bucket being ``int(wall time / TIMELINE_BUCKET_S)``."""

    def __init__(self, clock=time.time) -> None:
        self.clock = clock  # wall clock, s: members in other processes stamp comparable times
        self.read = 0
        self.timed = 0
        self.first: float | None = None
        self.last: float | None = None
        self.assignments: list[tuple[float, int]] = []
        self.buckets: dict[int, int] = {}
        self.error: str | None = None  # why the member stopped reading, if it did
        self.retried: list[str] = []  # retriable errors a poll raised; the member polled on

    def got(self, n: int, began: float | None) -> None:
        """``n`` records from a poll that started at ``began`` (wall clock), or None when
        the member had no partitions as the poll started (it may have joined inside it)."""
        if not n:
            return
        now = self.clock()
        if self.first is None:
            self.first = now if began is None else began
            if began is not None:
                self.timed += n
        else:
            self.timed += n
        self.last = now
        self.read += n
        bucket = int(now / TIMELINE_BUCKET_S)
        self.buckets[bucket] = self.buckets.get(bucket, 0) + n

    def owned(self, n: int) -> None:
        if not self.assignments or self.assignments[-1][1] != n:
            self.assignments.append((self.clock(), n))

    def report(self) -> dict[str, Any]:
        return {"read": self.read, "timed": self.timed, "first": self.first, "last": self.last,
                "assignments": list(self.assignments), "buckets": sorted(self.buckets.items()),
                "error": self.error, "retried": list(self.retried)}  # fmt: skip


def _rafka_member_class():
    import ray
    from ray import cloudpickle

    # Ray workers get this module by value: bench/ is not on their path.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote(num_cpus=0, max_restarts=0)
    class RafkaMember:
        def __init__(self, cluster, topic: str, group: str, columns: bool) -> None:
            self.stamps = Stamps()
            self.columns = columns
            self.consumer = cluster.consumer(
                group_id=group, auto_offset_reset="earliest", enable_auto_commit=True,
                session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                max_partition_fetch_bytes=4 << 20, max_poll_records=10_000,
            )  # fmt: skip
            self.consumer.subscribe([topic])
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

        def _run(self) -> None:
            from rafka.errors import RafkaError

            while True:
                try:
                    began = time.time() if self.consumer.assignment() else None
                    if self.columns:
                        n = self.consumer.poll_columns(timeout_ms=100).num_rows
                    else:
                        n = len(self.consumer.poll(timeout_ms=100))
                except RafkaError as exc:
                    if not exc.retriable:
                        self.stamps.error = f"{type(exc).__name__}: {exc}"
                        return
                    # An application's poll loop polls on after a retriable error (a
                    # coordinator call timed out on a loaded machine); the report keeps it.
                    self.stamps.retried.append(f"{type(exc).__name__}: {exc}")
                    continue
                except Exception as exc:  # the measurement names it rather than waiting it out
                    self.stamps.error = f"{type(exc).__name__}: {exc}"
                    return
                self.stamps.got(n, began)
                self.stamps.owned(len(self.consumer.assignment()))

        def report(self) -> dict[str, Any]:
            return self.stamps.report()

        def pid(self) -> int:
            return os.getpid()

    return RafkaMember


def _peer_member(bootstrap: str, topic: str, group: str, reports) -> None:
    """A confluent-kafka consumer of the group, in its own process; puts its stamps on
    ``reports`` every 50 ms."""
    import confluent_kafka as ck

    stamps = Stamps()
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": True, "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10,
    })  # fmt: skip
    owned: set = set()

    def assigned(_, partitions) -> None:
        owned.update((p.topic, p.partition) for p in partitions)

    def revoked(_, partitions) -> None:
        owned.difference_update((p.topic, p.partition) for p in partitions)

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    sent = 0.0
    while True:
        began = time.time() if owned else None
        messages = consumer.consume(num_messages=10_000, timeout=0.1)
        stamps.got(sum(1 for m in messages if m.error() is None), began)
        stamps.owned(len(owned))
        if time.monotonic() - sent > 0.05:
            sent = time.monotonic()
            reports.put((os.getpid(), stamps.report()))


# -- the measurement, same for both sides -------------------------------------------------------


def measure(
    start_member, reports_of, kill, records: int, rebalances: bool = True
) -> dict[str, Any]:
    """``start_member()`` -> member handle; ``reports_of(handles)`` -> their stamps;
    ``kill(handle)`` kills one hard. Without ``rebalances`` only the read is timed."""

    def wait(predicate, what: str):
        deadline = time.monotonic() + GIVE_UP_S
        reports: list[dict] = []
        while time.monotonic() < deadline:
            reports = reports_of(members)
            latest.update(zip(numbers, reports))
            stopped = [r["error"] for r in reports if r.get("error")]
            if stopped:
                raise RuntimeError(f"a member stopped reading while waiting for {what}: "
                                   f"{stopped[0]}")  # fmt: skip
            if predicate(reports):
                return reports
            time.sleep(0.02)
        seen = [{"read": r["read"], "owned": r["assignments"][-1][1] if r["assignments"] else 0}
                for r in reports]  # fmt: skip
        raise RuntimeError(f"gave up after {GIVE_UP_S:.0f} s waiting for {what}; members: "
                           f"{seen}")  # fmt: skip

    def shares(reports) -> list[int]:
        return sorted(r["assignments"][-1][1] if r["assignments"] else 0 for r in reports)

    began = time.time()
    latest: dict[int, dict] = {}  # member number (in start order) -> its latest stamps
    events: list[tuple[float, str]] = []  # (wall time, what happened) for the timeline
    members = [start_member() for _ in range(3)]
    numbers = [1, 2, 3]
    reports = wait(lambda rs: sum(r["read"] for r in rs) >= records, "the group to read all")
    first = min(r["first"] for r in reports if r["first"])
    last = max(r["last"] for r in reports if r["last"])
    timed = sum(r["timed"] for r in reports)
    if timed == 0 or last <= first:
        raise RuntimeError(f"every member read all its records in its first poll: too few "
                           f"records ({records}) to time the group's read")  # fmt: skip
    out: dict[str, Any] = {
        "records_per_s": timed / (last - first),
        "records_timed": timed,
        "shares_while_reading": shares(reports),
    }
    if not rebalances:
        out["timeline"] = timeline(began, latest, events)
        for member in members:
            kill(member)
        return out
    joined_at = time.time()
    events.append((joined_at, "member 4 starts"))
    members.append(start_member())
    numbers.append(4)
    reports = wait(lambda rs: shares(rs) == [1, 1, 2, 2], "the fourth member's share")
    out["join_rebalance_s"] = max(r["assignments"][-1][0] for r in reports) - joined_at
    events.append((joined_at + out["join_rebalance_s"], "4 members settled"))
    victim = members.pop(0)
    killed_at = time.time()
    victim_number = numbers.pop(0)
    events.append((killed_at, f"member {victim_number} killed"))
    kill(victim)
    reports = wait(lambda rs: shares(rs) == [2, 2, 2], "the survivors to own all six")
    out["death_rebalance_s"] = max(r["assignments"][-1][0] for r in reports) - killed_at
    out["death_rebalance_minus_session_s"] = out["death_rebalance_s"] - SESSION_TIMEOUT_MS / 1000
    events.append((killed_at + out["death_rebalance_s"], "3 survivors settled"))
    out["timeline"] = timeline(began, latest, events, {victim_number: killed_at})
    for member in members:
        kill(member)
    return out


def timeline(began: float, reports: dict[int, dict], events: list[tuple[float, str]],
             killed: dict[int, float] | None = None) -> dict:  # fmt: skip
    """The group over time for group_timeline.png, in seconds since ``began`` (wall clock):
    per member (by number, in start order) the records it read per TIMELINE_BUCKET_S
    (``reads``: [[bucket start, records], ...], empty buckets left out) and the partitions it
    owned (``owned``: [[since, partitions], ...]), when it was killed (``killed_s``, from
    ``killed``: member number -> wall time), and ``events`` (``at_s``, ``what``)."""

    def at(wall: float) -> float:
        return round(wall - began, 3)

    members = []
    for n in sorted(reports):
        member = {
            "member": n,
            "reads": [[at(b * TIMELINE_BUCKET_S), c] for b, c in reports[n].get("buckets", [])],
            "owned": [[at(t), c] for t, c in reports[n]["assignments"]],
        }
        if killed and n in killed:
            member["killed_s"] = at(killed[n])
        members.append(member)
    return {"bucket_s": TIMELINE_BUCKET_S, "members": members,
            "events": [{"at_s": at(t), "what": what} for t, what in events]}  # fmt: skip


def run_rafka(cluster, records: int, value: bytes, rebalances: bool = True) -> dict[str, Any]:
    import pyarrow as pa
    import ray

    admin = cluster.admin()
    topic = f"groups-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, partitions=PARTITIONS)
    try:
        producer = cluster.producer(acks=1, linger_ms=5)
        per_partition = records // PARTITIONS
        try:
            for p in range(PARTITIONS):
                producer.send_batch(topic, pa.array([value] * per_partition, pa.binary()),
                                    partition=p).result()  # fmt: skip
        finally:
            producer.close()
        member_class = _rafka_member_class()
        figures = {}
        for columns in (False, True):  # poll (Record objects), then poll_columns (Arrow)
            group = f"bench-{uuid.uuid4().hex[:6]}"
            figures["bulk" if columns else "per_record"] = measure(
                lambda g=group, c=columns: member_class.remote(cluster, topic, g, c),
                lambda ms: ray.get([m.report.remote() for m in ms]),
                lambda m: ray.kill(m, no_restart=True),
                per_partition * PARTITIONS, rebalances=rebalances and not columns,
            )  # fmt: skip
    finally:
        admin.delete_topic(topic)
    return figures


def run_peer(bootstrap: str, records: int, value_size: int, rebalances: bool = True) -> dict:
    """The peer's figures. A measurement that fails on the peer's side is made once more in
    a fresh topic and group, so one stalled run of the outside broker does not cost the
    workload its figures; the report says so (``peer_attempts``, ``first_attempt_error``).
    rafka's side gets no second try: its failure is a finding."""
    try:
        return _run_peer_once(bootstrap, records, value_size, rebalances)
    except RuntimeError as exc:
        print(f"peer: group measurement failed ({exc}); measuring once more", file=sys.stderr)
        figures = _run_peer_once(bootstrap, records, value_size, rebalances)
        return {**figures, "peer_attempts": 2, "first_attempt_error": str(exc)}


def _run_peer_once(bootstrap: str, records: int, value_size: int, rebalances: bool) -> dict:
    from bench import peer

    topic = f"groups-{uuid.uuid4().hex[:6]}"
    peer.create_topic(bootstrap, topic, PARTITIONS)
    try:
        peer.produce(bootstrap, topic, records, value_size, acks=1, idempotent=False)
        context = multiprocessing.get_context("spawn")
        reports = context.Queue()
        latest: dict[int, dict] = {}
        group = f"bench-{uuid.uuid4().hex[:6]}"
        started: list = []

        def start():
            process = context.Process(
                target=_peer_member, args=(bootstrap, topic, group, reports), daemon=True
            )
            process.start()
            started.append(process)
            return process

        def reports_of(processes) -> list[dict]:
            while not reports.empty():
                pid, report = reports.get()
                latest[pid] = report
            empty = {"read": 0, "timed": 0, "first": None, "last": None, "assignments": []}
            return [latest.get(p.pid, empty) for p in processes]

        def kill(process) -> None:
            process.kill()
            process.join()

        try:
            return measure(start, reports_of, kill, records, rebalances=rebalances)
        finally:
            for process in started:  # on a failure, measure() leaves its members running
                if process.is_alive():
                    kill(process)
    finally:
        peer.delete_topic(bootstrap, topic)


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``group`` workload: answers rows for the summary and the full report."""
    from bench.harness import row

    value = os.urandom(args.value_size)
    rebalances = args.groups_rebalances
    report: dict[str, Any] = {
        "records": args.groups_records, "value_size": args.value_size,
        "partitions": PARTITIONS, "members": 3,
        "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        "rebalances": rebalances,
    }  # fmt: skip
    report["rafka"] = run_rafka(ctx.embedded(), args.groups_records, value, rebalances)
    print("rafka: " + json.dumps(_without_timelines(report["rafka"])), file=sys.stderr)
    broker = ctx.peer()
    if broker is not None:
        report["peer"] = run_peer(broker.bootstrap, args.groups_records, len(value), rebalances)
        print("peer: " + json.dumps(_without_timelines(report["peer"])), file=sys.stderr)
    print(render(report))
    mine, bulk, theirs = report["rafka"]["per_record"], report["rafka"]["bulk"], \
        report.get("peer") or {}  # fmt: skip
    rows = [
        row("read, per record (poll)", "records/s", mine["records_per_s"],
            peer=theirs.get("records_per_s")),
        row("read, bulk (poll_columns)", "records/s", bulk["records_per_s"],
            peer=theirs.get("records_per_s")),
    ]  # fmt: skip
    if rebalances:
        rows += [
            row("rebalance on join", "s", mine["join_rebalance_s"],
                peer=theirs.get("join_rebalance_s"), higher_is_better=False),
            row("rebalance on death", "s", mine["death_rebalance_s"],
                peer=theirs.get("death_rebalance_s"), higher_is_better=False),
        ]  # fmt: skip
    return {"rows": rows, "report": report}


def _without_timelines(figures: dict[str, Any]) -> dict[str, Any]:
    """``figures`` as printed: the timelines are for the chart."""
    return {k: _without_timelines(v) if isinstance(v, dict) else v
            for k, v in figures.items() if k != "timeline"}  # fmt: skip


def render(report: dict[str, Any]) -> str:
    rafka_, peer_ = report["rafka"]["per_record"], report.get("peer") or {}
    lines = [
        f"\ngroup of 3 consumers, {PARTITIONS} partitions, {report['records']:,} records of "
        f"{report['value_size']} bytes; session {SESSION_TIMEOUT_MS} ms, heartbeat "
        f"{HEARTBEAT_INTERVAL_MS} ms",
        f"{'':<36}{'rafka':>12}{'peer':>12}{'ratio':>8}",
    ]
    rows = [
        ("group read, records/s", "records_per_s", "{:,.0f}", True),
        ("rebalance on join, s", "join_rebalance_s", "{:.2f}", False),
        ("rebalance on death, s", "death_rebalance_s", "{:.2f}", False),
        ("  of which past the session, s", "death_rebalance_minus_session_s", "{:.2f}", False),
    ]  # fmt: skip
    bulk = report["rafka"]["bulk"]["records_per_s"]
    theirs = peer_.get("records_per_s")
    for label, key, fmt, higher_better in rows:
        ours, theirs = rafka_.get(key), peer_.get(key)
        if ours is None:
            continue
        ratio = ""
        if ours and theirs:
            ratio = f"{(ours / theirs) if higher_better else (theirs / ours):.2f}x"
        lines.append(
            f"{label:<36}{fmt.format(ours):>12}"
            f"{fmt.format(theirs) if theirs is not None else '-':>12}{ratio:>8}"
        )
        if key == "records_per_s":
            lines.append(
                f"{'group read, bulk (poll_columns)':<36}{bulk:>12,.0f}{'':>12}"
                + (f"{bulk / theirs:>7.2f}x" if theirs else "")
            )
    lines.append("ratio: rafka's advantage (above 1: rafka faster); rafka per record reads "
                 "Record objects with poll(), the peer Message objects with consume()")
    return "\n".join(lines)
