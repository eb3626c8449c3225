"""``rafka brokers drain|undrain ID`` and ``rafka balancer status|rebalance`` (Cruise
Control's remove_broker, rebalance and state): empty a broker before its node goes, preview
or run a rebalance, and see what the balancer is doing."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rafka.cli.arguments import non_negative_int
from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import format_table, human_size


def add_brokers(commands: argparse._SubParsersAction) -> None:
    brokers = commands.add_parser(
        "brokers", help="drain a broker before its node goes, or stop draining it",
        description="Move every replica and leadership off a broker (throttled, by follower "
        "fetch) so its node can be removed; `rafka balancer status` shows when it is empty.",
    )  # fmt: skip
    actions = brokers.add_subparsers(title="actions", metavar="ACTION", required=True)
    for name, draining, text in (("drain", True, "empty the broker"),
                                 ("undrain", False, "stop emptying the broker")):  # fmt: skip
        parser = actions.add_parser(name, help=text, description=text)
        parser.add_argument("broker_id", type=non_negative_int, metavar="ID")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.set_defaults(handler=_drain, draining=draining)
        add_connection_options(parser)


def add_balancer(commands: argparse._SubParsersAction) -> None:
    balancer = commands.add_parser(
        "balancer", help="the balancer's status; preview or run a rebalance",
        description="The balancer moves replicas and leaderships for its goals, in order: "
        "brokers being drained or lost hold nothing, racks, disk capacity, replicas and "
        "leaders per broker, bytes in and out. Its mode (cluster setting "
        "partition.autobalancing.mode: off, node_add, continuous) says what it moves by itself.",
    )  # fmt: skip
    actions = balancer.add_subparsers(title="actions", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status", help="mode, goals, disk and traffic per broker, moves in flight, what is wrong")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=_status)
    add_connection_options(status)
    rebalance = actions.add_parser(
        "rebalance", help="plan over every goal; --execute starts it",
        description="Print the moves a rebalance over every goal would make now; with "
        "--execute start them (at most the throttle's worth at once; the balancer goes on "
        "in its next ticks).",
    )  # fmt: skip
    rebalance.add_argument("--execute", action="store_true", help="start the moves")
    rebalance.add_argument("--json", action="store_true", help="print one JSON object")
    rebalance.set_defaults(handler=_rebalance)
    add_connection_options(rebalance)


def _drain(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        admin = cluster.admin()
        if args.draining:
            status = admin.drain_broker(args.broker_id)
        else:
            status = admin.undrain_broker(args.broker_id)
    if args.json:
        _json(args, _status_dict(status))
    else:
        args.out.write(status_text(status))
    return 0


def _status(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        status = cluster.admin().describe_balancer()
    if args.json:
        _json(args, _status_dict(status))
    else:
        args.out.write(status_text(status))
    return 0


def _rebalance(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        result = cluster.admin().rebalance(dry_run=not args.execute)
    if args.json:
        _json(args, _plan_dict(result))
    else:
        args.out.write(plan_text(result, started=args.execute))
    return 0


def status_text(status) -> str:
    brokers = sorted(status.replicas)
    rows = [["BROKER", "REPLICAS", "LEADERS", "DISK", "IN", "OUT", "STATE"]]
    for b in brokers:
        state = ("draining" if b in status.draining else
                 f"dead {status.dead[b] // 1000} s" if b in status.dead else "live")
        rows.append([str(b), str(status.replicas[b]), str(status.leaders.get(b, 0)),
                     disk_text(status.disk_used.get(b, 0), status.disk_capacity.get(b, 0)),
                     rate_text(status.bytes_in_per_s.get(b, 0.0)),
                     rate_text(status.bytes_out_per_s.get(b, 0.0)), state])  # fmt: skip
    lines = [f"Mode: {status.mode}   Goals now: {', '.join(status.goals)}",
             f"Moves started: {status.moves_started}   In flight: {len(status.in_flight)}   "
             f"Lost brokers are replaced after {status.heal_after_ms // 1000} s"]
    lines.append(autoscaling_text(status.autoscaling))
    text = "\n".join(lines) + "\n" + format_table(rows)
    for move in status.in_flight:
        since = f" for {move['for_ms'] // 1000} s" if "for_ms" in move else ""
        text += (f"Moving {move['topic']}-{move['partition']}{since}: adding {move['adding']}, "
                 f"removing {move['removing']}, in sync {move['isr']}\n")
    return text + plan_text(status.pending, started=False, heading="A rebalance now would")


def autoscaling_text(scaling: dict | None) -> str:
    if not scaling or not scaling.get("enabled"):
        return "Autoscaling: off"
    text = f"Autoscaling: wants {scaling['wanted']} broker(s)"
    if scaling.get("reasons"):
        text += f" ({'; '.join(scaling['reasons'])})"
    text += f", asked Ray for {scaling['requested']} disk node(s)"
    if scaling.get("retiring") is not None:
        text += f", retiring broker {scaling['retiring']}"
    if scaling.get("retired"):
        text += f", retired {scaling['retired']}"
    return text


def disk_text(used: int, capacity: int) -> str:
    """``used`` of ``capacity`` bytes and the share; "-" when the broker has not reported."""
    if not capacity:
        return "-"
    return f"{human_size(used)} of {human_size(capacity)} ({used / capacity:.0%})"


def rate_text(bytes_per_s: float) -> str:
    return f"{human_size(int(bytes_per_s))}/s"


def plan_text(result, started: bool, heading: str | None = None) -> str:
    heading = heading or ("Started" if started else "Would start")
    lines = [f"{heading}: {len(result.moves)} replica move(s), "
             f"{len(result.leader_moves)} leadership move(s)"]
    lines += [f"  {m.topic}-{m.partition}: broker {m.source} -> {m.destination} ({m.goal})"
              for m in result.moves]
    lines += [f"  {t}-{p}: leader -> {leader} ({goal})" for t, p, leader, goal in
              result.leader_moves]  # fmt: skip
    for goal, problems in result.violations.items():
        lines += [f"Still wrong ({goal}): {problem}" for problem in problems]
    return "\n".join(lines) + "\n"


def _plan_dict(result) -> dict[str, Any]:
    return {"moves": [m._asdict() for m in result.moves],
            "leader_moves": [list(m) for m in result.leader_moves],
            "violations": result.violations}  # fmt: skip


def _status_dict(status) -> dict[str, Any]:
    return {**status._asdict(), "pending": _plan_dict(status.pending)}


def _json(args: argparse.Namespace, obj: dict[str, Any]) -> None:
    args.out.write(json.dumps(obj, sort_keys=True) + "\n")
