"""A multi-node rafka cluster on one machine, for tests, chaos runs and benchmarks.

``ray.cluster_utils.Cluster`` starts one Ray node per process group: the head hosts the
controller (resource ``rafka_controller``, so it is not a broker) and this process's driver,
and every data disk gets a node of its own that declares ``rafka_disk`` with its label.
Removing a disk's node and adding it back models a machine that dies and returns with its
disk: the data directory ``<data_dir>/<disk>`` survives, the Ray node id does not.

A process holds one Ray connection, so use one LocalCluster per process.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rafka.actors.placement import CONTROLLER_RESOURCE, DISK_LABEL, DISK_RESOURCE
from rafka.cluster.placement import RACK_LABEL

CONTROLLER_DISK = "controller"


def wait_for(predicate, timeout_s: float, what: str, interval: float = 0.2):
    """Poll ``predicate`` until it returns something true, and return that; TimeoutError
    naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting {timeout_s:g} s for {what}")
        time.sleep(interval)


class LocalCluster:
    def __init__(
        self,
        data_dir: str,
        disks: list[str],
        namespace: str = "rafka-local",
        settings: dict[str, Any] | None = None,
        cpus_per_node: float = 1,
        racks: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.disks = list(disks)
        self.namespace = namespace
        self.settings = dict(settings or {})
        self.cpus_per_node = cpus_per_node
        self.racks = dict(racks or {})
        self.nodes: dict[str, Any] = {}
        self.ray_cluster = None
        self.cluster = None  # the rafka.Cluster handle once started

    def start(self):
        """Start Ray's nodes and rafka's services; returns the ``rafka.Cluster`` handle."""
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray
        from ray.cluster_utils import Cluster

        import rafka
        from rafka.actors.service import at_broker_priority

        at_broker_priority()  # every node's raylet reads it as it starts

        self.ray_cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": self.cpus_per_node,
                "resources": {CONTROLLER_RESOURCE: 1},
                "labels": {DISK_LABEL: CONTROLLER_DISK},
            },
        )
        # Connect while the head is the only node: with several nodes on one address the
        # driver may attach to any of them, and cluster_utils never removes the driver's.
        ray.init(address=self.ray_cluster.address, namespace=self.namespace,
                 logging_level="ERROR")  # fmt: skip
        for disk in self.disks:
            self.nodes[disk] = self._add_node(disk)
        self.ray_cluster.wait_for_nodes()
        self.cluster = rafka.connect(
            data_dir=self.data_dir, namespace=self.namespace, settings=self.settings
        )
        return self.cluster

    def _add_node(self, disk: str):
        from rafka.actors.service import at_broker_priority

        labels = {DISK_LABEL: disk}
        if disk in self.racks:
            labels[RACK_LABEL] = self.racks[disk]
        with at_broker_priority():
            return self.ray_cluster.add_node(
                num_cpus=self.cpus_per_node, resources={DISK_RESOURCE: 1}, labels=labels
            )

    def kill(self, disk: str) -> None:
        """The node holding ``disk`` dies (its processes are killed; its files stay)."""
        self.ray_cluster.remove_node(self.nodes.pop(disk), allow_graceful=False)

    def revive(self, disk: str, timeout_s: float = 60.0) -> None:
        """A new node comes up with ``disk``: its agent and replicas restart there. Waits for
        this node only (cluster_utils' wait_for_nodes would also wait until Ray has marked
        every killed node dead, about 15 s)."""
        import ray

        node = self.nodes[disk] = self._add_node(disk)
        deadline = time.monotonic() + timeout_s
        while not any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the node of disk {disk!r} did not come up in {timeout_s} s")
            time.sleep(0.1)

    def join_disk(self, disk: str) -> None:
        """A node with a new disk joins and nothing else is done: the controller notices it
        and starts its node agent (a broker) by itself."""
        self.revive(disk)
        self.disks.append(disk)

    def add_disk(self, disk: str) -> None:
        """A node with a new disk joins; rafka starts a node agent (a broker) for it, as
        ``rafka up`` does on a real cluster."""
        from rafka.actors import service

        self.revive(disk)
        self.disks.append(disk)
        service.start_services(self.data_dir, self.namespace, self.settings)

    def is_up(self, disk: str) -> bool:
        return disk in self.nodes

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.ray_cluster is not None:
            self.ray_cluster.shutdown()

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
