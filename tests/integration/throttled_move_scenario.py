"""Run by test_throttled_move.py in its own process (a process holds one Ray connection): a
LocalCluster with two disk nodes and ``replication.throttled.rate`` set low, and one move.

1. A one-partition topic on one broker takes a few MB of acknowledged writes.
2. It is reassigned to the other broker: the new replica copies the log by follower fetch,
   at most the throttled rate, and the move completes.
3. The new replica reports what its throttle did (bytes taken while throttled, seconds
   waited, the rate), and every record reads back from the new broker as written.

Prints one ``REPORT {json}`` line; the Ray cluster is shut down whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from rafka import TopicPartition  # noqa: E402
from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402

import replica_lookup  # noqa: E402  (beside this script, which runs as a program)

NAMESPACE = "throttled-move"
TOPIC = "moved"
RECORDS = 3000
VALUE_SIZE = 1000  # 3 MB in all
#: Low enough that copying the log takes several budgets (each fetch asks for one burst).
RATE = 512 << 10
SETTINGS = {
    "replication.throttled.rate": RATE,
    # Only the move this scenario makes: no balancer moves to the idle broker.
    "partition.autobalancing.mode": "off",
}


def value(i: int) -> bytes:
    return i.to_bytes(4, "big") * (VALUE_SIZE // 4)


def read_all(cluster, expected: int) -> list:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, 0)])
    records: list = []

    def read() -> bool:
        records.extend(consumer.poll(timeout_ms=500))
        return len(records) >= expected

    wait_for(read, 120, "reading the moved partition", interval=0)
    consumer.close()
    return records


def main(data_dir: str) -> dict:
    import ray

    local = LocalCluster(data_dir, ["d1", "d2"], namespace=NAMESPACE, settings=SETTINGS)
    report: dict = {"rate": RATE, "records": RECORDS}
    cluster = local.start()
    try:
        admin = cluster.admin()
        admin.create_topic(TOPIC, 1, 1)
        described = admin.wait_for_topic(TOPIC)
        source = described.partitions[0].leader
        target = next(b.broker_id for b in admin.brokers() if b.broker_id != source)
        producer = cluster.producer(acks="all", linger_ms=5)
        for i in range(RECORDS):
            producer.send(TOPIC, value=value(i))
        producer.flush()
        producer.close()
        before = admin.partition_offsets(TOPIC)[0]
        report["before"] = {k: before[k] for k in ("log_end_offset", "size_bytes")}

        admin.reassign_partitions(TOPIC, {0: [target]})
        moved = wait_for(
            lambda: (p := admin.describe_topic(TOPIC).partitions[0]).replicas == [target]
            and not p.adding and not p.removing and p.leader == target and p,
            180, "the move",
        )  # fmt: skip
        report["moved"] = moved._asdict()
        replica = replica_lookup.find_replica(ray, NAMESPACE, described.topic_id, 0, target)
        report["throttle"] = ray.get(replica.describe.remote(), timeout=30).get("throttle")
        records = read_all(cluster, RECORDS)
        report["read"] = len(records)
        report["offsets_in_order"] = [r.offset for r in records] == list(range(len(records)))
        report["values_intact"] = all(r.value == value(r.offset) for r in records)
    except Exception:
        report["error"] = traceback.format_exc()
    finally:
        local.shutdown()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1])))
