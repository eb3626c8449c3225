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
from typing import Any

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
from rafka.errors import RafkaError

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
        auto_create_topics=args.auto_create_topics, controller_disk=args.controller_disk,
        settings=dict(args.settings),
    )  # fmt: skip
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
    from rafka.errors import BrokerNotAvailable

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


def add_status(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="show the brokers and topic counts of the running services",
        description="Attach to the running services and show the controller, the brokers (one "
        "per data disk) and how many topics and partitions there are. Exit 1 if none run.",
    )
    add_connection_options(parser)
    parser.add_argument("--json", action="store_true", help="print the raw status as JSON")
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    with connected(args, need_ray=True) as cluster:
        status = cluster.status()
    if args.json:
        args.out.write(json.dumps(status, indent=2, sort_keys=True) + "\n")
    else:
        args.out.write(f"rafka in Ray namespace {cluster.namespace!r}\n")
        _write_status(status, args.out)
    return 0


def _write_status(status: dict[str, Any], out) -> None:
    out.write(
        f"controller: disk {status['controller_disk']!r}, metadata offset "
        f"{status['metadata_offset']}\n"
    )
    rows = [["BROKER", "DISK", "ALIVE", "NODE", "FREE DISK", "DIRECTORY"]]
    for b in status["brokers"]:
        free = b.get("disk_free_bytes")
        total = b.get("disk_total_bytes")
        rows.append([
            str(b["broker_id"]), b["disk"], "yes" if b["alive"] else "NO", b.get("node_ip", "-"),
            "-" if free is None else f"{human_size(free)} of {human_size(total)}",
            b.get("directory", "-"),
        ])  # fmt: skip
    out.write(format_table(rows, indent="  ") if status["brokers"] else "  no brokers registered\n")
    out.write(f"topics: {status['topics']}, partitions: {status['partitions']}\n")


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
