"""Starting, finding and stopping rafka's services on a Ray cluster.

Every service is a named, detached actor in one Ray namespace, so any process connected to
the same Ray cluster (a script, the CLI, a Spark executor, a Ray task) finds the same
controller and replicas by name. Starting is idempotent (``get_if_exists``): ``up`` on a
running cluster only adds what is missing, for example a node agent for a new disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from typing import Any, Iterator

import ray

from rafka.actors.controller import Controller
from rafka.actors.node_agent import CONCURRENCY_GROUPS, NodeAgent
from rafka.actors.placement import (
    CONTROLLER_NAME,
    CONTROLLER_RESOURCE,
    DEFAULT_DISK,
    DISK_LABEL,
    DISK_RESOURCE,
    agent_name,
    check_disk_name,
    ephemeral_node,
    node_disk_name,
    pinned_to_disk,
)
from rafka.actors.kafka_listener import listener_name
from rafka.errors import BrokerNotAvailable

log = logging.getLogger(__name__)

# Token authentication is on by default for local clusters from Ray 2.59: rafka says what it
# wants rather than inherit a default that changes between Ray versions.
AUTH_MODE_ENV = "RAY_AUTH_MODE"
# Ray starts its worker processes at nice 15, below the drivers and everything else on the
# node. rafka's brokers are Ray workers, and a broker that yields the CPU to its own clients
# answers them late: with a Kafka client on the same 2-core machine, confluent-kafka's
# idempotent producer ran at 265-327 k records/s against listeners and replicas at nice 15
# and 427 k at nice 0 (one in-flight request: its round trip is the pace). rafka starts the
# Ray instances it owns with broker processes at the clients' priority, as a Kafka broker
# runs; a value the user set is kept.
WORKER_NICENESS_ENV = "RAY_worker_niceness"
BROKER_NICENESS = "0"


@contextlib.contextmanager
def at_broker_priority() -> Iterator[None]:
    """Ray nodes started inside run their workers at BROKER_NICENESS, unless
    ``RAY_worker_niceness`` is set already. A raylet reads it as it starts, so it is set only
    for the start and the environment is restored after: a Ray this process starts later
    for something else keeps Ray's default."""
    if WORKER_NICENESS_ENV in os.environ:
        yield
        return
    os.environ[WORKER_NICENESS_ENV] = BROKER_NICENESS
    try:
        yield
    finally:
        os.environ.pop(WORKER_NICENESS_ENV, None)


# The environment variable through which Ray (``ray.init``, ``ray start``) takes an address.
RAY_ADDRESS_ENV = "RAY_ADDRESS"
# How long the check that a Ray instance answers waits for its port to accept a connection.
PROBE_TIMEOUT_S = 2.0
# Port of the Ray client server when a ``ray://`` address gives none (Ray's default).
RAY_CLIENT_PORT = 10001


def ensure_ray(address: str | None, namespace: str, embedded_disk: str = DEFAULT_DISK) -> bool:
    """Connect this process to Ray. With ``address`` None, attach to Ray if this process is
    already connected, else to the instance ``ray.init()`` would find (``RAY_ADDRESS``, else
    the address file of the last ``ray start`` on this machine), else start a local Ray
    instance whose node offers one data disk; an address file that names an instance which
    has stopped is ignored with a warning. A given address, or ``RAY_ADDRESS``, must answer:
    BrokerNotAvailable within seconds if it does not (Ray itself would wait for minutes).
    The address file is ``ray_current_cluster`` in Ray's temporary directory (``/tmp/ray``,
    or ``$RAY_TMPDIR/ray``). Returns True when this call started a new local instance."""
    if ray.is_initialized():
        return False
    os.environ.setdefault(AUTH_MODE_ENV, "disabled")
    if address is None:
        address = _running_local_ray()
    else:
        address = check_ray_answers(address)
    if address is not None:
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING)
        return False
    with at_broker_priority():
        ray.init(
            address="local",  # a new instance, never the one a stale address file names
            namespace=namespace,
            resources={DISK_RESOURCE: 1},
            labels={DISK_LABEL: check_disk_name(embedded_disk)},
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    return True


_stale_warned: set[tuple[str, str]] = set()


def _running_local_ray(temp_dir: str | None = None) -> str | None:
    """Address of the Ray instance ``ray.init()`` would attach to: ``RAY_ADDRESS`` (which must
    answer, else BrokerNotAvailable), else the one running on this machine (``rafka up`` or
    ``ray start``) named by its address file. None when there is none, or when the address
    file names an instance that does not answer (it was killed or the machine restarted, and
    the file stayed): a warning says so, and the caller starts its own. ``temp_dir``: Ray's
    temporary directory, which holds the address file (default Ray's: /tmp/ray, or
    $RAY_TMPDIR/ray)."""
    if os.environ.get(RAY_ADDRESS_ENV):
        return check_ray_answers(None, temp_dir)
    try:
        found, address_file, _ = _ray_address_lookup(None, temp_dir)
    except Exception:  # an address Ray cannot use either: start our own
        return None
    if found is None or ray_answers(found):
        return found
    if (found, address_file) in _stale_warned:  # once per process (the CLI asks twice)
        return None
    _stale_warned.add((found, address_file))
    log.warning(
        "the Ray instance at %s named by %s does not answer (it has stopped and left its "
        "address file behind): starting a new local Ray instance instead; delete that file, "
        "or start Ray again with `rafka up`, to stop this warning",
        found, address_file,
    )  # fmt: skip
    return None


def check_ray_answers(address: str | None, temp_dir: str | None = None) -> str | None:
    """The address ``ray.init(address)`` would connect to, after checking that a Ray instance
    answers there: BrokerNotAvailable, within ``PROBE_TIMEOUT_S``, saying where the address
    came from and what to do when it does not (``ray.init`` would wait for minutes). None
    when ``ray.init`` would start a new local instance (address "local"). ``temp_dir`` as
    for ``_running_local_ray``."""
    given = address
    from_env = bool(os.environ.get(RAY_ADDRESS_ENV)) and address in (None, "auto")
    if from_env:
        address = os.environ[RAY_ADDRESS_ENV]
    named_by = f", named by the {RAY_ADDRESS_ENV} environment variable," if from_env else ""
    try:
        found, address_file, file_address = _ray_address_lookup(address, temp_dir)
    except ConnectionError:  # "auto" and nothing recorded or running on this machine
        raise BrokerNotAvailable(
            f"no Ray instance runs on this machine to join with address={address!r}"
            f"{named_by.rstrip(',')}; start one (`rafka up`, or `ray start --head`), give "
            "the address of a running one, or connect without an address to start an "
            "embedded one"
        ) from None
    if found is None or ray_answers(found):
        return found
    if address in (None, "auto") and found == file_address:
        named_by = (
            f", named by the address file {address_file} (written by the last `ray start` "
            "on this machine),"
        )
        fix = (
            "it has stopped and left that file behind; start it again (`rafka up`, or "
            f"`ray start --head`), or delete the stale file {address_file}"
        )
    else:
        fix = "start it (`rafka up`, or `ray start --head` on that host)"
        if from_env:
            fix += f", or unset {RAY_ADDRESS_ENV}"
    asked = f" (address {given!r})" if given not in (None, found) else ""
    raise BrokerNotAvailable(
        f"the Ray instance at {found}{asked}{named_by} does not answer (no connection within "
        f"{PROBE_TIMEOUT_S:g} s): {fix}, or pass the address of a running Ray cluster"
    )


def ray_answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when something accepts a TCP connection at the Ray address (``host:port`` of the
    GCS, or ``ray://host:port`` of the Ray client server) within ``timeout_s``. A refused
    connection (nothing listens: the instance has stopped) answers False at once."""
    client = address.startswith("ray://")
    hostport = address[len("ray://") :] if client else address
    hostport = hostport.split("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or "]" in port:  # no port, or an IPv6 host without one
        host, port = hostport, str(RAY_CLIENT_PORT) if client else ""
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _ray_address_lookup(
    address: str | None, temp_dir: str | None
) -> tuple[str | None, str, str | None]:
    """(the address ``ray.init(address)`` would connect to, or None for a new local instance;
    the path of Ray's address file; the address in it, or None). Ray has no public way to
    resolve an address as ``ray.init`` does (RAY_ADDRESS, then the address file of the last
    ``ray start``, then for "auto" a GCS process running here), so this one function uses
    its private helpers, and only this one. Raises ConnectionError when "auto" finds no
    instance, and ValueError for an address Ray cannot parse. A ``ray://`` address is
    returned as it is (the Ray client connects to it)."""
    from ray._common.utils import get_ray_address_file
    from ray._private.services import canonicalize_bootstrap_address
    from ray._private.utils import read_ray_address

    address_file = get_ray_address_file(temp_dir)
    file_address = read_ray_address(temp_dir)
    if file_address:
        try:
            file_address = canonicalize_bootstrap_address(file_address, temp_dir)
        except Exception:
            pass
    if address is not None and "://" in address:
        return address, address_file, file_address
    return canonicalize_bootstrap_address(address, temp_dir), address_file, file_address


def live_disks() -> list[str]:
    """Disk names of the alive nodes that declare the ``rafka_disk`` resource."""
    disks = []
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get(DISK_RESOURCE, 0) > 0:
            disks.append(node_disk_name(node.get("Labels"), node["NodeID"]))
    duplicates = {d for d in disks if disks.count(d) > 1}
    if duplicates:
        raise BrokerNotAvailable(
            f"several live nodes name their disk {sorted(duplicates)}; give each data-disk node "
            f"its own --labels {DISK_LABEL}=<name>"
        )
    return sorted(disks)


def controller_nodes() -> list[str]:
    """Disk labels of the alive nodes that offer a dedicated controller place."""
    return sorted(
        node_disk_name(node.get("Labels"), node["NodeID"])
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get(CONTROLLER_RESOURCE, 0) > 0
    )  # fmt: skip


def find_controller(namespace: str):
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=namespace)
    except ValueError:
        return None


def start_services(
    data_root: str,
    namespace: str,
    settings: dict[str, Any] | None = None,
    controller_disk: str | None = None,
    timeout_s: float = 120.0,
):
    """Start (or attach to) the controller and one node agent per live disk, register the
    disks, and recreate any replica actor the metadata names. Returns the controller."""
    disks = live_disks()
    if not disks:
        raise BrokerNotAvailable(
            f"no live Ray node declares the {DISK_RESOURCE!r} resource; start data nodes with "
            f"ray start --resources='{{\"{DISK_RESOURCE}\": 1}}' "
            f"--labels {DISK_LABEL}=<disk name>"
        )
    controller = find_controller(namespace)
    if controller is not None and _was_stopping(controller, timeout_s):
        # A `rafka down` that stopped the replicas but was interrupted before it killed the
        # controller: that one no longer watches brokers; a new one takes over the log.
        log.warning("replacing a controller left over from an interrupted stop")
        ray.kill(controller, no_restart=True)
        controller = _wait_until_replaced(namespace, controller, timeout_s)
    if controller is None:
        dedicated = controller_nodes()
        # A disk that lives on goes first: the controller on an ephemeral disk would end
        # with its node.
        lasting = [d for d in disks if ephemeral_node(d) is None]
        disk = controller_disk or (dedicated[0] if dedicated else (lasting or disks)[0])
        if ephemeral_node(disk) is not None:
            log.warning(
                "the controller starts on ephemeral disk %s: its metadata log ends with that "
                "node; give the cluster a node with a named disk (--labels %s=<name>) or "
                "the %s resource", disk, DISK_LABEL, CONTROLLER_RESOURCE,
            )  # fmt: skip
        if disk not in disks and disk not in dedicated:
            raise BrokerNotAvailable(
                f"controller disk {disk!r} is not on a live node; live disks: {disks}"
                + (f", controller nodes: {dedicated}" if dedicated else "")
            )
        resource = CONTROLLER_RESOURCE if disk in dedicated else DISK_RESOURCE
        controller = ray.remote(Controller).options(
            name=CONTROLLER_NAME, namespace=namespace, get_if_exists=True,
            max_concurrency=1000, **pinned_to_disk(disk, resource),
        ).remote(data_root, disk, namespace, settings or {})  # fmt: skip
    ray.get(controller.ping.remote(), timeout=timeout_s)
    # A retired broker's node lives on until Ray releases it: no agent for it.
    retired = set(ray.get(controller.retired_disks.remote(), timeout=timeout_s))
    disks = [d for d in disks if d not in retired]
    agents = [node_agent(data_root, disk, namespace) for disk in disks]
    starts = [a.start.remote() for a in agents]
    for disk, started in zip(disks, starts):
        try:
            ray.get(started, timeout=timeout_s)
        except ray.exceptions.RayActorError as e:
            # Its node died a moment ago (Ray still lists it for some seconds): the agent
            # registers itself when the disk comes back.
            log.warning("the node agent of disk %s did not start: %r", disk, e)
    ray.get(controller.reconcile.remote(), timeout=timeout_s)
    return controller


def node_agent(data_root: str, disk: str, namespace: str):
    """The node agent of ``disk`` (created, pinned to the disk's node, if it does not exist)."""
    return ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(NodeAgent).options(
        name=agent_name(disk), namespace=namespace, get_if_exists=True,
        max_concurrency=1000, **pinned_to_disk(disk),
    ).remote(data_root, disk, namespace)  # fmt: skip


def start_node_agent(data_root: str, disk: str, namespace: str, timeout_s: float = 120.0) -> None:
    """Start the node agent of a disk that joined: it registers the disk as a broker."""
    agent = node_agent(data_root, disk, namespace)
    ray.get(agent.start.remote(), timeout=timeout_s)


def needs_start(namespace: str, timeout_s: float = 60.0) -> bool:
    """True when no controller runs in ``namespace``, or only one left from an interrupted
    stop (its replicas were stopped and it no longer watches brokers)."""
    controller = find_controller(namespace)
    return controller is None or _was_stopping(controller, timeout_s)


def running_settings(namespace: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The cluster settings the running controller uses."""
    controller = find_controller(namespace)
    if controller is None:
        raise BrokerNotAvailable(f"no rafka controller runs in Ray namespace {namespace!r}")
    return ray.get(controller.settings_in_force.remote(), timeout=timeout_s)


def _was_stopping(controller, timeout_s: float) -> bool:
    try:
        return bool(ray.get(controller.ping.remote(), timeout=timeout_s).get("stopping"))
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return False  # restarting or busy: a restarted controller is not stopping


def _wait_until_replaced(namespace: str, old, timeout_s: float):
    """Wait until the killed controller ``old`` has left its name; returns the controller
    another start put there meanwhile (a concurrent connect), or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = find_controller(namespace)
        if current is None or current._actor_id != old._actor_id:
            return current
        if time.monotonic() > deadline:
            raise BrokerNotAvailable(
                f"the old rafka controller in namespace {namespace!r} did not stop in "
                f"{timeout_s:g} s; run `rafka down`, then start again"
            )
        time.sleep(0.1)


def stop_services(namespace: str, timeout_s: float = 120.0) -> dict[str, int]:
    """Close every replica cleanly, then stop replicas, agents and the controller. Data stays
    on disk; ``start_services`` brings it all back."""
    controller = find_controller(namespace)
    stopped = {"replicas": 0, "agents": 0, "controller": 0, "coordinators": 0}
    if controller is not None:
        stopped["coordinators"] = ray.get(controller.stop_coordinators.remote(), timeout=timeout_s)
        stopped["replicas"] = ray.get(controller.stop_replicas.remote(), timeout=timeout_s)
    for disk in live_disks():
        try:
            agent = ray.get_actor(agent_name(disk), namespace=namespace)
        except ValueError:
            continue
        ray.kill(agent, no_restart=True)
        stopped["agents"] += 1
        try:
            ray.kill(ray.get_actor(listener_name(disk), namespace=namespace), no_restart=True)
        except ValueError:
            pass  # this disk has no Kafka listener
    if controller is not None:
        ray.kill(controller, no_restart=True)
        stopped["controller"] = 1
    return stopped
