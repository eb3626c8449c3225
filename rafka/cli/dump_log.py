"""``rafka dump-log``: the argparse wiring of the offline segment checker in
``rafka.dump_log`` (which reads files only and never imports Ray)."""

from __future__ import annotations

import argparse
import sys

from rafka.cli.arguments import non_negative_int


def add_dump_log(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dump-log",
        help="print and check segment files offline (like kafka-dump-log.sh)",
        description=(
            "Print the batches of segment .log files (and the entries of .index, "
            ".timeindex and .txnindex files), checking CRCs, the offset chain and the tail. "
            "Reads files only; safe on a live data directory."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a segment file (<20-digit base offset>.log, .index, .timeindex or .txnindex) or "
        "a partition directory (every .log in it, in offset order)",
    )
    parser.add_argument(
        "--print-records", action="store_true", help="decode and print every record"
    )
    parser.add_argument(
        "--max-bytes",
        type=non_negative_int,
        default=64,
        metavar="N",
        help="show at most N bytes of each key, value and header value (default 64; 0: all)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="end with a summary line; exit 1 on any problem (a corrupt batch, offsets that "
        "go back, a torn tail, a bad index entry)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object a line")
    parser.set_defaults(handler=_dump_log)


def _dump_log(args: argparse.Namespace) -> int:
    from rafka import dump_log

    return dump_log.run(
        args.paths,
        dump_log.DumpOptions(print_records=args.print_records, max_bytes=args.max_bytes),
        verify=args.verify,
        as_json=args.json,
        out=args.out,
        err=sys.stderr,
    )
