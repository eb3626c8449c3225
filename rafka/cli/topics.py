"""``rafka topics``: create, list, describe, alter, grow and delete topics; elect leaders and
reassign partitions (kafka-topics.sh, kafka-leader-election.sh and
kafka-reassign-partitions.sh in one command). The last two, and the partition line of
``describe``, live in ``rafka.cli.replicas``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rafka.cli.arguments import config_pair, positive_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.replicas import (
    add_elect_leaders,
    add_reassign,
    partition_fields,
    partition_line,
)
from rafka.errors import RafkaError

OFFSET_FIELDS = ("log_start_offset", "high_watermark", "log_end_offset", "size_bytes")


def add_topics(commands: argparse._SubParsersAction) -> None:
    topics = commands.add_parser(
        "topics", help="create, list, describe, alter and delete topics; elect leaders and "
        "reassign partitions",
        description="Manage topics (like kafka-topics.sh), their leaders "
        "(kafka-leader-election.sh) and their replicas (kafka-reassign-partitions.sh).",
    )  # fmt: skip
    actions = topics.add_subparsers(title="actions", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=positive_int, default=1, metavar="N",
                        help="number of partitions (default 1)")  # fmt: skip
    create.add_argument("--replication-factor", type=positive_int, default=1, metavar="R",
                        help="replicas of each partition, at most one per disk (default 1); "
                        "spread over racks when the disk nodes have rafka-rack labels")
    create.add_argument("--config", type=config_pair, nargs="+", action="extend", default=[],
                        metavar="K=V", help="a topic property, Kafka name (retention.ms=...)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic exists already")  # fmt: skip
    create.set_defaults(handler=_topics_create)

    listing = actions.add_parser("list", help="list topic names")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    listing.set_defaults(handler=_topics_list)

    describe = actions.add_parser(
        "describe", help="partitions, leaders, ISR, offsets and non-default config of a topic",
        description="Per partition: leader (none: offline), leader epoch, replicas (preferred "
        "leader first), in-sync replicas, the replicas a reassignment adds and removes while "
        "it runs, and the offsets. With --under-replicated or --unavailable only the "
        "partitions in that state are listed, one line each with its topic (every topic "
        "when NAME is left out), as kafka-topics.sh --describe "
        "--under-replicated-partitions / --unavailable-partitions.",
    )  # fmt: skip
    describe.add_argument("name", metavar="NAME", nargs="?",
                          help="the topic (optional with --under-replicated or --unavailable: "
                          "default every topic)")  # fmt: skip
    describe.add_argument("--under-replicated", action="store_true",
                          help="only partitions with fewer in-sync replicas than replicas (not "
                          "counting those a reassignment is adding)")
    describe.add_argument("--unavailable", action="store_true",
                          help="only partitions without a live leader")  # fmt: skip
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(handler=_topics_describe, usage_error=describe.error)

    delete = actions.add_parser("delete", help="delete a topic and its data on every disk")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed if the topic does not exist")  # fmt: skip
    delete.set_defaults(handler=_topics_delete)

    alter = actions.add_parser("alter", help="change topic properties")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--config", type=config_pair, nargs="+", action="extend",
                       required=True, metavar="K=V",
                       help="a property to set; K=- or K= resets it to its default")
    alter.set_defaults(handler=_topics_alter)

    grow = actions.add_parser("add-partitions", help="grow a topic to more partitions")
    grow.add_argument("name", metavar="NAME")
    grow.add_argument("--total", type=positive_int, required=True, metavar="N",
                      help="the partition count after the change (never fewer)")  # fmt: skip
    grow.set_defaults(handler=_topics_add_partitions)

    add_elect_leaders(actions)
    add_reassign(actions)

    for parser in (create, listing, describe, delete, alter, grow):
        add_connection_options(parser)


# -- handlers ----------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    from rafka.errors import TopicAlreadyExists

    with connected(args) as cluster:
        try:
            described = cluster.admin().create_topic(
                args.name, args.partitions, args.replication_factor, dict(args.config) or None
            )
        except TopicAlreadyExists:
            if not args.if_not_exists:
                raise
            print(f"topic {args.name!r} exists already", file=args.out)
            return 0
    print(
        f"created topic {described.name!r}: {len(described.partitions)} partition(s), "
        f"replication factor {len(described.partitions[0].replicas)}"
        + _config_text(_non_default(described.config), ", config "),
        file=args.out,
    )
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        names = cluster.admin().list_topics(include_internal=args.internal)
    args.out.write("".join(f"{name}\n" for name in names))
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    if args.under_replicated or args.unavailable:
        return _describe_filtered(args)
    if args.name is None:
        args.usage_error(
            "the following arguments are required: NAME (or give --under-replicated or "
            "--unavailable to look through every topic)"
        )
    with connected(args) as cluster:
        admin = cluster.admin()
        described = admin.describe_topic(args.name)
        try:
            offsets = {o["partition"]: o
                       for o in admin.partition_offsets(args.name, timeout_s=0)}  # fmt: skip
        except RafkaError as e:  # a partition without a live leader: show the metadata
            print(f"warning: offsets unavailable: {type(e).__name__}: {e}", file=sys.stderr)
            offsets = {}
    config = _non_default(described.config)
    partitions = [
        {**partition_fields(p),
         **{k: offsets.get(p.partition, {}).get(k) for k in OFFSET_FIELDS}}
        for p in described.partitions
    ]  # fmt: skip
    if args.json:
        args.out.write(json.dumps({
            "name": described.name, "topic_id": described.topic_id,
            "internal": described.internal, "config": config, "partitions": partitions,
        }) + "\n")  # fmt: skip
        return 0
    replication = described.partitions[0].replication_factor if described.partitions else 0
    lines = [
        f"Topic: {described.name}\tTopicId: {described.topic_id}\t"
        f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\t"
        f"Configs: {_config_text(config)}"
    ]
    lines += [partition_line(p) for p in partitions]
    args.out.write("\n".join(lines) + "\n")
    return 0


def _describe_filtered(args: argparse.Namespace) -> int:
    """kafka-topics.sh --describe --under-replicated-partitions / --unavailable-partitions:
    the partitions in either state asked for, one line each, of NAME or of every topic."""
    with connected(args) as cluster:
        described = cluster.admin().describe_topics(None if args.name is None else [args.name])
    partitions = [
        {"topic": d.name, **partition_fields(p)}
        for d in described
        for p in d.partitions
        if (args.under_replicated and p.under_replicated) or (args.unavailable and p.offline)
    ]
    if args.json:
        args.out.write(json.dumps({"partitions": partitions}) + "\n")
        return 0
    args.out.write("".join(partition_line(p, with_topic=True) + "\n" for p in partitions))
    if not partitions:
        kinds = " or ".join(
            k for k, on in (("under-replicated", args.under_replicated),
                            ("unavailable", args.unavailable)) if on
        )  # fmt: skip
        scope = "every topic" if args.name is None else f"topic {args.name!r}"
        print(f"no {kinds} partitions in {scope}", file=sys.stderr)
    return 0


def _topics_delete(args: argparse.Namespace) -> int:
    from rafka.errors import UnknownTopicOrPartition

    with connected(args) as cluster:
        try:
            cluster.admin().delete_topic(args.name)
        except UnknownTopicOrPartition:
            if not args.if_exists:
                raise
            print(f"topic {args.name!r} does not exist", file=args.out)
            return 0
    print(f"deleted topic {args.name!r}", file=args.out)
    return 0


def _topics_alter(args: argparse.Namespace) -> int:
    changes = {k: (None if v in ("", "-") else v) for k, v in args.config}
    with connected(args) as cluster:
        described = cluster.admin().alter_topic_config(args.name, changes)
    print(f"altered topic {args.name!r}; config now "
          f"{_config_text(_non_default(described.config))}", file=args.out)  # fmt: skip
    return 0


def _topics_add_partitions(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        described = cluster.admin().create_partitions(args.name, args.total)
    print(f"topic {args.name!r} now has {len(described.partitions)} partition(s)", file=args.out)
    return 0


def _non_default(config: dict[str, Any]) -> dict[str, Any]:
    from rafka.storage.config import LogConfig

    defaults = LogConfig().to_dict()
    return {k: v for k, v in config.items() if defaults.get(k, object()) != v}


def _config_text(config: dict[str, Any], prefix: str = "") -> str:
    if not config:
        return "" if prefix else "(defaults)"
    return prefix + ",".join(f"{k}={_config_value(v)}" for k, v in sorted(config.items()))


def _config_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
