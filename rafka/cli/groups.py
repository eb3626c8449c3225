"""``rafka groups``: list, describe and delete consumer groups, and reset their committed
offsets (kafka-consumer-groups.sh). Like Kafka's tool, ``reset-offsets`` only prints its
plan unless given ``--execute``, and refuses while the group has members."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from rafka.cli.arguments import non_negative_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import format_table
from rafka.types import TopicPartition


def add_groups(commands: argparse._SubParsersAction) -> None:
    groups = commands.add_parser(
        "groups", help="list, describe and delete consumer groups; reset their offsets",
        description="Manage consumer groups and their committed offsets, like "
        "kafka-consumer-groups.sh.",
    )  # fmt: skip
    actions = groups.add_subparsers(title="actions", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list consumer groups",
                                 description="The group ids, one a line (with --state: a "
                                 "table of state, protocol type and members).")  # fmt: skip
    listing.add_argument("--state", action="store_true",
                         help="show each group's state, protocol type and member count")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=_groups_list)

    describe = actions.add_parser(
        "describe", help="members, committed offsets and lag of a group",
        description="A header line with the group's state, protocol, generation and members, "
        "then per partition it has committed or a member owns: the committed offset, the log "
        "end offset (high watermark), the lag and the owning member ('-': none or unknown).",
    )  # fmt: skip
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(handler=_groups_describe)

    delete = actions.add_parser("delete", help="delete an empty group and its offsets")
    delete.add_argument("group", metavar="GROUP")
    delete.set_defaults(handler=_groups_delete)

    reset = actions.add_parser(
        "reset-offsets", help="move a group's committed offsets (plan only without --execute)",
        description="Reset the committed offsets of GROUP, as kafka-consumer-groups.sh "
        "--reset-offsets: the group must have no members (stop its consumers first). Targets "
        "are clamped to [log start offset, high watermark]. Without --execute the plan is "
        "printed and nothing changes.",
    )  # fmt: skip
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", type=topic_partitions, action="append", metavar="T[:P,P...]",
                       help="a topic (all its partitions) or some of its partitions "
                       "(repeatable)")  # fmt: skip
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed offsets for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="to the high watermark")
    target.add_argument("--to-datetime", type=iso_datetime, metavar="ISO8601",
                        help="to the first record at or after this time (no zone: local "
                        "time), e.g. 2024-05-01T12:00:00 or 2024-05-01T10:00:00Z; the high "
                        "watermark when there is none")  # fmt: skip
    target.add_argument("--to-offset", type=non_negative_int, metavar="N", help="to offset N")
    target.add_argument("--shift-by", type=integer, metavar="N",
                        help="N past the committed offset (negative: back; a partition "
                        "without a commit shifts from its log start)")  # fmt: skip
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the plan (the default)")  # fmt: skip
    reset.add_argument("--json", action="store_true", help="print one JSON object")
    reset.set_defaults(handler=_groups_reset)

    for parser in (listing, describe, delete, reset):
        add_connection_options(parser)


# -- argument types ----------------------------------------------------------------------------


def topic_partitions(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``orders`` (every partition: None) or ``orders:0,2`` (those partitions, in order)."""
    topic, colon, rest = text.partition(":")
    if not topic.strip():
        raise argparse.ArgumentTypeError(f"{text!r} has no topic: give T or T:P,P,...")
    if not colon:
        return topic.strip(), None
    parts = [p.strip() for p in rest.split(",")]
    if not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: partitions after ':' must be numbers 0 or more, comma-separated, "
            "like orders:0,2"
        )
    return topic.strip(), tuple(dict.fromkeys(int(p) for p in parts))


def iso_datetime(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date-time: give e.g. 2024-05-01T12:00:00 (local "
            "time), 2024-05-01T10:00:00Z or 2024-05-01T12:00:00+02:00"
        ) from None


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def reset_request(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``Admin.reset_offsets`` the reset options ask for."""
    topics, partitions = [], []
    for topic, numbers in args.topic or ():
        if numbers is None:
            topics.append(topic)
        else:
            partitions.extend(TopicPartition(topic, p) for p in numbers)
    if args.to_earliest or args.to_latest:
        to: Any = "earliest" if args.to_earliest else "latest"
    else:
        to = args.to_datetime if args.to_datetime is not None else args.to_offset
    return {
        "topics": topics or None, "partitions": partitions or None, "to": to,
        "shift_by": args.shift_by, "dry_run": not args.execute,
    }  # fmt: skip


# -- handlers ----------------------------------------------------------------------------------


def _groups_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        listings = cluster.admin().list_groups()
    if args.json:
        args.out.write(json.dumps({"groups": [g._asdict() for g in listings]}) + "\n")
    elif args.state:
        rows = [["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"]] + [
            [g.group_id, g.state, g.protocol_type or "-", str(g.members)] for g in listings
        ]
        args.out.write(format_table(rows))
    else:
        args.out.write("".join(f"{g.group_id}\n" for g in listings))
    return 0


def _groups_describe(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        described = cluster.admin().describe_group(args.group)
    if args.json:
        args.out.write(json.dumps(description_fields(described)) + "\n")
        return 0
    args.out.write(describe_text(described))
    if not described.members:
        print(f"consumer group {described.group_id!r} has no active members", file=sys.stderr)
    return 0


def description_fields(d: Any) -> dict[str, Any]:
    """A GroupDescription as the JSON ``describe --json`` prints (log end offset null when
    unknown)."""
    return {
        "group_id": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
        "protocol": d.protocol, "generation": d.generation, "leader": d.leader,
        "total_lag": d.total_lag,
        "members": [{**m._asdict(), "assignment": [tp._asdict() for tp in m.assignment]}
                    for m in d.members],
        "offsets": [{**o._asdict(), "log_end_offset": None if o.log_end_offset < 0
                     else o.log_end_offset} for o in d.offsets],
    }  # fmt: skip


def describe_text(d: Any) -> str:
    """The header line and, when the group has any partitions, kafka-consumer-groups.sh's
    table of them."""
    header = (
        f"Group: {d.group_id}\tState: {d.state}\tProtocolType: {d.protocol_type or '-'}\t"
        f"Protocol: {d.protocol or '-'}\tGeneration: {d.generation}\t"
        f"Members: {len(d.members)}\tTotalLag: {d.total_lag}\n"
    )
    if not d.offsets:
        return header
    rows = [["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"]]
    rows += [
        [o.topic, str(o.partition), _or_dash(o.committed),
         _or_dash(o.log_end_offset if o.log_end_offset >= 0 else None), _or_dash(o.lag),
         o.member_id or "-"]
        for o in d.offsets
    ]  # fmt: skip
    return header + "\n" + format_table(rows)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _groups_delete(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        cluster.admin().delete_group(args.group)
    print(f"deleted consumer group {args.group!r}", file=args.out)
    return 0


def _groups_reset(args: argparse.Namespace) -> int:
    request = reset_request(args)
    with connected(args) as cluster:
        plan = cluster.admin().reset_offsets(args.group, **request)
    executed = not request["dry_run"]
    if args.json:
        args.out.write(json.dumps({
            "group": args.group, "executed": executed,
            "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": offset}
                        for tp, offset in plan.items()],
        }) + "\n")  # fmt: skip
    else:
        rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
            [args.group, tp.topic, str(tp.partition), str(offset)] for tp, offset in plan.items()
        ]
        args.out.write(format_table(rows))
    if executed:
        print(f"committed {len(plan)} offset(s) for group {args.group!r}", file=sys.stderr)
    else:
        print("dry run: nothing was changed; add --execute to commit these offsets",
              file=sys.stderr)  # fmt: skip
    return 0
