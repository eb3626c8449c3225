"""Run by test_kafka_failover.py in its own process: a LocalCluster of three disk nodes with
Kafka listeners, a RF=3 topic (min.insync.replicas=2), and a confluent-kafka producer
(idempotent, acks=all) writing while the leader's node dies. Every record the producer saw
acknowledged must be read back, once, in the order it was sent.

Prints one ``REPORT {json}`` line with what it injected and what it found.
"""

from __future__ import annotations

import json
import sys
import time

import confluent_kafka as ck

from rafka import TopicPartition
from rafka.actors.local_cluster import LocalCluster, wait_for

SETTINGS = {
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "partition.autobalancing.mode": "off",
    "auto.leader.rebalance.enable": False,
    "listeners": "PLAINTEXT://127.0.0.1:0",
}
TOTAL = 3000


def main(data_dir: str) -> dict:
    local = LocalCluster(data_dir, ["k1", "k2", "k3"], namespace="kafka-failover",
                         settings=SETTINGS)  # fmt: skip
    cluster = local.start()
    report: dict = {"injected": [], "total": TOTAL}
    try:
        admin = cluster.admin()
        disks = {b.broker_id: b.disk for b in admin.brokers()}
        admin.create_topic("orders", 1, 3, {"min.insync.replicas": 2})
        admin.wait_for_topic("orders")
        wait_for(lambda: len(cluster.bootstrap_servers.split(",")) == 3, 60,
                 "three Kafka listeners")  # fmt: skip
        report["bootstrap"] = cluster.bootstrap_servers
        acked: dict[int, int] = {}  # value -> offset
        failed: list[str] = []

        def delivered(error, message):
            if error:
                failed.append(str(error))
            else:
                acked[int(message.value())] = message.offset()

        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 2,
                                "max.in.flight.requests.per.connection": 5,
                                "message.timeout.ms": 60_000})  # fmt: skip
        leader = admin.describe_topic("orders").partitions[0].leader
        killed_at = None
        for i in range(TOTAL):
            producer.produce("orders", value=b"%d" % i, on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.001)
            if i == TOTAL // 3:
                # Mid-burst: up to five produce requests are in flight to the leader.
                local.kill(disks[leader])
                killed_at = time.monotonic()
                report["injected"].append(f"killed the node of leader broker {leader}")
        left = producer.flush(120)
        report["failover_to_all_acked_s"] = round(time.monotonic() - killed_at, 2)
        after = admin.describe_topic("orders").partitions[0]
        report.update(left_unflushed=left, failed=failed[:5], acked=len(acked),
                      old_leader=leader, new_leader=after.leader)  # fmt: skip
        consumer = cluster.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("orders", 0)])
        read: list = []
        deadline = time.monotonic() + 60
        while len(read) < len(acked) and time.monotonic() < deadline:
            read += consumer.poll(timeout_ms=500)
        consumer.close()
        values = [int(r.value) for r in read]
        report["read"] = len(values)
        report["lost"] = sorted(set(acked) - set(values))[:20]
        report["duplicates"] = len(values) - len(set(values))
        report["in_send_order"] = values == sorted(values)
        report["offsets_match"] = all(acked[int(r.value)] == r.offset for r in read
                                      if int(r.value) in acked)  # fmt: skip
    finally:
        local.shutdown()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1])), flush=True)
