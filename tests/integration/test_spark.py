"""Spark on the rafka cluster through RayDP: batch reads in Spark's Kafka-source schema,
write-back, and micro-batch streams that resume and replay. One Spark session for the
whole test session (the ``spark`` fixture)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from rafka import TopicPartition
from rafka.clients import spark as rspark
from rafka.clients.spark_stream import TopicStream
from rafka.errors import NonEmptyGroup, OffsetOutOfRange, UnknownTopicOrPartition
from tests.integration.script_report import run_script

LOCALITY_SCRIPT = os.path.join(os.path.dirname(__file__), "spark_locality_script.py")


def produce_records(cluster, topic: str, count: int, partitions: int, first: int = 0) -> dict:
    """Send ``count`` records round-robin over ``partitions`` (odd ones with headers);
    returns {(partition, offset): (key, value, headers, timestamp_ms)}."""
    producer = cluster.producer(linger_ms=2)
    futures = []
    for i in range(first, first + count):
        headers = [("n", b"%d" % i), ("parity", b"odd")] if i % 2 else None
        record = (b"k%d" % (i % 7), b"value-%d" % i, headers, 1_700_000_000_000 + i)
        futures.append((record, producer.send(
            topic, value=record[1], key=record[0], headers=headers,
            partition=i % partitions, timestamp_ms=record[3],
        )))  # fmt: skip
    producer.flush()
    sent = {}
    for record, future in futures:
        meta = future.result()
        sent[(meta.partition, meta.offset)] = record
    producer.close()
    return sent


def rows_by_position(df) -> dict:
    out = {}
    for row in df.collect():
        headers = _headers(row)
        ms = int(row.timestamp.timestamp() * 1000)
        out[(row.partition, row.offset)] = (bytes(row.key), bytes(row.value), headers, ms)
    return out


def test_read_gives_what_was_produced_in_the_kafka_source_schema(cluster, spark, make_topic):
    topic = make_topic(partitions=3)
    sent = produce_records(cluster, topic, 900, 3)
    df = rspark.read_topic(spark, cluster, topic, max_records_per_partition=100)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]  # fmt: skip
    assert df.rdd.getNumPartitions() == 9  # 300 records per partition, 100 per block
    assert rows_by_position(df) == sent
    assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}
    assert {r.timestampType for r in df.select("timestampType").distinct().collect()} == {0}
    rspark.release(df)


def test_offsets_given_per_partition_as_a_dict_or_spark_json_bound_the_read(
    cluster, spark, make_topic
):
    topic = make_topic(partitions=2)
    produce_records(cluster, topic, 200, 2)
    df = rspark.read_topic(spark, cluster, topic, starting_offsets={0: 10, 1: 90},
                           ending_offsets=json.dumps({topic: {"0": 20, "1": -1}}))  # fmt: skip
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(90, 100)]
    empty = rspark.read_topic(spark, cluster, topic, starting_offsets={0: 100, 1: 100})
    assert empty.count() == 0


def test_bad_reads_raise_typed_errors_before_reading(cluster, spark, make_topic):
    topic = make_topic(partitions=1)
    produce_records(cluster, topic, 10, 1)
    with pytest.raises(OffsetOutOfRange, match="past what is readable"):
        rspark.read_topic(spark, cluster, topic, ending_offsets={0: 11})
    with pytest.raises(OffsetOutOfRange, match="partitions \\[3\\]"):
        rspark.read_topic(spark, cluster, topic, starting_offsets={3: 0})
    with pytest.raises(ValueError, match="'latest' reads nothing"):
        rspark.read_topic(spark, cluster, topic, starting_offsets="latest")
    with pytest.raises(ValueError, match="isolation_level"):
        rspark.read_topic(spark, cluster, topic, isolation_level="dirty")
    with pytest.raises(UnknownTopicOrPartition):
        rspark.read_topic(spark, cluster, "no-such-topic-here")


def test_a_read_while_producers_write_stops_at_one_high_watermark_per_partition(
    cluster, spark, make_topic
):
    topic = make_topic(partitions=2)
    produce_records(cluster, topic, 400, 2)
    stop = threading.Event()

    def keep_producing():
        producer = cluster.producer(linger_ms=1)
        i = 0
        while not stop.is_set():
            producer.send(topic, value=b"live-%d" % i, partition=i % 2)
            i += 1
            if i % 200 == 0:
                producer.flush()
        producer.close()

    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        df = rspark.read_topic(spark, cluster, topic)
        first = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        again = df.count()  # a second action reads the same snapshot
    finally:
        stop.set()
        writer.join()
    ends = {}
    for partition, offset in first:
        ends[partition] = max(ends.get(partition, -1), offset + 1)
    # Every partition from 0 to its end with no gap: nothing past a high watermark, nothing
    # missing below it.
    assert first == [(p, o) for p in sorted(ends) for o in range(ends[p])]
    assert min(ends.values()) >= 200 and again == len(first)
    offsets = cluster.admin().partition_offsets(topic)
    assert all(ends[d["partition"]] <= d["high_watermark"] for d in offsets)


def test_write_back_round_trip_keeps_keys_values_partitions_and_headers(
    cluster, spark, make_topic
):
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, StringType, StructField, StructType,
    )  # fmt: skip

    target = make_topic(partitions=3)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()), StructField("headers", ArrayType(header)),
    ])  # fmt: skip
    rows = [(f"user-{i}", b"payload-%d" % i, i % 3, [("i", b"%d" % i)] if i % 4 == 0 else None)
            for i in range(120)]  # fmt: skip
    written = rspark.write_topic(spark.createDataFrame(rows, schema), cluster, target)
    assert written == 120
    back = rspark.read_topic(spark, cluster, target)
    got = {
        bytes(r.value): (bytes(r.key).decode(), r.partition, _headers(r))
        for r in back.collect()
    }
    assert got == {v: (k, p, h) for k, v, p, h in rows}
    # The bulk path (no headers, no partition column): partitioned by key like send().
    bulk = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(1000)], ["key", "value"])
    assert rspark.write_topic(bulk, cluster, target) == 1000
    assert rspark.read_topic(spark, cluster, target).count() == 1120


def _headers(row) -> list | None:
    return None if row.headers is None else [(h.key, bytes(h.value)) for h in row.headers]


def test_write_back_refuses_a_frame_without_a_value_or_with_a_wrong_type(
    cluster, spark, make_topic
):
    target = make_topic(partitions=1)
    with pytest.raises(TypeError, match="no 'value' column"):
        rspark.write_topic(spark.createDataFrame([(1,)], ["payload"]), cluster, target)
    with pytest.raises(TypeError, match="column 'value' is bigint"):
        rspark.write_topic(spark.createDataFrame([(1,)], ["value"]), cluster, target)
    with pytest.raises(UnknownTopicOrPartition):
        rspark.write_topic(spark.createDataFrame([("x",)], ["value"]), cluster, "missing-t")
    assert cluster.admin().partition_offsets(target)[0]["high_watermark"] == 0


def _collecting_sink(seen: dict):
    def sink(df, batch_id: int) -> None:
        seen[batch_id] = sorted(
            (r.partition, r.offset) for r in df.select("partition", "offset").collect()
        )

    return sink


def test_a_stream_resumes_from_its_committed_offsets_after_a_restart(
    cluster, spark, make_topic
):
    topic = make_topic(partitions=2)
    group = f"stream-{topic}"
    produce_records(cluster, topic, 500, 2)
    seen: dict = {}
    first = TopicStream(spark, cluster, topic, group, _collecting_sink(seen),
                        max_records_per_batch=200)  # fmt: skip
    assert first.process_available() == 3  # 200 + 200 + 100
    assert [len(seen[b]) for b in sorted(seen)] == [200, 200, 100]
    produce_records(cluster, topic, 300, 2, first=500)
    # A new stream object, as after a restart of the program: it carries on at batch 3.
    again = rspark.stream_topic(spark, cluster, topic, group, _collecting_sink(seen),
                                max_records_per_batch=200, trigger_interval_s=0.1)  # fmt: skip
    try:
        from rafka.actors.local_cluster import wait_for

        wait_for(lambda: sum(len(v) for v in seen.values()) >= 800, 120, "all 800 records")
    finally:
        again.stop()
    assert again.await_termination(5)
    assert sorted(seen) == list(range(len(seen))) and len(seen) >= 5
    everything = sorted(p for batch in seen.values() for p in batch)
    assert everything == sorted({(p, o) for p in (0, 1) for o in range(400)})
    committed = cluster.admin().list_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 400, 1: 400}
    assert cluster.admin().describe_group(group).state == "Empty"


def test_an_idempotent_sink_sees_each_record_once_when_a_batch_fails_and_is_replayed(
    cluster, spark, make_topic
):
    topic = make_topic(partitions=2)
    group = f"sink-{topic}"
    produce_records(cluster, topic, 300, 2)
    sink: dict = {}  # batch id -> records, replaced on a repeated batch id
    attempts: list = []

    def flaky(df, batch_id):
        _collecting_sink(sink)(df, batch_id)
        attempts.append(batch_id)
        if batch_id == 1 and attempts.count(1) == 1:
            raise RuntimeError("the sink's process died after writing batch 1")

    stream = TopicStream(spark, cluster, topic, group, flaky, max_records_per_batch=100)
    assert stream.run_once().batch_id == 0
    with pytest.raises(RuntimeError, match="died after writing batch 1"):
        stream.run_once()
    planned = list(sink[1])
    restarted = TopicStream(spark, cluster, topic, group, flaky, max_records_per_batch=100)
    replay = restarted.run_once()
    assert replay.batch_id == 1 and replay.replayed and sink[1] == planned
    assert restarted.process_available() == 1
    assert attempts == [0, 1, 1, 2]
    delivered = [p for batch in sink.values() for p in batch]
    assert sorted(delivered) == sorted(set(delivered)) == sorted(
        (p, o) for p in (0, 1) for o in range(150)
    )


def test_a_stream_refuses_a_group_that_has_live_members(cluster, spark, make_topic):
    topic = make_topic(partitions=1)
    group = f"busy-{topic}"
    produce_records(cluster, topic, 10, 1)
    member = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                              enable_auto_commit=False)
    member.subscribe([topic])
    try:
        from rafka.actors.local_cluster import wait_for

        wait_for(lambda: member.poll(timeout_ms=200) or member.assignment(), 30, "a member")
        stream = TopicStream(spark, cluster, topic, group, lambda df, b: None)
        with pytest.raises(NonEmptyGroup):
            stream.run_once()
    finally:
        member.close()
    assert cluster.admin().list_group_offsets(group).get(TopicPartition(topic, 0)) is None


@pytest.mark.slow
def test_blocks_are_made_and_owned_on_a_node_holding_a_replica(tmp_path):
    report = run_script(LOCALITY_SCRIPT, str(tmp_path / "data"))
    blocks = report["blocks"]
    assert sum(b["rows"] for b in blocks) == 3000 and len(blocks) >= 9
    for block in blocks:
        replicas = report["replica_disks"][str(block["partition"])]
        assert block["maker"] in replicas
        assert block["located"] == [block["maker"]], block


def test_a_replica_answers_produce_and_fetch_while_it_encodes_a_large_block(
    cluster, make_topic
):
    import pyarrow as pa
    import ray

    topic = make_topic(partitions=1)
    producer = cluster.producer()
    values = pa.array([b"x" * 100] * 400_000)
    producer.send_batch(topic, values, partition=0).result()
    meta = cluster.metadata.topic(topic)
    replica = cluster.metadata.replica(meta, 0)
    export = replica.export_block.remote(0, 400_000)
    # Sent after the export, answered before it: the encoding is off the event loop.
    fetch = replica.fetch.remote(0, 1024, 1, 0)
    sent = producer.send(topic, value=b"during the export", partition=0)
    ready, _ = ray.wait([export, fetch], num_returns=1, timeout=60)
    assert ready == [fetch] and ray.get(fetch)[0] == 0
    assert sent.result(timeout=60).offset == 400_000
    errno, _message, refs, rows = ray.get(export)
    assert errno == 0 and rows == 400_000 and len(refs) == 1
    producer.close()
