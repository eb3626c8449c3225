"""The demo behind ``./dev demo``: a million records through a rafka cluster on this machine.

It starts the embedded cluster (a local Ray instance and rafka's actors, data in
``$RAFKA_DATA_DIR`` or ``./rafka-data``), creates the topic ``demo`` if it is not there,
produces a million 100-byte records with a progress bar, consumes them back, checks count,
order and content, prints throughput, and leaves the data in place: a second run finds what
the first wrote, checks it too, and appends after it.
"""

from __future__ import annotations

import argparse
import sys
import time

TOPIC = "demo"
RECORD_BYTES = 100


def value_for(offset: int) -> bytes:
    """The value the demo writes at ``offset``: self-describing, so a reader can check it."""
    return f"{offset:020d}".encode().ljust(RECORD_BYTES, b".")


def progress(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(
        f"\r{label:<9} [{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{total:,} "
        f"{rate:>12,.0f} records/s"
    )
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rafka.demo", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default=None, help="default: $RAFKA_DATA_DIR or ./rafka-data")
    args = parser.parse_args(argv)

    import rafka
    from rafka import TopicPartition

    started = time.perf_counter()
    cluster = rafka.connect(data_dir=args.data_dir)
    admin = cluster.admin()
    if TOPIC not in admin.list_topics():
        admin.create_topic(TOPIC, partitions=1)
    tp = TopicPartition(TOPIC, 0)
    consumer = cluster.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20,
                                max_poll_records=50_000)  # fmt: skip
    consumer.assign([tp])
    earlier = consumer.end_offsets([tp])[tp]
    directory = cluster.status()["brokers"][0]["directory"]
    print(f"cluster up in {time.perf_counter() - started:.1f} s, data in {directory}")
    if earlier:
        print(f"found {earlier:,} records from earlier runs; checking them and appending after")

    total = args.records
    values = [value_for(earlier + i) for i in range(total)]
    producer = cluster.producer(acks=1, linger_ms=5)
    began = time.perf_counter()
    step = max(total // 100, 1)
    for i, value in enumerate(values):
        producer.send(TOPIC, value)
        if i % step == 0:
            progress("produce", i, total, began)
    producer.flush()
    produce_s = time.perf_counter() - began
    progress("produce", total, total, began)
    producer.close()

    expected_end = earlier + total
    began = time.perf_counter()
    next_offset = 0
    bad = 0
    while next_offset < expected_end:
        records = consumer.poll(timeout_ms=10_000)
        if not records:
            break
        for record in records:
            if record.offset != next_offset or record.value != value_for(next_offset):
                bad += 1
            next_offset = record.offset + 1
        if next_offset >= earlier:
            progress("consume", next_offset - earlier, total, began)
    consume_s = time.perf_counter() - began
    consumer.close()

    if next_offset != expected_end or bad:
        print(f"FAILED: read up to offset {next_offset:,} of {expected_end:,}, {bad} records "
              "out of order or wrong")  # fmt: skip
        return 1
    print(f"verified {expected_end:,} records in order ({earlier:,} from earlier runs)")
    print(f"produced {total:,} records in {produce_s:.2f} s ({total / produce_s:,.0f} records/s)")
    print(f"consumed {expected_end:,} records in {consume_s:.2f} s "
          f"({expected_end / consume_s:,.0f} records/s)")  # fmt: skip
    print("the data stays in place: run the demo again to find it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
