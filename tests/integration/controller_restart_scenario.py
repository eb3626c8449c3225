"""Run by test_controller_restarts.py in its own process (a process holds one Ray connection):
a LocalCluster with a controller node and three disk nodes (three brokers), and the
controller killed in the middle of its work, with a producer writing where it matters:

1. a topic is created, the controller killed 0, 20 and 80 ms after the call is sent;
2. a topic is deleted, the controller killed at the same delays;
3. a replication-factor-2 partition is moved off its leader to the third broker, the
   controller killed as the request is sent, under a producer;
4. a preferred leader election, the controller killed as the request is sent, under a
   producer (leadership first leaves the preferred replica: its actor is killed).

Ray starts the controller again (a named detached actor with max_restarts=-1); the new
process rebuilds from its metadata log and, at its start and then every
``metadata.reconcile.interval.ms``, brings the replicas in line with it. Clients' controller
calls retry while it restarts, and a retried create or delete whose first attempt took
effect answers success. Kills are ``ray.kill(controller, no_restart=False)``: the process
dies wherever it is, between any two steps of a request.

Each scenario gives a dict of what it saw (the admin call's answer, the metadata and every
replica actor's own view once they agree, the acknowledged records and the log read back,
what is left of a deleted topic), or, where a bounded wait gave up, ``failure``: the wait
and the last state seen. The scenarios run one after the other, each cleaning up after
itself; one failing does not stop the others. Prints one ``REPORT {json}`` line; the Ray
cluster is shut down whatever happens.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import threading
import time
import traceback
import uuid

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from rafka import TopicPartition  # noqa: E402
from rafka.actors.local_cluster import LocalCluster, wait_for  # noqa: E402
from rafka.actors.placement import CONTROLLER_NAME, replica_name  # noqa: E402
from rafka.errors import RafkaError, UnknownTopicOrPartition  # noqa: E402
import replica_lookup  # noqa: E402  (beside this script, which runs as a program)

DISKS = ["d0", "d1", "d2"]
NAMESPACE = "controller-restarts"
SETTINGS = {
    # A missing replica actor or a leaderless partition is put right within a second of the
    # new controller's start, not ten.
    "metadata.reconcile.interval.ms": 1000,
    # A follower stuck behind leaves the ISR after 3 s, not 30 (Kafka's tests shorten it too).
    "replica.lag.time.max.ms": 3000,
    # Leadership moves back to a preferred replica only when scenario 4 asks for it: the
    # periodic balancer would otherwise run the election that scenario interrupts.
    "auto.leader.rebalance.enable": False,
}
#: How long an interrupted admin call may take: the client retries for 60 s on its own.
ADMIN_CALL_S = 120
#: How long the cluster gets to converge after a kill.
CONVERGE_S = 60
#: Kill delays after an admin call is sent: before the controller reads it, while it works,
#: and (for a fast call) after it answered.
KILL_DELAYS_S = (0.0, 0.02, 0.08)


def log(message: str) -> None:
    print(f"[scenario {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Context:
    """What every scenario works with: Ray, the rafka cluster handle and its data directory."""

    def __init__(self, ray, cluster, data_dir: str) -> None:
        self.ray = ray
        self.cluster = cluster
        self.namespace = cluster.namespace
        self.admin = cluster.admin()
        self.data_dir = data_dir


# -- waiting ---------------------------------------------------------------------------------------


def converge(check, timeout_s: float, what: str):
    """Poll ``check() -> (done, seen)`` until done; returns the last ``seen``. Raises an
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


def controller_pid(ctx: Context, timeout_s: float = 10.0) -> int:
    handle = ctx.ray.get_actor(CONTROLLER_NAME, namespace=ctx.namespace)
    return ctx.ray.get(handle.ping.remote(), timeout=timeout_s)["pid"]


def kill_controller(ctx: Context) -> None:
    """Kill the controller's process; Ray starts a new one."""
    ctx.ray.kill(ctx.ray.get_actor(CONTROLLER_NAME, namespace=ctx.namespace), no_restart=False)


def wait_for_new_controller(ctx: Context, old_pid: int) -> int:
    """The pid of the controller that replaced ``old_pid`` (ray.kill is asynchronous: the old
    process may still answer once)."""

    def restarted():
        pid = controller_pid(ctx, timeout_s=5.0)
        return pid != old_pid, pid

    return converge(restarted, CONVERGE_S, f"a new controller process (the old pid {old_pid})")


def wait_for_controller(ctx: Context) -> int:
    return converge(lambda: (True, controller_pid(ctx, timeout_s=5.0)), CONVERGE_S,
                    "the controller to answer")  # fmt: skip


def outcome(answer) -> dict:
    """An admin call's answer as JSON: success, a typed (rafka) error, or any other error."""
    if isinstance(answer, RafkaError):
        return {"outcome": "typed error", "type": type(answer).__name__, "message": str(answer)}
    if isinstance(answer, BaseException):
        return {"outcome": "untyped error", "type": f"{type(answer).__module__}."
                f"{type(answer).__qualname__}", "message": str(answer)}  # fmt: skip
    return {"outcome": "success"}


def call_while_killing(ctx: Context, call, delay_s: float, facts: dict):
    """Run ``call()`` in a thread and kill the controller ``delay_s`` after the call starts;
    wait for the new controller. Returns the call's answer or the exception it raised, and
    records both pids and the answer's ``outcome`` in ``facts``."""
    old_pid = controller_pid(ctx)
    started = threading.Event()

    def run():
        started.set()
        return call()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(run)
        assert started.wait(10), "the admin call did not start"
        time.sleep(delay_s)
        kill_controller(ctx)
        began = time.monotonic()
        try:
            answer = future.result(timeout=ADMIN_CALL_S)
        except concurrent.futures.TimeoutError:
            raise AssertionError(
                f"the interrupted admin call did not return in {ADMIN_CALL_S} s"
            ) from None
        except Exception as e:  # judged by the test: a typed error is fine, others are not
            answer = e
        facts["answer_after_kill_s"] = round(time.monotonic() - began, 2)
    facts["answer"] = outcome(answer)
    facts["controller_pids"] = [old_pid, wait_for_new_controller(ctx, old_pid)]
    return answer


# -- topics, replica actors and files --------------------------------------------------------------


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def delete_quietly(ctx: Context, name: str) -> None:
    try:
        ctx.admin.delete_topic(name)
    except UnknownTopicOrPartition:
        pass


def running_replicas(ctx: Context, topic_id: str) -> set[str]:
    """Names (``replica_name``) of the running replicas of topic id ``topic_id``."""
    return replica_lookup.running_replicas(ctx.ray, ctx.namespace, topic_id)


def named_replicas(described) -> set[str]:
    """Names of the replica actors the metadata of one topic names."""
    return {
        replica_name(described.topic_id, p.partition, b)
        for p in described.partitions for b in p.replicas
    }  # fmt: skip


def replica_view(ctx: Context, topic_id: str, partition: int, broker: int):
    """A replica actor's own description (leader, leader_epoch, role, ...), or a string
    saying why there is none."""
    handle = replica_lookup.find_replica(ctx.ray, ctx.namespace, topic_id, partition, broker)
    if handle is None:
        return "not running"
    try:
        return ctx.ray.get(handle.describe.remote(), timeout=10)
    except Exception as e:  # restarting, or gone between the lookup and the call
        return f"{type(e).__name__}: {e}"


def replica_progress(ctx: Context, topic_id: str, partition: int, broker: int):
    """What a replica actor says of its role and log, or why it says nothing."""
    view = replica_view(ctx, topic_id, partition, broker)
    if isinstance(view, str):
        return view
    return {k: view[k] for k in ("role", "leader", "leader_epoch", "isr", "high_watermark",
                                 "log_end_offset")}  # fmt: skip


def replicas_agree(ctx: Context, topic: str) -> tuple[bool, dict]:
    """(done, seen): every partition of ``topic`` has a leader in the metadata; the running
    replica actors of the topic are exactly those the metadata names; each has checked in
    and holds the metadata's leader and leader epoch; and exactly one of each partition's
    replicas, the metadata's leader, acts as leader. ``seen`` holds all of it, for the test
    to check again."""
    described = ctx.admin.describe_topic(topic)
    running = running_replicas(ctx, described.topic_id)
    named = named_replicas(described)
    ok = running == named
    seen: dict = {"running": sorted(running), "named": sorted(named), "partitions": {}}
    for p in described.partitions:
        views = {b: replica_view(ctx, described.topic_id, p.partition, b) for b in p.replicas}
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


def live_brokers(ctx: Context) -> list[int]:
    return sorted(b.broker_id for b in ctx.admin.brokers() if b.alive and not b.fenced)


# -- records ---------------------------------------------------------------------------------------


def read_log(ctx: Context, topic: str, partitions, timeout_s: float = 60.0) -> list:
    """Every record of ``partitions`` up to their high watermarks, as [partition, offset,
    value] in the order read."""
    consumer = ctx.cluster.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    records: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"read {len(records)} records of {topic} in {timeout_s:g} s; positions "
                f"{[consumer.position(tp) for tp in tps]}, high watermarks {list(ends.values())}"
            )
            records += [[r.partition, r.offset, r.value.decode()]
                        for r in consumer.poll(timeout_ms=500)]  # fmt: skip
    finally:
        consumer.close()
    return records


def producer_progress(producer) -> dict | str:
    """Where a producer's unacknowledged records are: in an open batch, queued to send, or
    in requests awaiting an answer. Its private state, read for failure messages only."""
    try:
        acc, sender = producer._accumulator, producer._sender
        with acc.lock:
            return {
                "buffered_bytes": acc.buffered, "open_batches": len(acc.open),
                "queued_batches": sum(len(q.ready) for q in acc.queues.values()),
                "requests_in_flight": len(sender._requests),
            }  # fmt: skip
    except Exception as e:  # the producer's insides changed: say so, the rest still helps
        return f"unknown ({type(e).__name__}: {e})"


class KeyedWriter:
    """Sends keyed records (acks="all", idempotent) from a thread until stopped, and keeps
    every acknowledged one as [partition, offset, value]."""

    def __init__(self, ctx: Context, topic: str, keys: int = 16, pause_s: float = 0.005):
        self.producer = ctx.cluster.producer(
            acks="all", enable_idempotence=True, linger_ms=2,
            request_timeout_ms=10_000, delivery_timeout_ms=60_000,
        )  # fmt: skip
        self.ctx, self.admin = ctx, ctx.admin
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
                self.acked.append([meta.partition, meta.offset, value.decode()])
            else:
                self.failed.append([value.decode(), f"{type(error).__name__}: {error}"])

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_for_acks(self, more: int, timeout_s: float, what: str) -> None:
        """Wait until ``more`` records beyond those acknowledged now are acknowledged."""
        target = self.count() + more

        def acknowledged():
            if self.count() >= target:
                return True, None
            described = self.admin.describe_topic(self.topic)
            return False, {
                "acknowledged": self.count(), "last failures": self.failed[-3:],
                "producer": producer_progress(self.producer),
                "partitions": [p._asdict() for p in described.partitions],
                "replicas": {
                    f"{p.partition} on {b}": replica_progress(
                        self.ctx, described.topic_id, p.partition, b
                    )
                    for p in described.partitions for b in p.replicas
                },
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
        except Exception:  # reported by the scenario's failure already
            pass


# -- 1. create -------------------------------------------------------------------------------------


def created_while_killing(ctx: Context, facts: dict, kill_after_s: float) -> None:
    admin = ctx.admin
    name = facts["topic"] = new_topic_name("created-in-a-kill")
    try:
        answer = call_while_killing(
            ctx, lambda: admin.create_topic(name, partitions=3), kill_after_s, facts
        )
        facts["listed"] = name in admin.list_topics()
        if isinstance(answer, Exception) and not facts["listed"]:
            # An error and no topic: the create never took effect, so nothing of it may be
            # on disk either.
            facts["dirs_without_topic"] = partition_dirs(ctx.data_dir, DISKS, name)
            return
        facts["partitions"] = [p.partition for p in admin.describe_topic(name).partitions]
        facts["agreement"] = converge(
            lambda: replicas_agree(ctx, name), CONVERGE_S,
            f"every replica actor of {name} to run and agree with the metadata",
        )  # fmt: skip

        producer = ctx.cluster.producer(acks="all", linger_ms=0)
        try:
            facts["written"] = {
                p: [(m := producer.send(name, value=b"to-%d" % p, partition=p).result(
                    timeout=60)).partition, m.offset]
                for p in range(3)
            }  # fmt: skip
        finally:
            producer.close()
        facts["read"] = read_log(ctx, name, range(3))
        try:
            admin.create_topic(name, partitions=3)  # a new request, not a retry
            facts["fresh_create"] = outcome(None)
        except Exception as e:
            facts["fresh_create"] = outcome(e)
    finally:
        delete_quietly(ctx, name)


# -- 2. delete -------------------------------------------------------------------------------------


def deleted_while_killing(ctx: Context, facts: dict, kill_after_s: float) -> None:
    admin = ctx.admin
    name = facts["topic"] = new_topic_name("deleted-in-a-kill")
    try:
        described = admin.create_topic(name, partitions=3)
        producer = ctx.cluster.producer(acks="all", linger_ms=0)
        try:
            for p in range(3):
                producer.send(name, value=b"doomed", partition=p).result(timeout=60)
        finally:
            producer.close()
        facts["dirs_before"] = partition_dirs(ctx.data_dir, DISKS, name)
        facts["running_before"] = sorted(running_replicas(ctx, described.topic_id))

        answer = call_while_killing(ctx, lambda: admin.delete_topic(name), kill_after_s, facts)
        if isinstance(answer, Exception) and not isinstance(answer, UnknownTopicOrPartition):
            facts["deleted_again"] = True  # it may not have taken effect: a new request
            delete_quietly(ctx, name)
        facts["listed_after"] = name in admin.list_topics()
        try:
            admin.describe_topic(name)
            facts["describe_after"] = outcome(None)
        except Exception as e:
            facts["describe_after"] = outcome(e)

        facts["running_after"] = converge(
            lambda: (not (running := running_replicas(ctx, described.topic_id)),
                     sorted(running)),
            CONVERGE_S, f"every replica actor of the deleted topic {name} to stop",
        )  # fmt: skip
        facts["dirs_after"] = converge(
            lambda: (not (left := partition_dirs(ctx.data_dir, DISKS, name)), left),
            CONVERGE_S, f"the partition directories of the deleted topic {name} to go",
        )  # fmt: skip
    finally:
        delete_quietly(ctx, name)


# -- 3. reassignment -------------------------------------------------------------------------------


def reassigned_while_killing(ctx: Context, facts: dict) -> None:
    admin = ctx.admin
    brokers = facts["live_brokers"] = live_brokers(ctx)
    assert len(brokers) >= 3, f"moving a replica needs 3 live brokers; live: {brokers}"
    name = facts["topic"] = new_topic_name("moved-in-a-kill")
    writer = None
    try:
        topic_id = admin.create_topic(name, partitions=2, replication_factor=2).topic_id
        writer = KeyedWriter(ctx, name)
        writer.wait_for_acks(100, CONVERGE_S, "before the reassignment")

        before = admin.describe_topic(name).partitions[0]
        facts["before"] = before._asdict()
        outsider = next(b for b in brokers if b not in before.replicas)
        # The leader moves out: the partition must change leader as well as replicas.
        target = facts["target"] = [b for b in before.replicas if b != before.leader] + [outsider]
        # Killed while the request is in flight: before, while or just after the controller
        # records the plan and starts the new replica; a retry of the same plan is a no-op.
        call_while_killing(ctx, lambda: admin.reassign_partitions(name, {0: target}), 0.0, facts)

        def reassigned():
            p = admin.describe_topic(name).partitions[0]
            return (p.replicas == target and not p.adding and not p.removing
                    and sorted(p.isr) == sorted(target) and p.leader in target), p._asdict()

        facts["after"] = converge(reassigned, CONVERGE_S,
                                  f"{name}-0 to move from {before.replicas} to {target}")
        # The removed broker's replica actor is gone, the added one runs and follows.
        facts["agreement"] = converge(
            lambda: replicas_agree(ctx, name), CONVERGE_S,
            f"the replica actors of {name} to match its final replica sets",
        )  # fmt: skip
        facts["removed_replica"] = replica_name(topic_id, 0, before.leader)
        facts["running_after"] = sorted(running_replicas(ctx, topic_id))

        writer.wait_for_acks(100, CONVERGE_S, "after the reassignment")
        facts["acked"] = writer.stop()
        facts["send_failures"] = writer.failed[:5]
        writer = None
        facts["log"] = read_log(ctx, name, range(2))
    finally:
        if writer is not None:
            writer.abandon()
        delete_quietly(ctx, name)


# -- 4. preferred leader election ------------------------------------------------------------------


def elected_while_killing(ctx: Context, facts: dict) -> None:
    ray, admin = ctx.ray, ctx.admin
    brokers = facts["live_brokers"] = live_brokers(ctx)
    assert len(brokers) >= 2, f"moving leadership needs 2 live brokers; live: {brokers}"
    name = facts["topic"] = new_topic_name("elected-in-a-kill")
    writer = None
    try:
        described = admin.create_topic(name, partitions=1, replication_factor=2)
        topic_id = described.topic_id
        preferred = facts["preferred"] = described.partitions[0].replicas[0]
        writer = KeyedWriter(ctx, name)
        writer.wait_for_acks(100, CONVERGE_S, "before the failover")

        # Leadership leaves the preferred replica: its host actor dies and restarts,
        # uncleanly, so the in-sync follower takes over.
        handle = replica_lookup.find_replica(ray, ctx.namespace, topic_id, 0, preferred)
        ray.kill(handle.host, no_restart=False)
        facts["failed_over"] = converge(
            lambda: ((p := admin.describe_topic(name).partitions[0]).leader not in (preferred, -1),
                     p._asdict()),
            CONVERGE_S, f"leadership of {name}-0 to move off broker {preferred}",
        )  # fmt: skip
        facts["rejoined"] = converge(
            lambda: (preferred in (p := admin.describe_topic(name).partitions[0]).isr,
                     p._asdict()),
            CONVERGE_S, f"broker {preferred} to catch up and rejoin the ISR of {name}-0",
        )  # fmt: skip
        writer.wait_for_acks(50, CONVERGE_S, "after the failover")

        answer = call_while_killing(
            ctx, lambda: admin.elect_leaders(name, [0], "preferred"), 0.0, facts
        )
        if not isinstance(answer, Exception):
            facts["results"] = [
                {"partition": r.partition,
                 "error": None if r.error is None else type(r.error).__name__,
                 "message": None if r.error is None else str(r.error)}
                for r in answer
            ]  # fmt: skip

        def preferred_leads_everywhere():
            done, seen = replicas_agree(ctx, name)
            return done and seen["partitions"][0]["metadata"]["leader"] == preferred, seen

        facts["agreement"] = converge(
            preferred_leads_everywhere, CONVERGE_S,
            f"broker {preferred} to lead {name}-0 in the metadata and in every replica",
        )  # fmt: skip

        writer.wait_for_acks(50, CONVERGE_S, "after the election")
        facts["acked"] = writer.stop()
        facts["send_failures"] = writer.failed[:5]
        writer = None
        facts["log"] = read_log(ctx, name, [0])
    finally:
        if writer is not None:
            writer.abandon()
        delete_quietly(ctx, name)


# -- running them ----------------------------------------------------------------------------------


def run_scenario(ctx: Context, what: str, scenario, *args) -> dict:
    """Run one scenario; its facts, with ``failure`` (None, or what went wrong and where)."""
    facts: dict = {"failure": None}
    log(f"{what}: start")
    began = time.monotonic()
    try:
        scenario(ctx, facts, *args)
    except Exception as e:
        facts["failure"] = f"{type(e).__name__}: {e}"
        facts["traceback"] = "".join(traceback.format_tb(e.__traceback__))[-4000:]
        log(f"{what}: FAILED: {facts['failure']}")
    try:  # whatever happened, the next scenario finds a controller that answers
        facts["controller_after"] = wait_for_controller(ctx)
    except Exception as e:
        facts["controller_after"] = f"{type(e).__name__}: {e}"
    facts["elapsed_s"] = round(time.monotonic() - began, 1)
    log(f"{what}: done in {facts['elapsed_s']} s")
    return facts


def main(data_dir: str) -> dict:
    import ray

    began = time.monotonic()
    local = LocalCluster(data_dir, DISKS, namespace=NAMESPACE, settings=SETTINGS)
    report: dict = {"disks": DISKS, "settings": SETTINGS, "kill_delays_s": list(KILL_DELAYS_S)}
    try:
        cluster = local.start()
        ctx = Context(ray, cluster, local.data_dir)
        report["brokers"] = [b._asdict() for b in ctx.admin.brokers()]
        report["settings_in_force"] = ray.get(
            ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).settings_in_force.remote(),
            timeout=30,
        )  # fmt: skip
        report["started_s"] = round(time.monotonic() - began, 1)
        report["create"] = {
            str(d): run_scenario(ctx, f"create, kill after {d} s", created_while_killing, d)
            for d in KILL_DELAYS_S
        }  # fmt: skip
        report["delete"] = {
            str(d): run_scenario(ctx, f"delete, kill after {d} s", deleted_while_killing, d)
            for d in KILL_DELAYS_S
        }  # fmt: skip
        report["reassignment"] = run_scenario(ctx, "reassignment", reassigned_while_killing)
        report["election"] = run_scenario(ctx, "preferred election", elected_while_killing)
    finally:
        local.shutdown()
    report["elapsed_s"] = round(time.monotonic() - began, 1)
    return report


if __name__ == "__main__":
    found = main(sys.argv[1])
    # One write, so that no line another thread prints lands inside the report.
    sys.stdout.write("REPORT " + json.dumps(found) + "\n")
    sys.stdout.flush()
