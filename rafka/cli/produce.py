"""``rafka produce``: send the lines of a file or stdin as records."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from rafka.cli.arguments import key_separator, non_negative_float, non_negative_int
from rafka.cli.connect import add_connection_options, connected


def add_produce(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "produce",
        help="send lines of a file or stdin as records",
        description="Send each line of --file (or stdin) as one record: its bytes without the "
        "line end (\\n or \\r\\n). With --key-separator, the bytes before the first separator "
        "are the key (a line without it fails). Ends with the count and rate on stderr; exit "
        "1 if any record failed.",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--file", metavar="PATH",
                        help="read records from this file (default: stdin; '-' is stdin)")
    parser.add_argument("--key-separator", metavar="SEP", type=key_separator,
                        help="split each line into key SEP value (\\t means a tab)")
    parser.add_argument("--partition", type=non_negative_int, metavar="P",
                        help="send every record to this partition (default: by key; no key: "
                        "sticky batches)")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all",
                        help="acknowledgements to wait for (default all)")  # fmt: skip
    parser.add_argument("--compression", choices=["none", "gzip", "lz4", "zstd"],
                        default="none", help="batch compression (default none)")  # fmt: skip
    parser.add_argument("--linger-ms", type=non_negative_float, default=5.0, metavar="N",
                        help="how long a batch waits for more records (default 5)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when reading a file "
                        "and stderr is a terminal)")  # fmt: skip
    add_connection_options(parser)
    parser.set_defaults(handler=_produce)


def _produce(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        if args.file and args.file != "-":
            source = stack.enter_context(open(args.file, "rb"))
            total = os.fstat(source.fileno()).st_size
        else:
            source, total = sys.stdin.buffer, 0
        show = args.progress
        if show is None:
            show = source is not sys.stdin.buffer and sys.stderr.isatty()
        # Topics are created on first use when the *cluster* allows it (as Kafka's producer).
        cluster = stack.enter_context(connected(args))
        producer = cluster.producer(
            acks=args.acks, compression=args.compression, linger_ms=args.linger_ms
        )
        progress = _Progress(total, sys.stderr) if show else None
        tally = _Tally()
        started = time.monotonic()
        try:
            sent = _send_lines(producer, args, source, tally, progress)
            producer.flush()
            tally.reap_all()
        except BaseException:
            with contextlib.suppress(Exception):
                producer.close(timeout=5.0)
            raise
        finally:
            if progress is not None:
                progress.finish()
        producer.close()
    seconds = time.monotonic() - started
    produced = sent - tally.failed
    rate = produced / seconds if seconds > 0 else 0.0
    print(f"produced {produced} records to {args.topic} in {seconds:.2f} s "
          f"({rate:,.0f} records/s)", file=sys.stderr)  # fmt: skip
    if tally.failed or tally.unkeyed:
        if tally.unkeyed:
            print(f"error: {tally.unkeyed} line(s) had no key separator "
                  f"{args.key_separator!r} and were not sent", file=sys.stderr)  # fmt: skip
        for name, (count, message) in tally.errors.items():
            print(f"error: {count} record(s) failed: {name}: {message}", file=sys.stderr)
        return 1
    return 0


def _send_lines(producer, args, source, tally: "_Tally", progress: "_Progress | None") -> int:
    """Send every line of ``source``; returns how many records it tried to send.
    Futures are kept only until they resolve (checked every 1024 records, or after each line
    when reading a terminal), so memory stays bounded by what is in flight."""
    from rafka.errors import RecordTooLarge

    topic, partition = args.topic, args.partition
    separator = args.key_separator.encode() if args.key_separator else None
    interactive = source.isatty()
    send = producer.send
    pending = tally.pending
    read = sent = 0
    for line in source:
        read += len(line)
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        key = None
        if separator is not None:
            key, found, line = line.partition(separator)
            if not found:
                tally.no_separator(read)
                continue
        sent += 1
        try:
            pending.append(send(topic, line, key, partition=partition))
        except RecordTooLarge as e:  # this record only; the next may fit
            tally.add_error(e)
            continue
        if interactive or not sent & 1023:
            tally.reap()
        if progress is not None:
            progress.update(read, sent)
    if progress is not None:
        progress.update(read, sent, force=True)
    return sent


class _Tally:
    """Outcomes of the records sent: futures not yet resolved, and the failures by error."""

    def __init__(self) -> None:
        import collections

        self.pending: collections.deque = collections.deque()
        self.failed = 0
        self.unkeyed = 0
        self.errors: dict[str, list] = {}  # error name -> [count, first message]

    def add_error(self, error: BaseException) -> None:
        self.failed += 1
        name = type(error).__name__
        entry = self.errors.get(name)
        if entry is None:
            self.errors[name] = [1, str(error)]
            print(f"\nerror: a record failed: {name}: {error}", file=sys.stderr)
        else:
            entry[0] += 1

    def no_separator(self, position: int) -> None:
        self.unkeyed += 1
        if self.unkeyed <= 3:
            print(f"\nwarning: the line ending at byte {position} has no key separator; "
                  "skipped", file=sys.stderr)  # fmt: skip

    def reap(self) -> None:
        pending = self.pending
        while pending and pending[0].done():
            error = pending.popleft().exception()
            if error is not None:
                self.add_error(error)

    def reap_all(self) -> None:
        while self.pending:
            error = self.pending.popleft().exception()
            if error is not None:
                self.add_error(error)


class _Progress:
    """A tqdm progress bar on ``out``: bytes read of ``total`` (0: size unknown, a count
    with no bar), with the records sent and their rate, redrawn at most ten times a
    second."""

    def __init__(self, total: int, out) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total or None, file=out, unit="B", unit_scale=True,
                        unit_divisor=1024, mininterval=0.1, dynamic_ncols=True)  # fmt: skip
        self.started = self.drawn = time.monotonic()

    def update(self, done: int, records: int, force: bool = False) -> None:
        # Called once per line: the clock check keeps tqdm's work out of the send loop.
        now = time.monotonic()
        if not force and now - self.drawn < 0.1:
            return
        self.drawn = now
        elapsed = now - self.started
        rate = records / elapsed if elapsed > 0 else 0.0
        self.bar.set_postfix_str(f"{records:,} records, {rate:,.0f} records/s", refresh=False)
        self.bar.update(done - self.bar.n)
        if force:
            self.bar.refresh()

    def finish(self) -> None:
        self.bar.close()
