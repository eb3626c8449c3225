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


def progress_bar(label: str, total: int):
    """A tqdm progress bar on stderr of ``total`` records: count, percentage, records/s."""
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{label:<7}", unit=" records", unit_scale=True,
                file=sys.stderr, mininterval=0.1)  # fmt: skip


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
    with progress_bar("produce", total) as bar:
        for i, value in enumerate(values):
            producer.send(TOPIC, value)
            if i % step == 0:
                bar.update(i - bar.n)
        producer.flush()
        produce_s = time.perf_counter() - began
        bar.update(total - bar.n)
    producer.close()

    expected_end = earlier + total
    began = time.perf_counter()
    next_offset = 0
    bad = 0
    with progress_bar("consume", total) as bar:
        while next_offset < expected_end:
            records = consumer.poll(timeout_ms=10_000)
            if not records:
                break
            for record in records:
                if record.offset != next_offset or record.value != value_for(next_offset):
                    bad += 1
                next_offset = record.offset + 1
            if next_offset >= earlier:
                bar.update(next_offset - earlier - bar.n)
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
