"""Run by test_spark.py in its own process (a process holds one Ray connection): a
LocalCluster of three disk nodes, a replicated topic, and a Spark-read snapshot of it whose
blocks are located with Ray's object directory."""

from __future__ import annotations

import json
import sys

from rafka.actors.local_cluster import LocalCluster
from rafka.actors.placement import DISK_LABEL


def main(data_dir: str) -> dict:
    import ray
    from ray.experimental import get_object_locations

    from rafka.clients.topic_snapshot import snapshot_topic

    with LocalCluster(data_dir, ["disk-a", "disk-b", "disk-c"], namespace="locality") as local:
        cluster = local.cluster
        admin = cluster.admin()
        described = admin.create_topic("located", partitions=3, replication_factor=2)
        producer = cluster.producer()
        for i in range(3000):
            producer.send("located", value=b"%d" % i, key=b"%d" % i)
        producer.close()
        broker_disk = {b.broker_id: b.disk for b in admin.brokers()}
        node_disk = {n["NodeID"]: n["Labels"].get(DISK_LABEL) for n in ray.nodes() if n["Alive"]}
        snapshot = snapshot_topic(cluster, "located", records_per_block=400)
        # One ref per call: Ray 2.50 aborts the process ("promise already satisfied" in
        # GetLocationFromOwner) now and then when one call names blocks of several owners.
        locations = {}
        for ref in snapshot.refs:
            locations.update(get_object_locations([ref]))
        return {
            "replica_disks": {
                p.partition: [broker_disk[b] for b in p.replicas] for p in described.partitions
            },
            "blocks": [
                {
                    "partition": b.partition, "rows": b.rows, "maker": broker_disk[b.broker],
                    "located": sorted(node_disk.get(n, n) for n in locations[b.ref]["node_ids"]),
                }
                for b in snapshot.blocks
            ],
        }  # fmt: skip


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1])))
