"""Storage benchmark: how close the log's append and read paths come to the raw disk.

Run ``python -m bench storage [--mb 512] [--repeat 3] [--dir DIR]``. In one run, in one
temporary directory on one disk, it measures:

1. raw write   ``os.write`` of 1 MiB chunks to a new file, then one ``os.fdatasync``.
2. log append  ``Log.append_as_leader`` of prebuilt batches of 100-byte records (16 KiB, the
               producer's default batch size, and 1 MiB), then ``Log.flush()``: the same
               total bytes as (1), each batch patched, CRC-checked and written by the log.
3. raw read    ``os.pread`` of 1 MiB chunks of the file from (1).
4. log read    each log from (2) through ``Log.read(offset, max_bytes=1 MiB)``, taking the
               next offset from the last batch header of each answer, as a fetch loop does.
5. codec       ``encode_batch`` and ``decode_records`` of the same records with codecs none
               and lz4: client-side work, no disk, for context.

Why the comparison is fair:

- The raw side writes ``--mb`` MiB, the log side as many whole batches as fit in it, from
  buffers prepared before the clock starts, each chunk or batch a copy of its own (one buffer
  written again and again would stay in the CPU cache and flatter its side), and each ends
  with one fdatasync inside
  the timed region. Encoding, opening, closing and deleting are outside it.
- Every timed region starts after ``os.sync()``, so no earlier write-back competes with it.
- Writes alternate (raw, 16 KiB, 1 MiB, raw, ...) for ``--repeat`` rounds, and so do reads;
  each figure is the best round, so a burst from a neighbour or a virtual machine's slow
  first touch of fresh memory costs one round, not one side. Every round is printed and saved.
- Reads start with the page cache dropped (``/proc/sys/vm/drop_caches``: root only, and
  machine-wide) for the file and the logs alike. Where that is refused, every read is served
  from a warm cache, which measures memory copies rather than the disk; the report says which.

Values are random (incompressible) bytes. MB is 10**6 bytes. The results are printed as a
table and saved to bench/results/storage.json by the harness (``python -m bench storage``).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from bench.machine import git_revision
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

MIB = 1 << 20
MB = 10**6
VALUE_BYTES = 100
CHUNK_BYTES = MIB  # unit of the raw reads and writes, and the log read's max_bytes
BATCH_BYTES = (16 * 1024, MIB)
CODECS = (rb.Codec.NONE, rb.Codec.LZ4)
CODEC_SECONDS = 0.5  # spent on each codec figure
TIMESTAMP_MS = 1_700_000_000_000
NOISY_SPREAD = 1.5  # slowest / fastest round of one row above which the table warns
TARGET_RATIO = 0.70  # the owner's goal: 1 MiB appends at >= 70% of the raw write speed
SEED = 20240601
DROP_CACHES = "/proc/sys/vm/drop_caches"
TINY = {"mb": 4, "repeat": 1, "codec_seconds": 0.05}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--mb", type=_positive, default=512, help="MiB written per measurement (default 512)"
    )
    group.add_argument(
        "--repeat", type=_positive, default=3, help="rounds of each measurement (default 3)"
    )
    group.add_argument(
        "--dir",
        help="a directory on the disk to measure; a temporary directory is made in it and "
        "deleted afterwards (default: the current directory)",
    )
    group.add_argument(
        "--codec-seconds", type=float, default=CODEC_SECONDS,
        help=f"seconds spent on each codec figure (default {CODEC_SECONDS:g})",
    )  # fmt: skip


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


# -- workloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What one log receives: ``count`` copies of one encoded batch."""

    label: str
    batch: bytes
    records_per_batch: int
    count: int

    @property
    def nbytes(self) -> int:
        return len(self.batch) * self.count

    @property
    def records(self) -> int:
        return self.records_per_batch * self.count

    def log_dir(self, work: str) -> str:
        return os.path.join(work, "log-" + self.label.replace(" ", ""))


def random_values(count: int, rng: random.Random) -> list[bytes]:
    slab = rng.randbytes(count * VALUE_BYTES)
    return [slab[i : i + VALUE_BYTES] for i in range(0, len(slab), VALUE_BYTES)]


def fill_batch(limit: int, values: list[bytes]) -> bytes:
    """The uncompressed batch of as many leading ``values`` as fit in ``limit`` bytes."""
    # msgpack frames a 100-byte value with 2 bytes; the first guess ignores the few bytes of
    # array headers, so it is at most a record or two too many.
    count = (limit - rb.HEADER_SIZE) // (VALUE_BYTES + 2)
    batch = rb.encode_batch(values[:count], None, TIMESTAMP_MS)
    while len(batch) > limit:
        count -= 1
        batch = rb.encode_batch(values[:count], None, TIMESTAMP_MS)
    return batch


def make_workload(limit: int, total_bytes: int, values: list[bytes]) -> Workload:
    batch = fill_batch(limit, values)
    label = f"{limit // MIB} MiB" if limit >= MIB else f"{limit // 1024} KiB"
    return Workload(label, batch, rb.read_header(batch).record_count, total_bytes // len(batch))


def copies(buffer: bytes, count: int) -> list[bytes]:
    """``count`` copies of ``buffer``, each in memory of its own."""
    return [bytes(memoryview(buffer)) for _ in range(count)]


def fresh_dir(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# -- timed regions -----------------------------------------------------------------------------


def settle(drop_cache: bool = False) -> None:
    """Quiet the disk before a clock starts: write back everything dirty, and evict the page
    cache when asked, so that a read measures the disk rather than memory."""
    os.sync()
    if drop_cache:
        with open(DROP_CACHES, "w") as f:
            f.write("1")


def can_drop_page_cache() -> bool:
    try:
        settle(drop_cache=True)
    except OSError:
        return False
    return True


def time_raw_write(path: str, chunks: list[bytes]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        settle()
        start = time.perf_counter()
        for chunk in chunks:
            os.write(fd, chunk)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
        _expect(os.fstat(fd).st_size, sum(map(len, chunks)), path)
        return elapsed
    finally:
        os.close(fd)


def time_raw_read(path: str, drop_cache: bool) -> float:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        settle(drop_cache)
        position = 0
        start = time.perf_counter()
        while chunk := os.pread(fd, CHUNK_BYTES, position):
            position += len(chunk)
        elapsed = time.perf_counter() - start
        _expect(position, os.fstat(fd).st_size, path)
        return elapsed
    finally:
        os.close(fd)


def time_append(directory: str, batches: list[bytes]) -> float:
    log = Log(directory, LogConfig())
    try:
        settle()
        start = time.perf_counter()
        for batch in batches:
            log.append_as_leader(batch, leader_epoch=0)
        log.flush()
        return time.perf_counter() - start
    finally:
        log.close()


def time_log_read(directory: str, drop_cache: bool) -> float:
    log = Log(directory, LogConfig())
    try:
        end = log.update_high_watermark(log.log_end_offset)
        settle(drop_cache)  # after opening the log, which reads batch headers
        offset = log.log_start_offset
        nbytes = 0
        start = time.perf_counter()
        while offset < end:
            records = log.read(offset, CHUNK_BYTES, max_offset=end).records
            if not records:
                raise RuntimeError(f"{directory}: empty read at offset {offset} below {end}")
            for _, header in rb.iter_batches(records, verify=False):
                offset = header.next_offset
            nbytes += len(records)
        elapsed = time.perf_counter() - start
        _expect(nbytes, log.size_bytes, directory)
        return elapsed
    finally:
        log.close()


def _expect(actual: int, expected: int, where: str) -> None:
    if actual != expected:
        raise RuntimeError(f"{where}: {actual} bytes moved, expected {expected}")


def calls_per_second(call: Callable[[], object], seconds: float = CODEC_SECONDS) -> float:
    calls = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call()
        calls += 1
    return calls / elapsed


# -- measurements ------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the disk table: the seconds of each round over the same bytes. Its figures
    come from the best (fastest) round; the median is kept to show how noisy the rounds were."""

    name: str
    nbytes: int
    records: int  # 0 for raw file I/O
    baseline: Row | None = None  # the raw figure this one is compared with
    seconds: tuple[float, ...] = ()

    def add_round(self, seconds: float) -> None:
        """Keep a round's time and show its speed on stderr."""
        self.seconds += (seconds,)
        print(f"  {self.name}: {self.nbytes / seconds / MB:,.0f} MB/s", file=sys.stderr)

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / min(self.seconds) / MB

    @property
    def median_mb_per_s(self) -> float:
        return self.nbytes / statistics.median(self.seconds) / MB

    @property
    def records_per_s(self) -> float:
        return self.records / min(self.seconds)

    @property
    def vs_raw(self) -> float | None:
        return None if self.baseline is None else self.mb_per_s / self.baseline.mb_per_s

    @property
    def median_vs_raw(self) -> float | None:
        if self.baseline is None:
            return None
        return self.median_mb_per_s / self.baseline.median_mb_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.nbytes,
            "records": self.records,
            "seconds": list(self.seconds),
            "best_mb_per_s": self.mb_per_s,
            "best_records_per_s": self.records_per_s or None,
            "vs_raw": self.vs_raw,
            "median_mb_per_s": self.median_mb_per_s,
            "median_vs_raw": self.median_vs_raw,
        }


def measure_writes(
    work: str, chunk: bytes, chunks: int, workloads: list[Workload], repeat: int
) -> tuple[Row, list[Row]]:
    """Rounds of: ``chunks`` copies of ``chunk`` to a new file, then each workload to a new
    log. The file and the logs of the last round stay for the reads."""
    raw = Row("raw write, 1 MiB os.write + fdatasync", len(chunk) * chunks, 0)
    appends = [Row(f"log append, {w.label} batches + flush", w.nbytes, w.records, raw)
               for w in workloads]  # fmt: skip
    for _ in range(repeat):
        raw_file = os.path.join(fresh_dir(os.path.join(work, "raw")), "data")
        raw.add_round(time_raw_write(raw_file, copies(chunk, chunks)))
        for row, workload in zip(appends, workloads):
            log_dir = fresh_dir(workload.log_dir(work))
            row.add_round(time_append(log_dir, copies(workload.batch, workload.count)))
    return raw, appends


def measure_reads(
    work: str, raw_bytes: int, workloads: list[Workload], repeat: int, cold: bool
) -> tuple[Row, list[Row]]:
    """Rounds of reading the file and the logs that ``measure_writes`` left."""
    raw = Row("raw read, 1 MiB os.pread", raw_bytes, 0)
    logs = [Row(f"log read, {w.label} batches, 1 MiB max_bytes", w.nbytes, w.records, raw)
            for w in workloads]  # fmt: skip
    for _ in range(repeat):
        raw.add_round(time_raw_read(os.path.join(work, "raw", "data"), cold))
        for row, workload in zip(logs, workloads):
            row.add_round(time_log_read(workload.log_dir(work), cold))
    return raw, logs


def measure_codec(
    workload: Workload, values: list[bytes], codec: rb.Codec, seconds: float = CODEC_SECONDS
) -> dict[str, Any]:
    """Encode and decode speed of the workload's records with ``codec``."""
    count = workload.records_per_batch
    batch_values = values[:count]
    batch = rb.encode_batch(batch_values, None, TIMESTAMP_MS, codec=codec)
    encodes = calls_per_second(
        lambda: rb.encode_batch(batch_values, None, TIMESTAMP_MS, codec=codec), seconds
    )
    decodes = calls_per_second(lambda: rb.decode_records(batch), seconds)
    return {
        "codec": codec.name.lower(),
        "batch": workload.label,
        "records_per_batch": count,
        "batch_bytes": len(batch),
        "encode_records_per_s": encodes * count,
        "decode_records_per_s": decodes * count,
    }


# -- the run -----------------------------------------------------------------------------------


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``storage`` workload: answers rows for the summary and the full report."""
    from bench.harness import row

    rng = random.Random(SEED)
    chunk = rng.randbytes(CHUNK_BYTES)
    values = random_values(max(BATCH_BYTES) // VALUE_BYTES, rng)
    workloads = [make_workload(limit, args.mb * MIB, values) for limit in BATCH_BYTES]
    base = os.path.abspath(args.dir or os.getcwd())
    with tempfile.TemporaryDirectory(prefix="bench-data-", dir=base) as work:
        print(f"storage benchmark in {work}", file=sys.stderr)
        raw_write, appends = measure_writes(work, chunk, args.mb, workloads, args.repeat)
        cold = can_drop_page_cache()
        raw_read, reads = measure_reads(work, raw_write.nbytes, workloads, args.repeat, cold)
    codecs = [measure_codec(w, values, codec, args.codec_seconds)
              for w in workloads for codec in CODECS]  # fmt: skip
    report = {
        "command": reproduce_command(args),
        "environment": environment(base),
        "mb": args.mb,
        "repeat": args.repeat,
        "value_bytes": VALUE_BYTES,
        "read_cache": "cold" if cold else "warm",
        "disk": [row.to_dict() for row in (raw_write, *appends, raw_read, *reads)],
        "codec": codecs,
        "target": target(appends[-1], raw_write),
    }
    print(render(report))
    cache = "cold" if cold else "warm"
    rows = [
        row(f"log append, {workloads[-1].label} batches", "MB/s", appends[-1].mb_per_s,
            baseline=raw_write.mb_per_s, baseline_label="raw write"),
        row(f"log read, {workloads[-1].label} batches ({cache})", "MB/s", reads[-1].mb_per_s,
            baseline=raw_read.mb_per_s, baseline_label="raw read"),
    ]  # fmt: skip
    return {"rows": rows, "report": report}


def target(append: Row, raw_write: Row) -> dict[str, Any]:
    ratio = append.mb_per_s / raw_write.mb_per_s
    return {"what": append.name, "min_vs_raw": TARGET_RATIO, "vs_raw": ratio,
            "met": ratio >= TARGET_RATIO}  # fmt: skip


def reproduce_command(args: argparse.Namespace) -> str:
    argv = ["python", "-m", "bench", "storage", "--mb", str(args.mb), "--repeat", str(args.repeat)]
    if args.dir:
        argv += ["--dir", args.dir]
    return shlex.join(argv)


def environment(directory: str) -> dict[str, Any]:
    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "directory": directory,
        "git": git_revision(),  # read from .git's files: running git may touch the index
    }


# -- the table ---------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    cache = {
        "cold": "cold (page cache dropped before each read)",
        "warm": "WARM: the page cache could not be dropped, reads come from memory",
    }[report["read_cache"]]
    goal = report["target"]
    return "\n".join([
        f"rafka storage benchmark: {report['mb']} MiB per measurement, best of "
        f"{report['repeat']} rounds, {report['value_bytes']}-byte records, MB = 10^6 bytes",
        f"disk: {report['environment']['directory']}   reads: {cache}",
        "",
        *render_disk(report["disk"]),
        "",
        *render_codec(report["codec"]),
        "",
        f"target: {goal['what']} >= {goal['min_vs_raw']:.0%} of raw write: "
        f"{'met' if goal['met'] else 'NOT met'} ({goal['vs_raw']:.0%})",
        f"reproduce: {report['command']}",
    ])  # fmt: skip


def render_disk(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'measurement':<46} {'MB/s':>7} {'records/s':>10} {'vs raw':>7}   rounds (MB/s)"]
    for row in rows:
        records = f"{row['best_records_per_s'] / 1e6:.2f} M" if row["best_records_per_s"] else "-"
        ratio = f"{row['vs_raw']:.0%}" if row["vs_raw"] is not None else "-"
        rounds = " / ".join(f"{row['bytes'] / s / MB:,.0f}" for s in row["seconds"])
        lines.append(
            f"{row['name']:<46} {row['best_mb_per_s']:>7,.0f} {records:>10} {ratio:>7}   {rounds}"
        )
    spread = max(max(row["seconds"]) / min(row["seconds"]) for row in rows)
    if spread > NOISY_SPREAD:
        lines.append(
            f"note: rounds of one measurement differ by up to {spread:.1f}x (a busy machine or "
            "disk); each row shows its best round, the JSON also has medians"
        )
    return lines


def render_codec(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'codec (client side, no disk)':<30} {'records':>8} {'bytes':>9} "
        f"{'encode rec/s':>13} {'decode rec/s':>13}"
    ]
    for row in rows:
        lines.append(
            f"{row['codec'] + ', ' + row['batch'] + ' batch':<30} {row['records_per_batch']:>8} "
            f"{row['batch_bytes']:>9} {row['encode_records_per_s'] / 1e6:>11.2f} M "
            f"{row['decode_records_per_s'] / 1e6:>11.2f} M"
        )
    return lines
