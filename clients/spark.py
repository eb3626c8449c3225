"""Spark on the rafka cluster through RayDP: a session helper, batch reads of a topic in
Spark's Kafka-source schema, write-back, and micro-batch streams (``stream_topic``).

Importing this module needs neither pyspark nor raydp; using it does.

A read fixes each partition's range and has a replica of each partition put its records in
Ray's object store as Arrow blocks (``rafka.clients.topic_snapshot``). Spark's executors,
RayDP actors on the same cluster, read those blocks from the object store and are scheduled
on the host of each block's owner, which is the replica's node. The driver holds references
only. The DataFrame reads the same blocks for every action (a snapshot), so the blocks live
until ``release(df)`` or ``stop_spark()``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable

from rafka.clients.topic_snapshot import (
    DEFAULT_RECORDS_PER_BLOCK,
    TopicSnapshot,
    snapshot_topic,
)

log = logging.getLogger(__name__)

#: Java 17 closes these packages to the reflection Spark and RayDP use; without them a Spark
#: executor started by RayDP dies when it touches Ray's object store.
_OPENED_PACKAGES = (
    "java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math",
    "java.text", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
    "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar",
)  # fmt: skip
JAVA_OPTIONS = "-XX:+IgnoreUnrecognizedVMOptions " + " ".join(
    f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in _OPENED_PACKAGES
)
_JAVA_OPTION_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)

_snapshots: dict[int, tuple[Any, TopicSnapshot]] = {}  # id(DataFrame) -> (DataFrame, blocks)
_snapshots_lock = threading.Lock()


def spark_configs(
    configs: dict[str, str] | None = None, shuffle_partitions: int | None = None
) -> dict[str, str]:
    """The Spark settings rafka's session needs on Java 17, merged with ``configs`` (extra
    Java options given there are kept, after rafka's)."""
    merged = dict(configs or {})
    for key in _JAVA_OPTION_KEYS:
        extra = merged.get(key, "")
        merged[key] = f"{JAVA_OPTIONS} {extra}".strip()
    if shuffle_partitions is not None:
        merged.setdefault("spark.sql.shuffle.partitions", str(shuffle_partitions))
    # Spark's TimestampType is microseconds since the epoch; show them in UTC unless asked.
    merged.setdefault("spark.sql.session.timeZone", "UTC")
    merged.setdefault("spark.ui.showConsoleProgress", "false")
    return merged


def start_spark(
    app_name: str = "rafka",
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1g",
    configs: dict[str, str] | None = None,
):
    """Start a Spark session whose executors are RayDP actors on this process's Ray cluster
    (connect to rafka first, so Ray is up). Sets what Java 17 and PySpark need (the
    ``--add-opens`` options, ``PYSPARK_PYTHON`` to this interpreter) and a small
    ``spark.sql.shuffle.partitions`` (twice the executor cores). Takes about 10 s: start one
    session and share it. Stop it with ``stop_spark``."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError(
            "Ray is not initialized in this process: call rafka.connect() before start_spark"
        )
    if num_executors < 1 or executor_cores < 1:
        raise ValueError(
            f"num_executors and executor_cores must be >= 1, not {num_executors} and "
            f"{executor_cores}"
        )
    import raydp

    # The executors' Python workers must be this environment's interpreter (with rafka).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = raydp.init_spark(
        app_name,
        num_executors,
        executor_cores,
        executor_memory,
        configs=spark_configs(configs, shuffle_partitions=2 * num_executors * executor_cores),
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def stop_spark() -> None:
    """Stop the session ``start_spark`` made, releasing every read's blocks."""
    import raydp

    with _snapshots_lock:
        _snapshots.clear()
    raydp.stop_spark()


def read_topic(
    spark,
    cluster,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    isolation_level: str = "read_committed",
    max_records_per_partition: int = DEFAULT_RECORDS_PER_BLOCK,
    min_partitions: int | None = None,
):
    """``topic`` as a DataFrame in Spark's Kafka-source schema: key, value (binary), topic,
    partition, offset, timestamp, timestampType, headers (array of key/value structs, null
    for a record without headers).

    ``starting_offsets``/``ending_offsets``: 'earliest'/'latest', a dict {partition:
    offset} or Spark's JSON ('{"orders": {"0": 42, "1": -2}}', -2 earliest, -1 latest).
    'latest' is each partition's high watermark when the read starts, so a read while
    producers write stops at one consistent point. Each Spark partition is one range of one
    topic partition of at most ``max_records_per_partition`` records; ``min_partitions``
    splits further (as in Spark's Kafka source). Raises OffsetOutOfRange, ValueError or
    UnknownTopicOrPartition for a read that cannot be done, before anything is read."""
    snapshot = snapshot_topic(
        cluster, topic, starting_offsets, ending_offsets, isolation_level,
        max_records_per_partition, min_partitions or 1,
    )  # fmt: skip
    return snapshot_dataframe(spark, snapshot)


def snapshot_dataframe(spark, snapshot: TopicSnapshot):
    """A DataFrame over the blocks of ``snapshot`` (kept alive until ``release``)."""
    from pyspark.sql import DataFrame

    schema = kafka_source_schema()
    if not snapshot.blocks:
        df = spark.createDataFrame([], schema)
    else:
        import ray

        refs = snapshot.refs
        # Spark prefers, for each block, the host of the process that owns it: the replica.
        # (The owner address comes from Ray's core worker, as RayDP's own conversion gets it.)
        core_worker = ray._private.worker.global_worker.core_worker
        owners = [core_worker.get_owner_address(ref) for ref in refs]
        jvm = spark.sparkContext._jvm
        rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(
            spark._jsc, [ref.binary() for ref in refs], owners
        )
        reader = jvm.org.apache.spark.sql.raydp.ObjectStoreReader
        df = DataFrame(reader.RayDatasetToDataFrame(spark._jsparkSession, rdd, schema.json()),
                       spark)  # fmt: skip
    with _snapshots_lock:
        _snapshots[id(df)] = (df, snapshot)
    return df


def release(df) -> None:
    """Let Ray free the blocks behind ``df`` (a DataFrame ``read_topic`` returned). Any
    DataFrame derived from it can no longer be computed afterwards."""
    with _snapshots_lock:
        found = _snapshots.pop(id(df), None)
    if found is not None:
        found[1].release()


def kafka_source_schema():
    """Spark's Kafka-source schema as a pyspark StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from rafka.clients.arrow_blocks import KAFKA_SOURCE_SCHEMA

    return from_arrow_schema(KAFKA_SOURCE_SCHEMA)


def write_topic(df, cluster, topic: str, **producer_settings: Any) -> int:
    """Write the rows of ``df`` into ``topic`` from Spark's executors, each task with its
    own producer (``acks="all"`` and idempotence unless ``producer_settings`` say
    otherwise), and return the number of records written. Columns, as Spark's Kafka sink:
    ``value`` (binary or string, required), ``key`` (binary or string), ``partition``
    (int; null or absent: by key), ``headers`` (array of struct<key: string, value:
    binary>); others are ignored. A task whose records are not all acknowledged fails, and
    Spark retries it: at least once, like Spark's Kafka sink."""
    from rafka.clients import spark_writer

    return spark_writer.write(df, cluster, topic, producer_settings)


def stream_topic(
    spark,
    cluster,
    topic: str,
    group_id: str,
    fn: Callable[[Any, int], Any],
    *,
    starting_offsets: Any = "earliest",
    max_records_per_batch: int | None = None,
    trigger_interval_s: float = 1.0,
    isolation_level: str = "read_committed",
    max_records_per_partition: int = DEFAULT_RECORDS_PER_BLOCK,
    start: bool = True,
    sink_topic: str | None = None,
    producer_settings: dict[str, Any] | None = None,
):
    """A micro-batch stream of ``topic`` (Spark's ``foreachBatch``): each batch, from the
    offsets ``group_id`` committed up to the high watermark, is handed to ``fn(df,
    batch_id)``, and its end offsets are committed after ``fn`` returns. A group without
    offsets starts at ``starting_offsets``, resolved once and committed before the first
    batch ('latest': what arrives after the stream starts). See
    ``rafka.clients.spark_stream.TopicStream``; with ``start=False`` nothing runs until
    ``start()`` or ``process_available()``.

    With ``sink_topic``, ``fn`` returns each batch's output DataFrame (a value column; key,
    partition and headers optional) and the stream writes it to ``sink_topic`` exactly
    once: output and progress commit in one transaction (``spark_sink``), so after any
    failure and restart each input's output is there once for read_committed readers."""
    from rafka.clients.spark_sink import TransactionalSink
    from rafka.clients.spark_stream import TopicStream

    sink = None
    if sink_topic is not None:
        sink = TransactionalSink(cluster, sink_topic, group_id, producer_settings)
    stream = TopicStream(
        spark, cluster, topic, group_id, fn,
        starting_offsets=starting_offsets,
        max_records_per_batch=max_records_per_batch,
        trigger_interval_s=trigger_interval_s,
        isolation_level=isolation_level,
        max_records_per_partition=max_records_per_partition,
        sink=sink,
    )  # fmt: skip
    return stream.start() if start else stream
