"""rafka's metrics as Ray's Prometheus endpoint serves them: after producing and consuming a
known number of records, the counters, histograms and gauges scraped from the local node's
metrics agent say so. Ray exports each process's metrics every
``metrics_report_interval_ms`` (1 s in these tests), so every check waits for its value
with a deadline; nothing is timed."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

from rafka import TopicPartition

RECORDS = 600
VALUE_SIZE = 100
PARTITIONS = 2
DEADLINE_S = 60.0

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape() -> list[tuple[str, dict[str, str], float]]:
    """Every sample of this node's Prometheus endpoint as (name, labels, value)."""
    import ray

    port = ray._private.worker._global_node.metrics_export_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return samples


def select(samples, name: str, **labels: str) -> list[float]:
    """Values of the samples called ``name`` whose labels include ``labels`` (one per Ray
    worker process and tag set)."""
    return [
        value for n, found, value in samples
        if n == name and all(found.get(k) == v for k, v in labels.items())
    ]  # fmt: skip


def wait_for_metrics(check, what: str) -> None:
    """Scrape until ``check(samples)`` returns None (all good) or the deadline passes; then
    fail with the last complaint ``check`` returned."""
    deadline = time.monotonic() + DEADLINE_S
    complaint = "nothing scraped yet"
    while time.monotonic() < deadline:
        try:
            complaint = check(scrape())
        except OSError as e:  # the metrics agent is still starting
            complaint = f"scrape failed: {e!r}"
        if complaint is None:
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: {complaint}")


def test_traffic_and_group_metrics_reach_prometheus(cluster, make_topic):
    topic = make_topic(partitions=PARTITIONS)
    group = f"metrics-{uuid.uuid4().hex[:8]}"
    producer = cluster.producer(linger_ms=5)
    for i in range(RECORDS):
        producer.send(topic, value=bytes([i % 251]) * VALUE_SIZE, partition=i % PARTITIONS)
    producer.close()

    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)  # fmt: skip
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + DEADLINE_S
    while read < RECORDS and time.monotonic() < deadline:
        read += len(consumer.poll(timeout_ms=1000))
    assert read == RECORDS
    consumer.commit()
    committed = [consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)]
    assert sum(c.offset for c in committed) == RECORDS
    consumer.close()

    def traffic(samples):
        records_in = sum(select(samples, "ray_rafka_records_in_total", topic=topic))
        if records_in != RECORDS:
            return f"records in {records_in}, expected {RECORDS}"
        bytes_in = sum(select(samples, "ray_rafka_bytes_in_total", topic=topic))
        if bytes_in < RECORDS * VALUE_SIZE:
            return f"bytes in {bytes_in} < {RECORDS * VALUE_SIZE}"
        records_out = sum(
            select(samples, "ray_rafka_records_out_total", topic=topic, kind="consumer")
        )
        if records_out < RECORDS:
            return f"records out to consumers {records_out} < {RECORDS}"
        bytes_out = sum(select(samples, "ray_rafka_bytes_out_total", topic=topic, kind="consumer"))
        if bytes_out < RECORDS * VALUE_SIZE:
            return f"bytes out to consumers {bytes_out} < {RECORDS * VALUE_SIZE}"
        produces = sum(select(samples, "ray_rafka_produce_latency_ms_count", topic=topic))
        fetches = sum(
            select(samples, "ray_rafka_fetch_latency_ms_count", topic=topic, kind="consumer")
        )
        if produces <= 0 or fetches <= 0:
            return f"latency histogram counts: produce {produces}, fetch {fetches}"
        sizes = select(samples, "ray_rafka_log_size_bytes", topic=topic)
        if len(sizes) < PARTITIONS or sum(sizes) < RECORDS * VALUE_SIZE:
            return f"log sizes {sizes}"
        under = select(samples, "ray_rafka_under_replicated_partitions", topic=topic)
        if not under or any(under):
            return f"under-replicated partitions {under}"
        return None

    def group_metrics(samples):
        lags = {
            labels["partition"]: value for name, labels, value in samples
            if name == "ray_rafka_consumer_lag" and labels.get("group") == group
            and labels.get("topic") == topic
        }  # fmt: skip
        if sorted(lags) != [str(p) for p in range(PARTITIONS)] or any(lags.values()):
            return f"lag gauges {lags}, expected 0 on every partition"
        rebalances = sum(select(samples, "ray_rafka_group_rebalances_total", group=group))
        if rebalances < 1:
            return f"rebalances {rebalances}"
        return None

    wait_for_metrics(traffic, f"traffic metrics of {topic}")
    wait_for_metrics(group_metrics, f"metrics of group {group}")
