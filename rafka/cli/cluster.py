"""``rafka up``, ``rafka status`` and ``rafka down``: start, show and stop the services
(and, for ``up`` and ``down --stop-ray``, a local Ray head)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from typing import Any, Mapping

from rafka.cli.arguments import config_pair, disk_name
from rafka.cli.connect import (
    add_connection_options,
    connected,
    join_ray,
    local_ray_address,
    ray_session,
    resolve_namespace,
)
from rafka.cli.output import format_table, human_size
from rafka.errors import BrokerNotAvailable, RafkaError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def add_up(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "up",
        help="start the rafka services (and a local Ray head if none runs)",
        description=(
            "Start the rafka services: the controller and one node agent per data disk. With no "
            "--address and no Ray instance on this machine, first start a persistent local Ray "
            "head (`ray start --head`) whose node offers the data disk 'local', so the cluster "
            "outlives this command. On a running cluster, only adds what is missing (a node "
            "agent for a new disk)."
        ),
    )
    add_connection_options(parser)
    parser.add_argument(
        "--data-dir",
        metavar="D",
        help="root of the data directories (<D>/<disk name>); default $RAFKA_DATA_DIR or "
        "./rafka-data (on a running cluster: the directory it already uses)",
    )
    parser.add_argument(
        "--controller-disk",
        metavar="NAME",
        type=disk_name,
        help="the disk whose node hosts the controller (default: the first live disk)",
    )
    parser.add_argument(
        "--auto-create-topics",
        action="store_true",
        help="create a topic with 1 partition on its first use by a producer "
        "(auto.create.topics.enable)",
    )
    parser.add_argument(
        "--set", dest="settings", type=config_pair, nargs="+", action="extend", default=[],
        metavar="K=V",
        help="a cluster setting, Kafka's broker property name (broker.session.timeout.ms=2000, "
        "replica.lag.time.max.ms=10000, ...; see rafka.cluster.settings)",
    )  # fmt: skip
    parser.set_defaults(handler=_up)


def _up(args: argparse.Namespace) -> int:
    with ray_session():
        return _bring_up(args)


def _bring_up(args: argparse.Namespace) -> int:
    import ray

    import rafka
    from rafka.actors import service
    from rafka.actors.placement import DEFAULT_NAMESPACE, default_data_root

    address = local_ray_address(args)
    started_ray = address is None and not ray.is_initialized()
    if started_ray:
        _start_ray_head()
        address = local_ray_address(args) or "auto"
    namespace = resolve_namespace(args)
    join_ray(address, namespace)
    already = service.find_controller(namespace) is not None
    cluster = rafka.connect(
        address, data_dir=args.data_dir, namespace=namespace,
        auto_create_topics=args.auto_create_topics or None, controller_disk=args.controller_disk,
        settings=dict(args.settings),
    )  # fmt: skip
    try:
        cluster.bootstrap_servers  # waits for the Kafka listeners, when the cluster has any
    except BrokerNotAvailable:
        pass  # no listeners set, or they did not open (the status line then lacks them)
    status = cluster.status()
    if already:
        # connect() only attached: start what is missing (a node agent for a new disk), with
        # the data root the cluster already uses unless --data-dir says otherwise.
        roots = sorted({os.path.dirname(b["directory"]) for b in status["brokers"]
                        if b.get("directory")})  # fmt: skip
        data_root = os.path.abspath(args.data_dir) if args.data_dir else (
            roots[0] if roots else default_data_root())  # fmt: skip
        if args.data_dir and roots and data_root not in roots:
            print(f"warning: the running brokers keep their data in {', '.join(roots)}, not "
                  f"{data_root}; only new disks use {data_root}", file=sys.stderr)  # fmt: skip
        service.start_services(data_root, namespace, None, args.controller_disk)
        status = cluster.status()
        if args.auto_create_topics or args.controller_disk or args.settings:
            print("note: the services were already running: --auto-create-topics, --set and "
                  "--controller-disk apply only when they first start", file=sys.stderr)
    gcs = ray.get_runtime_context().gcs_address
    how = "started a Ray head on this machine" if started_ray else "joined the running Ray"
    out = args.out
    out.write(f"rafka {'was already' if already else 'is'} up in Ray namespace {namespace!r} "
              f"(Ray at {gcs}; {how})\n")  # fmt: skip
    _write_status(status, out)
    default = namespace == DEFAULT_NAMESPACE
    connect_args = json.dumps(gcs) + ("" if default else f", namespace={json.dumps(namespace)}")
    out.write(
        "\nconnect from Python:\n"
        "    import rafka\n"
        f"    cluster = rafka.connect({connect_args})\n"
        f"stop with: rafka down{'' if default else f' --namespace {namespace}'}"
        "   (--stop-ray also stops Ray on this machine)\n"
    )
    return 0


def _ray_executable() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


def _ray_env() -> dict[str, str]:
    from rafka.actors.service import AUTH_MODE_ENV

    env = dict(os.environ)
    env[AUTH_MODE_ENV] = os.environ.get(AUTH_MODE_ENV) or "disabled"
    return env


def _start_ray_head() -> None:
    from rafka.actors.placement import DEFAULT_DISK, DISK_LABEL, DISK_RESOURCE

    command = [
        _ray_executable(), "start", "--head",
        f"--resources={json.dumps({DISK_RESOURCE: 1})}",
        "--labels", f"{DISK_LABEL}={DEFAULT_DISK}", "--disable-usage-stats",
    ]  # fmt: skip
    print(f"starting Ray: {' '.join(command[1:])}", file=sys.stderr)
    done = subprocess.run(command, env=_ray_env(), capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise BrokerNotAvailable(f"`ray start --head` failed with status {done.returncode}")


#: Rows of the topic and problem-partition tables ``rafka status`` prints without --all.
MAX_ROWS = 20


def add_status(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="show brokers, topics, partition health and consumer groups at a glance",
        description="Attach to the running services and show the cluster at a glance: the "
        "controller; the brokers (one per data disk) with their node, disk usage and how many "
        "partition replicas each holds and leads; the topics with their leaders and replicas "
        "per broker (internal topics counted apart); the partitions that are under-replicated "
        "or offline; the consumer groups with their state and total lag. Exit 1 if no "
        "services run. `rafka groups describe GROUP` shows one group in full.",
    )
    add_connection_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the same facts as one JSON object (every topic, problem "
                        "partition and per-partition lag included)")  # fmt: skip
    parser.add_argument("--groups-detail", action="store_true",
                        help="also list each group's committed offset, log end offset and lag "
                        "per partition")  # fmt: skip
    parser.add_argument("--all", action="store_true",
                        help=f"list every topic and problem partition (default: the first "
                        f"{MAX_ROWS} of each)")  # fmt: skip
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    from rafka.clients.cluster_status import cluster_overview

    with connected(args, need_ray=True) as cluster:
        overview = cluster_overview(cluster.admin())
    if args.json:
        document = {"namespace": cluster.namespace, **overview}
        args.out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        args.out.write(status_text(overview, cluster.namespace, groups_detail=args.groups_detail,
                                   max_rows=None if args.all else MAX_ROWS))  # fmt: skip
    return 0


def status_text(
    overview: Mapping[str, Any], namespace: str | None = None, groups_detail: bool = False,
    max_rows: int | None = MAX_ROWS,
) -> str:  # fmt: skip
    """``rafka status`` as text: a ``cluster_overview`` (see rafka.clients.cluster_status),
    at most ``max_rows`` topics and problem partitions (None: all)."""
    lines: list[str] = []
    if namespace is not None:
        lines.append(f"rafka in Ray namespace {namespace!r}\n")
    lines.append(_controller_line(overview))
    brokers = overview["brokers"]
    alive = sum(1 for b in brokers if b["alive"])
    if brokers:
        lines.append(f"brokers: {len(brokers)}, {'all' if alive == len(brokers) else alive} "
                     "alive\n" + _broker_table(brokers))  # fmt: skip
    else:
        lines.append("brokers: none registered\n")
    lines.append(_topics_text(overview, max_rows))
    lines.append(_problems_text(overview, max_rows))
    lines.append(_groups_text(overview, groups_detail))
    return "".join(lines)


def _write_status(status: dict[str, Any], out) -> None:
    """The controller's ``describe_cluster`` answer as ``rafka up`` prints it."""
    out.write(_controller_line(status))
    out.write(_broker_table(status["brokers"]))
    out.write(f"topics: {status['topics']}, partitions: {status['partitions']}\n")


def _controller_line(status: Mapping[str, Any]) -> str:
    line = (f"controller: disk {status['controller_disk']!r}, metadata offset "
            f"{status['metadata_offset']}\n")  # fmt: skip
    if status.get("bootstrap_servers"):
        line += f"Kafka clients: bootstrap.servers={status['bootstrap_servers']}\n"
    return line


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _limited(rows: list[list[str]], max_rows: int | None, what: str) -> str:
    """The table of ``rows`` (a header first) cut to ``max_rows`` with a line saying so."""
    shown = rows if max_rows is None else rows[: max_rows + 1]
    text = format_table(shown, indent="  ")
    if len(shown) < len(rows):
        text += f"  ... and {len(rows) - len(shown)} more {what} (--all or --json: all)\n"
    return text


def _broker_table(brokers: list[Mapping[str, Any]]) -> str:
    """A row per broker; REPLICAS and LEADERS when the brokers carry those counts, RACK when
    any broker has one. Takes ``BrokerStatus`` dicts or the controller's raw ones."""
    if not brokers:
        return "  no brokers registered\n"
    counts = all("replicas" in b for b in brokers)
    racks = any(b.get("rack") for b in brokers)
    rows = [["BROKER", "DISK", *(["RACK"] if racks else []), "NODE", "ALIVE", "USED",
             "FREE DISK", *(["REPLICAS", "LEADERS"] if counts else []), "DIRECTORY"]]
    for b in brokers:
        free, total = b.get("disk_free_bytes"), b.get("disk_total_bytes")
        known = free is not None and total is not None
        if not b.get("registered", True):
            alive = "unknown"
        else:
            alive = ("fenced" if b.get("fenced") else "yes") if b["alive"] else "NO"
        rows.append([
            str(b["broker_id"]), b["disk"], *([b.get("rack") or "-"] if racks else []),
            b.get("node_ip") or "-", alive,
            f"{100 * (total - free) / total:.0f}%" if known and total else "-",
            f"{human_size(free)} of {human_size(total)}" if known else "-",
            *([str(b["replicas"]), str(b["leaders"])] if counts else []),
            b.get("directory") or "-",
        ])  # fmt: skip
    return format_table(rows, indent="  ")


def _placement(topic: Mapping[str, Any]) -> str:
    """Per broker: partitions led / replicas held, as "0:2/3 1:1/3"."""
    return " ".join(f"{p['broker_id']}:{len(p['leaders'])}/{len(p['replicas'])}"
                    for p in topic["placement"]) or "-"  # fmt: skip


def _topics_text(overview: Mapping[str, Any], max_rows: int | None) -> str:
    internal = [t for t in overview["topic_list"] if t["internal"]]
    head = f"topics: {overview['topics']}, partitions: {overview['partitions']}"
    if internal:
        head += "; internal: " + ", ".join(
            f"{t['name']} ({t['partitions']} partitions)" for t in internal
        )
    if not overview["topic_list"]:
        return head + "\n"
    rows = [["TOPIC", "PARTITIONS", "RF", "LEADERS/REPLICAS PER BROKER", "UNDER-REPLICATED",
             "OFFLINE"]]  # fmt: skip
    rows += [[t["name"], str(t["partitions"]), str(t["replication_factor"]), _placement(t),
              str(t["under_replicated"]), str(t["offline"])]
             for t in overview["topic_list"]]  # fmt: skip
    return head + "\n" + _limited(rows, max_rows, "topics")


def _problems_text(overview: Mapping[str, Any], max_rows: int | None) -> str:
    head = (f"under-replicated partitions: {overview['under_replicated_partitions']}, "
            f"offline partitions: {overview['offline_partitions']}\n")  # fmt: skip
    problems = overview["problem_partitions"]
    if not problems:
        return head
    rows = [["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "STATE"]]
    rows += [[p["topic"], str(p["partition"]), "-" if p["leader"] < 0 else str(p["leader"]),
              ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])) or "-",
              ", ".join(s for s, on in (("offline", p["offline"]),
                                        ("under-replicated", p["under_replicated"])) if on)]
             for p in problems]  # fmt: skip
    return head + _limited(rows, max_rows, "partitions")


def _groups_text(overview: Mapping[str, Any], detail: bool) -> str:
    if overview.get("groups_error"):
        return f"consumer groups: could not be listed: {overview['groups_error']}\n"
    groups = overview["groups"]
    if not groups:
        return "consumer groups: 0\n"
    failed = sum(1 for g in groups if g["error"])
    total = sum(g["total_lag"] or 0 for g in groups)
    head = f"consumer groups: {len(groups)}, total lag: {total}"
    head += f" ({failed} could not be described)\n" if failed else "\n"
    rows = [["GROUP", "STATE", "MEMBERS", "PARTITIONS", "LAG", *(["ERROR"] if failed else [])]]
    rows += [[g["group_id"], g["state"], str(g["members"]),
              "-" if g["error"] else str(len(g["offsets"])), _dash(g["total_lag"]),
              *([g["error"] or ""] if failed else [])]
             for g in groups]  # fmt: skip
    text = head + format_table(rows, indent="  ")
    offsets = [(g["group_id"], o) for g in groups for o in g["offsets"]]
    if detail and offsets:
        rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "MEMBER-ID"]]  # fmt: skip
        rows += [[group, o["topic"], str(o["partition"]), _dash(o["committed"]),
                  _dash(o["log_end_offset"]), _dash(o["lag"]), o["member_id"] or "-"]
                 for group, o in offsets]  # fmt: skip
        text += "lag per partition:\n" + format_table(rows, indent="  ")
    return text


def add_down(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "down",
        help="stop the rafka services (data stays on disk)",
        description="Stop every rafka service in the namespace: replicas flush and close "
        "cleanly, then the node agents and the controller stop. The data stays on disk; "
        "`rafka up` brings it all back.",
    )
    add_connection_options(parser)
    parser.add_argument(
        "--stop-ray",
        action="store_true",
        help="then run `ray stop`, which stops EVERY Ray instance on this machine",
    )
    parser.set_defaults(handler=_down)


def _down(args: argparse.Namespace) -> int:
    with ray_session():
        _stop_services(args)
    if args.stop_ray:
        done = subprocess.run(
            [_ray_executable(), "stop"], env=_ray_env(), capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            print(f"error: `ray stop` failed with status {done.returncode}", file=sys.stderr)
            return 1
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        summary = _ANSI.sub("", lines[-1]).split(" -- ")[-1] if lines else "done"
        print(f"ray stop: {summary}", file=args.out)
    return 0


def _stop_services(args: argparse.Namespace) -> None:
    import ray

    from rafka.actors import service
    from rafka.connection import Cluster

    namespace = resolve_namespace(args)
    address = local_ray_address(args)
    if address is None and not ray.is_initialized():
        print("no Ray instance runs on this machine: no rafka services to stop", file=args.out)
        return
    if address is not None:
        join_ray(address, namespace)
    directories: list[str] = []
    if service.find_controller(namespace) is not None:
        with contextlib.suppress(RafkaError):
            status = Cluster(namespace, address).status()
            directories = [b["directory"] for b in status["brokers"] if b.get("directory")]
    stopped = service.stop_services(namespace)
    if not any(stopped.values()):
        print(f"no rafka services run in Ray namespace {namespace!r}", file=args.out)
        return
    print(
        f"stopped {stopped['replicas']} replica(s), {stopped['agents']} node agent(s), "
        f"{stopped.get('coordinators', 0)} group coordinator(s) and "
        f"{'the' if stopped['controller'] else 'no'} controller in Ray namespace {namespace!r}",
        file=args.out,
    )
    if directories:
        print(f"the data stays in {', '.join(directories)}", file=args.out)
