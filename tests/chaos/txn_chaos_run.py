"""A seeded chaos run of transactions: transactional producers and read_committed readers
while disk nodes, transaction coordinators and replica host actors are killed, checked
Jepsen-style (``txn_checker``).

Run by test_txn_chaos.py in its own process (a process holds one Ray connection); a failing
seed is re-run by hand with ``python tests/chaos/txn_chaos_run.py --seed N``, and a run
written with ``--dump F`` is checked again with ``txn_checker.check(**json.load(open(F)))``.

The run, in order:

1. A LocalCluster of ``--disks`` disk nodes (default 4); two topics of ``--partitions``
   partitions each (default 3), RF=3, ``min.insync.replicas=2``; ``__transaction_state`` of
   ``--shards`` partitions (default 3, RF=3, min ISR 2), one coordinator actor each.
2. ``--producers`` threads (default 4), each with its own transactional id, run transactions
   back to back (at most ``--rate`` per second each), committing most, aborting or
   abandoning some, and keep each one's outcome, Jepsen's ok / fail / info (see
   ``txn_workload`` for the transactions and what makes each outcome).
3. ``--readers`` read_committed consumers (default 2) poll every partition from the start
   throughout; each record is kept with the reader and the time. A reader whose poll raises
   is replaced by a new one (a new reader name: its offsets start again).
4. The main thread plays a fault schedule drawn from the seed for ``--duration`` s
   (``txn_nemesis``): kill a disk node and revive it ``--min-down``..``--max-down-s`` s
   later (at most one node down, and only once every partition is back in sync), kill a
   transaction coordinator (Ray restarts it), kill the host actor of a data partition's
   leader (Ray restarts it and its replicas recover). Faults are recorded as they happen,
   with what they hit.
5. Every node is revived and the producers stop (each ends its transaction); the run waits
   for full ISRs, for no transaction open at any coordinator, and for every partition's last
   stable offset to reach its high watermark; every partition is read in full with a fresh
   read_committed consumer, from its start to its end offset; the readers stop once each has
   polled as many records.

The checker's anomalies (all must be zero) are listed in ``txn_checker``. Prints a readable
summary and one ``REPORT {json}`` line (the summary in it too).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any

from rafka import TopicPartition
from rafka.actors.local_cluster import LocalCluster, wait_for

# Beside this script, which runs as a program (the tests import them as tests.chaos.*).
import txn_checker  # noqa: E402,I001
from txn_nemesis import Nemesis, fault_schedule  # noqa: E402
from txn_workload import Reader, TxnProducer  # noqa: E402

TOPICS = ("txn-chaos-a", "txn-chaos-b")
TXN_STATE = "__transaction_state"
SETTINGS = {
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "leader.imbalance.check.interval.seconds": 5,
    # A transaction its producer left open is aborted within a second of its timeout.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    # A missing replica actor is started again within two seconds, not ten.
    "metadata.reconcile.interval.ms": 2000,
}
#: States of a transaction that still has to end.
OPEN_STATES = ["Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"]


def progress(message: str) -> None:
    print(f"[txn-chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the cluster's state and the final read ----------------------------------------------------


def fully_replicated(admin) -> bool:
    """Every partition of the data topics and of __transaction_state has a leader and its
    full ISR."""
    for topic in (*TOPICS, TXN_STATE):
        for p in admin.describe_topic(topic).partitions:
            if p.leader is None or p.leader < 0 or sorted(p.isr) != sorted(p.replicas):
                return False
    return True


def stable_everywhere(cluster, partitions: list[tuple[str, int]]) -> dict[str, int] | None:
    """None once every partition's last stable offset is its high watermark; else the
    partitions still held, with how far behind."""
    tps = [TopicPartition(t, p) for t, p in partitions]
    committed = cluster.consumer(isolation_level="read_committed")
    uncommitted = cluster.consumer()
    try:
        lso, hw = committed.end_offsets(tps), uncommitted.end_offsets(tps)
    finally:
        committed.close()
        uncommitted.close()
    behind = {f"{tp.topic}-{tp.partition}": hw[tp] - lso[tp] for tp in tps if lso[tp] != hw[tp]}
    return behind or None


def read_partition(cluster, topic: str, partition: int, timeout_s: float = 90) -> list[list]:
    """Every record of one partition, read_committed from its start to its end offset (the
    last stable offset), with a fresh consumer: [[topic, partition, offset, value], ...]."""
    tp = TopicPartition(topic, partition)
    consumer = cluster.consumer(isolation_level="read_committed", auto_offset_reset="earliest",
                                max_poll_records=5000)  # fmt: skip
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[list] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: read to {consumer.position(tp)} of "
                                   f"{end} in {timeout_s} s")  # fmt: skip
            out += [[topic, partition, r.offset, r.value.decode()]
                    for r in consumer.poll(timeout_ms=500)]  # fmt: skip
        return out
    finally:
        consumer.close()


# -- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The run described at the top; fills ``report`` as it goes (a run that fails half way
    still reports what it saw)."""
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="rafka-txn-chaos-")
    disks = [f"d{i + 1}" for i in range(args.disks)]
    partitions = [(t, p) for t in TOPICS for p in range(args.partitions)]
    schedule = fault_schedule(args.seed, args.duration, args.disks, args.shards,
                              len(partitions), (args.node_weight, args.coordinator_weight,
                                                args.host_weight),
                              (args.min_gap, args.max_gap), (args.min_down, args.max_down_s))
    settings = {**SETTINGS, "replicas.per.actor": args.replicas_per_actor,
                "transaction.state.log.num.partitions": args.shards}  # fmt: skip
    report.update(seed=args.seed, disks=disks, topics=list(TOPICS), partitions=args.partitions,
                  shards=args.shards, replicas_per_actor=args.replicas_per_actor,
                  producers=args.producers, readers=args.readers, rate=args.rate,
                  duration_s=args.duration, settings=settings,
                  schedule=[list(s) for s in schedule])  # fmt: skip
    t0 = time.monotonic()
    producers: list[TxnProducer] = []
    readers: list[Reader] = []
    progress(f"starting {len(disks)} disk nodes")
    local = LocalCluster(data_dir, disks, namespace=f"txn-chaos-{args.seed}", settings=settings)
    try:
        cluster = local.start()
        report["start_s"] = round(time.monotonic() - t0, 1)
        admin = cluster.admin()
        broker_of = {b.disk: b.broker_id for b in admin.brokers()}
        report["brokers"] = broker_of
        for topic in TOPICS:
            admin.create_topic(topic, partitions=args.partitions, replication_factor=3,
                               config={"min.insync.replicas": 2})  # fmt: skip
            admin.wait_for_topic(topic, 120)
        # The coordinators and __transaction_state start before the faults do.
        admin.list_transactions()
        wait_for(lambda: fully_replicated(admin), 120, "every ISR to be full")
        report["ready_s"] = round(time.monotonic() - t0, 1)

        started = time.monotonic()
        producers += [TxnProducer(cluster, n, args.seed, partitions, args.rate, started)
                      for n in range(args.producers)]  # fmt: skip
        readers += [Reader(cluster, n, partitions, started) for n in range(args.readers)]
        for thread in (*producers, *readers):
            thread.start()
        nemesis = Nemesis(local, lambda: fully_replicated(admin), disks, broker_of, partitions,
                          started, progress)
        progress(f"transactions under faults for {args.duration:g} s")
        nemesis.play(schedule, until=args.duration)
        report["fault_error"] = nemesis.error

        progress("faults over: nodes come back, producers end their transactions")
        for p in producers:
            p.stop.set()
        revived = time.monotonic()
        nemesis.revive_all()
        report["faults"] = nemesis.faults
        report["unplayed"] = nemesis.unplayed
        for p in producers:
            p.join(max(1.0, 120 - (time.monotonic() - revived)))
        report["producers_stopped_s"] = round(time.monotonic() - revived, 1)
        report["producers_still_running"] = [p.n for p in producers if p.is_alive()]
        produced_s = time.monotonic() - started
        wait_for(lambda: fully_replicated(admin), args.recovery_timeout, "every ISR to be full")
        report["recovery_s"] = round(time.monotonic() - revived, 1)
        settle = time.monotonic()
        try:
            wait_for(lambda: not admin.list_transactions(states=OPEN_STATES), 60,
                     "every transaction to end")  # fmt: skip
            wait_for(lambda: stable_everywhere(cluster, partitions) is None, 60,
                     "every last stable offset to reach its high watermark")  # fmt: skip
        except TimeoutError as e:  # reported; the final read then shows what it means
            report["settle_error"] = str(e)
            report["open_at_end"] = [t._asdict() for t in admin.list_transactions(OPEN_STATES)]
            report["lso_behind_hw"] = stable_everywhere(cluster, partitions)
        report["settle_s"] = round(time.monotonic() - settle, 1)

        progress("final read")
        began = time.monotonic()
        final = [row for t, p in partitions for row in read_partition(cluster, t, p)]
        report["final_read_s"] = round(time.monotonic() - began, 1)
        try:  # the readers polling all along catch up with it before they stop
            wait_for(lambda: all(r.polled() >= len(final) for r in readers), 30,
                     "the readers to catch up with the final read")  # fmt: skip
        except TimeoutError:
            report["readers_behind"] = {r.n: r.polled() for r in readers}
        for r in readers:
            r.stop.set()
        for r in readers:
            r.join(30)
        txns = [t for p in producers for t in p.txns]
        polls = {name: records for r in readers for name, records in r.polls.items()}
        report["result"] = txn_checker.check(txns, polls, final)
        report["txns_per_s"] = round(len(txns) / produced_s, 1)
        report["endings"] = dict(collections.Counter(t["ending"] for t in txns))
        report["producer_errors"] = {p.n: p.error for p in producers if p.error}
        report["incarnations"] = {p.n: p.incarnations for p in producers}
        report["init_errors"] = {p.n: dict(p.init_errors) for p in producers if p.init_errors}
        report["fenced_on_init"] = sum(p.fenced_on_init for p in producers)
        report["txn_errors"] = dict(collections.Counter(
            f"{step}:{name}" for t in txns for _, step, name, _ in t["errors"]))
        report["reader_errors"] = [e for r in readers for e in r.errors]
        report["readers_polled"] = {name: len(records) for name, records in polls.items()}
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump({"txns": txns, "polls": polls, "final": final}, f)
        report["total_s"] = round(time.monotonic() - t0, 1)
        emit(report)  # before the shutdown
    finally:
        for thread in (*producers, *readers):  # nothing may outlive the Ray connection
            thread.stop.set()
        for thread in (*producers, *readers):
            thread.join(10)
        progress("shutting down")
        local.shutdown()
        progress("shut down")
        if not args.keep_data and not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def emit(report: dict[str, Any]) -> None:
    """Print the summary and the REPORT line (once)."""
    if report.get("emitted"):
        return
    report["emitted"] = True
    report["summary"] = summary(report)
    print(report["summary"], flush=True)
    print("REPORT " + json.dumps(report), flush=True)


def summary(report: dict[str, Any]) -> str:
    result = report.get("result", {})
    outcomes = result.get("outcomes", {})
    lines = [
        f"transaction chaos seed {report.get('seed')}: {len(report.get('disks', []))} disks, "
        f"2 topics x {report.get('partitions')} partitions (RF=3, min.insync.replicas=2), "
        f"{report.get('shards')} coordinator shards, replicas.per.actor="
        f"{report.get('replicas_per_actor')}, {report.get('producers')} transactional producers"
        f" (<= {report.get('rate')} txn/s each), {report.get('readers')} read_committed "
        f"readers, {report.get('duration_s')} s of faults",
        f"  start {report.get('start_s')} s, ready {report.get('ready_s')} s; after the faults: "
        f"producers stopped in {report.get('producers_stopped_s')} s, full ISRs at "
        f"{report.get('recovery_s')} s, "
        f"settle {report.get('settle_s')} s, final read {report.get('final_read_s')} s, total "
        f"{report.get('total_s')} s",
        f"  transactions: ok {outcomes.get('ok_txns', 0)}, fail {outcomes.get('fail_txns', 0)}, "
        f"info {outcomes.get('info_txns', 0)} (committed in the end: "
        f"{outcomes.get('info_txns_visible', 0)}, not: {outcomes.get('info_txns_invisible', 0)})"
        f"; {report.get('txns_per_s')} txn/s; meant to end {report.get('endings')}; "
        f"records polled {result.get('polled_records')}, "
        f"in the final read {result.get('final_records')}",
        f"  transaction errors: {report.get('txn_errors')}; producer incarnations "
        f"{report.get('incarnations')}; init errors {report.get('init_errors')}; "
        f"ProducerFenced on init {report.get('fenced_on_init')}",
        f"  readers: {report.get('readers_polled')}, errors {report.get('reader_errors')}",
        "  faults (s from the start of the transactions):",
    ]
    for f in report.get("faults", []):
        line = f"    {f['at_s']:>6} {f['kind']:<11} {f.get('what')}"
        if f.get("partition"):
            line += f" (leader of {f['partition']})"
        if f["kind"] == "node":
            line += (f" (broker {f['broker']}), down {f.get('down_s')} s, revived at "
                     f"{f.get('revived_s')} by {f.get('revived_by')}")  # fmt: skip
        if f.get("waited_s", 0) > 0.5:
            line += f", {f['waited_s']} s after planned"
        if f.get("skipped"):
            line += f" [skipped: {f['skipped']}]"
        lines.append(line)
    if report.get("unplayed"):
        lines.append(f"  not played (still waiting at the end) [planned s, gap, kind, target, "
                     f"downtime]: {report['unplayed']}")
    for key in ("error", "fault_error", "settle_error", "producer_errors", "open_at_end",
                "lso_behind_hw", "producers_still_running", "readers_behind"):  # fmt: skip
        if report.get(key):
            lines.append(f"  {key}: {report[key]}")
    lines.append("  anomalies (all must be 0): " + ", ".join(
        f"{k}={v}" for k, v in result.get("violations", {}).items()))
    for kind, examples in result.get("examples", {}).items():
        lines.append(f"    e.g. {kind}: {json.dumps(examples[:2])[:1500]}")
    lines.append(f"  re-run: python tests/chaos/txn_chaos_run.py --seed {report.get('seed')}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", help="where the disks live (default: a temporary dir)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--dump", help="write every transaction and read here (JSON)")
    parser.add_argument("--disks", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=3, help="per topic (two topics)")
    parser.add_argument("--shards", type=int, default=3, help="__transaction_state partitions")
    parser.add_argument("--replicas-per-actor", type=int, default=100,
                        help="the cluster's replicas.per.actor (100: a disk's replicas in one "
                             "host actor; 1: a process per replica)")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=5, help="transactions/s per producer, at "
                        "most")
    parser.add_argument("--duration", type=float, default=60, help="seconds of faults")
    parser.add_argument("--node-weight", type=float, default=0.4)
    parser.add_argument("--coordinator-weight", type=float, default=0.3)
    parser.add_argument("--host-weight", type=float, default=0.3)
    parser.add_argument("--min-gap", type=float, default=2, help="shortest time between faults")
    parser.add_argument("--max-gap", type=float, default=6, help="longest time between faults")
    parser.add_argument("--min-down", type=float, default=3, help="shortest node downtime, s")
    parser.add_argument("--max-down-s", type=float, default=10, help="longest node downtime, s")
    parser.add_argument("--recovery-timeout", type=float, default=120)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {}
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
    sys.exit(main())
