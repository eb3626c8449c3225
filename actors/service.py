"""Starting, finding and stopping rafka's services on a Ray cluster.

Every service is a named, detached actor in one Ray namespace, so any process connected to
the same Ray cluster (a script, the CLI, a Spark executor, a Ray task) finds the same
controller and replicas by name. Starting is idempotent (``get_if_exists``): ``up`` on a
running cluster only adds what is missing, for example a node agent for a new disk.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import ray

from rafka.actors.controller import Controller
from rafka.actors.node_agent import NodeAgent
from rafka.actors.placement import (
    CONTROLLER_NAME,
    CONTROLLER_RESOURCE,
    DEFAULT_DISK,
    DISK_LABEL,
    DISK_RESOURCE,
    agent_name,
    check_disk_name,
    pinned_to_disk,
)
from rafka.errors import BrokerNotAvailable

log = logging.getLogger(__name__)

# Token authentication is on by default for local clusters from Ray 2.59: rafka says what it
# wants rather than inherit a default that changes between Ray versions.
AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ensure_ray(address: str | None, namespace: str, embedded_disk: str = DEFAULT_DISK) -> bool:
    """Connect this process to Ray. With ``address`` None, attach to Ray if this process is
    already connected, else start a local Ray instance whose node offers one data disk.
    Returns True when this call started a new local instance."""
    if ray.is_initialized():
        return False
    os.environ.setdefault(AUTH_MODE_ENV, "disabled")
    if address is None:
        address = _running_local_ray()
    if address is not None:
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING)
        return False
    ray.init(
        namespace=namespace,
        resources={DISK_RESOURCE: 1},
        labels={DISK_LABEL: check_disk_name(embedded_disk)},
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    return True


def _running_local_ray() -> str | None:
    """Address of a Ray instance already running on this machine (``rafka up`` or ``ray
    start``), found the way ``ray.init()`` finds one; None when there is none."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address(None)
    except Exception:  # no instance, or several without a latest one: start our own
        return None


def live_disks() -> list[str]:
    """Disk names of the alive nodes that declare the ``rafka_disk`` resource."""
    disks = []
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get(DISK_RESOURCE, 0) > 0:
            disks.append(check_disk_name((node.get("Labels") or {}).get(DISK_LABEL, DEFAULT_DISK)))
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
        check_disk_name((node.get("Labels") or {}).get(DISK_LABEL, DEFAULT_DISK))
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
        disk = controller_disk or (dedicated[0] if dedicated else disks[0])
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
    agents = [
        ray.remote(NodeAgent).options(
            name=agent_name(disk), namespace=namespace, get_if_exists=True,
            max_concurrency=1000, **pinned_to_disk(disk),
        ).remote(data_root, disk, namespace)  # fmt: skip
        for disk in disks
    ]
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
    if controller is not None:
        ray.kill(controller, no_restart=True)
        stopped["controller"] = 1
    return stopped
