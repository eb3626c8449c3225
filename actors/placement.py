"""Where rafka's actors live: the names, the Ray namespace and the pinning rules.

A node offers a data disk by declaring the custom resource ``rafka_disk`` and naming the disk
with the node label ``rafka-disk`` (default ``local``). Its data directory is
``$RAFKA_DATA_DIR/<disk name>``. Actors that own files (the controller, node agents and
the host actors of partition replicas) are pinned to a disk by that label, never by Ray node id: a hard node-id
affinity makes an actor DEAD when its node dies, while a label selector keeps it waiting and
restarts it wherever the disk comes back.

A node labelled ``rafka-disk=auto`` has an *ephemeral* disk instead: one that lives and dies
with the node, as an autoscaled node's does (a scalable node type or worker group gives its
nodes no identity a disk name could follow). Its disk is named ``auto-<Ray node id>`` and its
actors are pinned to that node by node affinity, so they end with it: a broker on an
ephemeral disk that is gone is gone for good (its replicas are healed elsewhere), and a
scale-down drains it first.
"""

from __future__ import annotations

import os
import re
from typing import Any

#: Custom resource a node declares to offer a data disk (``ray start --resources``).
DISK_RESOURCE = "rafka_disk"
#: Custom resource of a node that hosts the controller without being a broker (like Kafka's
#: dedicated controller nodes); its ``rafka-disk`` label names the controller's directory.
CONTROLLER_RESOURCE = "rafka_controller"
#: Node label naming the disk (``ray start --labels``); also the data directory's last part.
DISK_LABEL = "rafka-disk"
#: The disk name a node gets when it declares the resource but no label.
DEFAULT_DISK = "local"
#: The ``rafka-disk`` label value of a node whose disk is ephemeral (see above).
EPHEMERAL_DISK_LABEL_VALUE = "auto"
#: An ephemeral disk's name: this prefix and the Ray node id (56 hex digits).
EPHEMERAL_DISK_PREFIX = "auto-"
#: Environment variable holding the root of every disk's data directory.
DATA_DIR_ENV = "RAFKA_DATA_DIR"
#: Where data lives when RAFKA_DATA_DIR is unset: relative to the process that starts rafka.
DEFAULT_DATA_DIR = "./rafka-data"
#: Ray namespace that holds every rafka service actor.
NAMESPACE_ENV = "RAFKA_NAMESPACE"
DEFAULT_NAMESPACE = "rafka"

#: Share of the disk resource each pinned actor asks for. Ray ignores placement for actors
#: that request no resources at all, so every pinned actor asks for a sliver of the disk.
PINNED_DISK_SHARE = 0.001

CONTROLLER_NAME = "rafka-controller"

# Ray's label value rule: alphanumeric at both ends, '.', '_' or '-' inside, at most 63.
_DISK_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def default_data_root() -> str:
    """The data root for this process: ``$RAFKA_DATA_DIR`` or ``./rafka-data``, absolute."""
    return os.path.abspath(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def default_namespace() -> str:
    return os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE


def check_disk_name(disk: str) -> str:
    if not isinstance(disk, str) or not _DISK_NAME.match(disk):
        raise ValueError(
            f"disk name {disk!r} is not a valid Ray label value: use 1-63 letters, digits, "
            "'.', '_' or '-', starting and ending with a letter or digit (node label "
            f"{DISK_LABEL!r})"
        )
    return disk


def node_disk_name(labels: dict[str, str] | None, node_id: str) -> str:
    """The disk name of a node that declares the disk resource, from its labels."""
    label = (labels or {}).get(DISK_LABEL, DEFAULT_DISK)
    if label == EPHEMERAL_DISK_LABEL_VALUE:
        return check_disk_name(EPHEMERAL_DISK_PREFIX + node_id)
    return check_disk_name(label)


def ephemeral_node(disk: str) -> str | None:
    """The Ray node id of an ephemeral disk; None for a named (persistent) disk."""
    if disk.startswith(EPHEMERAL_DISK_PREFIX):
        node_id = disk[len(EPHEMERAL_DISK_PREFIX):]
        if len(node_id) == 56 and all(c in "0123456789abcdef" for c in node_id):
            return node_id
    return None


def disk_dir(data_root: str, disk: str) -> str:
    """Data directory of ``disk`` under ``data_root``."""
    return os.path.join(data_root, check_disk_name(disk))


def agent_name(disk: str) -> str:
    return f"rafka-agent-{disk}"


REPLICA_PREFIX = "rafka-replica-"
_REPLICA_NAME = re.compile(rf"^{REPLICA_PREFIX}([0-9A-Za-z]+)-(\d+)-b(\d+)$")


def replica_name(topic_id: str, partition: int, broker_id: int) -> str:
    """The name of one replica (a key: the actor is its host, ``rafka.cluster.hosting``).
    It uses the topic id, not the name, so a topic deleted and created again under the same
    name never meets the old topic's replicas."""
    return f"{REPLICA_PREFIX}{topic_id}-{partition}-b{broker_id}"


def parse_replica_name(name: str) -> tuple[str, int, int] | None:
    """(topic id, partition, broker id) of a replica actor name; None for another name."""
    match = _REPLICA_NAME.match(name)
    return (match[1], int(match[2]), int(match[3])) if match else None


def coordinator_name(shard: int) -> str:
    """Actor name of the group coordinator serving partition ``shard`` of __consumer_offsets."""
    return f"rafka-group-coordinator-{shard}"


def transaction_coordinator_name(shard: int) -> str:
    """Actor name of the transaction coordinator serving partition ``shard`` of
    __transaction_state."""
    return f"rafka-transaction-coordinator-{shard}"


def pinned_to_disk(disk: str, resource: str = DISK_RESOURCE) -> dict[str, Any]:
    """Ray actor options that pin an actor to ``disk`` (a node labelled with it that offers
    ``resource``) and restart it there forever; for an ephemeral disk, to its node, for as
    long as the node lives."""
    node_id = ephemeral_node(disk)
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        where: dict[str, Any] = {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
    else:
        where = {"label_selector": {DISK_LABEL: check_disk_name(disk)}}
    return {
        "num_cpus": 0,
        "resources": {resource: PINNED_DISK_SHARE},
        **where,
        "max_restarts": -1,
        "max_task_retries": 0,
        "lifetime": "detached",
    }
