"""Spark streams from 'latest' and writes of mixed rows, on the shared Ray cluster and Spark
session: a stream from 'latest' processes exactly the records produced after it started;
``write_topic`` of rows with null and non-null keys, with and without headers, puts each
keyed row on its murmur2 partition and keeps each Spark partition's rows in order."""

from __future__ import annotations

from rafka.actors.local_cluster import wait_for
from rafka.clients import spark as rspark
from rafka.clients.partitioner import default_partition
from rafka.types import TopicPartition


def _produce(cluster, topic: str, first: int, count: int, partitions: int) -> None:
    producer = cluster.producer(linger_ms=2)
    futures = [producer.send(topic, value=b"v-%d" % i, partition=i % partitions)
               for i in range(first, first + count)]  # fmt: skip
    producer.flush()
    for future in futures:
        future.result()
    producer.close()


def test_a_stream_from_latest_processes_only_records_produced_after_it_started(
    cluster, spark, make_topic
):
    topic = make_topic(partitions=2)
    group = f"latest-{topic}"
    _produce(cluster, topic, 0, 40, 2)
    seen: dict[int, list] = {}

    def sink(df, batch_id: int) -> None:
        seen[batch_id] = [bytes(r.value) for r in df.select("value").collect()]

    stream = rspark.stream_topic(spark, cluster, topic, group, sink,
                                 starting_offsets="latest", trigger_interval_s=0.1)  # fmt: skip
    admin = cluster.admin()
    try:
        # The stream has recorded where it starts: the end when it began.
        wait_for(lambda: len(admin.list_group_offsets(group)) == 2, 30, "the recorded start")
        started = {tp.partition: o.offset for tp, o in admin.list_group_offsets(group).items()}
        assert started == {0: 20, 1: 20}
        assert not seen
        _produce(cluster, topic, 40, 30, 2)
        wait_for(lambda: sum(len(v) for v in seen.values()) >= 30, 60, "the 30 new records")
    finally:
        stream.stop(30)
    assert stream.await_termination(5)
    assert sorted(seen) == list(range(len(seen)))  # batch ids from 0, each once
    got = sorted(v for values in seen.values() for v in values)
    assert got == sorted(b"v-%d" % i for i in range(40, 70))
    committed = admin.list_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 35, 1: 35}
    assert committed[TopicPartition(topic, 0)].metadata.startswith("rafka-stream:")


def _row(part: int, i: int) -> tuple:
    """Row ``i`` of Spark partition ``part``: every 7th key null; headers on some rows of
    every other run of four rows (runs are the Arrow batches the writer sends)."""
    key = None if i % 7 == 3 else f"key-{(part * 31 + i) % 13}"
    with_headers = (i // 4) % 2 == 1 and i % 2 == 0
    headers = [("row", b"%d" % i), ("part", b"%d" % part)] if with_headers else None
    return (key, f"{part}:{i}".encode(), headers)


def test_write_topic_of_null_keys_and_mixed_headers_keeps_partitions_and_order(
    cluster, spark, make_topic
):
    from pyspark.sql.types import (
        ArrayType, BinaryType, StringType, StructField, StructType,
    )  # fmt: skip

    partitions, spark_partitions, rows_each = 3, 3, 40
    target = make_topic(partitions=partitions)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("headers", ArrayType(header)),
    ])  # fmt: skip
    rows = [_row(p, i) for p in range(spark_partitions) for i in range(rows_each)]
    rdd = spark.sparkContext.parallelize(rows, spark_partitions)
    df = spark.createDataFrame(rdd, schema)
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(conf)
    spark.conf.set(conf, "4")  # several Arrow batches per Spark partition, some with headers
    try:
        assert rspark.write_topic(df, cluster, target) == len(rows)
    finally:
        spark.conf.set(conf, before)

    back = rspark.read_topic(spark, cluster, target)
    got = back.select("key", "value", "partition", "offset", "headers").collect()
    rspark.release(back)
    assert len(got) == len(rows)
    expected = {value: (key, headers) for key, value, headers in rows}
    wrong_partition = []
    by_partition: dict[int, list[tuple[int, int, int]]] = {}
    for r in got:
        value = bytes(r.value)
        key, headers = expected[value]
        assert (None if r.key is None else bytes(r.key).decode()) == key, value
        assert (None if r.headers is None
                else [(h.key, bytes(h.value)) for h in r.headers]) == headers, value  # fmt: skip
        if key is not None and r.partition != default_partition(key.encode(), partitions):
            wrong_partition.append((value, r.partition))
        part, i = map(int, value.split(b":"))
        by_partition.setdefault(r.partition, []).append((r.offset, part, i))
    assert wrong_partition == [], "keyed rows off their murmur2 partition"
    for topic_partition, placed in by_partition.items():
        placed.sort()
        for part in range(spark_partitions):
            order = [i for _offset, p, i in placed if p == part]
            assert order == sorted(order), (topic_partition, part, order)
