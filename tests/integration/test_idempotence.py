"""Idempotent producers against real replicas: a record that can never be written fails
alone, and every acknowledged record is in the log exactly once, at its acknowledged offset,
in send order."""

from __future__ import annotations

import time

from rafka import TopicPartition
from rafka.errors import RecordTooLarge

PRODUCERS = 20
SMALL_PER_PRODUCER = 100


def read_partitions(cluster, topic: str, partitions: int) -> list:
    """Every record of ``topic`` up to the end offsets seen now."""
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    out: list = []
    deadline = time.monotonic() + 60
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        assert time.monotonic() < deadline, f"read {len(out)} records; positions short of {ends}"
        out.extend(consumer.poll(timeout_ms=500))
    consumer.close()
    return out


def test_a_record_too_large_fails_alone_and_every_acknowledged_record_is_written_once(
    cluster, make_topic
):
    """Twenty fresh idempotent producers each send a record over max.message.bytes, then
    100 small ones: only the large records fail, and each small one is acknowledged and
    found exactly once at its offset, in its producer's send order."""
    partitions = 2
    topic = make_topic(partitions=partitions, config={"max.message.bytes": 1000})
    producers = [
        cluster.producer(
            acks="all", enable_idempotence=True, linger_ms=0, max_in_flight=5,
            **({"batch_size": 16} if i % 2 else {}),
        )  # fmt: skip
        for i in range(PRODUCERS)
    ]
    large = []
    small = []
    for i, producer in enumerate(producers):
        large.append(producer.send(topic, value=b"large-%02d-" % i + bytes(2000)))
        for j in range(SMALL_PER_PRODUCER):
            value = b"small-%02d-%03d" % (i, j)
            small.append((value, producer.send(topic, value=value)))
    for producer in producers:
        producer.close(timeout=120)

    assert all(isinstance(f.exception(timeout=0), RecordTooLarge) for f in large)
    failed = {value: f.exception(timeout=0) for value, f in small if f.exception(timeout=0)}
    acked = {value: f.result(timeout=0) for value, f in small if value not in failed}

    records = read_partitions(cluster, topic, partitions)
    at = {(r.partition, r.offset): r.value for r in records}
    missing = [v for v, meta in acked.items() if at.get((meta.partition, meta.offset)) != v]
    written = [r.value for r in records]
    duplicated = {v for v in written if written.count(v) > 1}
    assert (len(failed), len(missing), len(duplicated)) == (0, 0, 0), (
        f"{len(failed)} small records failed (first: {next(iter(failed.items()), None)}); "
        f"{len(missing)} of {len(acked)} acknowledged records are not at their offset; "
        f"{len(duplicated)} written more than once"
    )
    assert sorted(written) == sorted(acked)
    for i in range(PRODUCERS):
        for p in range(partitions):
            mine = [r.value for r in sorted(records, key=lambda r: r.offset)
                    if r.partition == p and r.value.startswith(b"small-%02d-" % i)]  # fmt: skip
            assert mine == sorted(mine), f"producer {i} partition {p} out of send order"
