"""``rafka consume``: print the records of a topic."""

from __future__ import annotations

import argparse
import json
import sys
import time

from rafka.cli.arguments import non_negative_int, positive_int
from rafka.cli.connect import add_connection_options, connected


def add_consume(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "consume",
        help="print the records of a topic",
        description="Print the records of a topic's partitions, starting at the end of each "
        "(new records only) or with --from-beginning at its start. Without --follow, stop "
        "after --timeout-ms without a new record, and with --from-beginning as soon as the "
        "log is read up to where it ended when the command started.",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the first record of each partition")  # fmt: skip
    parser.add_argument("--partition", type=non_negative_int, action="append", metavar="P",
                        help="read this partition (repeat for more; default: all)")
    parser.add_argument("--max-messages", type=positive_int, metavar="N",
                        help="stop after N records")  # fmt: skip
    parser.add_argument("--timeout-ms", type=non_negative_int, default=5000, metavar="T",
                        help="without --follow, stop after T ms with no new record "
                        "(default 5000)")  # fmt: skip
    parser.add_argument("--format", choices=["value", "kv", "json"], default="value",
                        help="value: the value as text; kv: key<TAB>value; json: one object a "
                        "line with topic, partition, offset, timestamp, key, value, headers "
                        "(bytes as UTF-8, invalid bytes as \\xNN; null for none)")
    parser.add_argument("--group", metavar="GROUP",
                        help="read as a member of consumer group GROUP: partitions shared with "
                        "its other members, starting at its committed offsets (new groups at "
                        "the end, or the start with --from-beginning), and committing what was "
                        "printed on exit")  # fmt: skip
    parser.add_argument("--follow", action="store_true",
                        help="keep waiting for new records until Ctrl-C (or --max-messages)")
    add_connection_options(parser)
    parser.set_defaults(handler=_consume, usage_error=parser.error)


def _consume(args: argparse.Namespace) -> int:
    from rafka.types import TopicPartition

    if args.group is not None and args.partition:
        args.usage_error("--partition and --group exclude each other: a group assigns partitions")
    if args.group is not None:
        return _consume_in_group(args)
    with connected(args) as cluster:
        if args.partition:
            partitions = sorted(set(args.partition))
        else:
            partitions = range(len(cluster.admin().describe_topic(args.topic).partitions))
        tps = [TopicPartition(args.topic, p) for p in partitions]
        reset = "earliest" if args.from_beginning else "latest"
        with cluster.consumer(auto_offset_reset=reset) as consumer:
            consumer.assign(tps)
            if args.from_beginning:
                consumer.seek_to_beginning()
            else:
                consumer.seek_to_end()
            printed = [0]
            try:
                _print_records(consumer, tps, args, printed)
            except KeyboardInterrupt:  # Ctrl-C ends --follow: say how far it got
                print(f"\nconsumed {printed[0]} records", file=sys.stderr)
                raise
    print(f"consumed {printed[0]} records", file=sys.stderr)
    return 0


def _consume_in_group(args: argparse.Namespace) -> int:
    printed = [0]
    with connected(args) as cluster:
        reset = "earliest" if args.from_beginning else "latest"
        with cluster.consumer(
            group_id=args.group, auto_offset_reset=reset, enable_auto_commit=True,
            client_id="rafka-console-consumer",
        ) as consumer:  # fmt: skip
            consumer.subscribe([args.topic])
            try:
                _print_records(consumer, None, args, printed)
            except KeyboardInterrupt:
                print(f"\nconsumed {printed[0]} records", file=sys.stderr)
                raise
    print(f"consumed {printed[0]} records", file=sys.stderr)
    return 0


def _print_records(consumer, tps: list | None, args: argparse.Namespace, printed: list) -> None:
    """Poll and print until a stop condition, counting the records in ``printed[0]``."""
    ends = None
    if tps is not None and args.from_beginning and not args.follow:
        ends = consumer.end_offsets(tps)  # stop once the log as it is now has been read
    formatter = _FORMATS[args.format]
    out = args.out
    idle_s = args.timeout_ms / 1000
    last = time.monotonic()
    while True:
        if ends is not None and all(consumer.position(tp) >= ends[tp] for tp in tps):
            return
        if args.follow:
            wait_s = 1.0
        else:
            wait_s = min(1.0, idle_s - (time.monotonic() - last))
            if wait_s <= 0:
                return
        limit = args.max_messages - printed[0] if args.max_messages else None
        records = consumer.poll(timeout_ms=int(wait_s * 1000), max_records=limit)
        if records:
            out.write("".join(map(formatter, records)))
            out.flush()
            printed[0] += len(records)
            last = time.monotonic()
            if args.max_messages and printed[0] >= args.max_messages:
                return


def _text(data) -> str | None:
    if data is None:
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    return data.decode("utf-8", "backslashreplace")


def _format_value(record) -> str:
    value = _text(record.value)
    return ("null" if value is None else value) + "\n"


def _format_kv(record) -> str:
    key, value = _text(record.key), _text(record.value)
    return f"{'null' if key is None else key}\t{'null' if value is None else value}\n"


def _format_json(record) -> str:
    return json.dumps({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
        "headers": [[name, _text(value)] for name, value in record.headers or ()],
    }, ensure_ascii=False) + "\n"  # fmt: skip


_FORMATS = {"value": _format_value, "kv": _format_kv, "json": _format_json}
