"""The ``rafka`` command line: one argparse subcommand per tool.

This module holds the entry point (``main``, the console script ``rafka``): it builds the
parser, runs the chosen handler with its output on ``args.out``, and maps errors to exit
statuses. Each subcommand is declared by an ``add_<name>`` function in the module of its group
(its arguments and its handler): ``cluster`` (up, status, down), ``topics``, ``groups``
(consumer groups), ``transactions``, ``balancer`` (brokers drain and undrain, balancer
status and rebalance), ``users`` (SASL users), ``acls`` (Kafka ACLs), ``produce``, ``consume``
and ``dump_log``; ``connect``
joins Ray and the services, ``arguments`` holds the argument types and ``output`` the shared
text formatting.
Handlers import what they need when they run, so ``rafka --help`` and the offline tools
(dump-log) start without importing Ray; a handler returns the exit status.

Commands that talk to a cluster reach Ray the way ``rafka.connect`` does: ``--address`` when
given, else the Ray instance running on this machine (``rafka up`` or ``ray start``), else an
*embedded* one started for this command alone (its services are stopped cleanly when the
command ends; the data stays in ``$RAFKA_DATA_DIR`` or ``./rafka-data``). A rafka error ends
the command with status 1 and ``error: <ErrorName>: <message>`` on stderr; Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from rafka import __version__
from rafka.cli.acls import add_acls
from rafka.cli.balancer import add_balancer, add_brokers
from rafka.cli.cluster import add_down, add_status, add_up
from rafka.cli.consume import add_consume
from rafka.cli.dump_log import add_dump_log
from rafka.cli.groups import add_groups
from rafka.cli.produce import add_produce
from rafka.cli.topics import add_topics
from rafka.cli.transactions import add_transactions
from rafka.cli.users import add_users
from rafka.errors import RafkaError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    # Handlers write their output to ``args.out``. While one runs, ``sys.stdout`` points at
    # stderr: Ray's background threads print raylet warnings to ``sys.stdout``, and they must
    # not end up among the records of ``rafka consume``.
    args.out = out = sys.stdout
    sys.stdout = sys.stderr
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader went away (``rafka dump-log ... | head``): stop quietly, like other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 1
    except (RafkaError, ConnectionError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    finally:
        sys.stdout = out


def build_parser() -> argparse.ArgumentParser:
    """The ``rafka`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="rafka", description="A Kafka-class distributed commit log on Ray."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    add_up(commands)
    add_status(commands)
    add_down(commands)
    add_topics(commands)
    add_groups(commands)
    add_transactions(commands)
    add_brokers(commands)
    add_balancer(commands)
    add_users(commands)
    add_acls(commands)
    add_produce(commands)
    add_consume(commands)
    add_dump_log(commands)
    return parser
