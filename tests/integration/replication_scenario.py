"""Run by test_replication.py in its own process (a process holds one Ray connection): a
LocalCluster with three disk nodes, and the failures of Kafka's replication story in turn.

1. A RF=3 topic (min.insync.replicas=2) takes acks=all writes; its leader's node dies: a new
   leader comes from the ISR with a higher epoch, the producer carries on by itself, and
   every acknowledged record is still there.
2. The node comes back: its replica catches up, rejoins the ISR, and the automatic
   preferred-leader election gives it its leadership back.
3. A RF=2 topic (min.insync.replicas=2) is reassigned onto the RF=3 leader and one follower;
   that follower's node dies: the RF=3 ISR shrinks and acks=all still works there, while
   the RF=2 topic refuses acks=all with NotEnoughReplicas.
4. The follower's node comes back: both ISRs are full again and the RF=2 topic takes writes.
5. A node is lost for good: its RF=2 replica is re-created on a new disk node by
   ``reassign_partitions``, copying the log by follower fetch.

Prints one ``REPORT {json}`` line with what it saw.
"""

from __future__ import annotations

import json
import os
import sys
import time

from rafka import TopicPartition
from rafka.actors.local_cluster import LocalCluster, wait_for
from rafka.errors import NotEnoughReplicas

SETTINGS = {
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "leader.imbalance.check.interval.seconds": 3,
    # Step 5 moves a partition to the disk that joins by hand; the balancer would move
    # replicas there too (test_balancer.py covers that).
    "partition.autobalancing.mode": "off",
}


def read_all(cluster, topic: str, expected: int) -> list[bytes]:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    records = []
    deadline = time.monotonic() + 60
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(timeout_ms=500)
    consumer.close()
    assert [r.offset for r in records] == list(range(len(records)))
    return [r.value for r in records]


def main(data_dir: str) -> dict:
    local = LocalCluster(data_dir, ["d1", "d2", "d3"], namespace="replication",
                         settings=SETTINGS)  # fmt: skip
    report: dict = {}
    cluster = local.start()
    try:
        admin = cluster.admin()
        disks = {b.broker_id: b.disk for b in admin.brokers()}
        admin.create_topic("rf3", 1, 3, {"min.insync.replicas": 2})
        producer = cluster.producer(acks="all", linger_ms=1)
        acked = [producer.send("rf3", value=b"%d" % i).result(30).offset for i in range(300)]
        before = admin.describe_topic("rf3").partitions[0]

        # 1. The leader's node dies.
        local.kill(disks[before.leader])
        killed_at = time.monotonic()
        first = producer.send("rf3", value=b"300").result(60)
        report["failover_s"] = time.monotonic() - killed_at
        acked.append(first.offset)
        acked += [producer.send("rf3", value=b"%d" % i).result(30).offset for i in range(301, 600)]
        after = admin.describe_topic("rf3").partitions[0]
        report["leader_death"] = {
            "old": before._asdict(), "new": after._asdict(), "acked_offsets_in_order":
            acked == list(range(600)), "read": [v.decode() for v in read_all(cluster, "rf3", 600)],
        }  # fmt: skip

        # 2. It comes back, catches up, rejoins, and leads again (automatic preferred election).
        local.revive(disks[before.leader])
        revived_at = time.monotonic()
        wait_for(lambda: len(admin.describe_topic("rf3").partitions[0].isr) == 3, 90, "rejoin")
        report["rejoin_s"] = time.monotonic() - revived_at
        back = wait_for(
            lambda: (p := admin.describe_topic("rf3").partitions[0]).leader == before.leader and p,
            60, "preferred leader",
        )  # fmt: skip
        report["leader_back"] = back._asdict()
        offsets = {o["broker_id"]: o for o in admin.partition_offsets("rf3")}
        report["offsets_after_rejoin"] = offsets[before.leader]

        # 3. A follower's node dies: RF=3 keeps taking acks=all, RF=2 refuses them.
        leader = back.leader
        follower = next(b for b in back.replicas if b != leader)
        admin.create_topic("rf2", 1, 2, {"min.insync.replicas": 2})
        admin.reassign_partitions("rf2", {0: [leader, follower]})
        moved = wait_for(
            lambda: (p := admin.describe_topic("rf2").partitions[0]).replicas == [leader, follower]
            and not p.adding and not p.removing and len(p.isr) == 2 and p,
            60, "reassignment",
        )  # fmt: skip
        report["reassigned"] = moved._asdict()
        admin.elect_leaders("rf2")
        wait_for(lambda: admin.describe_topic("rf2").partitions[0].leader == leader, 30,
                 "rf2 leader")  # fmt: skip
        rf2 = cluster.producer(acks="all", linger_ms=1, delivery_timeout_ms=5000)
        rf2.send("rf2", value=b"before").result(30)
        local.kill(disks[follower])
        shrunk = wait_for(
            lambda: follower not in (p := admin.describe_topic("rf3").partitions[0]).isr and p,
            30, "ISR shrink",
        )  # fmt: skip
        report["rf3_isr_after_follower_death"] = shrunk.isr
        # The rf2 leader itself must know its ISR shrank, or the write below would be taken
        # and then fail after the append (NotEnoughReplicasAfterAppend) instead.
        wait_for(lambda: admin.partition_offsets("rf2")[0]["isr"] == [leader], 30, "rf2 shrink")
        written = producer.send("rf3", value=b"600").result(30)
        report["rf3_write_with_follower_down"] = written.offset
        try:
            rf2.send("rf2", value=b"refused").result(30)
            report["rf2_write_with_follower_down"] = "acknowledged"
        except NotEnoughReplicas as e:
            report["rf2_write_with_follower_down"] = f"NotEnoughReplicas: {e}"
        except Exception as e:  # reported, and the test says what it expected
            report["rf2_write_with_follower_down"] = f"{type(e).__name__}: {e}"

        # 4. It comes back: both ISRs are full again and RF=2 takes acks=all again.
        local.revive(disks[follower])
        wait_for(lambda: len(admin.describe_topic("rf3").partitions[0].isr) == 3, 90, "rf3 ISR")
        wait_for(lambda: len(admin.describe_topic("rf2").partitions[0].isr) == 2, 90, "rf2 ISR")
        report["rf2_write_after_return"] = rf2.send("rf2", value=b"after").result(30).offset
        report["rf2_read"] = [v.decode() for v in read_all(cluster, "rf2", 2)]
        report["rf3_read_count"] = len(read_all(cluster, "rf3", 601))
        report["under_replicated"] = [
            (t, p.partition) for t, p in admin.under_replicated_partitions()
        ]  # fmt: skip

        # 5. The follower's node is lost for good; its replica moves to a new disk.
        local.kill(disks[follower])
        local.add_disk("d4")
        new_broker = next(b.broker_id for b in admin.brokers() if b.disk == "d4")
        admin.reassign_partitions("rf2", {0: [leader, new_broker]})
        moved = wait_for(
            lambda: (p := admin.describe_topic("rf2").partitions[0]).replicas
            == [leader, new_broker] and len(p.isr) == 2 and p,
            90, "reassignment to the new disk",
        )  # fmt: skip
        report["moved_to_new_disk"] = moved._asdict()
        copied = {o["broker_id"]: o for o in admin.partition_offsets("rf2")}
        report["new_disk_copy"] = sorted(
            n for n in os.listdir(os.path.join(data_dir, "d4")) if n.startswith("rf2-")
        )  # fmt: skip
        report["rf2_write_after_move"] = rf2.send("rf2", value=b"moved").result(30).offset
        report["rf2_read_after_move"] = [v.decode() for v in read_all(cluster, "rf2", 3)]
        report["leader_log_end_after_move"] = copied[leader]["log_end_offset"]
        producer.close()
        rf2.close()
    finally:
        local.shutdown()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1])))
