"""``rafka transactions``: list and describe transactions, describe the producers of a
partition, find hanging transactions and abort one (kafka-transactions.sh, KIP-664).

``abort`` names the transaction as Kafka's tool does: by the first offset of the transaction
in the partition (``--start-offset``, looked up among the producers its leader describes), or
by ``--producer-id``, ``--producer-epoch`` and ``--coordinator-epoch`` as ``describe-producers``
and ``find-hanging`` print them. Times are ms since the epoch and durations ms."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rafka.cli.arguments import non_negative_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import format_table

#: Kafka's transaction.max.timeout.ms default, find-hanging's default threshold.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def add_transactions(commands: argparse._SubParsersAction) -> None:
    txns = commands.add_parser(
        "transactions", help="list and describe transactions and producers; find and abort "
        "hanging transactions",
        description="Inspect transactions and the producer state of partitions, find "
        "transactions no coordinator will end and abort them, like kafka-transactions.sh.",
    )  # fmt: skip
    actions = txns.add_subparsers(title="actions", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list transactional ids and their states")
    listing.add_argument("--state", action="append", metavar="STATE",
                         help="only ids in this state (Kafka's names: Empty, Ongoing, "
                         "PrepareCommit, ...; repeatable)")  # fmt: skip
    listing.add_argument("--producer-id", type=non_negative_int, action="append", metavar="N",
                         help="only ids of this producer id (repeatable)")  # fmt: skip
    listing.add_argument("--min-duration-ms", type=non_negative_int, metavar="MS",
                         help="only transactions running for at least MS")  # fmt: skip
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=_list)

    describe = actions.add_parser(
        "describe", help="the coordinator's record of a transactional id",
        description="The producer id and epoch, state, timeout, start time, duration (while "
        "a transaction runs; '-' otherwise) and partitions of a transactional id.",
    )  # fmt: skip
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(handler=_describe)

    producers = actions.add_parser(
        "describe-producers", help="the producers a partition's leader holds",
        description="Per producer of each partition: its epoch there, the coordinator epoch of "
        "its last marker (-1: none), its last sequence and timestamp, and the first offset of "
        "its open transaction ('-': none open).",
    )  # fmt: skip
    producers.add_argument("--topic", required=True, metavar="T")
    producers.add_argument("--partition", type=non_negative_int, metavar="P",
                           help="only this partition (default: all)")  # fmt: skip
    producers.add_argument("--json", action="store_true", help="print one JSON object")
    producers.set_defaults(handler=_describe_producers)

    find = actions.add_parser(
        "find-hanging", help="open transactions no coordinator will end",
        description="Transactions open in a partition whose producer has written nothing "
        "there for longer than the maximum transaction timeout and whose coordinator does not "
        "hold the partition: they hold read_committed consumers until aborted.",
    )  # fmt: skip
    find.add_argument("--topic", metavar="T", help="only this topic (default: every topic "
                      "but the internal ones)")  # fmt: skip
    find.add_argument("--broker-id", type=non_negative_int, metavar="B",
                      help="only partitions with a replica on this broker")  # fmt: skip
    find.add_argument("--max-transaction-timeout", type=non_negative_int, metavar="MS",
                      default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                      help="how long a producer must have been silent, ms (default "
                      f"{DEFAULT_MAX_TRANSACTION_TIMEOUT_MS}: transaction.max.timeout.ms)")
    find.add_argument("--json", action="store_true", help="print one JSON object")
    find.set_defaults(handler=_find_hanging)

    abort = actions.add_parser(
        "abort", help="abort a hanging transaction in one partition",
        description="Write an ABORT marker that ends a producer's open transaction in one "
        "partition, releasing read_committed consumers. Name it by --start-offset, or by "
        "--producer-id, --producer-epoch and --coordinator-epoch. Only for hanging "
        "transactions: a live one loses its records in that partition.",
    )  # fmt: skip
    abort.add_argument("--topic", required=True, metavar="T")
    abort.add_argument("--partition", type=non_negative_int, required=True, metavar="P")
    abort.add_argument("--start-offset", type=non_negative_int, metavar="O",
                       help="the first offset of the transaction in the partition")
    abort.add_argument("--producer-id", type=non_negative_int, metavar="N")
    abort.add_argument("--producer-epoch", type=non_negative_int, metavar="E")
    abort.add_argument("--coordinator-epoch", type=int, metavar="C",
                       help="as describe-producers prints it (-1: none yet)")  # fmt: skip
    abort.set_defaults(handler=_abort, usage_error=abort.error)

    for parser in (listing, describe, producers, find, abort):
        add_connection_options(parser)


# -- formatting (no I/O) -----------------------------------------------------------------------


def _dash(value: int) -> str:
    return "-" if value < 0 else str(value)


def description_text(d: Any, now_ms: int) -> str:
    """kafka-transactions.sh describe's one-row table."""
    running = d.start_ms >= 0
    rows = [["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
             "START-MS", "DURATION-MS", "PARTITIONS"],
            [d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
             str(d.timeout_ms), _dash(d.start_ms),
             str(max(0, now_ms - d.start_ms)) if running else "-",
             ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"]]  # fmt: skip
    return format_table(rows)


def producers_text(states: dict[int, list]) -> str:
    rows = [["PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
             "LAST-TIMESTAMP", "TXN-START-OFFSET"]]  # fmt: skip
    rows += [[str(partition), str(s.producer_id), str(s.producer_epoch),
              str(s.coordinator_epoch), str(s.last_sequence), str(s.last_timestamp),
              _dash(s.current_transaction_start_offset)]
             for partition, found in sorted(states.items()) for s in found]  # fmt: skip
    return format_table(rows)


def hanging_text(found: list, now_ms: int) -> str:
    rows = [["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
             "START-OFFSET", "LAST-TIMESTAMP", "DURATION-MS"]]  # fmt: skip
    rows += [[h.topic, str(h.partition), str(h.producer_id), str(h.producer_epoch),
              str(h.coordinator_epoch), str(h.start_offset), str(h.last_timestamp),
              str(max(0, now_ms - h.last_timestamp))] for h in found]  # fmt: skip
    return format_table(rows)


def _json(args: argparse.Namespace, value: Any) -> None:
    args.out.write(json.dumps(value) + "\n")


# -- handlers ----------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        listed = cluster.admin().list_transactions(
            states=args.state, producer_ids=args.producer_id,
            min_duration_ms=-1 if args.min_duration_ms is None else args.min_duration_ms,
        )  # fmt: skip
    if args.json:
        _json(args, {"transactions": [t._asdict() for t in listed]})
        return 0
    rows = [["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]]
    rows += [[t.transactional_id, str(t.producer_id), t.state] for t in listed]
    args.out.write(format_table(rows))
    return 0


def _describe(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        described = cluster.admin().describe_transactions([args.transactional_id])
    d = described[args.transactional_id]
    if args.json:
        _json(args, {**d._asdict(), "partitions": [tp._asdict() for tp in d.partitions]})
    else:
        args.out.write(description_text(d, _now_ms()))
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    partitions = None if args.partition is None else [args.partition]
    with connected(args) as cluster:
        states = cluster.admin().describe_producers(args.topic, partitions)
    if args.json:
        _json(args, {"topic": args.topic, "partitions": [
            {"partition": p, "producers": [s._asdict() for s in found]}
            for p, found in sorted(states.items())
        ]})  # fmt: skip
    else:
        args.out.write(producers_text(states))
    return 0


def _find_hanging(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        found = cluster.admin().find_hanging_transactions(
            topic=args.topic, broker_id=args.broker_id,
            max_transaction_timeout_ms=args.max_transaction_timeout,
        )  # fmt: skip
    if args.json:
        _json(args, {"hanging": [h._asdict() for h in found]})
        return 0
    args.out.write(hanging_text(found, _now_ms()))
    if not found:
        print("no hanging transactions found", file=sys.stderr)
    return 0


def _abort(args: argparse.Namespace) -> int:
    named = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None and any(v is not None for v in named):
        args.usage_error("give either --start-offset or --producer-id, --producer-epoch and "
                         "--coordinator-epoch, not both")  # fmt: skip
    if args.start_offset is None and any(v is None for v in named):
        args.usage_error("name the transaction with --start-offset, or with all of "
                         "--producer-id, --producer-epoch and --coordinator-epoch")  # fmt: skip
    where = f"{args.topic}-{args.partition}"
    with connected(args) as cluster:
        admin = cluster.admin()
        if args.start_offset is not None:
            states = admin.describe_producers(args.topic, [args.partition])[args.partition]
            match = [s for s in states if s.current_transaction_start_offset == args.start_offset]
            if not match:
                print(f"error: no open transaction starts at offset {args.start_offset} in "
                      f"{where}; `rafka transactions describe-producers --topic {args.topic} "
                      f"--partition {args.partition}` lists the open ones",
                      file=sys.stderr)  # fmt: skip
                return 1
            s = match[0]
            named = (s.producer_id, s.producer_epoch, s.coordinator_epoch)
        admin.abort_transaction(args.topic, args.partition, *named)
    print(f"aborted the transaction of producer {named[0]} (epoch {named[1]}) in {where}",
          file=args.out)  # fmt: skip
    return 0
