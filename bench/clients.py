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
say where the time goes. Results: bench/results/clients.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from bench.embedded import start_embedded

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "clients.json"
DATA_DIR = Path(__file__).resolve().parent.parent / "bench-data" / "clients"
NAMESPACE = "rafka-bench"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--records", type=int, default=1_000_000, help="records per round")
    group.add_argument("--value-size", type=int, default=100, help="bytes per value")
    group.add_argument("--rounds", type=int, default=3, help="rounds (rafka and peer each)")
    group.add_argument("--no-peer", action="store_true", help="skip the Tansu/librdkafka peer")


def _start_rafka():
    return start_embedded(DATA_DIR, NAMESPACE)


def _fresh_topic(cluster, name: str) -> str:
    admin = cluster.admin()
    if name in admin.list_topics():
        admin.delete_topic(name)
    admin.create_topic(name, partitions=1)
    return name


def rafka_per_record(cluster, topic: str, count: int, value: bytes) -> dict:
    from rafka import TopicPartition

    producer = cluster.producer(acks=1, linger_ms=5)
    started = time.perf_counter()
    send = producer.send
    for _ in range(count):
        send(topic, value)
    sent = time.perf_counter()
    producer.flush()
    produced = time.perf_counter()
    producer.close()

    consumer = cluster.consumer(
        auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20, max_poll_records=50_000
    )
    consumer.assign([TopicPartition(topic, 0)])
    received = 0
    began = time.perf_counter()
    while received < count:
        received += len(consumer.poll(timeout_ms=5000))
    consumed = time.perf_counter()
    consumer.close()
    return {
        "produce_records_per_s": count / (produced - started),
        "send_loop_records_per_s": count / (sent - started),
        "consume_records_per_s": count / (consumed - began),
    }


def rafka_bulk(cluster, topic: str, count: int, value: bytes) -> dict:
    import pyarrow as pa

    from rafka import TopicPartition

    column = pa.array([value] * count, pa.binary())
    producer = cluster.producer(acks=1, linger_ms=5)
    started = time.perf_counter()
    producer.send_batch(topic, column).result()
    produced = time.perf_counter()
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    consumer.assign([TopicPartition(topic, 0)])
    received = 0
    began = time.perf_counter()
    while received < count:
        received += consumer.poll_columns(timeout_ms=5000).num_rows
    consumed = time.perf_counter()
    consumer.close()
    return {
        "produce_records_per_s": count / (produced - started),
        "consume_records_per_s": count / (consumed - began),
    }


def profile_pieces(cluster, topic: str, value: bytes) -> dict:
    """Cost of each piece of the per-record path, measured alone (µs per record, or ms per
    batch of one default-sized batch of 100-byte records)."""
    from itertools import repeat

    import numpy as np

    from rafka.storage import record_batch as rb
    from rafka.types import Record

    per_batch = (512 * 1024) // (len(value) + 8)
    values = [value] * per_batch
    out: dict[str, float] = {}

    producer = cluster.producer(acks=1, linger_ms=1000, batch_size=1 << 30,
                                buffer_memory=1 << 31, max_request_size=1 << 30)  # fmt: skip
    n = 200_000
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


def run(args: argparse.Namespace) -> None:
    value = os.urandom(args.value_size)
    cluster = _start_rafka()
    rounds: list[dict] = []
    peer_broker = None
    if not args.no_peer:
        from bench import peer

        peer_broker = peer.TansuBroker().__enter__()
    try:
        for i in range(args.rounds):
            row: dict = {}
            topic = _fresh_topic(cluster, f"bench-{i}")
            row["rafka"] = rafka_per_record(cluster, topic, args.records, value)
            topic = _fresh_topic(cluster, f"bench-bulk-{i}")
            row["rafka_bulk"] = rafka_bulk(cluster, topic, args.records, value)
            if peer_broker is not None:
                peer_topic = f"bench-{i}"
                peer.create_topic(peer_broker.bootstrap, peer_topic, 1)
                produced = peer.produce(peer_broker.bootstrap, peer_topic, args.records,
                                        args.value_size, acks=1, idempotent=False)  # fmt: skip
                consumed = peer.consume(peer_broker.bootstrap, peer_topic, args.records)
                row["peer"] = {
                    "produce_records_per_s": produced["records_per_s"],
                    "consume_records_per_s": consumed["records_per_s"],
                }
            rounds.append(row)
            print(f"round {i + 1}: " + json.dumps(row))
        profile = profile_pieces(cluster, _fresh_topic(cluster, "bench-profile"), value)
    finally:
        if peer_broker is not None:
            peer_broker.__exit__(None, None, None)
        cluster.shutdown()

    summary = _summarise(rounds)
    _print(summary, profile, args)
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(
        {"records": args.records, "value_size": args.value_size, "rounds": rounds,
         "summary": summary, "profile": profile}, indent=2,
    ))  # fmt: skip
    print(f"results: {RESULTS_PATH}")


def _summarise(rounds: list[dict]) -> dict:
    out: dict = {}
    for side in rounds[0]:
        for metric in rounds[0][side]:
            values = [r[side][metric] for r in rounds]
            out[f"{side}.{metric}"] = {"best": max(values), "median": statistics.median(values)}
    return out


def _print(summary: dict, profile: dict, args: argparse.Namespace) -> None:
    def best(key: str) -> float | None:
        return summary.get(key, {}).get("best")

    print(f"\n{args.records:,} records of {args.value_size} bytes, one partition, acks=1 "
          f"(best of {args.rounds})")  # fmt: skip
    print(f"{'path':<34}{'records/s':>14}{'vs peer':>10}")
    lines = [
        ("produce, per record (send)", "rafka.produce_records_per_s", "peer.produce_records_per_s"),
        ("consume, per record (poll)", "rafka.consume_records_per_s", "peer.consume_records_per_s"),
        ("produce, bulk (send_batch)", "rafka_bulk.produce_records_per_s",
         "peer.produce_records_per_s"),
        ("consume, bulk (poll_columns)", "rafka_bulk.consume_records_per_s",
         "peer.consume_records_per_s"),
        ("peer produce (confluent-kafka)", "peer.produce_records_per_s", None),
        ("peer consume (confluent-kafka)", "peer.consume_records_per_s", None),
    ]  # fmt: skip
    for label, key, peer_key in lines:
        value = best(key)
        if value is None:
            continue
        ratio = ""
        if peer_key and best(peer_key):
            ratio = f"{value / best(peer_key):.2f}x"
        print(f"{label:<34}{value:>14,.0f}{ratio:>10}")
    print("\nwhere the per-record time goes:")
    for key, value in profile.items():
        print(f"  {key:<34}{value:>10.3f}")
