"""Run by test_packed_replicas.py in its own process (a process holds one Ray connection):
three disk nodes (a LocalCluster) packing 100 replicas per host actor, one 300-partition RF=3
topic, and one host actor killed under acks=all writes.

1. the topic is created and every partition takes one acks=all write (timed);
2. an idempotent acks=all producer writes to every partition, keyed by sequence number;
3. the host actor holding the leader of partition 0 is killed (``ray.kill``, no restart):
   every partition it led must get a new leader from its ISR; its agent starts it again,
   and its replicas check in, catch up and rejoin the ISRs;
4. writes stop; every partition is read from the beginning, and each acknowledged record
   must be there, at its acknowledged offset, once.

Prints one ``REPORT {json}`` line; the Ray cluster is shut down whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from rafka import TopicPartition  # noqa: E402
from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402
from rafka.actors.placement import CONTROLLER_NAME  # noqa: E402
from rafka.cluster.hosting import host_name  # noqa: E402

DISKS = ["d1", "d2", "d3"]
NAMESPACE = "packed-scenario"
TOPIC = "packed"
PARTITIONS = 300
SETTINGS = {
    "replicas.per.actor": 100,
    # A follower stuck behind leaves the ISR after 3 s, not 30 (Kafka's tests shorten it too).
    "replica.lag.time.max.ms": 3000,
    # Leadership stays where the failure put it while the scenario watches it.
    "auto.leader.rebalance.enable": False,
}


def fully_replicated(admin) -> bool:
    return all(len(p.isr) == 3 and p.leader >= 0 and not p.starting
               for p in admin.describe_topic(TOPIC).partitions)  # fmt: skip


class Writer(threading.Thread):
    """Acks=all, idempotent, one record every 2 ms to partition ``seq % PARTITIONS``; keeps
    every acknowledgement as (partition, offset, value)."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=2,
                                         delivery_timeout_ms=120_000)  # fmt: skip
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stop.wait(0.002):
            value = b"seq-%d" % seq
            self.producer.send(TOPIC, value=value, partition=seq % PARTITIONS,
                               callback=lambda m, e, v=value: self._done(m, e, v))  # fmt: skip
            seq += 1
        self.producer.flush()
        self.producer.close()

    def _done(self, metadata, error, value: bytes) -> None:
        if error is None:
            self.acked.append((metadata.partition, metadata.offset, value))
        else:
            self.failed += 1


def read_all(cluster, admin, topic: str = TOPIC, partitions: int = PARTITIONS,
             timeout_s: float = 180) -> dict[int, list[tuple[int, bytes]]]:  # fmt: skip
    """partition -> (offset, value) of every record up to its high watermark."""
    ends = {o["partition"]: o["high_watermark"] for o in admin.partition_offsets(topic)}
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(
        (got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in range(partitions)
    ):
        for record in consumer.poll(timeout_ms=1000):
            got[record.partition].append((record.offset, record.value))
    consumer.close()
    return got


def lost_and_duplicated(got: dict[int, list[tuple[int, bytes]]], acked,
                        ignore: tuple[bytes, ...] = ()) -> tuple[int, int]:  # fmt: skip
    """Acknowledged (partition, offset, value)s not read back at their offset, and values
    read more than once (``ignore``: values written on purpose more than once)."""
    read = {(p, offset): value for p, records in got.items() for offset, value in records}
    lost = sum(1 for p, o, v in acked if read.get((p, o)) != v)
    values = [v for records in got.values() for _, v in records if v not in ignore]
    return lost, len(values) - len(set(values))


def main(data_dir: str) -> dict:
    import ray

    local = LocalCluster(data_dir, DISKS, namespace=NAMESPACE, settings=SETTINGS)
    report: dict = {"partitions": PARTITIONS, "settings": SETTINGS}
    try:
        cluster = local.start()
        admin = cluster.admin()
        began = time.monotonic()
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": 2})
        first = cluster.producer(acks="all", linger_ms=5, max_block_ms=300_000,
                                 delivery_timeout_ms=300_000)  # fmt: skip
        for future in [first.send(TOPIC, value=b"first", partition=p) for p in range(PARTITIONS)]:
            future.result(timeout=300)
        first.close()
        report["writable_s"] = round(time.monotonic() - began, 1)
        wait_for(lambda: fully_replicated(admin), 180, "every ISR full")
        report["replicated_s"] = round(time.monotonic() - began, 1)

        writer = Writer(cluster)
        writer.start()
        time.sleep(3)
        controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        (described,) = ray.get(controller.describe_topics.remote([TOPIC]))
        p0 = described["partitions"][0]
        broker = p0["leader"]
        slot = p0["hosts"][p0["replicas"].index(broker)]
        led = [p["partition"] for p in described["partitions"] if p["leader"] == broker
               and p["hosts"][p["replicas"].index(broker)] == slot]  # fmt: skip
        report["killed_host"] = host_name(broker, slot)
        report["killed_host_led"] = len(led)
        killed = time.monotonic()
        ray.kill(ray.get_actor(host_name(broker, slot), namespace=NAMESPACE), no_restart=True)
        moved: dict[int, float] = {}
        while time.monotonic() - killed < 30 and len(moved) < len(led):
            for p in admin.describe_topic(TOPIC).partitions:
                if p.partition in led and p.partition not in moved and p.leader not in (
                    broker, -1
                ):  # fmt: skip
                    moved[p.partition] = time.monotonic() - killed
            time.sleep(0.1)
        report["leaders_moved"] = len(moved)
        report["last_leader_moved_s"] = round(max(moved.values(), default=-1), 2)
        time.sleep(3)  # writes go on to the new leaders
        writer.stop.set()
        writer.join(120)
        report["acked"] = len(writer.acked)
        report["failed_sends"] = writer.failed
        try:
            wait_for(lambda: fully_replicated(admin), 180, "the killed host's replicas to rejoin")
            report["rejoined"] = True
            report["rejoined_s"] = round(time.monotonic() - killed, 1)
        except TimeoutError:
            report["rejoined"] = False
        report["fencings"] = cluster.status()["fencings"]
        report["lost"], report["duplicated"] = lost_and_duplicated(
            read_all(cluster, admin), writer.acked, ignore=(b"first",))
        report["summary"] = (
            f"{PARTITIONS} partitions RF=3 packed {SETTINGS['replicas.per.actor']} per host: "
            f"writable in {report['writable_s']} s; killed {report['killed_host']} (led "
            f"{len(led)}), {len(moved)} leaders moved (last after "
            f"{report['last_leader_moved_s']} s), rejoined: {report['rejoined']}; "
            f"{report['acked']} acked, {report['lost']} lost, {report['duplicated']} duplicated"
        )
    except Exception as e:  # say where it stopped, with what it saw
        report["error"] = "".join(traceback.format_exception(e))
        report.setdefault("summary", "failed: " + str(e))
    finally:
        local.shutdown()
    return report


if __name__ == "__main__":
    found = main(sys.argv[1])
    sys.stdout.write("REPORT " + json.dumps(found) + "\n")
    sys.stdout.flush()
