"""The controller dies in the middle of its work: while it creates a topic, deletes one, moves
a partition to other brokers or elects a preferred leader, with a producer writing. Ray starts
it again (a named detached actor with max_restarts=-1); the new process rebuilds from its
metadata log and, at its start, brings the replicas in line with it (pushes every partition's
state, creates missing replica actors, deletes strays). Clients' controller calls retry while
it restarts, and a retried create or delete whose first attempt took effect answers success.

Each test checks the end state within a bounded wait: the metadata and the running replica
actors agree, and every record a producer had acknowledged is read back at its offset.

Kills are ``ray.kill(controller, no_restart=False)``: the process dies wherever it is, between
any two steps of a request. Every test waits for the new controller before it ends, so the
next test finds one running.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time
import uuid

import pytest
from rafka.actors.local_cluster import wait_for
from rafka.actors.placement import CONTROLLER_NAME, replica_name

from rafka import TopicPartition
from rafka.errors import (
    ElectionNotNeeded,
    RafkaError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)

pytestmark = pytest.mark.slow

#: How long an interrupted admin call may take: the client retries for 60 s on its own.
ADMIN_CALL_S = 120
#: How long the cluster gets to converge after a kill.
CONVERGE_S = 60
#: Kill delays after an admin call is sent: before the controller reads it, while it works,
#: and (for a fast call) after it answered.
KILL_DELAYS_S = (0.0, 0.02, 0.08)


# -- waiting ---------------------------------------------------------------------------------------


def converge(check, timeout_s: float, what: str):
    """Poll ``check() -> (done, seen)`` until done; returns the last ``seen``. Fails with an
    AssertionError naming ``what`` and what was seen last. A typed error or an unreachable
    actor while polling counts as not done yet (the controller may be restarting)."""
    seen: list = [None]

    def probe():
        try:
            done, seen[0] = check()
        except (RafkaError, TimeoutError) as e:
            done, seen[0] = False, f"{type(e).__name__}: {e}"
        except Exception as e:  # Ray's errors for an actor that is restarting
            if not type(e).__module__.startswith("ray"):
                raise
            done, seen[0] = False, f"{type(e).__name__}: {e}"
        return done

    try:
        wait_for(probe, timeout_s, what, interval=0.3)
    except TimeoutError as e:
        raise AssertionError(f"{e}; last seen: {seen[0]!r}") from None
    return seen[0]


# -- the controller --------------------------------------------------------------------------------


def controller_pid(ray, namespace: str, timeout_s: float = 10.0) -> int:
    handle = ray.get_actor(CONTROLLER_NAME, namespace=namespace)
    return ray.get(handle.ping.remote(), timeout=timeout_s)["pid"]


def kill_controller(ray, namespace: str) -> None:
    """Kill the controller's process; Ray starts a new one."""
    ray.kill(ray.get_actor(CONTROLLER_NAME, namespace=namespace), no_restart=False)


def wait_for_new_controller(ray, namespace: str, old_pid: int) -> int:
    """The pid of the controller that replaced ``old_pid`` (ray.kill is asynchronous: the old
    process may still answer once)."""

    def restarted():
        pid = controller_pid(ray, namespace, timeout_s=5.0)
        return pid != old_pid, pid

    return converge(restarted, CONVERGE_S, f"a new controller process (the old pid {old_pid})")


def call_while_killing(ray, namespace: str, call, delay_s: float):
    """Run ``call()`` in a thread and kill the controller ``delay_s`` after the call starts;
    wait for the new controller. Returns the call's answer, or the typed error it raised (any
    other exception fails the test)."""
    old_pid = controller_pid(ray, namespace)
    started = threading.Event()

    def run():
        started.set()
        return call()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(run)
        assert started.wait(10), "the admin call did not start"
        time.sleep(delay_s)
        kill_controller(ray, namespace)
        try:
            answer = future.result(timeout=ADMIN_CALL_S)
        except RafkaError as e:
            answer = e
    wait_for_new_controller(ray, namespace, old_pid)
    return answer


@pytest.fixture(autouse=True)
def controller_left_running(cluster, ray_session):
    """Whatever a test did, the next one finds a controller that answers."""
    yield
    converge(
        lambda: (True, controller_pid(ray_session, cluster.namespace, timeout_s=5.0)),
        CONVERGE_S, "the controller to answer after the test",
    )  # fmt: skip


# -- topics, replica actors and files --------------------------------------------------------------


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def delete_quietly(admin, name: str) -> None:
    try:
        admin.delete_topic(name)
    except UnknownTopicOrPartition:
        pass


def running_replicas(ray, namespace: str, topic_id: str) -> set[str]:
    """Names of the live replica actors of topic id ``topic_id``."""
    prefix = f"rafka-replica-{topic_id}-"
    return {
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(prefix)
    }  # fmt: skip


def named_replicas(described) -> set[str]:
    """Names of the replica actors the metadata of one topic names."""
    return {
        replica_name(described.topic_id, p.partition, b)
        for p in described.partitions for b in p.replicas
    }  # fmt: skip


def replica_view(ray, namespace: str, topic_id: str, partition: int, broker: int):
    """A replica actor's own description (leader, leader_epoch, role, ...), or a string
    saying why there is none."""
    name = replica_name(topic_id, partition, broker)
    try:
        handle = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return "not running"
    try:
        return ray.get(handle.describe.remote(), timeout=10)
    except Exception as e:  # restarting, or gone between the lookup and the call
        return f"{type(e).__name__}: {e}"


def replicas_agree(ray, namespace: str, admin, topic: str) -> tuple[bool, dict]:
    """(done, seen): every partition of ``topic`` has a leader in the metadata; the running
    replica actors of the topic are exactly those the metadata names; each has checked in
    and holds the metadata's leader and leader epoch; and exactly one of each partition's
    replicas, the metadata's leader, acts as leader."""
    described = admin.describe_topic(topic)
    running = running_replicas(ray, namespace, described.topic_id)
    ok = running == named_replicas(described)
    seen: dict = {"running": sorted(running), "partitions": {}}
    for p in described.partitions:
        views = {b: replica_view(ray, namespace, described.topic_id, p.partition, b)
                 for b in p.replicas}  # fmt: skip
        acting = [b for b, v in views.items() if isinstance(v, dict) and v["role"] == "leader"]
        ok = ok and p.leader >= 0 and acting == [p.leader] and all(
            isinstance(v, dict) and v["role"] != "starting"
            and (v["leader"], v["leader_epoch"]) == (p.leader, p.leader_epoch)
            for v in views.values()
        )  # fmt: skip
        seen["partitions"][p.partition] = {
            "metadata": {"leader": p.leader, "leader_epoch": p.leader_epoch,
                         "replicas": p.replicas, "isr": p.isr},
            "replicas": {b: v if isinstance(v, str) else {
                k: v[k] for k in ("role", "leader", "leader_epoch", "isr")
            } for b, v in views.items()},
        }  # fmt: skip
    return ok, seen


def partition_dirs(data_dir: str, disks: list[str], topic: str) -> list[str]:
    """The directories of ``topic``'s partitions (set-aside stray ones too) on ``disks``."""
    found = []
    for disk in disks:
        root = os.path.join(data_dir, disk)
        if os.path.isdir(root):
            found += [f"{disk}/{n}" for n in sorted(os.listdir(root)) if n.startswith(f"{topic}-")]
    return found


def disks_of(admin) -> list[str]:
    return sorted({b.disk for b in admin.brokers()})


def live_brokers(admin) -> list:
    return [b for b in admin.brokers() if b.alive and not b.fenced]


# -- records ---------------------------------------------------------------------------------------


def read_log(cluster, topic: str, partitions, timeout_s: float = 60.0) -> dict:
    """Every record of ``partitions`` up to their high watermarks: {(partition, offset): value}."""
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    log: dict = {}
    deadline = time.monotonic() + timeout_s
    try:
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"read {len(log)} records of {topic} in {timeout_s:g} s; positions "
                f"{[consumer.position(tp) for tp in tps]}, high watermarks {list(ends.values())}"
            )
            for r in consumer.poll(timeout_ms=500):
                log[r.partition, r.offset] = r.value
    finally:
        consumer.close()
    return log


def assert_nothing_acknowledged_lost(acked: list, log: dict) -> None:
    """Every acknowledged (partition, offset, value) is in the log at its offset, once."""
    lost = [(p, o, v, log.get((p, o))) for p, o, v in acked if log.get((p, o)) != v]
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged records are not at their offsets "
        f"(partition, offset, sent, found); first: {lost[:5]}"
    )
    counts = collections.Counter(log.values())
    twice = [v for _, _, v in acked if counts[v] != 1]
    assert not twice, f"acknowledged records found more than once: {twice[:5]}"


class KeyedWriter:
    """Sends keyed records (acks="all", idempotent) from a thread until stopped, and keeps
    every acknowledged one as (partition, offset, value)."""

    def __init__(self, cluster, topic: str, keys: int = 16, pause_s: float = 0.005):
        self.producer = cluster.producer(
            acks="all", enable_idempotence=True, linger_ms=2,
            request_timeout_ms=10_000, delivery_timeout_ms=60_000,
        )  # fmt: skip
        self.admin = cluster.admin()
        self.topic, self.keys, self.pause_s = topic, keys, pause_s
        self.acked: list = []
        self.failed: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"v-%d" % i
            try:
                self.producer.send(
                    self.topic, value=value, key=b"k-%d" % (i % self.keys),
                    callback=lambda meta, error, value=value: self._done(value, meta, error),
                )  # fmt: skip
            except RafkaError as e:  # the buffer stayed full: the record was never sent
                self._done(value, None, e)
            i += 1
            time.sleep(self.pause_s)

    def _done(self, value: bytes, meta, error) -> None:
        with self._lock:
            if error is None:
                self.acked.append((meta.partition, meta.offset, value))
            else:
                self.failed.append((value, f"{type(error).__name__}: {error}"))

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_for_acks(self, more: int, timeout_s: float, what: str) -> None:
        """Wait until ``more`` records beyond those acknowledged now are acknowledged."""
        target = self.count() + more

        def acknowledged():
            if self.count() >= target:
                return True, None
            return False, {
                "acknowledged": self.count(), "last failures": self.failed[-3:],
                "partitions": [
                    p._asdict() for p in self.admin.describe_topic(self.topic).partitions
                ],
            }  # fmt: skip

        converge(acknowledged, timeout_s, f"{more} more acknowledged records {what}")

    def stop(self) -> list:
        """Stop sending, wait for every answer; returns the acknowledged records."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.producer.close(timeout=90)
        with self._lock:
            return list(self.acked)

    def abandon(self) -> None:
        """Stop sending after a failure, waiting a little for the answers."""
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            self.producer.close(timeout=10)
        except RafkaError:
            pass


# -- 1. create -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill_after_s", KILL_DELAYS_S)
def test_a_topic_created_while_the_controller_dies_ends_with_every_replica_running(
    cluster, ray_session, data_dir, kill_after_s
):
    ray, namespace, admin = ray_session, cluster.namespace, cluster.admin()
    name = new_topic_name("created-in-a-kill")
    try:
        answer = call_while_killing(
            ray, namespace, lambda: admin.create_topic(name, partitions=3), kill_after_s
        )
        if isinstance(answer, RafkaError) and name not in admin.list_topics():
            # A typed error and no topic: the create never took effect, so nothing of it
            # may be on disk either.
            assert partition_dirs(data_dir, disks_of(admin), name) == []
            return
        described = admin.describe_topic(name)
        assert [p.partition for p in described.partitions] == [0, 1, 2]
        converge(lambda: replicas_agree(ray, namespace, admin, name), CONVERGE_S,
                 f"every replica actor of {name} to run and agree with the metadata")

        producer = cluster.producer(acks="all", linger_ms=0)
        written = {
            p: producer.send(name, value=b"to-%d" % p, partition=p).result(timeout=60)
            for p in range(3)
        }
        producer.close()
        assert {p: (m.partition, m.offset) for p, m in written.items()} == {
            p: (p, 0) for p in range(3)
        }
        assert read_log(cluster, name, range(3)) == {(p, 0): b"to-%d" % p for p in range(3)}

        with pytest.raises(TopicAlreadyExists):
            admin.create_topic(name, partitions=3)  # a new request, not a retry
        # Checked last, so that a failure here comes after the checks of the cluster's state.
        assert not isinstance(answer, TopicAlreadyExists), (
            f"the create answered {answer!r}: its own retry, after a first attempt that took "
            "effect, must answer success (the retry carries the same request id)"
        )
    finally:
        delete_quietly(admin, name)


# -- 2. delete -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill_after_s", KILL_DELAYS_S)
def test_a_topic_deleted_while_the_controller_dies_leaves_no_replica_actor_and_no_files(
    cluster, ray_session, data_dir, kill_after_s
):
    ray, namespace, admin = ray_session, cluster.namespace, cluster.admin()
    name = new_topic_name("deleted-in-a-kill")
    disks = disks_of(admin)
    try:
        described = admin.create_topic(name, partitions=3)
        producer = cluster.producer(acks="all", linger_ms=0)
        for p in range(3):
            producer.send(name, value=b"doomed", partition=p).result(timeout=60)
        producer.close()
        assert len(partition_dirs(data_dir, disks, name)) == 3

        answer = call_while_killing(ray, namespace, lambda: admin.delete_topic(name),
                                    kill_after_s)  # fmt: skip
        if isinstance(answer, RafkaError) and not isinstance(answer, UnknownTopicOrPartition):
            delete_quietly(admin, name)  # it may not have taken effect: a new request
        assert name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartition):
            admin.describe_topic(name)

        converge(
            lambda: (not (running := running_replicas(ray, namespace, described.topic_id)),
                     sorted(running)),
            CONVERGE_S, f"every replica actor of the deleted topic {name} to stop",
        )  # fmt: skip
        converge(
            lambda: (not (left := partition_dirs(data_dir, disks, name)), left),
            CONVERGE_S, f"the partition directories of the deleted topic {name} to go",
        )  # fmt: skip
        # Checked last, so that a failure here comes after the checks of the cluster's state.
        assert not isinstance(answer, UnknownTopicOrPartition), (
            f"the delete answered {answer!r}: its own retry, after a first attempt that took "
            "effect, must answer success (the retry carries the same request id)"
        )
    finally:
        delete_quietly(admin, name)


# -- 3. reassignment -------------------------------------------------------------------------------


def test_a_reassignment_cut_by_a_controller_death_completes_and_loses_no_acknowledged_record(
    cluster, ray_session
):
    ray, namespace, admin = ray_session, cluster.namespace, cluster.admin()
    brokers = sorted(b.broker_id for b in live_brokers(admin))
    if len(brokers) < 3:
        pytest.skip(
            f"moving a replica of a replication-factor-2 partition to another broker needs 3 "
            f"live brokers; this cluster has {len(brokers)} (one broker per data disk, and the "
            "shared integration cluster is one Ray node with one disk)"
        )
    name = new_topic_name("moved-in-a-kill")
    writer = None
    try:
        topic_id = admin.create_topic(name, partitions=2, replication_factor=2).topic_id
        writer = KeyedWriter(cluster, name)
        writer.wait_for_acks(100, CONVERGE_S, "before the reassignment")

        before = admin.describe_topic(name).partitions[0]
        outsider = next(b for b in brokers if b not in before.replicas)
        # The leader moves out: the partition must change leader as well as replicas.
        target = [b for b in before.replicas if b != before.leader] + [outsider]
        # Killed while the request is in flight: before, while or just after the controller
        # records the plan and starts the new replica; a retry of the same plan is a no-op.
        answer = call_while_killing(
            ray, namespace, lambda: admin.reassign_partitions(name, {0: target}), 0.0
        )
        if isinstance(answer, RafkaError):
            raise AssertionError(f"the reassignment failed: {answer!r}")

        def reassigned():
            p = admin.describe_topic(name).partitions[0]
            return (p.replicas == target and not p.adding and not p.removing
                    and sorted(p.isr) == sorted(target) and p.leader in target), p._asdict()

        converge(reassigned, CONVERGE_S, f"{name}-0 to move from {before.replicas} to {target}")
        # The removed broker's replica actor is gone, the added one runs and follows.
        converge(lambda: replicas_agree(ray, namespace, admin, name), CONVERGE_S,
                 f"the replica actors of {name} to match its final replica sets")
        assert replica_name(topic_id, 0, before.leader) not in running_replicas(
            ray, namespace, topic_id
        )

        writer.wait_for_acks(100, CONVERGE_S, "after the reassignment")
        acked = writer.stop()
        writer = None
        assert {p for p, _, _ in acked} == {0, 1}
        assert_nothing_acknowledged_lost(acked, read_log(cluster, name, range(2)))
    finally:
        if writer is not None:
            writer.abandon()
        delete_quietly(admin, name)


# -- 4. preferred leader election ------------------------------------------------------------------


def test_a_preferred_election_cut_by_a_controller_death_leaves_every_replica_agreeing(
    cluster, ray_session
):
    ray, namespace, admin = ray_session, cluster.namespace, cluster.admin()
    brokers = sorted(b.broker_id for b in live_brokers(admin))
    if len(brokers) < 2:
        pytest.skip(
            f"moving leadership off the preferred replica needs a second replica, so 2 live "
            f"brokers; this cluster has {len(brokers)} (one broker per data disk, and the "
            "shared integration cluster is one Ray node with one disk)"
        )
    name = new_topic_name("elected-in-a-kill")
    writer = None
    try:
        described = admin.create_topic(name, partitions=1, replication_factor=2)
        topic_id, preferred = described.topic_id, described.partitions[0].replicas[0]
        writer = KeyedWriter(cluster, name)
        writer.wait_for_acks(100, CONVERGE_S, "before the failover")

        # Leadership leaves the preferred replica: its actor dies and restarts, uncleanly,
        # so the in-sync follower takes over.
        handle = ray.get_actor(replica_name(topic_id, 0, preferred), namespace=namespace)
        ray.kill(handle, no_restart=False)
        converge(
            lambda: ((p := admin.describe_topic(name).partitions[0]).leader not in (preferred, -1),
                     p._asdict()),
            CONVERGE_S, f"leadership of {name}-0 to move off broker {preferred}",
        )  # fmt: skip
        converge(
            lambda: (preferred in (p := admin.describe_topic(name).partitions[0]).isr,
                     p._asdict()),
            CONVERGE_S, f"broker {preferred} to catch up and rejoin the ISR of {name}-0",
        )  # fmt: skip
        writer.wait_for_acks(50, CONVERGE_S, "after the failover")

        answer = call_while_killing(
            ray, namespace, lambda: admin.elect_leaders(name, [0], "preferred"), 0.0
        )
        if isinstance(answer, RafkaError):
            raise AssertionError(f"the preferred election failed: {answer!r}")
        assert [r.partition for r in answer] == [0]
        assert answer[0].error is None or isinstance(answer[0].error, ElectionNotNeeded), (
            f"the preferred election answered {answer[0]!r}"
        )

        def preferred_leads_everywhere():
            done, seen = replicas_agree(ray, namespace, admin, name)
            return done and seen["partitions"][0]["metadata"]["leader"] == preferred, seen

        converge(preferred_leads_everywhere, CONVERGE_S,
                 f"broker {preferred} to lead {name}-0 in the metadata and in every replica")

        writer.wait_for_acks(50, CONVERGE_S, "after the election")
        acked = writer.stop()
        writer = None
        assert_nothing_acknowledged_lost(acked, read_log(cluster, name, [0]))
    finally:
        if writer is not None:
            writer.abandon()
        delete_quietly(admin, name)

