"""Run by test_multi_node.py in its own process (a process holds one Ray connection): a
three-node ``ray.cluster_utils.Cluster`` whose two worker nodes each offer a named disk."""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import rafka  # noqa: E402
from rafka import TopicPartition  # noqa: E402
from rafka.actors.placement import DISK_LABEL, DISK_RESOURCE  # noqa: E402


def disk_node(cluster: Cluster, disk: str):
    return cluster.add_node(num_cpus=1, resources={DISK_RESOURCE: 1}, labels={DISK_LABEL: disk})


def main(data_dir: str) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes = {disk: disk_node(cluster, disk) for disk in ("disk-a", "disk-b")}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="multi-node", logging_level="ERROR")
    report: dict = {}
    try:
        handle = rafka.connect(data_dir=data_dir, namespace="multi-node")
        admin = handle.admin()
        report["brokers"] = {b.disk: b.broker_id for b in admin.brokers()}
        described = admin.create_topic("spread", partitions=4)
        report["replicas"] = [p.replicas for p in described.partitions]
        producer = handle.producer()
        for i in range(400):
            producer.send("spread", value=b"%d" % i, key=b"%d" % i)
        producer.close()
        report["dirs"] = {
            disk: sorted(n for n in os.listdir(os.path.join(data_dir, disk)) if "-" in n)
            for disk in ("disk-a", "disk-b")
        }
        # A disk's node goes away and a new node (new Ray node id) comes back with the same
        # disk: its replicas must restart there and recover their files. (Not the node this
        # driver happens to be attached to: cluster_utils refuses to remove that one.)
        driver_node = ray.get_runtime_context().get_node_id()
        replaced = next(d for d, n in nodes.items() if n.node_id != driver_node)
        cluster.remove_node(nodes[replaced])
        disk_node(cluster, replaced)
        report["replaced"] = replaced
        cluster.wait_for_nodes()
        consumer = handle.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("spread", p) for p in range(4)])
        got: list = []
        deadline = time.monotonic() + 120
        while len(got) < 400 and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=1000)
        report["consumed_after_node_came_back"] = sorted(int(r.value) for r in got)
        handle.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1])))
