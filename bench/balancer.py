"""The balancer: how long a disk node that joins takes to get its share, what the moves cost
a producer, and how many moves the default throttle lets through.

One workload of the harness, ``balancer`` (``python -m bench balancer
[--balancer-partitions 12] [--balancer-mib-per-partition 4] [--balancer-rate 200]
[--balancer-window-s 10]``), on a LocalCluster of its own (the balancer changes the cluster's
brokers, so it shares nothing with the other workloads). In one run:

1. A raw sequential write (1 MiB ``os.write`` chunks then one ``fdatasync``, as the storage
   workload's, ``--balancer-raw-write-mib`` MiB, best of two) in the run's data directory: the
   hardware figure the move's copy rate is set against.
2. A LocalCluster of three disk nodes, a topic of ``--balancer-partitions`` partitions with
   RF=2, each filled with ``--balancer-mib-per-partition`` MiB of 1 KiB random values
   (acks=all, in bulk).
3. An idempotent acks=all producer sends ``--value-size``-byte records round the partitions
   at ``--balancer-rate`` records/s from then to the end; each acknowledgement's latency is
   the time from ``send()`` to its callback.
4. After a quiet window of ``--balancer-window-s`` s (the "before" latencies), a fourth disk
   node joins (``LocalCluster.join_disk``: a Ray node declaring ``rafka_disk``, no command).
   ``admin.describe_balancer()`` is polled every ``POLL_S``; from the ``join_disk`` call, the
   times of (a) the new broker registered (a broker id in the controller's metadata), and its
   node agent answering (``admin.brokers()`` "alive"), (b) the balancer's first move
   (``moves_started`` up, or a reassignment in flight), (c) balance: replicas and leaders per
   broker within one of the mean (most and least loaded differ by at most one) with no
   reassignment in flight. Per move: when a poll first and last saw it in flight (the
   controller completes a reassignment when its new replica joins the ISR, so the last
   sighting is also the end of the copy, within a poll).
5. Bytes moved: the ``.log`` files, at the end, of every replica that a broker gained (the
   replica sets before the join against those after), on that broker's disk. They include
   the few records the producer appended meanwhile. Copy rate = bytes moved / the time from
   the first move seen to the last poll that saw one in flight, plus one poll interval: an
   effective rate, which holds each move's replica actor starting, the copy, the ISR join,
   the completion and the wait for the next tick, not the follower fetch's bytes/s alone.
6. Producer latency, p50/p99 over the acknowledgements of records sent in the window before
   the join, and in the window while moves were in flight (first move to last seen); the
   ratio p99 during / p99 before. Apart: the window from the join to the first move (the new
   Ray node and its broker starting, on the same cores).
7. Moves per minute under the default throttle: replica moves the controller started
   (``moves_started``, leadership moves not counted) over the minutes from the first move to
   balance.

Every setting is the default but ``partition.autobalancing.tick.interval.ms`` (1000 here,
10,000 by default), so the figures are not dominated by waiting for the next tick; with the
default, expect up to 10 s more before the first move and between waves of moves. The
effective balancer and replication settings are saved with the results
(bench/results/balancer.json).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

NAMESPACE = "rafka-bench-balancer"
DISKS = ["d1", "d2", "d3"]
NEW_DISK = "d4"
SETTINGS = {"partition.autobalancing.tick.interval.ms": 1000}
#: Recorded with the results: what decides how fast moves go (defaults unless in SETTINGS).
RECORDED_SETTINGS = (
    "partition.autobalancing.mode", "partition.autobalancing.tick.interval.ms",
    "partition.autobalancing.concurrent.moves.per.broker",
    "partition.autobalancing.concurrent.moves",
    "partition.autobalancing.node.availability.timeout.sec", "replication.throttled.rate",
    "replica.fetch.max.bytes", "replica.fetch.wait.max.ms", "replica.lag.time.max.ms",
    "broker.session.timeout.ms", "replicas.per.actor",
)  # fmt: skip
REPLICATION = 2
FILL_VALUE_BYTES = 1024
MIB = 1 << 20
POLL_S = 0.1
WARM_UP_S = 2.0
GIVE_UP_S = 600.0

TINY = {"balancer_partitions": 6, "balancer_mib_per_partition": 0.25, "balancer_window_s": 2.0,
        "balancer_raw_write_mib": 16}  # fmt: skip


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--balancer-partitions", type=int, default=12,
                       help="partitions of the topic, RF=2 (default 12)")  # fmt: skip
    group.add_argument("--balancer-mib-per-partition", type=float, default=4.0,
                       help="MiB written to each partition before the join (default 4)")
    group.add_argument("--balancer-rate", type=float, default=200.0,
                       help="records/s of the acks=all producer running all along (default 200)")
    group.add_argument("--balancer-window-s", type=float, default=10.0,
                       help="seconds of producer latency measured before the join (default 10)")
    group.add_argument("--balancer-raw-write-mib", type=int, default=256,
                       help="MiB of the raw sequential write the copy rate is set against "
                       "(default 256)")  # fmt: skip


# -- pure arithmetic (unit-tested) -------------------------------------------------------------


def spread(counts: Mapping[int, int], brokers: Iterable[int]) -> int:
    """Most minus least of ``counts`` over ``brokers`` (a broker missing counts 0)."""
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values) if values else 0


def is_balanced(
    replicas: Mapping[int, int], leaders: Mapping[int, int], brokers: Iterable[int],
    in_flight: Iterable[Any], new_broker: int,
) -> bool:  # fmt: skip
    """The balancer's count goals hold: replicas and leaders per broker differ by at most one
    (so each is within one of the mean), the new broker holds replicas, nothing in flight."""
    brokers = list(brokers)
    return (not list(in_flight) and new_broker in brokers and replicas.get(new_broker, 0) > 0
            and spread(replicas, brokers) <= 1 and spread(leaders, brokers) <= 1)  # fmt: skip


def gained_replicas(before: Mapping[int, Iterable[int]],
                    after: Mapping[int, Iterable[int]]) -> list[tuple[int, int]]:  # fmt: skip
    """(partition, broker) for every replica a broker holds in ``after`` and did not in
    ``before`` (partition -> replica brokers): the replicas that were copied."""
    out = []
    for partition in sorted(after):
        old = set(before.get(partition, ()))
        out += [(partition, b) for b in sorted(after[partition]) if b not in old]
    return out


def latency_figures(samples: Iterable[tuple[float, float]], start: float,
                    end: float) -> dict[str, Any]:  # fmt: skip
    """p50, p99 and max in ms of the latencies of ``samples`` ((sent, latency s) pairs) sent in
    ``[start, end)``, and how many there are (percentiles interpolated, numpy's default)."""
    import numpy as np

    ms = np.asarray([lat for sent, lat in samples if start <= sent < end], dtype=np.float64)
    if not ms.size:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ms *= 1e3
    return {"count": int(ms.size), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}  # fmt: skip


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is not positive."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return None
    return a / b


def per_minute(count: int, seconds: float | None) -> float | None:
    if seconds is None or seconds <= 0:
        return None
    return count * 60.0 / seconds


# -- the measurements --------------------------------------------------------------------------


def raw_write_mib_s(directory: Path, mib: int, rounds: int = 2) -> float:
    """Best MiB/s of writing ``mib`` MiB in 1 MiB chunks and one fdatasync, in ``directory``."""
    from bench.storage import copies, time_raw_write

    chunks = copies(os.urandom(MIB), mib)
    best = 0.0
    try:
        for i in range(rounds):
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"raw-{i}"
            seconds = time_raw_write(str(path), chunks)
            path.unlink()
            best = max(best, mib / seconds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return best


class _Sender(threading.Thread):
    """Sends one record every 1/rate s (on a schedule: late sends go at once) round the
    partitions; keeps (sent, latency) of every acknowledgement."""

    def __init__(self, producer, topic: str, partitions: int, rate: float, value: bytes) -> None:
        super().__init__(name="balancer-bench-sender", daemon=True)
        self.producer, self.topic, self.partitions = producer, topic, partitions
        self.interval, self.value = 1.0 / rate, value
        self.samples: list[tuple[float, float]] = []
        self.errors: dict[str, int] = {}
        self.sent = 0
        self.most_behind_s = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        while not self.stop.is_set():
            due = began + self.sent * self.interval
            now = time.monotonic()
            if due > now:
                if self.stop.wait(due - now):
                    break
            else:
                self.most_behind_s = max(self.most_behind_s, now - due)
            sent = time.monotonic()
            self.producer.send(self.topic, self.value, partition=self.sent % self.partitions,
                               callback=lambda m, e, sent=sent: self._done(e, sent))  # fmt: skip
            self.sent += 1

    def _done(self, error, sent: float) -> None:  # on the producer's sender thread
        if error is None:
            self.samples.append((sent, time.monotonic() - sent))
        else:
            name = type(error).__name__
            self.errors[name] = self.errors.get(name, 0) + 1


def _replica_sets(admin, topic: str) -> dict[int, list[int]]:
    return {p.partition: list(p.replicas) for p in admin.describe_topic(topic).partitions}


def _log_bytes(directory: str) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(directory) if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0


def _wait_for_isr(admin, topic: str, timeout_s: float = 180) -> None:
    """Until every partition of ``topic`` has its replicas in the ISR; a TimeoutError says
    which have not."""
    from rafka.actors.local_cluster import wait_for

    def state():
        return [(p.partition, list(p.replicas), list(p.isr), p.leader)
                for p in admin.describe_topic(topic).partitions]  # fmt: skip

    try:
        wait_for(lambda: all(len(isr) == REPLICATION for _, _, isr, _ in state()), timeout_s,
                 "every partition's replicas in the ISR", 0.5)  # fmt: skip
    except TimeoutError as exc:
        short = [f"{p}: replicas {r} isr {i} leader {lead}" for p, r, i, lead in state()
                 if len(i) < REPLICATION]  # fmt: skip
        raise TimeoutError(f"{exc}; not yet: {'; '.join(short)}") from None


def fill(cluster, topic: str, partitions: int, mib: float) -> int:
    """Write ``mib`` MiB of 1 KiB random values to every partition (acks=all, in bulk);
    answers the bytes of values written."""
    import numpy as np

    count = max(1, int(mib * MIB) // FILL_VALUE_BYTES)
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=5)
    try:
        for p in range(partitions):
            values = np.frombuffer(os.urandom(count * FILL_VALUE_BYTES), dtype=np.uint8)
            producer.send_batch(topic, values.reshape(count, FILL_VALUE_BYTES),
                                partition=p).result()  # fmt: skip
    finally:
        producer.close(60)
    return count * FILL_VALUE_BYTES * partitions


def watch_join(local, admin, topic: str) -> dict[str, Any]:
    """Join the new disk and follow it to balance; the timings are seconds from the
    ``join_disk`` call."""
    old_brokers = sorted(b.broker_id for b in admin.brokers())
    before = _replica_sets(admin, topic)
    leaders_before = {p.partition: p.leader for p in admin.describe_topic(topic).partitions}
    status = admin.describe_balancer()
    started_before = status.moves_started
    out: dict[str, Any] = {"brokers_before": old_brokers, "replicas_before": before,
                           "moves_started_before": started_before}  # fmt: skip

    joined = time.monotonic()
    local.join_disk(NEW_DISK)
    out["join_disk_call_s"] = time.monotonic() - joined
    new = registered = answering = first_move = last_in_flight = balanced = None
    in_flight_seen: dict[str, dict[str, Any]] = {}
    polls = 0
    while balanced is None:
        now = time.monotonic()
        if now - joined > GIVE_UP_S:
            raise TimeoutError(f"no balance {GIVE_UP_S:g} s after {NEW_DISK} joined; last "
                               f"status: {status._asdict()}")  # fmt: skip
        status = admin.describe_balancer()
        seen = time.monotonic()
        polls += 1
        if new is None and set(status.replicas) - set(old_brokers):
            # In the controller's metadata: a broker. Which disk is checked once.
            new = next(b.broker_id for b in admin.brokers() if b.disk == NEW_DISK)
            registered = seen
        elif new is not None and answering is None:
            # Its node agent answers the controller's status call (admin.brokers' "alive").
            if any(b.broker_id == new and b.alive for b in admin.brokers()):
                answering = time.monotonic()
        if first_move is None and (status.moves_started > started_before or status.in_flight):
            first_move = seen
        if status.in_flight:
            last_in_flight = seen
            for m in status.in_flight:
                key = f"{m['topic']}-{m['partition']}"
                entry = in_flight_seen.setdefault(key, {"adding": m["adding"],
                                                        "removing": m["removing"],
                                                        "first_seen_s": seen - joined})
                entry["last_seen_s"] = seen - joined
        if new is not None and is_balanced(status.replicas, status.leaders, status.replicas,
                                           status.in_flight, new):  # fmt: skip
            balanced = seen
            break
        time.sleep(max(0.0, POLL_S - (time.monotonic() - now)))

    after = _replica_sets(admin, topic)
    disk_of = {b.broker_id: b.disk for b in admin.brokers()}
    gained = gained_replicas(before, after)
    moved_bytes = {f"{p}@{b}": _log_bytes(os.path.join(local.data_dir, disk_of[b],
                                                       f"{topic}-{p}"))
                   for p, b in gained}  # fmt: skip
    leaders_after = {p.partition: p.leader for p in admin.describe_topic(topic).partitions}

    def since(t: float | None) -> float | None:
        return None if t is None else t - joined

    copy_s = None
    if first_move is not None:
        # No poll saw a move in flight: it finished within one poll of starting.
        copy_s = (last_in_flight if last_in_flight is not None else first_move) - first_move
        copy_s += POLL_S  # the last move ended between that poll and the next
    out.update(
        new_broker=new, disk_of=disk_of, replicas_after=after,
        registered_s=since(registered), agent_answers_s=since(answering),
        first_move_s=since(first_move),
        last_in_flight_s=since(last_in_flight), balanced_s=since(balanced),
        copy_window_s=copy_s, balancing_s=None if first_move is None else balanced - first_move,
        moves_started=status.moves_started - started_before, moves_seen=in_flight_seen,
        replicas_gained=[list(g) for g in gained], bytes_moved=sum(moved_bytes.values()),
        bytes_moved_per_replica=moved_bytes,
        leaders_moved=sum(leaders_after[p] != leaders_before.get(p) for p in leaders_after),
        replicas_per_broker=status.replicas, leaders_per_broker=status.leaders,
        polls=polls, joined_at=joined, first_move_at=first_move,
        last_in_flight_at=last_in_flight, balanced_at=balanced,
    )  # fmt: skip
    return out


# -- the workload ------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def effective_settings() -> dict[str, Any]:
    from rafka.cluster.settings import setting

    return {name: setting(SETTINGS, name) for name in RECORDED_SETTINGS}


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``balancer`` workload: answers rows for the summary and the report."""
    from bench.failover import stop_local
    from bench.harness import row
    from rafka.actors.local_cluster import LocalCluster, wait_for

    partitions, mib = args.balancer_partitions, args.balancer_mib_per_partition
    if partitions < 1 or mib <= 0 or args.balancer_rate <= 0 or args.balancer_window_s <= 0:
        raise SystemExit("--balancer-partitions, --balancer-mib-per-partition, --balancer-rate "
                         "and --balancer-window-s must be positive")  # fmt: skip
    ctx.stop_embedded()
    ctx.stop_local()  # one Ray connection per process: the shared LocalCluster goes first
    raw = raw_write_mib_s(ctx.data_dir / "balancer-raw", args.balancer_raw_write_mib)
    _log(f"raw sequential write: {raw:,.0f} MiB/s")

    data_dir = ctx.data_dir / "balancer"
    shutil.rmtree(data_dir, ignore_errors=True)
    local = LocalCluster(str(data_dir), list(DISKS), namespace=NAMESPACE, settings=SETTINGS)
    sender = producer = None
    try:
        began = time.monotonic()
        cluster = local.start()
        _log(f"LocalCluster with {len(DISKS)} disk nodes started in "
             f"{time.monotonic() - began:.1f} s")  # fmt: skip
        admin = cluster.admin()
        topic = f"balance-{uuid.uuid4().hex[:6]}"
        admin.create_topic(topic, partitions, REPLICATION)
        admin.wait_for_topic(topic, 180)
        began = time.monotonic()
        filled = fill(cluster, topic, partitions, mib)
        fill_s = time.monotonic() - began
        _wait_for_isr(admin, topic)
        _log(f"filled {partitions} partitions with {filled / MIB:,.1f} MiB in {fill_s:.1f} s")

        producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=1,
                                    delivery_timeout_ms=120_000)  # fmt: skip
        sender = _Sender(producer, topic, partitions, args.balancer_rate,
                         os.urandom(args.value_size))  # fmt: skip
        sender.start()
        wait_for(lambda: len(sender.samples) > 10, 60, "the producer's first acknowledgements")
        time.sleep(WARM_UP_S)
        quiet_from = time.monotonic()
        time.sleep(args.balancer_window_s)
        load_at_join = os.getloadavg()
        _log(f"{NEW_DISK} joins")
        join = watch_join(local, admin, topic)
        sender.stop.set()
        sender.join(30)
        producer.flush(120)
    finally:
        if sender is not None:
            sender.stop.set()
        try:
            if producer is not None:
                producer.close(30)
        finally:
            stop_local(local)

    samples = list(sender.samples)
    joined = join["joined_at"]
    before = latency_figures(samples, quiet_from, joined)
    starting = latency_figures(samples, joined, join["first_move_at"] or join["balanced_at"])
    during = (latency_figures(samples, join["first_move_at"],
                              join["first_move_at"] + join["copy_window_s"])
              if join["first_move_at"] is not None else latency_figures([], 0, 0))  # fmt: skip
    rate = (join["bytes_moved"] / MIB / join["copy_window_s"]
            if join["copy_window_s"] else None)  # fmt: skip
    moves_per_minute = per_minute(join["moves_started"], join["balancing_s"])
    report = {
        "disks": list(DISKS), "new_disk": NEW_DISK, "partitions": partitions,
        "replication_factor": REPLICATION, "mib_per_partition": mib,
        "fill_bytes": filled, "fill_value_bytes": FILL_VALUE_BYTES, "fill_s": fill_s,
        "settings_given": SETTINGS, "settings": effective_settings(),
        "note": "partition.autobalancing.tick.interval.ms is 1000 for this run (default 10000); "
                "every other setting is its default",
        "producer": {"acks": "all", "enable_idempotence": True, "linger_ms": 1,
                     "rate_per_s": args.balancer_rate, "value_size": args.value_size,
                     "sent": sender.sent, "acked": len(samples), "errors": sender.errors,
                     "most_behind_schedule_s": sender.most_behind_s},
        "poll_s": POLL_S, "window_before_s": args.balancer_window_s,
        "join": {k: v for k, v in join.items() if not k.endswith("_at")},
        "raw_write_mib_s": raw, "raw_write_mib": args.balancer_raw_write_mib,
        "copy_mib_s": rate, "copy_vs_raw_write": ratio(rate, raw),
        "latency_before": before, "latency_joining": starting, "latency_during": during,
        "p99_during_over_before": ratio(during["p99_ms"], before["p99_ms"]),
        "p50_during_over_before": ratio(during["p50_ms"], before["p50_ms"]),
        "moves_per_minute": moves_per_minute,
        "load_average_at_join": load_at_join, "load_average_at_end": os.getloadavg(),
        "peer": "none: a single Tansu broker has nothing to balance",
    }  # fmt: skip
    print(render(report))
    print("balancer report: " + json.dumps({k: report[k] for k in (
        "copy_mib_s", "p99_during_over_before", "moves_per_minute")}), file=sys.stderr)
    if join["moves_started"] < 1:
        raise RuntimeError("the balancer started no move: nothing to measure")
    rows = [
        row("joined disk registered as a broker", "s", join["registered_s"],
            higher_is_better=False),
        row("balancer's first move after the join", "s", join["first_move_s"],
            higher_is_better=False),
        row("new broker has its share (balanced)", "s", join["balanced_s"],
            higher_is_better=False),
        row("bytes moved / time moves in flight", "MiB/s", rate, baseline=raw,
            baseline_label="raw write"),
        row("producer ack p50 during moves", "ms", during["p50_ms"], baseline=before["p50_ms"],
            baseline_label="no moves", higher_is_better=False),
        row("producer ack p99 during moves", "ms", during["p99_ms"], baseline=before["p99_ms"],
            baseline_label="no moves", higher_is_better=False),
        row("producer ack p99, join to first move", "ms", starting["p99_ms"],
            baseline=before["p99_ms"], baseline_label="no moves", higher_is_better=False),
        row("moves per minute, default throttle", "moves/min", moves_per_minute),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


# -- printing ----------------------------------------------------------------------------------


def _f(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _moved_mib(join: dict[str, Any], name: str, move: dict[str, Any]) -> str:
    partition = name.rsplit("-", 1)[1]
    sizes = [join["bytes_moved_per_replica"].get(f"{partition}@{b}") for b in move["adding"]]
    return "-" if None in sizes else f"{sum(sizes) / MIB:.1f}"


def render(report: dict[str, Any]) -> str:
    j = report["join"]
    s = report["settings"]
    lines = [
        f"\nbalancer: LocalCluster with {len(report['disks'])} disk nodes, a topic of "
        f"{report['partitions']} partitions (RF={report['replication_factor']}) with "
        f"{report['mib_per_partition']:g} MiB each; {report['new_disk']} joins",
        f"settings: tick {s['partition.autobalancing.tick.interval.ms']} ms (default 10000, "
        f"lowered for this run), mode {s['partition.autobalancing.mode']}, "
        f"{s['partition.autobalancing.concurrent.moves.per.broker']} moves per broker, "
        f"replication.throttled.rate {s['replication.throttled.rate'] / MIB:g} MiB/s; "
        "the rest default",
        f"{'from join_disk to':<44}{'s':>10}",
        f"{'  the new broker registered':<44}{_f(j['registered_s']):>10}",
        f"{'  its node agent answering':<44}{_f(j['agent_answers_s']):>10}",
        f"{'  the first move':<44}{_f(j['first_move_s']):>10}",
        f"{'  the last move seen in flight':<44}{_f(j['last_in_flight_s']):>10}",
        f"{'  balanced (counts within one, none moving)':<44}{_f(j['balanced_s']):>10}",
        f"moves started {j['moves_started']}, replicas gained {len(j['replicas_gained'])}, "
        f"leaders changed {j['leaders_moved']}; per broker now: replicas "
        f"{j['replicas_per_broker']}, leaders {j['leaders_per_broker']}",
        f"{'move (seen by polls, s from the join)':<40}{'started':>9}{'done':>9}{'MiB':>8}",
        *(f"{'  ' + name + ' -> ' + ','.join(map(str, m['adding'])):<40}"
          f"{m['first_seen_s']:>9.2f}{m['last_seen_s']:>9.2f}"
          f"{_moved_mib(j, name, m):>8}" for name, m in j['moves_seen'].items()),
        f"bytes moved {j['bytes_moved'] / MIB:,.1f} MiB over {_f(j['copy_window_s'])} s: "
        f"{_f(report['copy_mib_s'], ',.1f')} MiB/s, raw sequential write "
        f"{report['raw_write_mib_s']:,.0f} MiB/s (ratio {_f(report['copy_vs_raw_write'], '.3f')})",
        f"moves per minute (first move to balanced): {_f(report['moves_per_minute'], '.1f')}",
        f"{'producer acks (acks=all, idempotent)':<40}{'count':>8}{'p50 ms':>10}{'p99 ms':>10}"
        f"{'max ms':>10}",
    ]  # fmt: skip
    for key, label in (("latency_before", "before the join (no moves)"),
                       ("latency_joining", "join to first move"),
                       ("latency_during", "moves in flight")):  # fmt: skip
        f = report[key]
        lines.append(f"{'  ' + label:<40}{f['count']:>8}{_f(f['p50_ms']):>10}"
                     f"{_f(f['p99_ms']):>10}{_f(f['max_ms']):>10}")  # fmt: skip
    lines.append(f"p99 during / before: {_f(report['p99_during_over_before'])}; producer "
                 f"errors: {report['producer']['errors'] or 'none'}")  # fmt: skip
    if report.get("load_average_at_join"):
        lines.append("load average (1, 5, 15 min) at the join: "
                     + ", ".join(f"{x:.1f}" for x in report["load_average_at_join"]))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - use `python -m bench balancer`
    os.execvp(sys.executable, [sys.executable, "-m", "bench", "balancer", *sys.argv[1:]])
