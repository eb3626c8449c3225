"""Transactions: the transactional producer beside the idempotent one, the commit's latency,
and read_committed reads beside read_uncommitted ones, in one run.

Workload: topics of ``--txn-partitions`` partitions (3), ``--value-size``-byte values (100),
acks=all, on the embedded instance (one node, RF=1). Each round:

  transactional  one producer (``transactional_id``) runs ``--txn-transactions`` transactions
                 one after another, each ``begin_transaction()``, ``--txn-records`` (1,000)
                 ``send(topic, value, partition=i % partitions)`` and ``commit_transaction()``;
                 records/s from the first ``begin`` to the last commit's return, and each
                 commit's time from the call to its return
  idempotent     one idempotent producer (no transactional id, acks=all) sends the same number
                 of records the same way into a topic of its own, one ``flush()`` at the end
  idempotent, flushed per transaction
                 the same, with a ``flush()`` after every ``--txn-records``: a transaction
                 waits for its records before it commits, so this side shows how much of the
                 gap is that wait and how much the transaction protocol itself

The two sides alternate which goes first from round to round; each producer is created and
does one untimed transaction (or flush) of warm-up before its clock starts, so metadata and
the coordinator's first answers are not measured. The table shows the best round (the JSON
keeps every round and the medians); commit latency percentiles are over every timed commit
of every round.

Then the last round's transactional topic is read from the beginning by fresh consumers, per
record (``poll``) and bulk (``poll_columns``), read_committed beside read_uncommitted
(``--txn-rounds`` rounds, alternating, best shown; one untimed poll of each kind first).
Every transaction committed, so both read the same records: read_committed pays for reading
up to the last stable offset and for the aborted-transaction filter on every batch,
read_uncommitted for neither.

The harness's ``transactions`` workload (``python -m bench transactions``); results go to
bench/results/transactions.json. Kafka-compatible peers get no figure here: the ratios are
rafka's transactional path against its own idempotent path and read_uncommitted reads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any, Callable

#: A consumer that receives nothing for this long has stalled: the workload fails.
STALL_S = 60.0

TINY = {"txn_transactions": 10, "txn_rounds": 1}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--txn-transactions", type=int, default=200,
                       help="transactions per round (default 200)")
    group.add_argument("--txn-records", type=int, default=1_000,
                       help="records per transaction (default 1000)")
    group.add_argument("--txn-partitions", type=int, default=3,
                       help="partitions of each topic; a transaction's records are spread "
                       "over all of them (default 3)")
    group.add_argument("--txn-rounds", type=int, default=3,
                       help="rounds of each side, produce and consume; the best counts "
                       "(default 3)")  # fmt: skip


# -- arithmetic ------------------------------------------------------------------------------


def latency_figures(seconds: list[float]) -> dict[str, float | int]:
    """p50, p99, mean and max in ms of the times ``seconds``, and how many there are."""
    import numpy as np

    if not seconds:
        return {"count": 0}
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {"count": int(ms.size), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()),
            "max_ms": float(ms.max())}  # fmt: skip


def summarise(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """``side.metric`` -> best (highest) and median over the rounds, for every rate (a
    metric named ``*_per_s``) of ``rounds`` (each a dict of side -> metric -> value); the
    other figures stay in the rounds only. A side missing from a round is left out of it."""
    values: dict[str, list[float]] = {}
    for r in rounds:
        for side, figures in r.items():
            for metric, value in figures.items():
                if metric.endswith("_per_s"):
                    values.setdefault(f"{side}.{metric}", []).append(value)
    return {key: {"best": max(v), "median": statistics.median(v)} for key, v in values.items()}


# -- producing -------------------------------------------------------------------------------


def _fresh_topic(cluster, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topic(name, partitions=partitions)
    return name


def _delete(cluster, topics: list[str]) -> None:
    admin = cluster.admin()
    for topic in topics:
        try:
            admin.delete_topic(topic)
        except Exception as exc:  # a leftover topic costs actors, not results
            print(f"could not delete topic {topic}: {exc}", file=sys.stderr)


def _send_records(send: Callable[..., Any], topic: str, count: int, partitions: int,
                  value: bytes) -> None:  # fmt: skip
    for i in range(count):
        send(topic, value, partition=i % partitions)


def produce_transactional(cluster, topic: str, transactions: int, records: int, partitions: int,
                          value: bytes) -> tuple[dict[str, float], list[float]]:  # fmt: skip
    """``transactions`` transactions of ``records`` records, committed one after another:
    (figures, each commit's seconds). One untimed transaction first."""
    producer = cluster.producer(transactional_id=f"bench-{uuid.uuid4().hex[:8]}", acks="all",
                                transaction_timeout_ms=60_000)  # fmt: skip
    commits: list[float] = []
    clock = time.perf_counter
    try:
        init_began = clock()
        producer.init_transactions()
        init_s = clock() - init_began
        send = producer.send
        producer.begin_transaction()
        _send_records(send, topic, records, partitions, value)
        producer.commit_transaction()
        began = clock()
        for _ in range(transactions):
            producer.begin_transaction()
            _send_records(send, topic, records, partitions, value)
            committing = clock()
            producer.commit_transaction()
            commits.append(clock() - committing)
        ended = clock()
    finally:
        producer.close()
    total = transactions * records
    commit_s = sum(commits)
    return {
        "records_per_s": total / (ended - began),
        "transactions_per_s": transactions / (ended - began),
        # begin_transaction() and the sends (send() queues only: the leaders add the partitions)
        "outside_commit_share": (ended - began - commit_s) / (ended - began),
        "init_transactions_ms": init_s * 1e3,
    }, commits  # fmt: skip


def produce_idempotent(cluster, topic: str, transactions: int, records: int, partitions: int,
                       value: bytes, flush_every: bool) -> dict[str, float]:  # fmt: skip
    """The same records from an idempotent acks=all producer, flushed once at the end (or
    after every ``records`` when ``flush_every``). One untimed flushed group first."""
    producer = cluster.producer(acks="all")
    try:
        send, flush = producer.send, producer.flush
        _send_records(send, topic, records, partitions, value)
        flush()
        began = time.perf_counter()
        if flush_every:
            for _ in range(transactions):
                _send_records(send, topic, records, partitions, value)
                flush()
        else:
            _send_records(send, topic, transactions * records, partitions, value)
            flush()
        ended = time.perf_counter()
    finally:
        producer.close()
    return {"records_per_s": transactions * records / (ended - began)}


# -- consuming -------------------------------------------------------------------------------


def consume(cluster, topic: str, partitions: int, count: int, isolation_level: str,
            bulk: bool) -> dict[str, float]:  # fmt: skip
    """A fresh consumer reads ``count`` records of every partition of ``topic`` from the
    beginning; records/s."""
    from rafka import TopicPartition

    consumer = cluster.consumer(
        auto_offset_reset="earliest", isolation_level=isolation_level,
        max_partition_fetch_bytes=4 << 20, max_poll_records=50_000,
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        received = 0
        began = time.perf_counter()
        last_progress = began
        while received < count:
            if bulk:
                got = consumer.poll_columns(timeout_ms=1000).num_rows
            else:
                got = len(consumer.poll(timeout_ms=1000))
            now = time.perf_counter()
            if got:
                received += got
                last_progress = now
            elif now - last_progress > STALL_S:
                raise RuntimeError(f"a {isolation_level} consumer of {topic} received "
                                   f"{received:,} of {count:,} records and nothing for "
                                   f"{STALL_S:g} s")  # fmt: skip
        consumed = time.perf_counter()
    finally:
        consumer.close()
    if received != count:
        raise RuntimeError(f"a {isolation_level} consumer of {topic} received {received:,} "
                           f"records, not {count:,}")  # fmt: skip
    return {"records_per_s": count / (consumed - began)}


def warm_up_reads(cluster, topic: str) -> None:
    """One untimed poll of each kind and isolation level: the first ``poll_columns`` of a
    process pays for pyarrow's and the columnar reader's first use (about 0.2 s)."""
    from rafka import TopicPartition

    for level in ("read_committed", "read_uncommitted"):
        consumer = cluster.consumer(auto_offset_reset="earliest", isolation_level=level)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            deadline = time.monotonic() + STALL_S
            while not len(consumer.poll(timeout_ms=1000)) and time.monotonic() < deadline:
                pass
            consumer.seek(TopicPartition(topic, 0), 0)
            while not consumer.poll_columns(timeout_ms=1000).num_rows and (
                    time.monotonic() < deadline):  # fmt: skip
                pass
        finally:
            consumer.close()


# -- the workload ----------------------------------------------------------------------------


def _produce_round(
    cluster, first: str, transactions: int, records: int, partitions: int, value: bytes
) -> tuple[dict[str, dict[str, float]], list[float], str]:
    """One round of the three producers, ``first`` ("transactional" or "idempotent") going
    first: (figures per side, the commits' seconds, the transactional topic). The other
    topics are deleted."""
    figures: dict[str, dict[str, float]] = {}
    commits: list[float] = []
    txn_topic = _fresh_topic(cluster, "txn", partitions)
    others = [_fresh_topic(cluster, "txn-idempotent", partitions),
              _fresh_topic(cluster, "txn-idempotent-flushed", partitions)]  # fmt: skip
    try:
        for side in ("transactional", "idempotent") if first == "transactional" else (
                "idempotent", "transactional"):  # fmt: skip
            if side == "transactional":
                figures[side], commits = produce_transactional(
                    cluster, txn_topic, transactions, records, partitions, value)
            else:
                figures["idempotent"] = produce_idempotent(
                    cluster, others[0], transactions, records, partitions, value, False)
                figures["idempotent_flushed"] = produce_idempotent(
                    cluster, others[1], transactions, records, partitions, value, True)
    except BaseException:
        _delete(cluster, [txn_topic])
        raise
    finally:
        _delete(cluster, others)
    return figures, commits, txn_topic


def _consume_round(cluster, first: str, topic: str, partitions: int,
                   count: int) -> dict[str, dict[str, float]]:  # fmt: skip
    """Fresh consumers of both isolation levels, ``first`` first, per record then bulk."""
    levels = ("read_committed", "read_uncommitted")
    figures: dict[str, dict[str, float]] = {}
    for level in levels if first == levels[0] else levels[::-1]:
        key = "committed" if level == "read_committed" else "uncommitted"
        figures[key] = consume(cluster, topic, partitions, count, level, bulk=False)
        figures[f"{key}_bulk"] = consume(cluster, topic, partitions, count, level, bulk=True)
    return figures


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``transactions`` workload: answers rows for the summary and the report."""
    from bench.harness import row

    transactions, records = args.txn_transactions, args.txn_records
    partitions, n_rounds = args.txn_partitions, args.txn_rounds
    if min(transactions, records, partitions, n_rounds) < 1:
        raise SystemExit("--txn-transactions, --txn-records, --txn-partitions and --txn-rounds "
                         "must be >= 1")  # fmt: skip
    value = os.urandom(args.value_size)
    cluster = ctx.embedded()
    produced: list[dict] = []
    consumed: list[dict] = []
    commits: list[float] = []
    # Every transaction of a transactional topic committed, the warm-up one too.
    count = (transactions + 1) * records
    txn_topic = None
    try:
        for i in range(n_rounds):
            if txn_topic is not None:
                _delete(cluster, [txn_topic])
            first = "transactional" if i % 2 == 0 else "idempotent"
            figures, round_commits, txn_topic = _produce_round(
                cluster, first, transactions, records, partitions, value)
            produced.append(figures)
            commits.extend(round_commits)
            print(f"transactions round {i + 1}: {_round_line(figures)}", file=sys.stderr)
        warm_up_reads(cluster, txn_topic)
        for i in range(n_rounds):
            first = "read_committed" if i % 2 == 0 else "read_uncommitted"
            consumed.append(_consume_round(cluster, first, txn_topic, partitions, count))
            print(f"transactions consume round {i + 1}: {_round_line(consumed[-1])}",
                  file=sys.stderr)  # fmt: skip
    finally:
        if txn_topic is not None:
            _delete(cluster, [txn_topic])

    produce_summary, consume_summary = summarise(produced), summarise(consumed)
    commit = latency_figures(commits)
    report = {
        "transactions": transactions, "records_per_transaction": records,
        "partitions": partitions, "value_size": args.value_size, "acks": "all",
        "replication_factor": 1, "linger_ms": 5, "rounds": n_rounds,
        "produce_rounds": produced, "produce_summary": produce_summary,
        "commit_latency": commit, "consume_records": count, "consume_rounds": consumed,
        "consume_summary": consume_summary,
        "ratio": "transactional / idempotent and read_committed / read_uncommitted records/s",
    }  # fmt: skip
    print(_render(report))
    best = _best(produce_summary)
    best_read = _best(consume_summary)
    rows = [
        row(f"{records:,}-record txns, {partitions} partitions", "records/s",
            best("transactional.records_per_s"), baseline=best("idempotent.records_per_s"),
            baseline_label="idempotent"),
        row("commit_transaction() p50", "ms", commit.get("p50_ms"), higher_is_better=False),
        row("commit_transaction() p99", "ms", commit.get("p99_ms"), higher_is_better=False),
        row("read_committed, per record (poll)", "records/s",
            best_read("committed.records_per_s"),
            baseline=best_read("uncommitted.records_per_s"), baseline_label="read_uncommitted"),
        row("read_committed, bulk poll_columns", "records/s",
            best_read("committed_bulk.records_per_s"),
            baseline=best_read("uncommitted_bulk.records_per_s"),
            baseline_label="read_uncommitted"),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def _best(summary: dict[str, dict[str, float]]) -> Callable[[str], float | None]:
    def best(key: str) -> float | None:
        return summary.get(key, {}).get("best")

    return best


def _round_line(r: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{side} {figures['records_per_s']:,.0f}/s" for side, figures in r.items())


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else ""


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _render(report: dict[str, Any]) -> str:
    best, best_read = _best(report["produce_summary"]), _best(report["consume_summary"])
    commit = report["commit_latency"]
    txn = best("transactional.records_per_s")
    lines = [
        f"\ntransactions: {report['transactions']} transactions of "
        f"{report['records_per_transaction']:,} records of {report['value_size']} bytes over "
        f"{report['partitions']} partitions, acks=all (best of {report['rounds']} rounds)",
        f"{'produce':<44}{'records/s':>14}{'txn / this':>12}",
    ]  # fmt: skip
    for side, label in (("transactional", "transactional, commit per transaction"),
                        ("idempotent", "idempotent, one flush"),
                        ("idempotent_flushed", "idempotent, flush per transaction")):  # fmt: skip
        value = best(f"{side}.records_per_s") or 0.0
        ratio = "" if side == "transactional" else _ratio(txn, value)
        lines.append(f"{label:<44}{value:>14,.0f}{ratio:>12}")
    lines.append(f"commit_transaction(): p50 {_ms(commit.get('p50_ms'))}, p99 "
                 f"{_ms(commit.get('p99_ms'))}, max {_ms(commit.get('max_ms'))} over "
                 f"{commit['count']} commits")  # fmt: skip
    title = f"consume ({report['consume_records']:,} records, from the beginning)"
    lines.append(f"{title:<44}{'records/s':>14}{'rc / ru':>12}")
    for key, label in (("committed", "read_committed, poll"),
                       ("uncommitted", "read_uncommitted, poll"),
                       ("committed_bulk", "read_committed, poll_columns"),
                       ("uncommitted_bulk", "read_uncommitted, poll_columns")):  # fmt: skip
        value = best_read(f"{key}.records_per_s") or 0.0
        ratio = ""
        if key.startswith("committed"):
            ratio = _ratio(value, best_read(f"un{key}.records_per_s"))
        lines.append(f"{label:<44}{value:>14,.0f}{ratio:>12}")
    return "\n".join(lines)
