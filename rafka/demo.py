"""The demo behind ``./dev demo``: a million records through a partition log on local disk.

It opens the partition ``demo-0`` under ``$RAFKA_DATA_DIR`` (default ``./rafka-data``), appends
a million 100-byte records in 16 KiB batches with a progress bar, flushes, reads every record
back, checks count, order and content, prints throughput, and leaves the data in place: a
second run finds what the first wrote, verifies it too, and appends after it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from rafka.storage import Log, LogConfig, partition_dir
from rafka.storage import record_batch as rb

RECORD_BYTES = 100
BATCH_RECORDS = 160  # ~16 KiB batches, a producer's default batch size


def value_for(offset: int) -> bytes:
    """The value the demo writes at ``offset``: self-describing, so a reader can check it."""
    return f"{offset:020d}".encode().ljust(RECORD_BYTES, b".")


def progress(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = width * done // total
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stdout.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{total:,}"
                     f"  {rate:>12,.0f} records/s")
    sys.stdout.flush()


def append_records(log: Log, count: int) -> float:
    """Append ``count`` records after the log end; returns seconds taken (flush included)."""
    started = time.perf_counter()
    first = log.log_end_offset
    for start in range(first, first + count, BATCH_RECORDS):
        n = min(BATCH_RECORDS, first + count - start)
        values = [value_for(start + i) for i in range(n)]
        now_ms = int(time.time() * 1000)
        log.append_as_leader(rb.encode_batch(values, timestamps=now_ms, codec=rb.Codec.LZ4), 0)
        if (start - first) % (BATCH_RECORDS * 200) == 0:
            progress("produce", start - first + n, count, started)
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    progress("produce", count, count, started)
    print()
    return time.perf_counter() - started


def verify_records(log: Log) -> tuple[int, float]:
    """Read the whole log, checking that offsets are consecutive and values match."""
    started = time.perf_counter()
    offset, seen, total = log.log_start_offset, 0, log.high_watermark - log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20, max_offset=log.high_watermark).records
        for pos, _ in rb.iter_batches(data, verify=False):
            records = rb.decode_records(data, pos)
            for record_offset, value in zip(records.offsets, records.values):
                if record_offset < offset:
                    continue
                if record_offset != offset or value != value_for(record_offset):
                    raise SystemExit(f"verification failed at offset {offset}: got "
                                     f"offset {record_offset} value {value[:24]!r}")
                offset += 1
                seen += 1
        progress("consume", seen, max(total, 1), started)
    print()
    return seen, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rafka-demo", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default=os.environ.get("RAFKA_DATA_DIR", "rafka-data"))
    args = parser.parse_args(argv)

    directory = partition_dir(args.data_dir, "demo", 0)
    log = Log(directory, LogConfig.from_dict({"segment.bytes": 64 << 20}))
    log.update_high_watermark(log.log_end_offset)
    print(f"partition log: {os.path.abspath(directory)}")
    print(f"  {log.recovery_report.summary()}")
    if log.log_end_offset:
        print(f"  found {log.log_end_offset - log.log_start_offset:,} records from earlier runs")

    seconds = append_records(log, args.records)
    megabytes = args.records * RECORD_BYTES / 1e6
    print(f"  appended {args.records:,} records ({megabytes:,.0f} MB of values) in {seconds:.2f} s:"
          f" {args.records / seconds:,.0f} records/s, {megabytes / seconds:,.0f} MB/s")

    seen, seconds = verify_records(log)
    print(f"  read back and verified {seen:,} records in order in {seconds:.2f} s:"
          f" {seen / seconds:,.0f} records/s")
    print(f"  log: {len(log.segments)} segments, {log.size_bytes / 1e6:,.1f} MB on disk "
          f"(lz4), offsets [{log.log_start_offset}, {log.log_end_offset})")
    log.close()
    print("data left in place; run again to find it and add more.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
