"""``rafka topics elect-leaders`` and ``rafka topics reassign`` (kafka-leader-election.sh and
kafka-reassign-partitions.sh, --cancel too), and the partition line that ``describe`` prints
too: who leads a partition, its replicas, its in-sync replicas and a reassignment in
progress."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from rafka.cli.arguments import non_negative_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import human_size
from rafka.clients.admin import ELECTION_TYPES


def add_elect_leaders(actions: argparse._SubParsersAction) -> None:
    elect = actions.add_parser(
        "elect-leaders", help="move leadership back to the preferred replicas",
        description="Run a leader election, as kafka-leader-election.sh. 'preferred' makes "
        "each partition's first replica its leader again when it is alive and in sync (after "
        "a failover left leadership elsewhere); 'unclean' gives a leaderless partition a "
        "leader even from outside the in-sync replicas, losing the records it lacks. Prints "
        "one line per partition; exit 1 if an election failed (a partition already led by "
        "its preferred replica is not a failure).",
    )  # fmt: skip
    elect.add_argument("name", metavar="NAME", nargs="?",
                       help="the topic (default: every topic)")  # fmt: skip
    elect.add_argument("--partition", type=non_negative_int, action="append", metavar="P",
                       help="only this partition of NAME (repeatable; default all)")
    elect.add_argument("--type", choices=ELECTION_TYPES, default="preferred",
                       dest="election_type", help="the kind of election (default preferred)")
    elect.set_defaults(handler=_elect_leaders, usage_error=elect.error)
    add_connection_options(elect)


def add_reassign(actions: argparse._SubParsersAction) -> None:
    reassign = actions.add_parser(
        "reassign", help="move partitions to other brokers, or cancel a move",
        description="Give partitions new replica sets (preferred leader first), as "
        "kafka-reassign-partitions.sh --execute: either --partition P --replicas B1,B2,... "
        "pairs for topic NAME, or --plan FILE.json in Kafka's format "
        '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]} '
        "(NAME optional; '-' reads stdin). The new replicas copy the log in the background; "
        "`rafka topics describe NAME` shows Adding/Removing Replicas until they are in sync. "
        "NAME --cancel [--partition P ...] cancels a reassignment in progress, as "
        "kafka-reassign-partitions.sh --cancel: the partitions (default: every partition of "
        "NAME being reassigned) go back to their original replicas and the replicas the "
        "reassignment added are deleted.",
    )  # fmt: skip
    reassign.add_argument("name", metavar="NAME", nargs="?",
                          help="the topic (optional with --plan)")  # fmt: skip
    reassign.add_argument("--partition", type=non_negative_int, action="append", metavar="P",
                          help="a partition to move; pairs with the --replicas in the same "
                          "position (repeatable); with --cancel, a partition whose "
                          "reassignment to cancel")  # fmt: skip
    reassign.add_argument("--replicas", type=broker_ids, action="append", metavar="B1,B2,...",
                          help="the broker ids of the partition's new replica set, preferred "
                          "leader first")  # fmt: skip
    reassign.add_argument("--plan", type=reassignment_plan, metavar="FILE.json",
                          help="a reassignment plan in Kafka's JSON format ('-': stdin)")
    reassign.add_argument("--cancel", action="store_true",
                          help="cancel the reassignment of NAME's partitions (all, or those "
                          "given with --partition): back to their original replicas")
    reassign.set_defaults(handler=_reassign, usage_error=reassign.error)
    add_connection_options(reassign)


# -- argument types ----------------------------------------------------------------------------


def broker_ids(text: str) -> list[int]:
    """``1,2,3``: distinct broker ids >= 0, preferred leader first."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or "" in parts:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of broker ids: give them comma-separated, like 1,2,3"
        )
    ids = []
    for part in parts:
        if not part.isdigit():
            raise argparse.ArgumentTypeError(
                f"{part!r} in {text!r} is not a broker id: give integers 0 or more, like 1,2,3"
            )
        if int(part) in ids:
            raise argparse.ArgumentTypeError(
                f"broker {int(part)} appears twice in {text!r}: each replica needs its own "
                "broker"
            )
        ids.append(int(part))
    return ids


def reassignment_plan(path: str) -> dict[str, dict[int, list[int]]]:
    """A Kafka reassignment JSON file read and checked: {topic: {partition: replicas}}."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {e}") from None
    try:
        return parse_plan(json.loads(text))
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{path!r} is not JSON: {e}") from None
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{path!r}: {e}") from None


_PLAN_EXAMPLE = '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}'


def parse_plan(plan: Any) -> dict[str, dict[int, list[int]]]:
    """Kafka's reassignment JSON (already decoded) as {topic: {partition: replicas}}, in the
    plan's order; ValueError says which entry is wrong and how. ``log_dirs`` is accepted
    only as all "any": rafka places replicas on brokers (one disk each), not on log dirs."""
    if not isinstance(plan, dict) or "partitions" not in plan:
        raise ValueError(f"a reassignment plan is an object like {_PLAN_EXAMPLE}")
    if plan.get("version", 1) != 1:
        raise ValueError(f"plan version {plan.get('version')!r} is unknown; use version 1")
    entries = plan["partitions"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'"partitions" must be a non-empty list, like {_PLAN_EXAMPLE}')
    out: dict[str, dict[int, list[int]]] = {}
    for i, entry in enumerate(entries):
        where = f"partitions[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object with topic, partition and replicas")
        missing = [k for k in ("topic", "partition", "replicas") if k not in entry]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"{where}: topic must be a topic name, got {topic!r}")
        if not _is_id(partition):
            raise ValueError(f"{where}: partition must be an integer 0 or more, got "
                             f"{partition!r}")  # fmt: skip
        if not isinstance(replicas, list) or not replicas or not all(map(_is_id, replicas)):
            raise ValueError(f"{where}: replicas must be a non-empty list of broker ids "
                             f"(integers 0 or more), got {replicas!r}")  # fmt: skip
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"{where}: replicas {replicas} name a broker twice: each replica "
                             "needs its own broker")  # fmt: skip
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (
            not isinstance(log_dirs, list) or any(d != "any" for d in log_dirs)
        ):
            raise ValueError(
                f"{where}: log_dirs {log_dirs!r} cannot be honoured: each broker has one "
                'disk and its replicas go there; remove log_dirs or make every entry "any"'
            )
        moves = out.setdefault(topic, {})
        if partition in moves:
            raise ValueError(f"{where}: {topic} partition {partition} appears twice")
        moves[partition] = list(replicas)
    return out


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- output ------------------------------------------------------------------------------------


def partition_fields(p: Any) -> dict[str, Any]:
    """A PartitionDescription as the JSON fields ``describe`` prints."""
    return {
        "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
        "replicas": list(p.replicas), "isr": list(p.isr), "adding": list(p.adding),
        "removing": list(p.removing), "offline": p.offline,
        "under_replicated": p.under_replicated, "starting": list(p.starting),
    }  # fmt: skip


def partition_line(p: dict[str, Any], with_topic: bool = False) -> str:
    """One partition as kafka-topics.sh --describe prints it: tab-separated ``Name: value``
    fields, the reassignment's replicas only while one runs, offsets when known."""
    leader = p["leader"] if p["leader"] is not None and p["leader"] >= 0 else "none"
    line = f"\tTopic: {p['topic']}" if with_topic else ""
    line += (
        f"\tPartition: {p['partition']}\tLeader: {leader}\tEpoch: {p['leader_epoch']}\t"
        f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}"
    )
    if p.get("adding"):
        line += f"\tAdding Replicas: {_ids(p['adding'])}"
    if p.get("removing"):
        line += f"\tRemoving Replicas: {_ids(p['removing'])}"
    if p.get("starting"):
        line += f"\tStarting: {_ids(p['starting'])}"
    if p.get("offline"):
        line += "\tOffline: yes"
    if p.get("high_watermark") is not None:
        line += (
            f"\tLogStartOffset: {p['log_start_offset']}\tHighWatermark: "
            f"{p['high_watermark']}\tLogEndOffset: {p['log_end_offset']}\t"
            f"Size: {human_size(p['size_bytes'])}"
        )
    return line


# -- handlers ----------------------------------------------------------------------------------


def _elect_leaders(args: argparse.Namespace) -> int:
    if args.partition and args.name is None:
        args.usage_error("--partition needs NAME, the topic the partitions belong to")
    with connected(args) as cluster:
        results = cluster.admin().elect_leaders(args.name, args.partition, args.election_type)
    lines, failed = election_report(sorted(results, key=lambda r: (r.topic, r.partition)))
    args.out.write("".join(line + "\n" for line in lines))
    if not results:
        print("no partitions to elect leaders for", file=sys.stderr)
    if failed:
        print(f"error: the {args.election_type} election failed for {failed} partition(s)",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def election_report(results: Sequence[Any]) -> tuple[list[str], int]:
    """One line per ElectionResult, and how many failed (ElectionNotNeeded is no failure:
    the preferred replica leads already)."""
    from rafka.errors import ElectionNotNeeded

    lines, failed = [], 0
    for r in results:
        where = f"Topic: {r.topic}\tPartition: {r.partition}\t"
        leader = r.leader if r.leader is not None and r.leader >= 0 else "none"
        if r.error is None:
            lines.append(f"{where}Leader: {leader}\telected")
        elif isinstance(r.error, ElectionNotNeeded):
            lines.append(f"{where}Leader: {leader}\tnot needed: {r.error}")
        else:
            failed += 1
            lines.append(f"{where}Leader: {leader}\tfailed: {type(r.error).__name__}: {r.error}")
    return lines, failed


def _reassign(args: argparse.Namespace) -> int:
    if args.cancel:
        return _cancel_reassignment(args)
    plan = reassign_request(args)
    with connected(args) as cluster:
        admin = cluster.admin()
        for topic, moves in plan.items():
            described = admin.reassign_partitions(topic, moves)
            print(f"reassigning {len(moves)} partition(s) of topic {topic!r}:", file=args.out)
            args.out.write("".join(
                partition_line(partition_fields(p)) + "\n"
                for p in described.partitions if p.partition in moves
            ))  # fmt: skip
    names = " ".join(plan)
    print(f"the new replicas catch up in the background; `rafka topics describe {names}` "
          "shows Adding/Removing Replicas until they are in sync", file=sys.stderr)  # fmt: skip
    return 0


def _cancel_reassignment(args: argparse.Namespace) -> int:
    partitions = cancel_request(args)
    with connected(args) as cluster:
        described = cluster.admin().cancel_reassignment(args.name, partitions)
    if partitions is None:
        print(f"cancelled the reassignments of topic {args.name!r}; its partitions:",
              file=args.out)  # fmt: skip
    else:
        print(f"cancelled the reassignment of {len(partitions)} partition(s) of topic "
              f"{args.name!r}:", file=args.out)  # fmt: skip
    args.out.write("".join(
        partition_line(partition_fields(p)) + "\n"
        for p in described.partitions if partitions is None or p.partition in partitions
    ))  # fmt: skip
    print("the partitions are back on their original replicas; the replicas the "
          "reassignment added are deleted", file=sys.stderr)  # fmt: skip
    return 0


def cancel_request(args: argparse.Namespace) -> list[int] | None:
    """The partitions ``--cancel`` names (None: every partition of NAME being reassigned);
    a usage error when --cancel is combined with a new assignment or NAME is missing."""
    if args.replicas:
        args.usage_error(
            "--cancel takes no --replicas: a cancelled reassignment goes back to the replicas "
            "the partition had before; give --partition P alone to pick partitions"
        )
    if args.plan is not None:
        args.usage_error(
            "--cancel takes no --plan: a plan starts a reassignment; give NAME --cancel "
            "[--partition P ...] to cancel one"
        )
    if args.name is None:
        args.usage_error(
            "the following arguments are required with --cancel: NAME (the topic whose "
            "reassignment to cancel)"
        )
    if not args.partition:
        return None
    partitions = list(dict.fromkeys(args.partition))
    if len(partitions) != len(args.partition):
        twice = sorted({p for p in args.partition if args.partition.count(p) > 1})
        args.usage_error(f"partition {', '.join(map(str, twice))} is given twice")
    return partitions


def reassign_request(args: argparse.Namespace) -> dict[str, dict[int, list[int]]]:
    """{topic: {partition: replicas}} from --plan or --partition/--replicas pairs; a usage
    error says what is missing or inconsistent."""
    pairs = args.partition or args.replicas
    if args.plan is not None:
        if pairs:
            args.usage_error("give either --plan or --partition/--replicas pairs, not both")
        others = sorted(set(args.plan) - {args.name}) if args.name is not None else []
        if others:
            args.usage_error(
                f"the plan moves partitions of {', '.join(map(repr, others))}, not of "
                f"{args.name!r} only: leave NAME out to apply the whole plan"
            )
        return args.plan
    if not pairs:
        args.usage_error(
            "say what to move: --partition P --replicas B1,B2,... (repeatable) or --plan "
            "FILE.json"
        )
    if args.name is None:
        args.usage_error("the following arguments are required: NAME (the topic to reassign)")
    partitions, replicas = args.partition or [], args.replicas or []
    if len(partitions) != len(replicas):
        args.usage_error(
            f"each --partition needs one --replicas: got {len(partitions)} --partition and "
            f"{len(replicas)} --replicas"
        )
    moves: dict[int, list[int]] = {}
    for partition, ids in zip(partitions, replicas):
        if partition in moves:
            args.usage_error(f"partition {partition} is given twice")
        moves[partition] = ids
    return {args.name: moves}


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"
