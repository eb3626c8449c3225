"""Run by test_host_packing.py in its own process (a process holds one Ray connection): two
disk nodes (a LocalCluster) packing 8 replicas per host actor, a 4-partition RF=2 topic whose
replicas share one host per broker, and a producer (acks=all, idempotent) that writes
partition 0 hard and the others a little, all along.

1. the topic is created; every replica of a broker is in one host;
2. the writer starts; partition 0's replicas cross ``partition.hot.bytes.per.sec`` and the
   controller's host packing moves each into a host of its own (the leader's too: it stops
   serving while its host changes, and the producer retries);
3. writes go on a few seconds in the new hosts, then stop; every partition is read from the
   beginning, and each acknowledged record must be there, at its acknowledged offset, once.

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

from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402
from rafka.actors.placement import CONTROLLER_NAME  # noqa: E402
# Run as a script, so its own folder is on the path.
from packed_scenario import lost_and_duplicated, read_all  # noqa: E402

DISKS = ["d1", "d2"]
NAMESPACE = "host-packing-scenario"
TOPIC = "packing"
PARTITIONS = 4
HOT_PARTITION = 0
SETTINGS = {
    "replicas.per.actor": 8,
    # Partition 0 takes ~250 KB/s below: hot; the others ~2 KB/s: cold.
    "partition.hot.bytes.per.sec": 50_000,
    "broker.load.report.interval.ms": 1000,
    "replica.lag.time.max.ms": 3000,
}


class Writer(threading.Thread):
    """Acks=all, idempotent: 1 KiB records to the hot partition every 4 ms, one record in
    20 to another partition; keeps every acknowledgement as (partition, offset, value)."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=5,
                                         delivery_timeout_ms=120_000)  # fmt: skip
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stop.wait(0.004):
            partition = HOT_PARTITION if seq % 20 else 1 + (seq // 20) % (PARTITIONS - 1)
            value = b"seq-%d-" % seq + b"x" * 1024
            self.producer.send(TOPIC, value=value, partition=partition,
                               callback=lambda m, e, v=value: self._done(m, e, v))  # fmt: skip
            seq += 1
        self.producer.flush()
        self.producer.close()

    def _done(self, metadata, error, value: bytes) -> None:
        if error is None:
            self.acked.append((metadata.partition, metadata.offset, value))
        else:
            self.failed += 1


def hosts(controller) -> dict[int, dict[int, int]]:
    """partition -> broker -> host slot, as the controller says."""
    import ray

    (described,) = ray.get(controller.describe_topics.remote([TOPIC]))
    return {p["partition"]: dict(zip(p["replicas"], p["hosts"]))
            for p in described["partitions"]}  # fmt: skip


def hot_alone(controller) -> bool:
    now = hosts(controller)
    hot = now[HOT_PARTITION]
    return all(hot[b] != now[p][b] for p in now if p != HOT_PARTITION for b in hot)


def main(data_dir: str) -> dict:
    import ray

    local = LocalCluster(data_dir, DISKS, namespace=NAMESPACE, settings=SETTINGS)
    report: dict = {"settings": SETTINGS}
    try:
        cluster = local.start()
        admin = cluster.admin()
        admin.create_topic(TOPIC, PARTITIONS, 2)
        controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        wait_for(lambda: all(not p.starting and p.leader >= 0 and len(p.isr) == 2
                             for p in admin.describe_topic(TOPIC).partitions), 60,
                 "the topic to be writable and replicated")  # fmt: skip
        before = hosts(controller)
        report["shared_before"] = all(before[p] == before[0] for p in before)
        writer = Writer(cluster)
        writer.start()
        began = time.monotonic()
        try:
            wait_for(lambda: hot_alone(controller), 75, "the hot partition's own hosts", 0.5)
            report["rehosted_after_s"] = round(time.monotonic() - began, 1)
            report["hot_alone"] = True
        except TimeoutError:
            report["hot_alone"] = False
        time.sleep(3)  # writes go on in the new hosts
        writer.stop.set()
        writer.join(120)
        status = ray.get(controller.describe_balancer.remote())["host_packing"]
        report["rehosts"] = status["rehosts"]
        report["hosts_after"] = {str(p): {str(b): s for b, s in by.items()}
                                 for p, by in hosts(controller).items()}  # fmt: skip
        report["acked"] = len(writer.acked)
        report["acked_hot"] = sum(1 for p, _, _ in writer.acked if p == HOT_PARTITION)
        report["failed_sends"] = writer.failed
        report["lost"], report["duplicated"] = lost_and_duplicated(
            read_all(cluster, admin, TOPIC, PARTITIONS, timeout_s=60), writer.acked)
        report["fencings"] = cluster.status()["fencings"]
        report["summary"] = (
            f"hot partition alone: {report['hot_alone']} (after "
            f"{report.get('rehosted_after_s')} s), {report['rehosts']} re-host(s); "
            f"{report['acked']} acked ({report['acked_hot']} hot), {report['failed_sends']} "
            f"failed, {report['lost']} lost, {report['duplicated']} duplicated"
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
