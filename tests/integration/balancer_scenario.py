"""Run by test_balancer.py in its own process (a process holds one Ray connection): the
balancer on a LocalCluster of three disk nodes, with an acks=all producer writing all along.

1. A topic of 6 partitions, RF=2, placed on the three brokers.
2. Two disk nodes join (``join_disk``: a Ray node declaring ``rafka_disk``, nothing else):
   the controller starts their node agents, so they become brokers, and in the default
   ``node_add`` mode the balancer gives them their share, replicas and leaders per broker
   within one of each other, with no command.
3. ``admin.drain_broker`` empties one broker of its replicas and leaderships.
4. Another broker's node is killed for good: once it has been dead for the healing delay
   (5 s here), its replicas are re-created on the live brokers from the in-sync replicas.
5. The producer stops; a consumer reads every partition from the start: every acknowledged
   record is there, once.

Prints one ``REPORT {json}`` line with what each step saw and its timings; the Ray cluster
is shut down whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

from rafka import TopicPartition  # noqa: E402
from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402

DISKS = ["d1", "d2", "d3"]
NAMESPACE = "balancer-scenario"
TOPIC = "balanced"
PARTITIONS = 6
HEAL_AFTER_S = 5
SETTINGS = {
    "partition.autobalancing.tick.interval.ms": 500,
    "partition.autobalancing.node.availability.timeout.sec": HEAL_AFTER_S,
    "broker.session.timeout.ms": 1000,
    "replica.lag.time.max.ms": 3000,
    "replicas.per.actor": 8,  # fewer processes on the 2 cores
}


def log(message: str) -> None:
    print(f"[balancer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Writer:
    """An acks=all producer sending numbered values round the partitions until stopped;
    ``acked`` holds every value whose send was acknowledged."""

    def __init__(self, cluster, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer = cluster.producer(acks="all", linger_ms=5, retries=1_000_000,
                                         delivery_timeout_ms=120_000)  # fmt: skip
        self.acked: set[bytes] = set()
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, value: bytes):
        def callback(metadata, error) -> None:
            with self._lock:
                if error is None:
                    self.acked.add(value)
                else:
                    self.failed += 1
        return callback

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"v%d" % i
            self.producer.send(self.topic, value=value, partition=i % self.partitions,
                               callback=self._done(value))  # fmt: skip
            i += 1
            time.sleep(0.002)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.producer.flush(180)
        self.producer.close(30)


def read_everything(cluster, topic: str = TOPIC, partitions: int = PARTITIONS) -> list[bytes]:
    consumer = cluster.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        out: list[bytes] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError("reading the topic back took over 120 s")
            out += [r.value for r in consumer.poll(timeout_ms=500)]
        return out
    finally:
        consumer.close()


def stop_and_check(writer: Writer, cluster) -> dict[str, int]:
    """Stop the writer and read its topic back: what was acknowledged, read, lost (acked
    but not read) and read twice."""
    writer.stop()
    read = read_everything(cluster, writer.topic, writer.partitions)
    return {"acked": len(writer.acked), "failed_sends": writer.failed, "read": len(read),
            "lost": len(writer.acked - set(read)), "duplicates": len(read) - len(set(read))}


def spread(counts: dict[int, int], brokers) -> int:
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values)


def main(data_dir: str) -> dict[str, Any]:
    local = LocalCluster(data_dir, DISKS, namespace=NAMESPACE, settings=SETTINGS)
    report: dict[str, Any] = {"settings": SETTINGS, "timings_s": {}}
    timings = report["timings_s"]
    writer = admin = None
    try:
        log("starting three disk nodes")
        cluster = local.start()
        admin = cluster.admin()
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)
        admin.wait_for_topic(TOPIC, 120)
        writer = Writer(cluster)
        writer.thread.start()
        wait_for(lambda: len(writer.acked) > 200, 60, "the first acknowledged records")

        # 2. Two disk nodes join: they become brokers and take their share by themselves.
        log("nodes with disks d4 and d5 join")
        began = time.monotonic()
        local.join_disk("d4")
        local.join_disk("d5")

        def joined():
            found = {b.disk: b.broker_id for b in admin.brokers()}
            return found if {"d4", "d5"} <= set(found) else None

        disk_ids = wait_for(joined, 60, "the joined disks to become brokers")
        timings["joined_disk_registered"] = round(time.monotonic() - began, 1)
        disk_of = {b.broker_id: b.disk for b in admin.brokers()}
        new = [disk_ids["d4"], disk_ids["d5"]]
        report["new_brokers"] = new

        def balanced():
            s = admin.describe_balancer()
            brokers = sorted(disk_of)
            ok = (not s.in_flight and all(s.replicas.get(b, 0) > 0 for b in new)
                  and spread(s.replicas, brokers) <= 1 and spread(s.leaders, brokers) <= 1)
            return s if ok else None

        status = wait_for(balanced, 120, "the new brokers' share of replicas and leaders")
        timings["node_add_balanced"] = round(time.monotonic() - began, 1)
        report["after_node_add"] = {"replicas": status.replicas, "leaders": status.leaders,
                                    "moves_started": status.moves_started}  # fmt: skip

        # 3. A broker is drained.
        drained = next(b for b, d in disk_of.items() if d == "d2")
        log(f"draining broker {drained}")
        began = time.monotonic()
        admin.drain_broker(drained)
        status = wait_for(lambda: (lambda s: s if s.replicas.get(drained) == 0
                                   and s.leaders.get(drained) == 0 and not s.in_flight
                                   else None)(admin.describe_balancer()),
                          120, "the drained broker to be empty")  # fmt: skip
        timings["drained"] = round(time.monotonic() - began, 1)
        report["drained_broker"] = drained
        report["after_drain"] = {"replicas": status.replicas, "leaders": status.leaders,
                                 "draining": status.draining}  # fmt: skip

        # 4. A broker is lost for good and healed.
        lost = next(b for b, d in disk_of.items() if d == "d3")
        log(f"killing broker {lost}'s node for good")
        began = time.monotonic()
        local.kill("d3")

        def healed():
            partitions = admin.describe_topic(TOPIC).partitions
            return all(lost not in p.replicas and len(p.isr) == 2 for p in partitions)

        wait_for(healed, 120, "the lost broker's replicas to be re-created")
        timings["healed"] = round(time.monotonic() - began, 1)
        report["lost_broker"] = lost
        report["after_heal"] = [p.replicas for p in admin.describe_topic(TOPIC).partitions]

        # 5. Nothing acknowledged is lost.
        report.update(stop_and_check(writer, cluster))
        writer = None
    except Exception:
        report["error"] = traceback.format_exc()
        try:  # what the balancer saw, for the failure's reader
            report["balancer_at_error"] = admin.describe_balancer()._asdict()
            report["partitions_at_error"] = [p._asdict() for p in
                                             admin.describe_topic(TOPIC).partitions]
        except Exception:  # noqa: BLE001 - the cluster may be what failed
            pass
    finally:
        if writer is not None:
            try:
                writer.stop()
            except Exception:  # noqa: BLE001 - the cluster is going down anyway
                pass
        local.shutdown()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1]), default=str))
