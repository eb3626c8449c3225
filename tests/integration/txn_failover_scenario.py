"""Run by test_transaction_failover.py in its own process (a process holds one Ray
connection): a transaction coordinator killed after the commit point (PrepareCommit) and
before the markers, on three disk nodes (a LocalCluster), finishes the commit once it is back.

1. A data topic of one partition, RF=3 with ``min.insync.replicas=3``: its leader refuses a
   marker while a replica is out of the ISR. ``__transaction_state`` keeps RF=3 with min ISR
   2, so the coordinator can still write PrepareCommit with one broker down.
2. A transactional producer writes ``RECORDS`` records to the data topic (acks=all, all three
   replicas in sync) and flushes.
3. The node of a broker that leads neither the data partition nor the id's
   ``__transaction_state`` partition, and does not run the coordinator actor (see
   ``place_apart``), is stopped, and the scenario waits for the data partition's ISR to
   shrink to 2 (``replica.lag.time.max.ms`` is 1.5 s).
4. ``commit_transaction()`` returns (PrepareCommit is durable: the commit point) while no
   marker can be written: read_committed readers see nothing of the transaction (their end
   offset, the last stable offset, stays at its first record) and the coordinator describes
   it as PrepareCommit.
5. The coordinator actor of the id is killed with ``ray.kill(handle, no_restart=False)``:
   Ray starts it again at once (a named detached actor with ``max_restarts=-1``); the new
   process loads its ``__transaction_state`` partition and finds the transaction prepared.
   While the broker is still down it stays PrepareCommit and invisible.
6. The node comes back; its replica rejoins the ISR and the restarted coordinator writes the
   COMMIT marker: read_committed readers see every record of the transaction, describe says
   CompleteCommit, and the producer's next transaction commits and is read too.

Prints one ``REPORT {json}`` line with what each step saw and its timings; the Ray cluster
is shut down whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# A client thread calling Ray after the shutdown must fail, not connect to another Ray
# instance of this machine.
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

from rafka import TopicPartition  # noqa: E402
from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402
from rafka.actors.placement import transaction_coordinator_name  # noqa: E402
from rafka.cluster.transaction_records import shard_of  # noqa: E402

DISKS = ["d1", "d2", "d3"]
NAMESPACE = "txn-failover-scenario"
TOPIC = "txn-failover"
TXN_STATE_TOPIC = "__transaction_state"
TRANSACTIONAL_ID = "failover-producer"
RECORDS = 20
TXN_STATE_PARTITIONS = 2
SETTINGS = {
    "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
    # A replica of the stopped node leaves the ISRs 1.5 s after it stops fetching.
    "replica.lag.time.max.ms": 1500,
    "broker.session.timeout.ms": 1000,
    # Leaders stay where they are while the scenario watches them.
    "auto.leader.rebalance.enable": False,
    # A missing replica actor is started again within a second of the node's return.
    "metadata.reconcile.interval.ms": 1000,
}
#: Restarts of the coordinator, at most, to have it run apart from the broker to stop.
MAX_MOVES = 8
#: How long the scenario watches the stalled transaction with the broker down, s.
STALLED_S = 3.0


def log(message: str) -> None:
    print(f"[txn-failover {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def committed_read(cluster, expect: int, wait_s: float) -> dict[str, Any]:
    """What a fresh read_committed consumer of the data partition reads from the start in
    ``wait_s`` (stopping early once ``expect`` records are in), and its end offset (the
    last stable offset)."""
    tp = TopicPartition(TOPIC, 0)
    consumer = cluster.consumer(isolation_level="read_committed", auto_offset_reset="earliest",
                                fetch_max_wait_ms=100)  # fmt: skip
    try:
        consumer.assign([tp])
        values: list[str] = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and len(values) < expect:
            values += [r.value.decode() for r in consumer.poll(timeout_ms=200)]
        return {"values": values, "end_offset": consumer.end_offsets([tp])[tp],
                "position": consumer.position(tp)}  # fmt: skip
    finally:
        consumer.close()


def uncommitted_end(cluster) -> int:
    """The data partition's high watermark, as a read_uncommitted consumer sees it."""
    tp = TopicPartition(TOPIC, 0)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def whereabouts(ray, handle) -> dict[str, Any]:
    """The coordinator actor's process id and Ray node id (asked of the actor itself)."""

    def where(_self) -> dict[str, Any]:
        import os as _os

        import ray as _ray

        return {"pid": _os.getpid(), "node_id": _ray.get_runtime_context().get_node_id()}

    return ray.get(handle.__ray_call__.remote(where), timeout=60)


def place_apart(
    ray, local: LocalCluster, coordinator, candidates: list[int], disk_of: dict[int, str]
) -> tuple[int, int]:
    """The broker to stop (one of ``candidates``) and how many restarts it took to have the
    coordinator run on another node: the scenario kills the coordinator itself, so stopping
    its node would kill it before the commit. A coordinator asks for no resources, so Ray
    may place it on any node; it is restarted (``ray.kill``, no_restart=False) until it
    runs apart from a candidate, at most MAX_MOVES times."""
    for moves in range(MAX_MOVES + 1):
        before = whereabouts(ray, coordinator)
        apart = [b for b in candidates if local.nodes[disk_of[b]].node_id != before["node_id"]]
        if apart:
            return apart[0], moves
        restart(ray, coordinator, before["pid"])
    raise RuntimeError(f"the coordinator stayed on the node of brokers {candidates}")


def restart(ray, coordinator, old_pid: int) -> dict[str, Any]:
    """Kill the coordinator actor for Ray to start again, and return once a new process
    runs it with its shard loaded: its whereabouts. ``ray.kill`` returns before the old
    process dies; until it has, that process may still answer (and then drop a call sent
    next), so this waits for a new pid, then for ``ready``."""
    ray.kill(coordinator, no_restart=False)

    def restarted():
        where = whereabouts(ray, coordinator)
        return where if where["pid"] != old_pid and ray.get(coordinator.ready.remote(),
                                                             timeout=30) else None

    return wait_for(lambda: _try(restarted), 120, "the coordinator to run again, loaded")


def state_of(admin) -> str:
    return admin.describe_transactions([TRANSACTIONAL_ID])[TRANSACTIONAL_ID].state


def main(data_dir: str) -> dict[str, Any]:
    import ray

    local = LocalCluster(data_dir, DISKS, namespace=NAMESPACE, settings=SETTINGS)
    report: dict[str, Any] = {"records": RECORDS, "settings": SETTINGS, "timings_s": {}}
    timings = report["timings_s"]
    producer = None
    t0 = time.monotonic()
    try:
        log("starting three disk nodes")
        cluster = local.start()
        timings["cluster_start"] = round(time.monotonic() - t0, 1)
        admin = cluster.admin()
        disk_of = {b.broker_id: b.disk for b in admin.brokers()}
        admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                           config={"min.insync.replicas": 3})  # fmt: skip
        admin.wait_for_topic(TOPIC, 120)
        wait_for(lambda: len(admin.describe_topic(TOPIC).partitions[0].isr) == 3, 60,
                 "the data partition's ISR to be full")  # fmt: skip

        producer = cluster.producer(transactional_id=TRANSACTIONAL_ID, acks="all",
                                    transaction_timeout_ms=600_000, max_block_ms=120_000)
        began = time.monotonic()
        producer.init_transactions()  # creates __transaction_state and starts its coordinator
        timings["init_transactions"] = round(time.monotonic() - began, 1)
        shard = shard_of(TRANSACTIONAL_ID, TXN_STATE_PARTITIONS)
        wait_for(lambda: len(admin.describe_topic(TXN_STATE_TOPIC).partitions[shard].isr) == 3,
                 60, "the coordinator's __transaction_state partition to be in sync")
        data = admin.describe_topic(TOPIC).partitions[0]
        state_partition = admin.describe_topic(TXN_STATE_TOPIC).partitions[shard]
        candidates = sorted(set(disk_of) - {data.leader, state_partition.leader})
        coordinator = ray.get_actor(transaction_coordinator_name(shard), namespace=NAMESPACE)
        victim, moves = place_apart(ray, local, coordinator, candidates, disk_of)
        report.update(
            brokers={str(b): d for b, d in disk_of.items()}, shard=shard,
            data_leader=data.leader, txn_state_leader=state_partition.leader,
            stopped_broker=victim, stopped_disk=disk_of[victim], coordinator_moves=moves,
        )  # fmt: skip
        report["coordinator_before"] = whereabouts(ray, coordinator)
        report["stopped_node_id"] = local.nodes[disk_of[victim]].node_id

        # 2. The transaction's records, in sync on all three replicas.
        values = [f"txn1-{i}" for i in range(RECORDS)]
        producer.begin_transaction()
        for value in values:
            producer.send(TOPIC, value=value.encode(), partition=0)
        producer.flush()
        report["high_watermark_after_writes"] = uncommitted_end(cluster)
        (held,) = admin.describe_producers(TOPIC, [0])[0]
        report["open_transaction_first_offset"] = held.current_transaction_start_offset

        # 3. One broker's node stops; the data partition's ISR shrinks to 2.
        log(f"stopping broker {victim} (disk {disk_of[victim]})")
        stopped = time.monotonic()
        local.kill(disk_of[victim])
        shrunk = wait_for(lambda: (lambda p: p if len(p.isr) == 2 else None)(
            admin.describe_topic(TOPIC).partitions[0]), 60, "the data partition's ISR to shrink")
        timings["isr_shrink_after_stop"] = round(time.monotonic() - stopped, 2)
        report["isr_while_down"] = sorted(shrunk.isr)

        # 4. The commit point is durable; the markers cannot be written.
        began = time.monotonic()
        producer.commit_transaction()
        timings["commit_transaction"] = round(time.monotonic() - began, 2)
        report["commit_returned"] = True
        time.sleep(STALLED_S)
        report["state_after_commit"] = state_of(admin)
        report["read_after_commit"] = committed_read(cluster, 1, wait_s=2.0)
        report["isr_after_commit"] = sorted(admin.describe_topic(TOPIC).partitions[0].isr)

        # 5. The coordinator dies; Ray starts it again; it finds the transaction prepared.
        log("killing the transaction coordinator (Ray restarts it)")
        killed = time.monotonic()
        report["coordinator_after"] = restart(ray, coordinator,
                                              report["coordinator_before"]["pid"])
        report["coordinator_restarted"] = (
            report["coordinator_after"]["pid"] != report["coordinator_before"]["pid"]
        )
        timings["coordinator_loaded"] = round(time.monotonic() - killed, 2)
        time.sleep(STALLED_S)
        report["state_after_restart"] = state_of(admin)
        report["read_after_restart"] = committed_read(cluster, 1, wait_s=2.0)

        # 6. The node comes back; the restarted coordinator completes the commit.
        log("bringing the node back")
        revived = time.monotonic()
        timings["broker_down"] = round(revived - stopped, 1)
        local.revive(disk_of[victim])
        wait_for(lambda: state_of(admin) == "CompleteCommit", 180, "CompleteCommit")
        timings["complete_commit_after_revive"] = round(time.monotonic() - revived, 2)
        report["state_after_revive"] = state_of(admin)
        read = committed_read(cluster, RECORDS, wait_s=60)
        timings["read_after_revive"] = round(time.monotonic() - revived, 2)
        report["read_after_revive"] = read
        report["all_visible"] = read["values"] == values
        report["isr_after_revive"] = sorted(admin.describe_topic(TOPIC).partitions[0].isr)

        # The producer goes on: its next transaction commits and is read.
        began = time.monotonic()
        producer.begin_transaction()
        following = [f"txn2-{i}" for i in range(3)]
        for value in following:
            producer.send(TOPIC, value=value.encode(), partition=0)
        producer.commit_transaction()
        timings["next_transaction"] = round(time.monotonic() - began, 2)
        wait_for(lambda: state_of(admin) == "CompleteCommit", 60, "the next CompleteCommit")
        report["state_after_next"] = state_of(admin)
        final = committed_read(cluster, RECORDS + len(following), wait_s=60)
        report["final_values"] = final["values"]
        report["final_ok"] = final["values"] == values + following
        timings["total"] = round(time.monotonic() - t0, 1)
        report["summary"] = summary(report)
    except Exception as e:  # say where it stopped, with what it saw
        report["error"] = "".join(traceback.format_exception(e))
        report["summary"] = "failed: " + str(e)
    finally:
        if producer is not None:
            try:
                producer.close(5)
            except Exception:  # noqa: BLE001 - the cluster goes down next anyway
                pass
        local.shutdown()
    return report


def _try(call):
    try:
        return call()
    except Exception:  # noqa: BLE001 - the actor is restarting: ask again
        return None


def summary(report: dict[str, Any]) -> str:
    t = report["timings_s"]
    return (
        f"stopped broker {report['stopped_broker']} (data leader {report['data_leader']}, "
        f"__transaction_state-{report['shard']} leader {report['txn_state_leader']}; the "
        f"coordinator restarted {report['coordinator_moves']} time(s) to run apart); ISR "
        f"shrank in {t['isr_shrink_after_stop']} s; commit returned in "
        f"{t['commit_transaction']} s with the state {report['state_after_commit']} and "
        f"{len(report['read_after_commit']['values'])} records readable (open from offset "
        f"{report['open_transaction_first_offset']}, LSO "
        f"{report['read_after_commit']['end_offset']}, HW "
        f"{report['high_watermark_after_writes']}); coordinator killed, running again "
        f"with its shard loaded in {t['coordinator_loaded']} s, state "
        f"{report['state_after_restart']}; broker down {t['broker_down']} s; after its return "
        f"CompleteCommit in {t['complete_commit_after_revive']} s and all {report['records']} "
        f"records read by {t['read_after_revive']} s; next transaction {t['next_transaction']}"
        f" s; total {t['total']} s"
    )


if __name__ == "__main__":
    found = main(sys.argv[1])
    sys.stdout.write("REPORT " + json.dumps(found) + "\n")
    sys.stdout.flush()
