"""Clickstream -> Spark -> results topic: a streaming pipeline on one Ray cluster.

Producers write click events (JSON, keyed by user) into ``clicks``. A micro-batch stream
reads each new range of ``clicks`` into Spark, counts views per page and per minute of event
time, and writes the counts into ``page-views``, a compacted topic keyed by page, minute and
batch id: when a batch is repeated after a failure its counts replace the earlier attempt's,
so the totals stay exact. At the end the pipeline reads ``page-views`` back with Spark, adds
up the latest count of each key and checks the totals against what was produced.

    ./dev demo spark                      # or: python examples/clickstream.py --events 200000
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import Counter

PAGES = ("/", "/search", "/cart", "/checkout", "/item/1", "/item/2", "/item/3", "/help")
START_MS = 1_767_225_600_000  # 2026-01-01 00:00 UTC: event times are spread over minutes


def click_events(count: int, seed: int = 7):
    """``count`` click events: (user key, JSON value, page, minute of event time)."""
    rng = random.Random(seed)
    for i in range(count):
        user = f"user-{rng.randrange(5_000)}"
        page = rng.choice(PAGES)
        ts = START_MS + i * 60_000 * 10 // max(count, 1)  # ten minutes of events
        value = json.dumps({"user": user, "page": page, "ts": ts}).encode()
        yield user.encode(), value, page, ts // 60_000 * 60_000


def produce_clicks(cluster, topic: str, count: int) -> Counter:
    """Send the events; returns the true views per (page, minute start ms)."""
    truth: Counter = Counter()
    producer = cluster.producer(linger_ms=20, compression="lz4")
    for key, value, page, minute in click_events(count):
        producer.send(topic, value=value, key=key)
        truth[(page, minute)] += 1
    producer.close()
    return truth


def count_views(df, results_topic: str, cluster, batch_id: int) -> int:
    """One micro-batch: views per page and minute, written to ``results_topic``."""
    from pyspark.sql import functions as F

    from rafka.clients import spark as rspark

    event = F.from_json(F.col("value").cast("string"), "user STRING, page STRING, ts LONG")
    counts = (
        df.select(event.alias("e"))
        .select("e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("at"))
        .groupBy(F.window("at", "1 minute").alias("w"), "page")
        .count()
    )
    minute_ms = (F.col("w.start").cast("long") * 1000).cast("string")
    out = counts.select(
        F.concat_ws("|", "page", minute_ms, F.lit(str(batch_id))).alias("key"),
        F.to_json(F.struct("page", minute_ms.alias("minute"), "count")).alias("value"),
    )
    return rspark.write_topic(out, cluster, results_topic)


def read_totals(spark, cluster, results_topic: str) -> Counter:
    """Views per (page, minute): the latest count of each key, summed over batches."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from rafka.clients import spark as rspark

    df = rspark.read_topic(spark, cluster, results_topic)
    latest = (
        df.withColumn("n", F.row_number().over(
            Window.partitionBy("key").orderBy(F.col("offset").desc())))
        .where("n = 1")
        .select(F.from_json(F.col("value").cast("string"),
                            "page STRING, minute STRING, count LONG").alias("r"))
        .groupBy("r.page", "r.minute").agg(F.sum("r.count").alias("views"))
    )  # fmt: skip
    totals = Counter({(r.page, int(r.minute)): r.views for r in latest.collect()})
    rspark.release(df)
    return totals


def run(spark, cluster, events: int, prefix: str = "", max_records_per_batch: int = 50_000,
        trigger_interval_s: float = 1.0) -> dict:  # fmt: skip
    """The whole pipeline; returns a report with the true and computed views."""
    from rafka.clients import spark as rspark

    clicks, views = f"{prefix}clicks", f"{prefix}page-views"
    admin = cluster.admin()
    existing = set(admin.list_topics())
    if clicks not in existing:
        admin.create_topic(clicks, partitions=3)
    if views not in existing:
        admin.create_topic(views, partitions=2, config={"cleanup.policy": "compact"})
    group = f"{prefix}page-views-job"
    already = sum(d["high_watermark"] for d in admin.partition_offsets(clicks))
    started = time.perf_counter()
    truth: Counter = Counter()
    writer = threading.Thread(target=lambda: truth.update(produce_clicks(cluster, clicks, events)))
    writer.start()
    batches = []
    stream = rspark.stream_topic(
        spark, cluster, clicks, group,
        lambda df, batch_id: batches.append((batch_id, count_views(df, views, cluster, batch_id))),
        max_records_per_batch=max_records_per_batch, trigger_interval_s=trigger_interval_s,
    )  # fmt: skip
    writer.join()
    total = already + events
    try:
        while True:
            committed = admin.list_group_offsets(group)
            if sum(o.offset for o in committed.values()) >= total:
                break
            if stream.exception is not None:
                raise stream.exception
            time.sleep(0.5)
    finally:
        stream.stop()
    elapsed = time.perf_counter() - started
    computed = read_totals(spark, cluster, views)
    return {
        "events": events, "batches": len(batches), "seconds": elapsed,
        "truth": truth, "computed": computed, "first_run": already == 0,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--data-dir", default=None, help="default: $RAFKA_DATA_DIR or ./rafka-data")
    args = parser.parse_args(argv)

    import rafka
    from rafka.clients import spark as rspark

    cluster = rafka.connect(data_dir=args.data_dir)
    spark = rspark.start_spark("clickstream")
    try:
        report = run(spark, cluster, args.events, prefix="demo-")
    finally:
        rspark.stop_spark()
    print(f"{report['events']:,} click events in {report['batches']} micro-batches, "
          f"{report['events'] / report['seconds']:,.0f} events/s end to end")  # fmt: skip
    by_minute: Counter = Counter()
    for (page, minute), views in report["computed"].items():
        by_minute[minute] += views
    for minute in sorted(by_minute)[:10]:
        top = max((v, p) for (p, m), v in report["computed"].items() if m == minute)
        stamp = time.strftime("%H:%M", time.gmtime(minute / 1000))
        print(f"  {stamp}  {by_minute[minute]:>8,} views   top page {top[1]:<9} {top[0]:>7,}")
    if report["first_run"]:
        ok = report["computed"] == report["truth"]
        print("totals match the events produced" if ok else "MISMATCH with the events produced")
        return 0 if ok else 1
    print("(topics from an earlier run were reused: totals include its events)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
