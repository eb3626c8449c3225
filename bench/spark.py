"""Spark reading a topic: records per second read from rafka into Spark and aggregated, next
to the same Spark session reading the same rows from a local Parquet file, in one run.

Run ``python -m bench spark [--spark-records 2000000] [--spark-partitions 2]
[--spark-keys 1000] [--spark-executors 1] [--spark-executor-cores 1] [--spark-repeats 3]``:

1. An embedded rafka (one Ray node, one disk) gets a topic of ``--spark-partitions``
   partitions and ``--spark-records`` records with 100-byte random values and keys
   ``key-000000`` .. (``--spark-keys`` distinct, so records go to partitions by key), sent
   with ``Producer.send_batch`` (acks=1) and flushed. Not timed by the figures; its rate is
   printed.
2. One Spark session through RayDP (``rafka.clients.spark.start_spark``) with
   ``--spark-executors`` executors of ``--spark-executor-cores`` cores.
3. The same rows (all columns of Spark's Kafka-source schema, taken from a snapshot of the
   topic) are written with pyarrow to one local Parquet file (snappy, pyarrow's default
   row groups). Not timed.
4. ``--spark-repeats`` rounds, alternating the two sources so both see the same machine
   state. Each round times, wall clock, the read plus an aggregation that touches every row:
   ``groupBy(key).agg(count(*), sum(length(value)))`` collected on the driver.
     rafka    ``read_topic(spark, cluster, topic)`` (the replicas make the Arrow blocks in
              Ray's object store) + the Spark job; then ``release(df)``, not timed.
     parquet  ``spark.read.parquet(path)`` (reads the footer) + the Spark job. The file is
              in the page cache after the first round, as rafka's log segments are.
   The figure is records / best round's seconds; the JSON keeps every round, and for rafka
   the part of each round spent in ``read_topic``.

Both aggregations must agree, key by key, with each other and with what was produced.
Results are printed and saved to bench/results/spark.json with the machine by the harness
(``python -m bench spark``), which shares one embedded rafka between its workloads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

VALUE_BYTES = 100
EXECUTOR_MEMORY = "1g"
#: Records per send_batch call: bounds the producer's memory, not its speed.
PRODUCE_CHUNK = 500_000


TINY = {"spark_records": 20_000, "spark_keys": 100, "spark_repeats": 1}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--spark-records", type=int, default=2_000_000,
                       help="records read into Spark (default 2000000)")
    group.add_argument("--spark-partitions", type=int, default=2,
                       help="partitions of the topic (default 2)")
    group.add_argument("--spark-keys", type=int, default=1000,
                       help="distinct keys, the groups of the aggregation (default 1000)")
    group.add_argument("--spark-executors", type=int, default=1,
                       help="Spark executors, RayDP actors (default 1)")
    group.add_argument("--spark-executor-cores", type=int, default=1,
                       help="cores per Spark executor (default 1)")
    group.add_argument("--spark-repeats", type=int, default=3,
                       help="rounds per source, best one counts (default 3)")  # fmt: skip


# -- the data ----------------------------------------------------------------------------------


def key_column(records: int, keys: int):
    """``records`` keys cycling through ``keys`` distinct ones, as a pyarrow binary array."""
    import numpy as np
    import pyarrow as pa

    names = pa.array([f"key-{k:06d}".encode() for k in range(keys)], pa.binary())
    return names.take(pa.array(np.arange(records, dtype=np.int64) % keys))


def produce(cluster, topic: str, records: int, keys: int) -> dict[str, float]:
    """Send ``records`` keyed records of VALUE_BYTES random bytes with ``send_batch`` and
    flush. Answers the seconds taken and records/s (value generation not counted)."""
    import numpy as np

    rng = np.random.default_rng(0)
    key_col = key_column(records, keys)
    producer = cluster.producer(acks=1, linger_ms=5)
    seconds = 0.0
    try:
        for start in range(0, records, PRODUCE_CHUNK):
            count = min(PRODUCE_CHUNK, records - start)
            values = rng.integers(0, 256, (count, VALUE_BYTES), dtype=np.uint8)
            began = time.perf_counter()
            producer.send_batch(topic, values, keys=key_col.slice(start, count)).result()
            seconds += time.perf_counter() - began
        began = time.perf_counter()
        producer.flush()
        seconds += time.perf_counter() - began
    finally:
        producer.close()
    return {"seconds": seconds, "records_per_s": records / seconds}


def write_parquet(cluster, topic: str, path: Path) -> int:
    """The topic's rows, as a Spark read sees them (Kafka-source schema), written to one
    Parquet file at ``path``. Answers the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from rafka.clients.arrow_blocks import from_ipc_stream
    from rafka.clients.topic_snapshot import snapshot_topic

    # The same snapshot a Spark read makes, so the file holds exactly the rows rafka serves.
    snapshot = snapshot_topic(cluster, topic)
    try:
        table = pa.concat_tables([from_ipc_stream(ray.get(ref)) for ref in snapshot.refs])
    finally:
        snapshot.release()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))
    return table.num_rows


# -- the measurement ---------------------------------------------------------------------------


def aggregate(df) -> dict[bytes, tuple[int, int]]:
    """Count and value bytes per key of ``df``, computed by Spark and collected."""
    from pyspark.sql import functions as F

    rows = df.groupBy("key").agg(
        F.count(F.lit(1)).alias("records"), F.sum(F.length("value")).alias("value_bytes")
    ).collect()
    return {bytes(r["key"]): (r["records"], r["value_bytes"]) for r in rows}


def time_rafka(spark, cluster, topic: str) -> tuple[dict[str, float], dict]:
    """One round of read_topic + aggregation; answers (seconds, result)."""
    from rafka.clients.spark import read_topic, release

    began = time.perf_counter()
    df = read_topic(spark, cluster, topic)
    read = time.perf_counter()
    try:
        result = aggregate(df)
        done = time.perf_counter()
    finally:
        release(df)
    return {"seconds": done - began, "read_topic_s": read - began}, result


def time_parquet(spark, path: Path) -> tuple[dict[str, float], dict]:
    """One round of spark.read.parquet + aggregation; answers (seconds, result)."""
    began = time.perf_counter()
    df = spark.read.parquet(path.as_uri())
    result = aggregate(df)
    return {"seconds": time.perf_counter() - began}, result


def expected(records: int, keys: int) -> dict[bytes, tuple[int, int]]:
    """What both aggregations must find: key_column's records per key, VALUE_BYTES each."""
    out = {}
    for k in range(min(keys, records)):
        count = records // keys + (1 if k < records % keys else 0)
        out[f"key-{k:06d}".encode()] = (count, count * VALUE_BYTES)
    return out


def check(name: str, got: dict, want: dict) -> None:
    if got != want:
        wrong = [k for k in want.keys() | got.keys() if got.get(k) != want.get(k)]
        sample = sorted(wrong)[:3]
        raise RuntimeError(
            f"{name}'s aggregation disagrees on {len(wrong)} keys, e.g. "
            + ", ".join(f"{k!r}: {got.get(k)} (expected {want.get(k)})" for k in sample)
        )


# -- the run -----------------------------------------------------------------------------------


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``spark`` workload: answers rows for the summary and the full report."""
    from bench.harness import row
    from rafka.clients.spark import start_spark, stop_spark

    records, keys = args.spark_records, args.spark_keys
    if records < 1 or keys < 1 or args.spark_repeats < 1 or args.spark_partitions < 1:
        raise SystemExit("--spark-records, --spark-keys, --spark-partitions and "
                         "--spark-repeats must be >= 1")  # fmt: skip
    parquet_dir = ctx.data_dir / "spark-parquet"
    parquet_path = parquet_dir / "records.parquet"
    shutil.rmtree(parquet_dir, ignore_errors=True)
    want = expected(records, keys)
    report: dict[str, Any] = {
        "command": reproduce_command(args),
        "records": records, "value_bytes": VALUE_BYTES, "keys": keys,
        "partitions": args.spark_partitions, "executors": args.spark_executors,
        "executor_cores": args.spark_executor_cores, "executor_memory": EXECUTOR_MEMORY,
        "repeats": args.spark_repeats,
        "aggregation": "groupBy(key).agg(count(*), sum(length(value))).collect()",
    }  # fmt: skip
    spark = None
    cluster = ctx.embedded()
    topic = f"spark-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    admin.create_topic(topic, partitions=args.spark_partitions)
    try:
        report["produce"] = produce(cluster, topic, records, keys)
        print(f"produced {records:,} records with send_batch: "
              f"{report['produce']['records_per_s']:,.0f} records/s", file=sys.stderr)  # fmt: skip

        began = time.perf_counter()
        spark = start_spark("rafka-bench-spark", args.spark_executors,
                            args.spark_executor_cores, EXECUTOR_MEMORY)  # fmt: skip
        report["spark_start_s"] = time.perf_counter() - began
        report["environment"] = environment(spark)

        written = write_parquet(cluster, topic, parquet_path)
        if written != records:
            raise RuntimeError(f"the topic holds {written} records, {records} were produced")
        report["parquet_bytes"] = parquet_path.stat().st_size

        rounds: list[dict[str, Any]] = []
        for i in range(args.spark_repeats):
            rafka_round, rafka_result = time_rafka(spark, cluster, topic)
            check("rafka", rafka_result, want)
            parquet_round, parquet_result = time_parquet(spark, parquet_path)
            check("parquet", parquet_result, want)
            rounds.append({"rafka": rafka_round, "parquet": parquet_round})
            print(f"round {i + 1}: " + json.dumps(rounds[-1]), file=sys.stderr)
        report["rounds"] = rounds
    finally:
        try:
            if spark is not None:
                stop_spark()
        finally:
            admin.delete_topic(topic)
            shutil.rmtree(parquet_dir, ignore_errors=True)
    report["summary"] = summary = summarise(rounds, records)
    print(render(report))
    rows = [row("read + aggregate", "records/s", summary["rafka"]["records_per_s"],
                baseline=summary["parquet"]["records_per_s"], baseline_label="parquet")]
    return {"rows": rows, "report": report}


def summarise(rounds: list[dict[str, Any]], records: int) -> dict[str, Any]:
    """Per source: best and median seconds and records/s; the ratio rafka/parquet of the
    best records/s (above 1: rafka faster)."""
    out: dict[str, Any] = {}
    for source in ("rafka", "parquet"):
        seconds = [r[source]["seconds"] for r in rounds]
        out[source] = {
            "best_s": min(seconds), "median_s": statistics.median(seconds),
            "records_per_s": records / min(seconds),
            "median_records_per_s": records / statistics.median(seconds),
        }  # fmt: skip
    best = min(rounds, key=lambda r: r["rafka"]["seconds"])["rafka"]
    out["rafka"]["best_read_topic_s"] = best["read_topic_s"]
    out["ratio"] = out["rafka"]["records_per_s"] / out["parquet"]["records_per_s"]
    return out


def reproduce_command(args: argparse.Namespace) -> str:
    return shlex.join([
        "python", "-m", "bench", "spark", "--spark-records", str(args.spark_records),
        "--spark-partitions", str(args.spark_partitions), "--spark-keys", str(args.spark_keys),
        "--spark-executors", str(args.spark_executors),
        "--spark-executor-cores", str(args.spark_executor_cores),
        "--spark-repeats", str(args.spark_repeats),
    ])  # fmt: skip


def environment(spark) -> dict[str, Any]:
    """The versions that matter here (the harness adds the machine's description)."""
    import pyarrow
    import pyspark
    import ray
    import raydp

    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version"),
        "spark": pyspark.__version__,
        "raydp": getattr(raydp, "__version__", None),
        "ray": ray.__version__,
        "pyarrow": pyarrow.__version__,
    }


# -- the table ---------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    s = report["summary"]
    env = report["environment"]

    def rounds_of(source: str) -> str:
        return " / ".join(f"{r[source]['seconds']:.2f}" for r in report["rounds"])

    lines = [
        f"\nSpark read + aggregate: {report['records']:,} records of {report['value_bytes']} "
        f"bytes, {report['keys']:,} keys, {report['partitions']} partitions; Spark "
        f"{env['spark']} via RayDP, {report['executors']} executor(s) x "
        f"{report['executor_cores']} core(s), {env['cpus']} CPUs; best of {report['repeats']}",
        f"aggregation: {report['aggregation']}",
        f"{'source':<40}{'records/s':>12}{'best s':>9}   rounds (s)",
        f"{'rafka: read_topic + job':<40}{s['rafka']['records_per_s']:>12,.0f}"
        f"{s['rafka']['best_s']:>9.2f}   {rounds_of('rafka')}",
        f"{'  of which read_topic (blocks made)':<40}{'':>12}"
        f"{s['rafka']['best_read_topic_s']:>9.2f}",
        f"{'parquet: spark.read.parquet + job':<40}{s['parquet']['records_per_s']:>12,.0f}"
        f"{s['parquet']['best_s']:>9.2f}   {rounds_of('parquet')}",
        f"ratio rafka/parquet: {s['ratio']:.2f}x (above 1: rafka faster); parquet file "
        f"{report['parquet_bytes'] / 1e6:,.0f} MB, snappy, local, page-cached",
        f"not timed: produce (send_batch, acks=1) {report['produce']['records_per_s']:,.0f} "
        f"records/s; Spark start {report['spark_start_s']:.1f} s",
        f"reproduce: {report['command']}",
    ]  # fmt: skip
    return "\n".join(lines)
