"""The ``rafka`` command line: one argparse subcommand per tool.

Each subcommand is declared by an ``_add_<name>`` function (its arguments and its handler).
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
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Iterator, Sequence

from rafka import __version__
from rafka.errors import RafkaError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader went away (``rafka dump-log ... | head``): stop quietly, like other tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (RafkaError, ConnectionError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The ``rafka`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="rafka", description="A Kafka-class distributed commit log on Ray."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    _add_up(commands)
    _add_status(commands)
    _add_down(commands)
    _add_topics(commands)
    _add_produce(commands)
    _add_consume(commands)
    _add_dump_log(commands)
    return parser


# -- connecting ------------------------------------------------------------------------------


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray address to join (host:port, ray://host:10001 or auto); default: the Ray "
        "instance running on this machine, else an embedded one for this command",
    )
    parser.add_argument(
        "--namespace",
        metavar="NS",
        help="Ray namespace of the rafka services (default $RAFKA_NAMESPACE or 'rafka')",
    )


def _namespace(args: argparse.Namespace) -> str:
    from rafka.actors.placement import default_namespace

    return args.namespace or default_namespace()


def _quiet_ray() -> None:
    import warnings

    # ray.init warns about a future change of GPU env vars: noise for a command line tool.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")


def _local_ray_address(args: argparse.Namespace) -> str | None:
    """The Ray address this command will join: ``--address``, else the instance running on
    this machine (``rafka up`` or ``ray start``); None when neither (or when this process is
    already connected to Ray, as in tests)."""
    import ray

    from rafka.actors import service

    if args.address or ray.is_initialized():
        return args.address
    return service._running_local_ray()


def _join_ray(address: str, namespace: str | None) -> None:
    """Connect this process to the Ray at ``address`` as ``service.ensure_ray`` would (which
    then has nothing left to do), but without streaming every worker's and raylet's log lines
    to this terminal: they are not the command's output."""
    import logging

    import ray

    from rafka.actors.placement import default_namespace
    from rafka.actors.service import AUTH_MODE_ENV

    if ray.is_initialized():
        return
    os.environ.setdefault(AUTH_MODE_ENV, "disabled")
    ray.init(
        address=address, namespace=namespace or default_namespace(), log_to_driver=False,
        logging_level=logging.WARNING,
    )  # fmt: skip


def _no_ray() -> RafkaError:
    from rafka.errors import BrokerNotAvailable

    return BrokerNotAvailable(
        "no Ray instance runs on this machine; start rafka with `rafka up`, or give --address"
    )


@contextlib.contextmanager
def _ray_session() -> Iterator[None]:
    """Disconnect from Ray at the end if this command connected: an explicit shutdown stops
    Ray's log-printing thread, which otherwise may fail while the interpreter exits."""
    _quiet_ray()
    import ray

    connected_before = ray.is_initialized()
    try:
        yield
    finally:
        if not connected_before and ray.is_initialized():
            ray.shutdown()


@contextlib.contextmanager
def _connected(args: argparse.Namespace, need_ray: bool = False) -> Iterator[Any]:
    """A Cluster for this command: attach to the running services (BrokerNotAvailable if there
    are none). With no Ray anywhere, start an embedded one with its services for this command
    and stop them cleanly when it ends, unless ``need_ray`` (then BrokerNotAvailable)."""
    import ray

    import rafka

    with _ray_session():
        address = _local_ray_address(args)
        embedded = address is None and not ray.is_initialized()
        if embedded and need_ray:
            raise _no_ray()
        if embedded:
            from rafka.actors.placement import default_data_root

            print(
                "note: no Ray instance runs on this machine: starting an embedded one for this "
                f"command, data in {default_data_root()} (`rafka up` starts one that stays)",
                file=sys.stderr,
            )
        if address is not None:
            _join_ray(address, args.namespace)
        cluster = rafka.connect(address, namespace=args.namespace, start=embedded)
        try:
            yield cluster
        finally:
            if embedded:
                cluster.shutdown()  # replicas flush and close; the data stays


# -- up, status, down ------------------------------------------------------------------------


def _add_up(commands: argparse._SubParsersAction) -> None:
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
    _add_connection_options(parser)
    parser.add_argument(
        "--data-dir",
        metavar="D",
        help="root of the data directories (<D>/<disk name>); default $RAFKA_DATA_DIR or "
        "./rafka-data (on a running cluster: the directory it already uses)",
    )
    parser.add_argument(
        "--controller-disk",
        metavar="NAME",
        type=_disk_name,
        help="the disk whose node hosts the controller (default: the first live disk)",
    )
    parser.add_argument(
        "--auto-create-topics",
        action="store_true",
        help="create a topic with 1 partition on its first use by a producer "
        "(auto.create.topics.enable)",
    )
    parser.set_defaults(handler=_up)


def _up(args: argparse.Namespace) -> int:
    with _ray_session():
        return _bring_up(args)


def _bring_up(args: argparse.Namespace) -> int:
    import ray

    import rafka
    from rafka.actors import service
    from rafka.actors.placement import DEFAULT_NAMESPACE, default_data_root

    address = _local_ray_address(args)
    started_ray = address is None and not ray.is_initialized()
    if started_ray:
        _start_ray_head()
        address = _local_ray_address(args) or "auto"
    namespace = _namespace(args)
    _join_ray(address, namespace)
    already = service.find_controller(namespace) is not None
    cluster = rafka.connect(
        address, data_dir=args.data_dir, namespace=namespace,
        auto_create_topics=args.auto_create_topics, controller_disk=args.controller_disk,
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
        if args.auto_create_topics or args.controller_disk:
            print("note: the services were already running: --auto-create-topics and "
                  "--controller-disk apply only when they first start", file=sys.stderr)
    gcs = ray.get_runtime_context().gcs_address
    how = "started a Ray head on this machine" if started_ray else "joined the running Ray"
    out = sys.stdout
    out.write(f"rafka {'was already' if already else 'is'} up in Ray namespace {namespace!r} "
              f"(Ray at {gcs}; {how})\n")  # fmt: skip
    _write_status(status, out)
    default = namespace == DEFAULT_NAMESPACE
    out.write(
        "\nconnect from Python:\n"
        "    import rafka\n"
        f'    cluster = rafka.connect("{gcs}"{"" if default else f", namespace={namespace!r}"})\n'
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


def _add_status(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="show the brokers and topic counts of the running services",
        description="Attach to the running services and show the controller, the brokers (one "
        "per data disk) and how many topics and partitions there are. Exit 1 if none run.",
    )
    _add_connection_options(parser)
    parser.add_argument("--json", action="store_true", help="print the raw status as JSON")
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    with _connected(args, need_ray=True) as cluster:
        status = cluster.status()
    if args.json:
        sys.stdout.write(json.dumps(status, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(f"rafka in Ray namespace {cluster.namespace!r}\n")
        _write_status(status, sys.stdout)
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
            "-" if free is None else f"{_size(free)} of {_size(total)}",
            b.get("directory", "-"),
        ])  # fmt: skip
    out.write(_table(rows, indent="  ") if status["brokers"] else "  no brokers registered\n")
    out.write(f"topics: {status['topics']}, partitions: {status['partitions']}\n")


def _add_down(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "down",
        help="stop the rafka services (data stays on disk)",
        description="Stop every rafka service in the namespace: replicas flush and close "
        "cleanly, then the node agents and the controller stop. The data stays on disk; "
        "`rafka up` brings it all back.",
    )
    _add_connection_options(parser)
    parser.add_argument(
        "--stop-ray",
        action="store_true",
        help="then run `ray stop`, which stops EVERY Ray instance on this machine",
    )
    parser.set_defaults(handler=_down)


def _down(args: argparse.Namespace) -> int:
    with _ray_session():
        _stop_services(args)
    if args.stop_ray:
        sys.stdout.flush()
        done = subprocess.run([_ray_executable(), "stop"], env=_ray_env())
        if done.returncode != 0:
            print(f"error: `ray stop` failed with status {done.returncode}", file=sys.stderr)
            return 1
    return 0


def _stop_services(args: argparse.Namespace) -> None:
    import ray

    from rafka.actors import service
    from rafka.connection import Cluster

    namespace = _namespace(args)
    address = _local_ray_address(args)
    if address is None and not ray.is_initialized():
        print("no Ray instance runs on this machine: no rafka services to stop")
        return
    if address is not None:
        _join_ray(address, namespace)
    directories: list[str] = []
    if service.find_controller(namespace) is not None:
        with contextlib.suppress(RafkaError):
            status = Cluster(namespace, address).status()
            directories = [b["directory"] for b in status["brokers"] if b.get("directory")]
    stopped = service.stop_services(namespace)
    if not any(stopped.values()):
        print(f"no rafka services run in Ray namespace {namespace!r}")
        return
    print(
        f"stopped {stopped['replicas']} replica(s), {stopped['agents']} node agent(s) and "
        f"{'the' if stopped['controller'] else 'no'} controller in Ray namespace {namespace!r}"
    )
    if directories:
        print(f"the data stays in {', '.join(directories)}")


# -- topics ----------------------------------------------------------------------------------


def _add_topics(commands: argparse._SubParsersAction) -> None:
    topics = commands.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Manage topics (like kafka-topics.sh).",
    )  # fmt: skip
    actions = topics.add_subparsers(title="actions", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=_positive_int, default=1, metavar="N",
                        help="number of partitions (default 1)")  # fmt: skip
    create.add_argument("--replication-factor", type=_positive_int, default=1, metavar="R",
                        help="replicas of each partition, at most one per disk (default 1)")
    create.add_argument("--config", type=_config_pair, nargs="+", action="extend", default=[],
                        metavar="K=V", help="a topic property, Kafka name (retention.ms=...)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic exists already")  # fmt: skip
    create.set_defaults(handler=_topics_create)

    listing = actions.add_parser("list", help="list topic names")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    listing.set_defaults(handler=_topics_list)

    describe = actions.add_parser(
        "describe", help="partitions, leaders, ISR, offsets and non-default config of a topic"
    )
    describe.add_argument("name", metavar="NAME")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(handler=_topics_describe)

    delete = actions.add_parser("delete", help="delete a topic and its data on every disk")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed if the topic does not exist")  # fmt: skip
    delete.set_defaults(handler=_topics_delete)

    alter = actions.add_parser("alter", help="change topic properties")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--config", type=_config_pair, nargs="+", action="extend",
                       required=True, metavar="K=V",
                       help="a property to set; K=- or K= resets it to its default")
    alter.set_defaults(handler=_topics_alter)

    grow = actions.add_parser("add-partitions", help="grow a topic to more partitions")
    grow.add_argument("name", metavar="NAME")
    grow.add_argument("--total", type=_positive_int, required=True, metavar="N",
                      help="the partition count after the change (never fewer)")  # fmt: skip
    grow.set_defaults(handler=_topics_add_partitions)

    for parser in (create, listing, describe, delete, alter, grow):
        _add_connection_options(parser)


def _topics_create(args: argparse.Namespace) -> int:
    from rafka.errors import TopicAlreadyExists

    with _connected(args) as cluster:
        try:
            described = cluster.admin().create_topic(
                args.name, args.partitions, args.replication_factor, dict(args.config) or None
            )
        except TopicAlreadyExists:
            if not args.if_not_exists:
                raise
            print(f"topic {args.name!r} exists already")
            return 0
    print(
        f"created topic {described.name!r}: {len(described.partitions)} partition(s), "
        f"replication factor {len(described.partitions[0].replicas)}"
        + _config_text(_non_default(described.config), ", config ")
    )
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        names = cluster.admin().list_topics(include_internal=args.internal)
    sys.stdout.write("".join(f"{name}\n" for name in names))
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        admin = cluster.admin()
        described = admin.describe_topic(args.name)
        try:
            offsets = {o["partition"]: o for o in admin.partition_offsets(args.name)}
        except RafkaError as e:  # a partition without a live leader: show the metadata
            print(f"warning: offsets unavailable: {type(e).__name__}: {e}", file=sys.stderr)
            offsets = {}
    config = _non_default(described.config)
    partitions = []
    for p in described.partitions:
        o = offsets.get(p.partition, {})
        partitions.append({
            "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr),
            **{k: o.get(k) for k in ("log_start_offset", "high_watermark", "log_end_offset",
                                     "size_bytes")},
        })  # fmt: skip
    if args.json:
        sys.stdout.write(json.dumps({
            "name": described.name, "topic_id": described.topic_id,
            "internal": described.internal, "config": config, "partitions": partitions,
        }) + "\n")  # fmt: skip
        return 0
    replication = len(described.partitions[0].replicas) if described.partitions else 0
    lines = [
        f"Topic: {described.name}\tTopicId: {described.topic_id}\t"
        f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\t"
        f"Configs: {_config_text(config)}"
    ]
    for p in partitions:
        leader = p["leader"] if p["leader"] is not None and p["leader"] >= 0 else "none"
        line = (
            f"\tPartition: {p['partition']}\tLeader: {leader}\tEpoch: {p['leader_epoch']}\t"
            f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}"
        )
        if p["high_watermark"] is not None:
            line += (
                f"\tLogStartOffset: {p['log_start_offset']}\tHighWatermark: "
                f"{p['high_watermark']}\tLogEndOffset: {p['log_end_offset']}\t"
                f"Size: {_size(p['size_bytes'])}"
            )
        lines.append(line)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _topics_delete(args: argparse.Namespace) -> int:
    from rafka.errors import UnknownTopicOrPartition

    with _connected(args) as cluster:
        try:
            cluster.admin().delete_topic(args.name)
        except UnknownTopicOrPartition:
            if not args.if_exists:
                raise
            print(f"topic {args.name!r} does not exist")
            return 0
    print(f"deleted topic {args.name!r}")
    return 0


def _topics_alter(args: argparse.Namespace) -> int:
    changes = {k: (None if v in ("", "-") else v) for k, v in args.config}
    with _connected(args) as cluster:
        described = cluster.admin().alter_topic_config(args.name, changes)
    print(f"altered topic {args.name!r}; config now "
          f"{_config_text(_non_default(described.config))}")  # fmt: skip
    return 0


def _topics_add_partitions(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        described = cluster.admin().create_partitions(args.name, args.total)
    print(f"topic {args.name!r} now has {len(described.partitions)} partition(s)")
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


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


# -- produce ---------------------------------------------------------------------------------


def _add_produce(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "produce",
        help="send lines of a file or stdin as records",
        description="Send each line of --file (or stdin) as one record: its bytes without the "
        "line end (\\n or \\r\\n). With --key-separator, the bytes before the first separator "
        "are the key (a line without it fails). Ends with the count and rate on stderr; exit "
        "1 if any record failed.",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--file", metavar="PATH",
                        help="read records from this file (default: stdin; '-' is stdin)")
    parser.add_argument("--key-separator", metavar="SEP", type=_separator,
                        help="split each line into key SEP value (\\t means a tab)")
    parser.add_argument("--partition", type=_non_negative_int, metavar="P",
                        help="send every record to this partition (default: by key; no key: "
                        "sticky batches)")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all",
                        help="acknowledgements to wait for (default all)")  # fmt: skip
    parser.add_argument("--compression", choices=["none", "gzip", "lz4", "zstd"],
                        default="none", help="batch compression (default none)")  # fmt: skip
    parser.add_argument("--linger-ms", type=_non_negative_float, default=5.0, metavar="N",
                        help="how long a batch waits for more records (default 5)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when reading a file "
                        "and stderr is a terminal)")  # fmt: skip
    _add_connection_options(parser)
    parser.set_defaults(handler=_produce)


def _produce(args: argparse.Namespace) -> int:
    from rafka.connection import Cluster

    with contextlib.ExitStack() as stack:
        if args.file and args.file != "-":
            source = stack.enter_context(open(args.file, "rb"))
            total = os.fstat(source.fileno()).st_size
        else:
            source, total = sys.stdin.buffer, 0
        show = args.progress
        if show is None:
            show = source is not sys.stdin.buffer and sys.stderr.isatty()
        connected = stack.enter_context(_connected(args))
        # Topics are created on first use when the *cluster* allows it (as Kafka's producer).
        cluster = Cluster(connected.namespace, connected.address, auto_create_topics=True)
        producer = cluster.producer(
            acks=args.acks, compression=args.compression, linger_ms=args.linger_ms
        )
        progress = _Progress(total, sys.stderr) if show else None
        tally = _Tally()
        started = time.monotonic()
        try:
            sent = _send_lines(producer, args, source, tally, progress)
            producer.flush()
            tally.reap_all()
        except BaseException:
            with contextlib.suppress(Exception):
                producer.close(timeout=5.0)
            raise
        finally:
            if progress is not None:
                progress.finish()
        producer.close()
    seconds = time.monotonic() - started
    produced = sent - tally.failed
    rate = produced / seconds if seconds > 0 else 0.0
    print(f"produced {produced} records to {args.topic} in {seconds:.2f} s "
          f"({rate:,.0f} records/s)", file=sys.stderr)  # fmt: skip
    if tally.failed or tally.unkeyed:
        if tally.unkeyed:
            print(f"error: {tally.unkeyed} line(s) had no key separator "
                  f"{args.key_separator!r} and were not sent", file=sys.stderr)  # fmt: skip
        for name, (count, message) in tally.errors.items():
            print(f"error: {count} record(s) failed: {name}: {message}", file=sys.stderr)
        return 1
    return 0


def _send_lines(producer, args, source, tally: "_Tally", progress: "_Progress | None") -> int:
    """Send every line of ``source``; returns how many records were handed to the producer.
    Futures are kept only until they resolve (checked every 1024 records, or after each line
    when reading a terminal), so memory stays bounded by what is in flight."""
    from rafka.errors import RecordTooLarge

    topic, partition = args.topic, args.partition
    separator = args.key_separator.encode() if args.key_separator else None
    interactive = source.isatty()
    send = producer.send
    pending = tally.pending
    read = sent = 0
    for line in source:
        read += len(line)
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        key = None
        if separator is not None:
            key, found, line = line.partition(separator)
            if not found:
                tally.no_separator(read)
                continue
        try:
            pending.append(send(topic, line, key, partition=partition))
        except RecordTooLarge as e:
            tally.add_error(e)
            continue
        sent += 1
        if interactive or not sent & 1023:
            tally.reap()
        if progress is not None:
            progress.update(read, sent)
    if progress is not None:
        progress.update(read, sent, force=True)
    return sent


class _Tally:
    """Outcomes of the records sent: futures not yet resolved, and the failures by error."""

    def __init__(self) -> None:
        import collections

        self.pending: collections.deque = collections.deque()
        self.failed = 0
        self.unkeyed = 0
        self.errors: dict[str, list] = {}  # error name -> [count, first message]

    def add_error(self, error: BaseException) -> None:
        self.failed += 1
        name = type(error).__name__
        entry = self.errors.get(name)
        if entry is None:
            self.errors[name] = [1, str(error)]
            print(f"\nerror: a record failed: {name}: {error}", file=sys.stderr)
        else:
            entry[0] += 1

    def no_separator(self, position: int) -> None:
        self.unkeyed += 1
        if self.unkeyed <= 3:
            print(f"\nwarning: the line ending at byte {position} has no key separator; "
                  "skipped", file=sys.stderr)  # fmt: skip

    def reap(self) -> None:
        pending = self.pending
        while pending and pending[0].done():
            error = pending.popleft().exception()
            if error is not None:
                self.add_error(error)

    def reap_all(self) -> None:
        while self.pending:
            error = self.pending.popleft().exception()
            if error is not None:
                self.add_error(error)


class _Progress:
    """A one-line progress bar redrawn with ``\\r`` at most ten times a second."""

    WIDTH = 30

    def __init__(self, total: int, out) -> None:
        self.total = total
        self.out = out
        self.started = self.drawn = time.monotonic()
        self.length = 0

    def update(self, done: int, records: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.drawn < 0.1:
            return
        self.drawn = now
        elapsed = now - self.started
        rate = records / elapsed if elapsed > 0 else 0.0
        if self.total:
            fraction = min(1.0, done / self.total)
            filled = int(fraction * self.WIDTH)
            bar = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction:4.0%} "
            amount = f"{_size(done)} / {_size(self.total)}"
        else:
            bar, amount = "", _size(done)
        text = f"{bar}{amount}  {records:,} records  {rate:,.0f} records/s"
        self.out.write("\r" + text.ljust(self.length))
        self.length = len(text)
        self.out.flush()

    def finish(self) -> None:
        if self.length:
            self.out.write("\n")
            self.out.flush()


# -- consume ---------------------------------------------------------------------------------


def _add_consume(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "consume",
        help="print the records of a topic",
        description="Print the records of a topic's partitions, starting at the end of each "
        "(new records only) or with --from-beginning at its start. Without --follow, stop "
        "after --timeout-ms without a new record, and with --from-beginning as soon as the "
        "log is read up to where it ended when the command started.",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the first record of each partition")  # fmt: skip
    parser.add_argument("--partition", type=_non_negative_int, action="append", metavar="P",
                        help="read this partition (repeat for more; default: all)")
    parser.add_argument("--max-messages", type=_positive_int, metavar="N",
                        help="stop after N records")  # fmt: skip
    parser.add_argument("--timeout-ms", type=_non_negative_int, default=5000, metavar="T",
                        help="without --follow, stop after T ms with no new record "
                        "(default 5000)")  # fmt: skip
    parser.add_argument("--format", choices=["value", "kv", "json"], default="value",
                        help="value: the value as text; kv: key<TAB>value; json: one object a "
                        "line with topic, partition, offset, timestamp, key, value, headers "
                        "(bytes as UTF-8, invalid bytes as \\xNN; null for none)")
    parser.add_argument("--follow", action="store_true",
                        help="keep waiting for new records until Ctrl-C (or --max-messages)")
    _add_connection_options(parser)
    parser.set_defaults(handler=_consume)


def _consume(args: argparse.Namespace) -> int:
    from rafka.types import TopicPartition

    with _connected(args) as cluster:
        if args.partition:
            partitions = sorted(set(args.partition))
        else:
            partitions = range(len(cluster.admin().describe_topic(args.topic).partitions))
        tps = [TopicPartition(args.topic, p) for p in partitions]
        reset = "earliest" if args.from_beginning else "latest"
        with cluster.consumer(auto_offset_reset=reset) as consumer:
            consumer.assign(tps)
            if args.from_beginning:
                consumer.seek_to_beginning()
            else:
                consumer.seek_to_end()
            printed = [0]
            try:
                _print_records(consumer, tps, args, printed)
            except KeyboardInterrupt:  # Ctrl-C ends --follow: say how far it got
                print(f"\nconsumed {printed[0]} records", file=sys.stderr)
                raise
    print(f"consumed {printed[0]} records", file=sys.stderr)
    return 0


def _print_records(consumer, tps: list, args: argparse.Namespace, printed: list) -> None:
    """Poll and print until a stop condition, counting the records in ``printed[0]``."""
    ends = None
    if args.from_beginning and not args.follow:
        ends = consumer.end_offsets(tps)  # stop once the log as it is now has been read
    formatter = _FORMATS[args.format]
    out = sys.stdout
    idle_s = args.timeout_ms / 1000
    last = time.monotonic()
    while True:
        if ends is not None and all(consumer.position(tp) >= ends[tp] for tp in tps):
            return
        if args.follow:
            wait_s = 1.0
        else:
            wait_s = min(1.0, idle_s - (time.monotonic() - last))
            if wait_s <= 0:
                return
        limit = args.max_messages - printed[0] if args.max_messages else None
        records = consumer.poll(timeout_ms=int(wait_s * 1000), max_records=limit)
        if records:
            out.write("".join(map(formatter, records)))
            out.flush()
            printed[0] += len(records)
            last = time.monotonic()
            if args.max_messages and printed[0] >= args.max_messages:
                return


def _text(data) -> str | None:
    if data is None:
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    return data.decode("utf-8", "backslashreplace")


def _format_value(record) -> str:
    value = _text(record.value)
    return ("null" if value is None else value) + "\n"


def _format_kv(record) -> str:
    key, value = _text(record.key), _text(record.value)
    return f"{'null' if key is None else key}\t{'null' if value is None else value}\n"


def _format_json(record) -> str:
    return json.dumps({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _text(record.key), "value": _text(record.value),
        "headers": [[name, _text(value)] for name, value in record.headers or ()],
    }, ensure_ascii=False) + "\n"  # fmt: skip


_FORMATS = {"value": _format_value, "kv": _format_kv, "json": _format_json}


# -- dump-log --------------------------------------------------------------------------------


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



def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not allowed; give 1 or more")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; give 0 or more")
    return value


def _config_pair(text: str) -> tuple[str, str]:
    name, found, value = text.partition("=")
    if not found or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name.strip(), value.strip()


def _separator(text: str) -> str:
    text = text.replace("\\t", "\t")
    if not text:
        raise argparse.ArgumentTypeError("the key separator is empty")
    return text


def _disk_name(text: str) -> str:
    from rafka.actors.placement import check_disk_name

    try:
        return check_disk_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _table(rows: list[list[str]], indent: str = "") -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n"
        for row in rows
    )


if __name__ == "__main__":
    sys.exit(main())
