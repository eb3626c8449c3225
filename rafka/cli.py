"""The ``rafka`` command line: one argparse subcommand per tool.

Each subcommand is declared by an ``_add_<name>`` function (its arguments and its handler).
Handlers import what they need when they run, so ``rafka --help`` and the offline tools
(dump-log) start without importing Ray; a handler returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from rafka import __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader went away (``rafka dump-log ... | head``): stop quietly, like other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def build_parser() -> argparse.ArgumentParser:
    """The ``rafka`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="rafka", description="A Kafka-class distributed commit log on Ray."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_dump_log(commands)
    return parser


def _add_dump_log(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "dump-log",
        help="print and check segment files offline (like kafka-dump-log.sh)",
        description=(
            "Print the batches of segment .log files (and the entries of .index and "
            ".timeindex files), checking CRCs, the offset chain and the tail. Reads files "
            "only; safe on a live data directory."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a segment file (<20-digit base offset>.log, .index or .timeindex) or a partition "
        "directory (every .log in it, in offset order)",
    )
    parser.add_argument(
        "--print-records", action="store_true", help="decode and print every record"
    )
    parser.add_argument(
        "--max-bytes",
        type=_non_negative_int,
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
        out=sys.stdout,
        err=sys.stderr,
    )


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


if __name__ == "__main__":
    sys.exit(main())
