"""Producer and consumer throughput against the peer, in one run.

Workload (the issue's figure): one topic with one partition, 100-byte values, acks=1, one
producer sending ``--records`` records and one consumer reading them back from the start.
rafka runs embedded on a local Ray instance; the peer is the confluent-kafka client
(librdkafka) against a Tansu broker on loopback (``bench/peer.py``). Rounds alternate between
the two so both see the same machine state; the table shows the best round and the JSON keeps
every round and the medians.

Four rafka paths are measured:
  per-record  ``producer.send(topic, value)`` per record, ``consumer.poll()`` Records
  bulk        ``producer.send_batch(topic, column)``, ``consumer.poll_columns()`` Arrow tables
and a profile of the per-record path's pieces (time per record or per batch), so the figures
say where the time goes. These are the harness's ``produce`` and ``consume`` workloads
(``python -m bench produce consume``; ``clients`` names both); results go to
bench/results/produce.json and consume.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any

TINY = {"records": 20_000, "rounds": 1, "profile_records": 2_000}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--records", type=int, default=1_000_000,
                       help="records per round, produce and consume (default 1000000)")
    group.add_argument("--rounds", type=int, default=3,
                       help="rounds, rafka and peer each; the best counts (default 3)")
    group.add_argument("--profile-records", type=int, default=200_000,
                       help="records sent to time send() alone, in produce's profile of the "
                       "per-record path (default 200000; 0: no profile)")  # fmt: skip


def _fresh_topic(cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topic(name, partitions=1)
    return name


def _delete(cluster, topics: list[str]) -> None:
    admin = cluster.admin()
    for topic in topics:
        try:
            admin.delete_topic(topic)
        except Exception as exc:  # a leftover topic costs actors, not results
            print(f"could not delete topic {topic}: {exc}", file=sys.stderr)


# -- rafka -------------------------------------------------------------------------------------


def rafka_produce_per_record(cluster, topic: str, count: int, value: bytes) -> dict:
    """``send`` in a loop then ``flush``: records/s to the last acknowledgement, and of the
    loop alone."""
    producer = cluster.producer(acks=1, linger_ms=5)
    try:
        started = time.perf_counter()
        send = producer.send
        for _ in range(count):
            send(topic, value)
        sent = time.perf_counter()
        producer.flush()
        produced = time.perf_counter()
    finally:
        producer.close()
    return {
        "produce_records_per_s": count / (produced - started),
        "send_loop_records_per_s": count / (sent - started),
    }


def rafka_produce_bulk(cluster, topic: str, count: int, value: bytes) -> dict:
    """One ``send_batch`` of an Arrow column of ``count`` values, to its acknowledgement."""
    import pyarrow as pa

    column = pa.array([value] * count, pa.binary())
    producer = cluster.producer(acks=1, linger_ms=5)
    try:
        started = time.perf_counter()
        producer.send_batch(topic, column).result()
        produced = time.perf_counter()
    finally:
        producer.close()
    return {"produce_records_per_s": count / (produced - started)}


def rafka_consume_per_record(cluster, topic: str, count: int) -> dict:
    """A fresh consumer reads ``count`` records from offset 0 with ``poll`` (Record objects)."""
    from rafka import TopicPartition

    consumer = cluster.consumer(
        auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20, max_poll_records=50_000
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        received = 0
        began = time.perf_counter()
        while received < count:
            received += len(consumer.poll(timeout_ms=5000))
        consumed = time.perf_counter()
    finally:
        consumer.close()
    return {"consume_records_per_s": count / (consumed - began)}


def rafka_consume_bulk(cluster, topic: str, count: int) -> dict:
    """A fresh consumer reads ``count`` records from offset 0 with ``poll_columns`` (Arrow)."""
    from rafka import TopicPartition

    consumer = cluster.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        received = 0
        began = time.perf_counter()
        while received < count:
            received += consumer.poll_columns(timeout_ms=5000).num_rows
        consumed = time.perf_counter()
    finally:
        consumer.close()
    return {"consume_records_per_s": count / (consumed - began)}


def profile_pieces(cluster, topic: str, value: bytes, n: int = 200_000) -> dict:
    """Cost of each piece of the per-record path, measured alone (µs per record, or ms per
    batch of one default-sized batch of 100-byte records); ``send`` is timed over ``n``
    records."""
    from itertools import repeat

    import numpy as np

    from rafka.storage import record_batch as rb
    from rafka.types import Record

    per_batch = (512 * 1024) // (len(value) + 8)
    values = [value] * per_batch
    out: dict[str, float] = {}

    producer = cluster.producer(acks=1, linger_ms=1000, batch_size=1 << 30,
                                buffer_memory=1 << 31, max_request_size=1 << 30)  # fmt: skip
    t = time.perf_counter()
    for _ in range(n):
        producer.send(topic, value)
    out["send_us_per_record"] = (time.perf_counter() - t) / n * 1e6
    producer.close()

    t = time.perf_counter()
    for _ in range(20):
        batch = rb.encode_batch(values, timestamps=1)
    out["encode_ms_per_batch"] = (time.perf_counter() - t) / 20 * 1e3
    out["records_per_batch"] = per_batch

    meta = cluster.metadata.refresh([topic])[topic]
    replica = cluster.metadata.replica(meta, 0)
    gateway = cluster.gateway
    array = np.frombuffer(batch, dtype=np.uint8)
    gateway.get(gateway.produce(replica, array, 1, 30_000, "bench", -1))
    t = time.perf_counter()
    for _ in range(20):
        gateway.get(gateway.produce(replica, array, 1, 30_000, "bench", -1))
    out["produce_call_ms_per_batch"] = (time.perf_counter() - t) / 20 * 1e3

    t = time.perf_counter()
    for i in range(20):
        answer = gateway.get(gateway.fetch(replica, i * per_batch, len(batch), 1, 0))
    out["fetch_call_ms_per_batch"] = (time.perf_counter() - t) / 20 * 1e3
    data = answer[5]

    t = time.perf_counter()
    for _ in range(20):
        decoded = rb.decode_records(data, 0)
    out["decode_ms_per_batch"] = (time.perf_counter() - t) / 20 * 1e3

    t = time.perf_counter()
    for _ in range(5):
        list(map(tuple.__new__, repeat(Record), zip(
            repeat(topic), repeat(0), decoded.offsets, decoded.timestamps, repeat(None),
            decoded.values, repeat(()),
        )))  # fmt: skip
    out["record_objects_us_per_record"] = (time.perf_counter() - t) / 5 / len(decoded) * 1e6
    return out


# -- the peer ----------------------------------------------------------------------------------


def peer_produce(bootstrap: str, topic: str, count: int, value_size: int) -> dict:
    from bench import peer

    figures = peer.produce(bootstrap, topic, count, value_size, acks=1, idempotent=False)
    return {"produce_records_per_s": figures["records_per_s"]}


def peer_consume(bootstrap: str, topic: str, count: int, value_size: int) -> dict:
    from bench import peer

    figures = peer.consume(bootstrap, topic, count, value_size=value_size)
    return {"consume_records_per_s": figures["records_per_s"]}


def _peer_topic(bootstrap: str, prefix: str) -> str:
    from bench import peer

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    peer.create_topic(bootstrap, name, 1)
    return name


# -- the workloads -----------------------------------------------------------------------------


def produce_workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``produce``: rounds of rafka per record, rafka bulk and the peer, each into a fresh
    one-partition topic; then the profile of the per-record path."""
    from bench import peer
    from bench.harness import row

    value = os.urandom(args.value_size)
    cluster, broker = ctx.embedded(), ctx.peer()
    rounds: list[dict] = []
    topics: list[str] = []
    profile = None
    try:
        for i in range(args.rounds):
            r: dict[str, dict] = {}
            topics.append(_fresh_topic(cluster, "produce"))
            r["rafka"] = rafka_produce_per_record(cluster, topics[-1], args.records, value)
            topics.append(_fresh_topic(cluster, "produce-bulk"))
            r["rafka_bulk"] = rafka_produce_bulk(cluster, topics[-1], args.records, value)
            if broker is not None:
                topic = _peer_topic(broker.bootstrap, "produce")
                r["peer"] = peer_produce(broker.bootstrap, topic, args.records, args.value_size)
                peer.delete_topic(broker.bootstrap, topic)
            rounds.append(r)
            print(f"produce round {i + 1}: {_round_line(r)}", file=sys.stderr)
            _delete(cluster, topics)
            topics.clear()
        if args.profile_records > 0:
            topics.append(_fresh_topic(cluster, "produce-profile"))
            profile = profile_pieces(cluster, topics[-1], value, args.profile_records)
    finally:
        _delete(cluster, topics)
    summary = _summarise(rounds)
    report = {"records": args.records, "value_size": args.value_size, "partitions": 1,
              "acks": 1, "linger_ms": 5, "rounds": rounds, "summary": summary,
              "profile": profile}  # fmt: skip
    print(_render("produce", report))
    best = _best(summary)
    rows = [
        row("per record (send + flush)", "records/s", best("rafka.produce_records_per_s"),
            peer=best("peer.produce_records_per_s")),
        row("bulk (send_batch)", "records/s", best("rafka_bulk.produce_records_per_s"),
            peer=best("peer.produce_records_per_s")),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def consume_workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``consume``: one topic per side filled by its per-record producer (not timed), then
    rounds of fresh consumers reading it from the beginning: rafka per record, rafka bulk,
    the peer."""
    from bench import peer
    from bench.harness import row

    value = os.urandom(args.value_size)
    cluster, broker = ctx.embedded(), ctx.peer()
    topic = _fresh_topic(cluster, "consume")
    peer_topic = None
    rounds: list[dict] = []
    try:
        rafka_produce_per_record(cluster, topic, args.records, value)
        if broker is not None:
            peer_topic = _peer_topic(broker.bootstrap, "consume")
            peer_produce(broker.bootstrap, peer_topic, args.records, args.value_size)
        for i in range(args.rounds):
            r = {
                "rafka": rafka_consume_per_record(cluster, topic, args.records),
                "rafka_bulk": rafka_consume_bulk(cluster, topic, args.records),
            }
            if peer_topic is not None:
                r["peer"] = peer_consume(broker.bootstrap, peer_topic, args.records,
                                         args.value_size)  # fmt: skip
            rounds.append(r)
            print(f"consume round {i + 1}: {_round_line(r)}", file=sys.stderr)
    finally:
        _delete(cluster, [topic])
        if peer_topic is not None:
            peer.delete_topic(broker.bootstrap, peer_topic)
    summary = _summarise(rounds)
    report = {"records": args.records, "value_size": args.value_size, "partitions": 1,
              "from": "the beginning, a fresh consumer per round", "rounds": rounds,
              "summary": summary}  # fmt: skip
    print(_render("consume", report))
    best = _best(summary)
    rows = [
        row("per record (poll)", "records/s", best("rafka.consume_records_per_s"),
            peer=best("peer.consume_records_per_s")),
        row("bulk (poll_columns)", "records/s", best("rafka_bulk.consume_records_per_s"),
            peer=best("peer.consume_records_per_s")),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def _round_line(r: dict[str, dict]) -> str:
    return ", ".join(f"{side} {metric.replace('_records_per_s', '')} {value:,.0f}/s"
                     for side, figures in r.items() for metric, value in figures.items())


def _summarise(rounds: list[dict]) -> dict:
    out: dict = {}
    for side in rounds[0]:
        for metric in rounds[0][side]:
            values = [r[side][metric] for r in rounds]
            out[f"{side}.{metric}"] = {"best": max(values), "median": statistics.median(values)}
    return out


def _best(summary: dict):
    def best(key: str) -> float | None:
        return summary.get(key, {}).get("best")

    return best


def _render(what: str, report: dict) -> str:
    best = _best(report["summary"])
    lines = [f"\n{what}: {report['records']:,} records of {report['value_size']} bytes, one "
             f"partition (best of {len(report['rounds'])} rounds)",
             f"{'path':<34}{'records/s':>14}{'vs peer':>10}"]  # fmt: skip
    peer_key = f"peer.{what}_records_per_s"
    for side, label in (("rafka", "per record"), ("rafka_bulk", "bulk"), ("peer", "peer")):
        value = best(f"{side}.{what}_records_per_s")
        if value is None:
            continue
        ratio = f"{value / best(peer_key):.2f}x" if side != "peer" and best(peer_key) else ""
        lines.append(f"{label:<34}{value:>14,.0f}{ratio:>10}")
    if report.get("profile"):
        lines.append("where the per-record time goes:")
        for key, value in report["profile"].items():
            lines.append(f"  {key:<34}{value:>10.3f}")
    return "\n".join(lines)
