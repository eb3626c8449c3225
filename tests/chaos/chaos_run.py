"""A seeded chaos run: acks=all producers write while disk nodes die and come back, then every
partition is read twice and checked against what the producers were told.

Run by test_chaos.py in its own process (a process holds one Ray connection); a failing seed
is re-run by hand with ``python tests/chaos/chaos_run.py --seed N``.

The run, in order:

1. A LocalCluster with ``--disks`` disk nodes (default 4) and one RF=3 topic of
   ``--partitions`` partitions (default 6), ``min.insync.replicas=2``.
2. ``--producers`` threads (default 3), each with its own idempotent acks=all producer, send
   self-describing records (key and value ``p<producer>-<seq>``, padded to ``--value-size``)
   at ``--rate`` records/s each, for ``--duration`` seconds. Every record's outcome is kept:
   acknowledged at (partition, offset), or failed with its error.
3. Meanwhile the main thread plays a fault schedule drawn from the seed: kill a disk node,
   revive it after a random downtime, kill the next one after a random gap. At most
   ``--max-down`` disks (default 2) are *unhealthy* at once: down, or back but with a replica
   not yet in its ISR. With 4 disks and RF=3 every partition keeps an in-sync replica, most
   keep two and take acks=all writes throughout, and some lose two for a while and refuse
   them (NotEnoughReplicas) or wait for a leader. The order of the faults (which disk, how
   long down, the gaps) is a pure function of the seed; their wall-clock times are not (a
   kill waits for the cluster to be healthy enough), so every fault is recorded as it
   happened. ``--max-down 1`` keeps every partition writable except during a failover.
4. Everything is revived; the run waits for every partition to have a leader and a full ISR,
   then reads every partition from its start twice, with fresh consumers.

Checks (all must be zero, see ``check``): acknowledged records lost, records read at two
offsets, per-(producer, partition) sequence order not matching offset order, offsets that
differ between the two reads or from the acknowledged offset, two acknowledged records told
the same offset, gaps in a partition's offsets, values nobody sent, and records read whose
write failed *definitely*.

Definite vs. indeterminate failures. The leader checks ``min.insync.replicas`` before it
appends, so NotEnoughReplicas (and the other "rejected before append" errors below) means the
*last attempt* wrote nothing. But the producer retries retriable errors until
``delivery_timeout_ms``, and an earlier attempt may have been appended (a request that timed
out waiting for the high watermark, or one abandoned after the leader moved) and be committed
later, when the ISR grows back. So a failure counts as definite only when its error is of a
rejected-before-append kind *and* its batch was sent once; everything else (RequestTimedOut,
BrokerNotAvailable, NotLeaderOrFollower, retried batches...) is indeterminate: such a record
may or may not be in the log, and either is allowed. The attempt count is read from the
record's batch (white box: ``RecordFuture`` is a ``(batch, index)`` tuple).

Prints a readable summary and one ``REPORT {json}`` line (the summary is in it too).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from typing import NamedTuple

from rafka import TopicPartition, errors
from rafka.actors.local_cluster import LocalCluster, wait_for

TOPIC = "chaos"
SETTINGS = {
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "leader.imbalance.check.interval.seconds": 5,
}
# Errors the leader answers before appending anything: a batch sent once that failed with one
# of these is not in the log.
DEFINITE = (
    errors.NotEnoughReplicas,
    errors.RecordTooLarge,
    errors.RecordListTooLarge,
    errors.InvalidRecord,
    errors.CorruptRecord,
    errors.OutOfOrderSequence,
    errors.InvalidProducerEpoch,
    errors.UnknownTopicOrPartition,
    errors.InvalidTopic,
    errors.UnsupportedCompressionType,
)
CHECKS = (
    "lost", "duplicated", "out_of_order", "offset_mismatch_between_reads",
    "offset_mismatch_with_ack", "acked_offset_reused", "offset_gaps", "unknown_values",
    "definite_failures_read",
)  # fmt: skip


# -- the fault schedule ------------------------------------------------------------------------


class Fault(NamedTuple):
    """One step of a schedule: ``gap`` s after the previous kill, kill ``disk``, and revive
    it ``downtime`` s later."""

    gap: float
    disk: str
    downtime: float


def fault_schedule(
    seed: int, disks: list[str], duration: float, max_down: int,
    downtime: tuple[float, float], gap: tuple[float, float],
) -> list[Fault]:
    """The kills to make, in order: a pure function of its arguments. Planned on paper with
    at most ``max_down`` disks down at once (a disk is never killed while the plan has it
    down); the player may start a kill later than planned (see FaultPlayer), never sooner."""
    rng = random.Random(seed)
    steps: list[Fault] = []
    back: dict[str, float] = {}  # disk -> when the plan revives it
    t = 0.0
    while True:
        step_gap = rng.uniform(*gap)
        t += step_gap
        if t >= duration:
            return steps
        down = {d for d, at in back.items() if at > t}
        if len(down) >= max_down:  # on paper: wait for the first to come back
            wait = min(back[d] for d in down) - t
            t += wait
            step_gap += wait
        disk = rng.choice(sorted(d for d in disks if back.get(d, 0.0) <= t))
        step = Fault(round(step_gap, 2), disk, round(rng.uniform(*downtime), 2))
        back[disk] = t + step.downtime
        steps.append(step)


class FaultPlayer:
    """Plays the schedule against the LocalCluster and records what happened when. Runs on
    the main thread: ``ray.cluster_utils.Cluster.add_node`` installs signal handlers, which
    only the main thread may do.

    A kill waits, past its planned time, until fewer than ``max_down`` disks are *unhealthy*:
    down, or back but with a replica not yet in its partition's ISR. A revived node's
    replicas take long to return (Ray restarts its actors only once it has declared the old
    node dead, about 15 s after the kill, however soon the node came back), and counting only
    dead nodes would let the faults pile up until no partition has an ISR. So the *order* of
    the faults comes from the seed and the timing from the cluster; every fault is recorded
    with its planned and actual times and how long it waited."""

    def __init__(
        self, local: LocalCluster, schedule: list[Fault], started: float,
        monitor: PartitionMonitor, broker_of: dict[str, int], max_down: int,
    ) -> None:  # fmt: skip
        self.local = local
        self.schedule = schedule
        self.started = started
        self.monitor = monitor
        self.broker_of = broker_of
        self.max_down = max_down
        self.faults: list[dict] = []
        self.open: dict[str, dict] = {}  # disk -> its fault, while it is down
        self.revives: list[tuple[float, str]] = []  # (when, disk), pending
        self.error: str | None = None

    def now(self) -> float:
        return time.monotonic() - self.started

    def play(self, until: float) -> None:
        """The schedule's kills (and their revives) until ``until`` s from the start."""
        try:
            last_kill = 0.0
            planned = 0.0
            for step in self.schedule:
                planned += step.gap
                earliest = max(planned, last_kill + step.gap)
                while self.now() < until and not (
                    self.now() >= earliest and step.disk not in self.open
                    and len(self.unhealthy() - {step.disk}) < self.max_down
                ):  # fmt: skip
                    self.revive_due()
                    time.sleep(0.05)
                if self.now() >= until:
                    break
                last_kill = self.now()
                self.kill(step, planned, waited=last_kill - earliest)
            while self.now() < until:
                self.revive_due()
                time.sleep(0.05)
        except Exception as e:  # reported: the run then fails
            self.error = f"{type(e).__name__}: {e}"

    def unhealthy(self) -> set[str]:
        """Disks down, or up with a replica outside its partition's ISR."""
        lagging = self.monitor.lagging_brokers()
        return set(self.open) | {d for d, b in self.broker_of.items() if b in lagging}

    def revive_due(self) -> None:
        for at, disk in sorted(self.revives):
            if at <= self.now():
                self.revives.remove((at, disk))
                progress(f"revive {disk} at {self.now():.1f} s")
                self.revive(disk, at)

    def kill(self, step: Fault, planned: float, waited: float) -> None:
        disk = step.disk
        led = self.monitor.led_by(self.broker_of[disk])
        unhealthy = sorted(self.unhealthy() - {disk})
        progress(f"kill {disk} at {self.now():.1f} s")
        began = self.now()
        self.local.kill(disk)
        fault = {"disk": disk, "broker": self.broker_of[disk], "planned_kill_s": round(planned, 2),
                 "killed_s": round(began, 2), "kill_call_s": round(self.now() - began, 2),
                 "waited_s": round(waited, 2), "led_partitions": led,
                 "down_with": sorted(self.open), "unhealthy_with": unhealthy}  # fmt: skip
        self.faults.append(fault)
        self.open[disk] = fault
        self.revives.append((began + step.downtime, disk))

    def revive(self, disk: str, planned: float | None) -> None:
        began = self.now()
        self.local.revive(disk)
        fault = self.open.pop(disk)
        fault.update(planned_revive_s=None if planned is None else round(planned, 2),
                     revived_s=round(began, 2), revive_call_s=round(self.now() - began, 2),
                     downtime_s=round(began - fault["killed_s"], 2))  # fmt: skip
        if planned is None:
            fault["revived_by"] = "end of faults"

    def revive_all(self) -> None:
        self.revives.clear()
        for disk in sorted(self.open):
            progress(f"revive {disk} (end of faults)")
            self.revive(disk, None)


class PartitionMonitor(threading.Thread):
    """Polls the topic's leaders and ISRs every ``interval`` s and keeps every change, so a
    stretch without acknowledgements can be told apart: the broker side (no leader, or fewer
    in-sync replicas than min.insync.replicas) or the producer side."""

    def __init__(self, admin, started: float, interval: float = 0.5) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.admin = admin
        self.started = started
        self.interval = interval
        self.changes: list[list] = []  # [s, partition, leader, epoch, isr]
        self.latest: dict[int, object] = {}  # partition -> its last PartitionDescription
        self.stop = threading.Event()
        self.poll()

    def lagging_brokers(self) -> set[int]:
        """Brokers holding a replica that is not in its partition's ISR (last poll)."""
        return {b for p in self.latest.values() for b in p.replicas if b not in p.isr}

    def led_by(self, broker: int) -> list[int]:
        return sorted(n for n, p in self.latest.items() if p.leader == broker)

    def poll(self) -> list | None:
        try:
            partitions = self.admin.describe_topic(TOPIC).partitions
        except Exception:
            return None
        self.latest = {p.partition: p for p in partitions}
        return partitions

    def run(self) -> None:
        last: dict[int, tuple] = {}
        while not self.stop.wait(self.interval):
            partitions = self.poll()
            if partitions is None:
                continue
            now = round(time.monotonic() - self.started, 2)
            for p in partitions:
                state = (p.leader, p.leader_epoch, sorted(p.isr))
                if last.get(p.partition) != state:
                    last[p.partition] = state
                    self.changes.append([now, p.partition, p.leader, p.leader_epoch, state[2]])

    def unavailable(self, until: float, min_isr: int = 2) -> dict[int, dict]:
        """Per partition, seconds of [0, until] without a leader, and with a leader but fewer
        than ``min_isr`` in-sync replicas (acks=all refused)."""
        out: dict[int, dict] = {}
        for partition in sorted({c[1] for c in self.changes}):
            seen = [c for c in self.changes if c[1] == partition]
            offline = short = 0.0
            for (t, _, leader, _, isr), nxt in zip(seen, seen[1:] + [[until]], strict=True):
                span = max(0.0, min(nxt[0], until) - min(t, until))
                if leader is None or leader < 0:
                    offline += span
                elif len(isr) < min_isr:
                    short += span
            out[partition] = {"offline_s": round(offline, 1), "under_min_isr_s": round(short, 1)}
        return out


# -- the producers -----------------------------------------------------------------------------


class ProducerThread(threading.Thread):
    """Sends ``p<n>-<seq>`` records at a steady rate until told to stop; keeps every
    record's future and the time each was answered."""

    def __init__(self, cluster, n: int, rate: float, value_size: int, config: dict) -> None:
        super().__init__(name=f"chaos-producer-{n}", daemon=True)
        self.n = n
        self.rate = rate
        self.value_size = value_size
        self.producer = cluster.producer(acks="all", enable_idempotence=True, **config)
        self.futures: list = []
        self.answered: dict[int, float] = {}  # seq -> monotonic time of the answer
        self.started = time.monotonic()  # the run sets the common start before start()
        self.stop = threading.Event()
        self.error: str | None = None

    def value(self, seq: int) -> bytes:
        tag = b"p%d-%d" % (self.n, seq)
        return tag + b"." * max(0, self.value_size - len(tag))

    def run(self) -> None:
        started = self.started
        seq = 0
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - started) * self.rate) + 1
                while seq < due:
                    tag = b"p%d-%d" % (self.n, seq)
                    self.futures.append(self.producer.send(
                        TOPIC, value=self.value(seq), key=tag,
                        callback=lambda m, e, s=seq: self.answered.__setitem__(s, time.monotonic()),
                    ))  # fmt: skip
                    seq += 1
                self.stop.wait(0.01)
        except Exception as e:  # a send that raises at once: reported, and the run fails
            self.error = f"{type(e).__name__}: {e}"

    def _at(self, seq: int) -> float | None:
        at = self.answered.get(seq)
        return None if at is None else round(at - self.started, 3)

    def outcomes(self) -> list[dict]:
        out = []
        for seq, future in enumerate(self.futures):
            error = future.exception(timeout=0) if future.done() else None
            if not future.done():
                out.append({"seq": seq, "status": "unanswered"})
            elif error is None:
                meta = future.result(0)
                batch = future[0]
                out.append({"seq": seq, "status": "acked", "partition": meta.partition,
                            "offset": meta.offset, "at": self._at(seq),
                            "attempts": getattr(batch, "attempts", None),
                            "resequenced": getattr(batch, "resequenced", None),
                            "base_sequence": getattr(batch, "sequence", None)})  # fmt: skip
            else:
                attempts = getattr(future[0], "attempts", None)
                definite = isinstance(error, DEFINITE) and attempts == 1
                out.append({"seq": seq, "status": "definite" if definite else "indeterminate",
                            "error": type(error).__name__, "attempts": attempts,
                            "at": self._at(seq)})  # fmt: skip
        return out


# -- reading back ------------------------------------------------------------------------------


def fully_replicated(admin) -> list | None:
    partitions = admin.describe_topic(TOPIC).partitions
    ok = all(
        p.leader is not None and p.leader >= 0 and sorted(p.isr) == sorted(p.replicas)
        for p in partitions
    )
    return partitions if ok else None


def read_partition(cluster, partition: int, timeout_s: float = 90) -> list[tuple[int, bytes]]:
    """Every (offset, value) of one partition from its log start to its high watermark, with
    a fresh consumer."""
    tp = TopicPartition(TOPIC, partition)
    consumer = cluster.consumer(auto_offset_reset="earliest", max_poll_records=5000)
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{TOPIC}-{partition}: read up to {consumer.position(tp)} of {end} "
                    f"in {timeout_s} s"
                )
            out += [(r.offset, r.value) for r in consumer.poll(timeout_ms=500)]
        return out
    finally:
        consumer.close()


def parse(value: bytes) -> tuple[int, int] | None:
    """(producer, seq) from a record's value, or None for a value nobody sent."""
    try:
        tag = value.split(b".", 1)[0]
        if not tag.startswith(b"p"):
            return None
        producer, seq = tag[1:].split(b"-")
        return int(producer), int(seq)
    except (ValueError, AttributeError):
        return None


# -- the checks --------------------------------------------------------------------------------


def check(sent: dict[int, list[dict]], reads: list[dict[int, list[tuple[int, bytes]]]],
          value_of) -> dict:  # fmt: skip
    """Counts of every violation (and of the allowed oddities), with a few examples each."""
    examples: dict[str, list] = collections.defaultdict(list)
    counts: dict[str, int] = collections.Counter()

    def bad(kind: str, example) -> None:
        counts[kind] += 1
        if len(examples[kind]) < 5:
            examples[kind].append(example)

    first, second = reads
    at_offset = {(p, o): _short(v) for p, records in first.items() for o, v in records}
    # The two reads must agree record for record.
    for partition in sorted(set(first) | set(second)):
        a, b = dict(first.get(partition, ())), dict(second.get(partition, ()))
        for offset in sorted(set(a) | set(b)):
            if a.get(offset) != b.get(offset):
                bad("offset_mismatch_between_reads", [partition, offset,
                    _short(a.get(offset)), _short(b.get(offset))])  # fmt: skip
    # Where each (producer, seq) was read; offsets contiguous within a partition.
    found: dict[tuple[int, int], list[tuple[int, int]]] = collections.defaultdict(list)
    for partition, records in sorted(first.items()):
        offsets = [o for o, _ in records]
        for before, after in itertools.pairwise(offsets):
            if after != before + 1:
                bad("offset_gaps", [partition, before, after])
        for offset, value in records:
            ident = parse(value)
            if ident is None or ident[0] not in sent or not 0 <= ident[1] < len(sent[ident[0]]):
                bad("unknown_values", [partition, offset, _short(value)])
                continue
            if value != value_of(*ident):
                bad("unknown_values", [partition, offset, _short(value)])
            found[ident].append((partition, offset))
    for ident, where in found.items():
        if len(where) > 1:
            bad("duplicated", [f"p{ident[0]}-{ident[1]}", where])
    # Per producer and partition, sequence order must be offset order.
    for partition, records in sorted(first.items()):
        last: dict[int, tuple[int, int]] = {}
        for offset, value in records:
            ident = parse(value)
            if ident is None:
                continue
            producer, seq = ident
            if producer in last and seq <= last[producer][0]:
                bad("out_of_order", [partition, f"p{producer}-{last[producer][0]}@"
                                     f"{last[producer][1]}", f"p{producer}-{seq}@{offset}"])
            last[producer] = (seq, offset)
    # No two acknowledged records may be told the same offset.
    told: dict[tuple[int, int], str] = {}
    for producer, outcomes in sorted(sent.items()):
        for o in outcomes:
            if o["status"] == "acked":
                at = (o["partition"], o["offset"])
                if at in told:
                    bad("acked_offset_reused", [list(at), told[at], f"p{producer}-{o['seq']}"])
                told.setdefault(at, f"p{producer}-{o['seq']}")
    # Every outcome against what was read.
    for producer, outcomes in sorted(sent.items()):
        for o in outcomes:
            where = found.get((producer, o["seq"]), [])
            status = o["status"]
            counts[f"{status}_total"] += 1
            if status == "acked":
                if not where:
                    bad("lost", [f"p{producer}-{o['seq']}", o["partition"], o["offset"], {
                        "attempts": o.get("attempts"), "resequenced": o.get("resequenced"),
                        "acked_at_s": o.get("at"),
                        "read_there": at_offset.get((o["partition"], o["offset"]))}])
                elif (o["partition"], o["offset"]) not in where:
                    bad("offset_mismatch_with_ack", [f"p{producer}-{o['seq']}",
                        [o["partition"], o["offset"]], where])  # fmt: skip
            elif status == "definite" and where:
                bad("definite_failures_read", [f"p{producer}-{o['seq']}", o["error"], where])
            elif status in ("indeterminate", "unanswered") and where:
                counts[f"{status}_read"] += 1
    return {
        "violations": {kind: counts[kind] for kind in CHECKS},
        "acked": counts["acked_total"],
        "definite_failed": counts["definite_total"],
        "indeterminate_failed": counts["indeterminate_total"],
        "indeterminate_read": counts["indeterminate_read"],
        "unanswered": counts["unanswered_total"],
        "unanswered_read": counts["unanswered_read"],
        "records_read": sum(len(r) for r in first.values()),
        "examples": dict(examples),
    }


def _short(value: bytes | None) -> str | None:
    return None if value is None else value.split(b".", 1)[0].decode(errors="replace")


# -- the run -----------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, report: dict) -> dict:
    """The run described at the top; fills ``report`` as it goes (so a run that fails half
    way still reports what it saw)."""
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="rafka-chaos-")
    disks = [f"d{i + 1}" for i in range(args.disks)]
    schedule = fault_schedule(
        args.seed, disks, args.duration, args.max_down, (args.min_down, args.max_down_s),
        (args.min_gap, args.max_gap),
    )
    report.update({"seed": args.seed, "disks": disks, "partitions": args.partitions,
                    "replicas_per_actor": args.replicas_per_actor,
                    "producers": args.producers, "rate_per_producer": args.rate,
                    "duration_s": args.duration, "max_down": args.max_down,
                    "schedule": [list(step) for step in schedule]})  # fmt: skip
    t0 = time.monotonic()
    producers: list[ProducerThread] = []
    progress(f"starting {len(disks)} disk nodes")
    local = LocalCluster(data_dir, disks, namespace=f"chaos-{args.seed}",
                         settings={**SETTINGS, "replicas.per.actor": args.replicas_per_actor})
    try:
        cluster = local.start()
        report["start_s"] = round(time.monotonic() - t0, 1)
        admin = cluster.admin()
        broker_of = {b.disk: b.broker_id for b in admin.brokers()}
        report["brokers"] = broker_of
        described = admin.create_topic(TOPIC, partitions=args.partitions, replication_factor=3,
                                       config={"min.insync.replicas": 2})  # fmt: skip
        report["replicas"] = {p.partition: p.replicas for p in described.partitions}
        wait_for(lambda: fully_replicated(admin), 60, "the new topic's leaders")
        producer_config = {"linger_ms": 5, "request_timeout_ms": args.request_timeout_ms,
                           "delivery_timeout_ms": args.delivery_timeout_ms}  # fmt: skip
        producers += [ProducerThread(cluster, n, args.rate, args.value_size, producer_config)
                      for n in range(args.producers)]  # fmt: skip
        started = time.monotonic()
        monitor = PartitionMonitor(cluster.admin(), started)
        monitor.start()
        faults = FaultPlayer(local, schedule, started, monitor, broker_of, args.max_down)
        for p in producers:
            p.started = started
            p.start()
        progress(f"producing, faults for {args.duration:g} s")
        faults.play(until=args.duration)  # the fault window
        progress("faults over; stopping producers, reviving")

        # Stop sending, bring every node back, and let every record settle.
        for p in producers:
            p.stop.set()
        for p in producers:
            p.join(30)
        produced_s = time.monotonic() - started
        revived = time.monotonic()
        faults.revive_all()
        report["faults"] = faults.faults
        report["fault_error"] = faults.error
        settle = time.monotonic()
        for p in producers:
            try:
                p.producer.flush(args.delivery_timeout_ms / 1000 + 30)
            except errors.RequestTimedOut as e:
                report.setdefault("flush_errors", []).append(str(e))
        report["settle_s"] = round(time.monotonic() - settle, 1)

        # Every ISR full, then read it all twice.
        progress("waiting for full ISRs")
        try:
            final = wait_for(lambda: fully_replicated(admin), args.recovery_timeout,
                             "every partition's ISR to be full")  # fmt: skip
        except TimeoutError:  # say what it looked like
            report["final_partitions"] = [
                p._asdict() for p in admin.describe_topic(TOPIC).partitions]
            report["final_brokers"] = [b._asdict() for b in admin.brokers()]
            raise
        report["recovery_s"] = round(time.monotonic() - revived, 1)
        report["final_partitions"] = [p._asdict() for p in final]
        progress("reading twice")
        reads = []
        for _ in range(2):
            began = time.monotonic()
            reads.append({p: read_partition(cluster, p) for p in range(args.partitions)})
            report.setdefault("read_s", []).append(round(time.monotonic() - began, 1))

        sent = {p.n: p.outcomes() for p in producers}
        report["faults"] = faults.faults
        report["fault_error"] = faults.error
        report["producer_errors"] = {p.n: p.error for p in producers if p.error}
        report["produce_s"] = round(produced_s, 1)
        report["sent"] = sum(len(o) for o in sent.values())
        report["errors_by_type"] = dict(collections.Counter(
            f"{o['status']}:{o['error']}" for outs in sent.values() for o in outs if "error" in o
        ))  # fmt: skip
        report["longest_ack_gap_s"] = _longest_ack_gap(sent, produced_s)
        monitor.stop.set()
        report["partition_changes"] = monitor.changes
        report["unavailable"] = monitor.unavailable(produced_s)
        by_id = {p.n: p for p in producers}
        report["result"] = check(sent, reads, lambda n, seq: by_id[n].value(seq))
        if args.dump:  # every outcome and the first read, for a post-mortem
            read = {p: [[o, _short(v)] for o, v in records] for p, records in reads[0].items()}
            with open(args.dump, "w") as f:
                json.dump({"sent": sent, "read": read}, f)
        report["acked_per_s"] = round(report["result"]["acked"] / produced_s, 1)
        report["total_s"] = round(time.monotonic() - t0, 1)
        emit(report)  # before the shutdown, which has been seen to end the process
    except Exception as e:
        report["error"] = "".join(traceback.format_exception(e))
        emit(report)
    finally:
        for p in producers:  # their sender threads must not outlive the Ray connection
            p.stop.set()
            try:
                p.producer.close(5)
            except Exception:
                pass
        progress("shutting down")
        local.shutdown()
        progress("shut down")
        if not args.keep_data and not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return report


def emit(report: dict) -> None:
    """Print the summary and the REPORT line (once)."""
    if report.get("emitted"):
        return
    report["emitted"] = True
    report["summary"] = summary(report)
    print(report["summary"], flush=True)
    print("REPORT " + json.dumps(report), flush=True)


def _longest_ack_gap(sent: dict[int, list[dict]], window: float) -> dict:
    """Per partition, the longest stretch of the fault window with no acknowledgement: how
    long the partition was unavailable to acks=all writes."""
    times: dict[int, list[float]] = collections.defaultdict(list)
    for outcomes in sent.values():
        for o in outcomes:
            if o["status"] == "acked" and o.get("at") is not None:
                times[o["partition"]].append(o["at"])
    out = {}
    for partition, ts in sorted(times.items()):
        ts = sorted([0.0] + [t for t in ts if t <= window] + [window])
        gap, at = max((b - a, a) for a, b in itertools.pairwise(ts))
        out[partition] = [round(gap, 2), round(at, 2)]
    return out


def summary(report: dict) -> str:
    result = report.get("result", {})
    violations = result.get("violations", {})
    lines = [
        f"chaos seed {report['seed']}: {len(report['disks'])} disks, {report['partitions']} "
        f"partitions (RF=3, min.insync.replicas=2), {report['producers']} producers x "
        f"{report['rate_per_producer']:g} records/s, {report['duration_s']:g} s of faults "
        f"(at most {report['max_down']} node(s) down)",
        f"  start {report.get('start_s')} s, settle {report.get('settle_s')} s, recovery "
        f"{report.get('recovery_s')} s, reads {report.get('read_s')} s, total "
        f"{report.get('total_s')} s",
        f"  sent {report.get('sent')}: acked {result.get('acked')} "
        f"({report.get('acked_per_s')}/s), failed definitely {result.get('definite_failed')}, "
        f"indeterminate {result.get('indeterminate_failed')} (read back: "
        f"{result.get('indeterminate_read')}), unanswered {result.get('unanswered')}; "
        f"records read {result.get('records_read')}",
        f"  errors: {report.get('errors_by_type')}",
        "  faults (s from the start of producing):",
    ]

    for f in report.get("faults", []):
        lines.append(
            f"    kill {f['disk']} (broker {f['broker']}, leading {f['led_partitions']}) at "
            f"{f['killed_s']} (waited {f.get('waited_s')} s), revive at {f.get('revived_s')} "
            f"[{f.get('revive_call_s', '-')} s]{' ' + f['revived_by'] if 'revived_by' in f else ''}"
            f", down {f.get('downtime_s')} s"
            + (f", with {f['down_with']} down" if f["down_with"] else "")
            + (f", {f['unhealthy_with']} not in sync" if f.get("unhealthy_with") else "")
        )
    if report.get("error"):
        lines.append(f"  the run failed: {report['error']}")
        for p in report.get("final_partitions", []) if "final_brokers" in report else []:
            lines.append(f"    partition {p['partition']}: leader {p['leader']} replicas "
                         f"{p['replicas']} isr {p['isr']}")  # fmt: skip
        for b in report.get("final_brokers", []):
            lines.append(f"    broker {b['broker_id']} ({b['disk']}): alive {b['alive']}, "
                         f"fenced {b['fenced']}")  # fmt: skip
    if report.get("fault_error"):
        lines.append(f"  fault injection failed: {report['fault_error']}")
    if report.get("producer_errors"):
        lines.append(f"  producer threads failed: {report['producer_errors']}")
    gaps = report.get("longest_ack_gap_s", {})
    if gaps:
        lines.append("  longest stretch without an ack, per partition [s, from]: "
                     + ", ".join(f"{p}: {g}" for p, g in gaps.items()))  # fmt: skip
    unavailable = report.get("unavailable", {})
    if unavailable:
        lines.append("  broker side, per partition [s offline, s under min.insync.replicas]: "
                     + ", ".join(f"{p}: [{u['offline_s']}, {u['under_min_isr_s']}]"
                                 for p, u in unavailable.items()))  # fmt: skip
    lines.append("  violations (all must be 0): "
                 + ", ".join(f"{k}={v}" for k, v in violations.items()))  # fmt: skip
    for kind, examples in result.get("examples", {}).items():
        lines.append(f"    e.g. {kind}: {examples}")
    lines.append(f"  re-run: python tests/chaos/chaos_run.py --seed {report['seed']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", help="where the disks live (default: a temporary dir)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--dump", help="write every record's outcome and the read log here")
    parser.add_argument("--disks", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replicas-per-actor", type=int, default=1,
                        help="the cluster's replicas.per.actor (1: a process per replica)")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200, help="records/s per producer")
    parser.add_argument("--value-size", type=int, default=64)
    parser.add_argument("--duration", type=float, default=60, help="seconds of faults")
    parser.add_argument("--max-down", type=int, default=2, help="nodes down at once, at most")
    parser.add_argument("--min-down", type=float, default=2, help="shortest downtime, s")
    parser.add_argument("--max-down-s", type=float, default=10, help="longest downtime, s")
    parser.add_argument("--min-gap", type=float, default=2, help="shortest time between kills")
    parser.add_argument("--max-gap", type=float, default=8, help="longest time between kills")
    parser.add_argument("--request-timeout-ms", type=int, default=5000)
    parser.add_argument("--delivery-timeout-ms", type=int, default=15000)
    parser.add_argument("--recovery-timeout", type=float, default=120)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict = {}
    try:
        run(args, report)
    except Exception as e:  # the run could not finish: say where, with what it saw so far
        report["error"] = "".join(traceback.format_exception(e))
    emit(report)
    violations = report.get("result", {}).get("violations", {})
    return 1 if any(violations.values()) or report.get("fault_error") or "error" in report else 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # A client thread calling Ray after shutdown must fail, not ray.init() itself onto
    # whichever other Ray instance runs on this machine (Ray's auto-connect does that).
    os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # every controller/replica line, for diagnosis
    sys.exit(main())
