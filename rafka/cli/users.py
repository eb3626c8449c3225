"""``rafka users add|list|remove`` (kafka-configs.sh --alter --add-config
'SCRAM-SHA-256=[password=...]' --entity-type users, and --describe / --delete-config): the
users Kafka clients authenticate as over SASL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN).

The password is turned into salted SCRAM credentials on this machine; only those reach the
cluster. A password given with ``--password`` shows in ``ps`` and the shell's history:
``--password-file`` (or ``-`` for standard input) or the prompt avoid that.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from rafka.cli.arguments import positive_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import format_table
from rafka.cluster.scram import MECHANISMS, MIN_ITERATIONS
from rafka.errors import UnacceptableCredential


def add_users(commands: argparse._SubParsersAction) -> None:
    users = commands.add_parser(
        "users", help="add, list and remove the users Kafka clients log in as (SASL)",
        description="Users that Kafka clients authenticate as over SASL/SCRAM and "
        "SASL/PLAIN on the cluster's SASL listeners; ACLs (`rafka acls`) name them as "
        "User:<name>.",
    )  # fmt: skip
    actions = users.add_subparsers(title="actions", metavar="ACTION", required=True)

    add = actions.add_parser(
        "add", help="create a user or set its password",
        description="Create user NAME or set its password (its old password then stops "
        "working). Without --password or --password-file the password is asked for.",
    )  # fmt: skip
    add.add_argument("name", metavar="NAME")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--password", metavar="P",
                        help="the password (visible in ps and shell history; prefer the "
                        "prompt or --password-file)")  # fmt: skip
    secret.add_argument("--password-file", metavar="FILE",
                        help="read the password from the first line of FILE ('-': stdin)")
    add.add_argument("--mechanism", choices=sorted(MECHANISMS), action="append",
                     help="SCRAM mechanism to store (repeatable; default: both)")
    add.add_argument("--iterations", type=positive_int, default=MIN_ITERATIONS, metavar="N",
                     help=f"PBKDF2 iterations, {MIN_ITERATIONS}..16384 (default "
                     f"{MIN_ITERATIONS})")  # fmt: skip
    add.set_defaults(handler=_add)
    add_connection_options(add)

    listing = actions.add_parser("list", help="users and their SCRAM mechanisms")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(handler=_list)
    add_connection_options(listing)

    remove = actions.add_parser("remove", help="delete a user and all its credentials")
    remove.add_argument("name", metavar="NAME")
    remove.set_defaults(handler=_remove)
    add_connection_options(remove)


def read_password(args: argparse.Namespace) -> str:
    """The password from --password, --password-file, or a prompt (asked twice)."""
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        if args.password_file == "-":
            password = sys.stdin.readline()
        else:
            try:
                with open(args.password_file, encoding="utf-8") as f:
                    password = f.readline()
            except OSError as e:
                raise UnacceptableCredential(
                    f"cannot read the password file {args.password_file}: {e.strerror}"
                ) from None
        password = password.rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            raise UnacceptableCredential(
                "no password given: use --password-file FILE (or - for stdin), or run in a "
                "terminal to be asked"
            )
        password = getpass.getpass(f"Password for {args.name}: ")
        if getpass.getpass("Again: ") != password:
            raise UnacceptableCredential("the two passwords differ; nothing was changed")
    if not password:
        raise UnacceptableCredential("the password is empty: give a non-empty password")
    return password


def _add(args: argparse.Namespace) -> int:
    password = read_password(args)
    mechanisms = sorted(set(args.mechanism or MECHANISMS))
    with connected(args) as cluster:
        admin = cluster.admin()
        if len(mechanisms) == len(MECHANISMS):
            admin.add_user(args.name, password, None, args.iterations)
        else:
            admin.add_user(args.name, password, mechanisms[0], args.iterations)
    args.out.write(f"User {args.name}: credentials set for {', '.join(mechanisms)} "
                   f"({args.iterations} iterations)\n")  # fmt: skip
    return 0


def _list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        users = cluster.admin().list_users()
    if args.json:
        json.dump([{"name": u.name, "mechanisms": u.mechanisms} for u in users], args.out)
        args.out.write("\n")
    else:
        args.out.write(users_text(users))
    return 0


def users_text(users) -> str:
    if not users:
        return "No users (add one with `rafka users add NAME`)\n"
    rows = [["USER", "MECHANISMS"]]
    rows += [[u.name, ", ".join(f"{m} ({n} iterations)" for m, n in sorted(u.mechanisms.items()))]
             for u in users]  # fmt: skip
    return format_table(rows)


def _remove(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        cluster.admin().remove_user(args.name)
    args.out.write(f"User {args.name} removed\n")
    return 0
