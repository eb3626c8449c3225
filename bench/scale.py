"""Scale: how many partition replicas one node holds, how fast they become writable, what
they cost idle, one replica per Ray actor next to replicas packed many to an actor.

One workload of the harness, ``scale`` (``python -m bench scale [--scale-unpacked-partitions
100] [--scale-packed-partitions 1000] [--scale-per-actor 100] [--scale-rf3-partitions 300]
[--scale-records 200000] [--scale-idle-s 20] [--scale-settle-s 5]``). The cluster setting
``replicas.per.actor`` is fixed when the services start, so the workload starts its own rafka
instances one after the other (start, measure, shut down, start the next), none of the
harness's: the embedded default (one Ray node, one disk) twice, then a LocalCluster of three
disk nodes. In order:

1. unpacked, embedded, ``replicas.per.actor=1``: a topic of ``--scale-unpacked-partitions``
   partitions, RF=1, and the time from calling ``create_topic`` until every partition has
   acknowledged a write (one record sent to each partition, ``partition=i``, from one
   producer with acks=1 and 300 s delivery and block timeouts; the time includes
   ``create_topic``). Meanwhile brokers fenced are counted (below).
2. packed, embedded, ``replicas.per.actor=--scale-per-actor``: first a 1-partition topic
   that takes one write (so one replica host holds one replica), then the same
   time-to-writable for ``--scale-packed-partitions`` partitions, RF=1.
3. memory, after the writes and ``--scale-settle-s`` of quiet, in both instances: the unique
   memory (USS, ``psutil``'s ``memory_full_info().uss``) of the replicas' actor processes
   (class ``ReplicaHost`` or ``PartitionReplica``; found in Ray's actor table). Unpacked: total
   USS / replicas. Packed: total USS / replicas (the hosts' base counted), and the cost beyond
   the hosts' base, (total USS - hosts x base) / replicas, where the base is the USS of the
   one host measured when it held only the 1-partition topic's replica (step 2; measured
   then, so it stays right whatever the packing later puts into that host). Replicas per GiB
   = 1024 / MiB per replica, base counted.
4. idle CPU, right after (3), in both instances: CPU time (user + system) over
   ``--scale-idle-s`` seconds, as a percentage of one core, of rafka's actors (every live
   actor of the instance: the controller, the node agent, the replicas' processes) and of the
   whole Ray instance (every process descending from this driver: gcs_server, raylet, its
   agents and every worker; the driver itself, which only sleeps, is reported apart).
5. produce, packed instance: one producer (acks=1, linger_ms=5, the produce workload's
   producer) sends ``--scale-records`` records of ``--value-size`` bytes round robin over
   every partition of the packed topic (``partition=i % n``), then ``flush``; the same loop
   to a new 1-partition topic is the baseline. Records/s of both and their ratio.
6. rf3, a LocalCluster of three disk nodes with ``replicas.per.actor=--scale-per-actor``: a
   ``--scale-rf3-partitions`` partition topic, RF=3, and the time until every partition has
   acknowledged an acks=all write (as in 1), and brokers fenced.

Fencings: a thread asks the controller's ``describe_cluster`` every 0.2 s and counts every
broker that turns fenced; the controller's log lines ("missed its heartbeats; fencing it", in
the Ray session's worker logs) are counted too and the larger count is reported, for the
start window and for the instance's whole life. Anything above 0 means the start starved the
heartbeats.

Targets, printed next to the figures (not asserted): 1,000 packed partitions writable in
<= 20 s, <= 2 MiB per idle packed replica beyond its host's base, 100 unpacked partitions
writable in <= 60 s with no broker fenced, idle CPU < 5% of a core.

A rafka that does not know ``replicas.per.actor`` (it refuses it with InvalidConfig) runs the
unpacked instance without the setting (one replica per actor is all it does) and records the
packed and rf3 instances as skipped, with the error, in the report. Results go to
bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

SETTING = "replicas.per.actor"
REPLICA_CLASSES = ("ReplicaHost", "PartitionReplica")
FENCING_LINE = "missed its heartbeats; fencing it"
FENCE_POLL_S = 0.2
TIMEOUT_MS = 300_000  # delivery and block timeouts of the time-to-writable producers
MIB = 1 << 20
TARGETS = {"packed_writable_s": 20.0, "unpacked_writable_s": 60.0,
           "packed_mib_beyond_base": 2.0, "idle_cpu_pct": 5.0}  # fmt: skip

TINY = {"scale_unpacked_partitions": 6, "scale_packed_partitions": 40, "scale_per_actor": 10,
        "scale_rf3_partitions": 12, "scale_records": 5_000, "scale_idle_s": 3.0,
        "scale_settle_s": 2.0}  # fmt: skip


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--scale-unpacked-partitions", type=int, default=100,
                       help="partitions (RF=1) with one replica per actor (default 100)")
    group.add_argument("--scale-packed-partitions", type=int, default=1000,
                       help="partitions (RF=1) packed --scale-per-actor to an actor "
                       "(default 1000)")  # fmt: skip
    group.add_argument("--scale-per-actor", type=int, default=100,
                       help="replicas.per.actor of the packed instances (default 100)")
    group.add_argument("--scale-rf3-partitions", type=int, default=300,
                       help="partitions (RF=3) packed on three local nodes (default 300)")
    group.add_argument("--scale-records", type=int, default=200_000,
                       help="records sent spread over the packed partitions, and to one "
                       "partition (default 200000)")  # fmt: skip
    group.add_argument("--scale-idle-s", type=float, default=20.0,
                       help="idle window over which CPU time is taken (default 20)")
    group.add_argument("--scale-settle-s", type=float, default=5.0,
                       help="quiet after the writes before memory and idle CPU (default 5)")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the processes of a Ray instance -----------------------------------------------------------


def actor_processes() -> list[dict[str, Any]]:
    """Every live actor of the Ray instance this process is connected to: class, name, pid.
    Ray's state API (``list_actors``) needs the dashboard, which the embedded instance does
    not run; then the GCS's actor table answers."""
    try:
        from ray.util.state import list_actors

        found = list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=100_000,
                            timeout=10, raise_on_missing_output=False)  # fmt: skip
        return [{"class": a.class_name, "name": a.name, "pid": a.pid} for a in found if a.pid]
    except Exception:  # no dashboard: ask the GCS
        import ray

        table = ray._private.state.actors()
        return [
            {"class": a.get("ActorClassName"), "name": a.get("Name"), "pid": a.get("Pid")}
            for a in table.values() if a.get("State") == "ALIVE" and a.get("Pid")
        ]  # fmt: skip


def replica_pids() -> list[int]:
    return sorted({a["pid"] for a in actor_processes() if a["class"] in REPLICA_CLASSES})


def uss(pids: list[int]) -> dict[int, int]:
    """pid -> unique memory in bytes (processes that are gone are left out)."""
    import psutil

    out = {}
    for pid in pids:
        try:
            out[pid] = psutil.Process(pid).memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def instance_pids() -> list[int]:
    """Every process of the Ray instances this driver started: its descendants (gcs_server,
    raylet and the raylet's agents and workers)."""
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True)]


def _cpu_sample(pids: list[int]) -> dict[int, tuple[float, float]]:
    import psutil

    out = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            out[pid] = (p.create_time(), t.user + t.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def idle_cpu(window_s: float) -> dict[str, Any]:
    """CPU time over ``window_s`` of rafka's actors, of the whole Ray instance and of this
    driver, as a percentage of one core. A process that appears in the window counts with
    all its CPU time; one that ends in it is left out (and counted in ``gone``)."""
    actors = {a["pid"] for a in actor_processes()}
    everything = set(instance_pids()) | actors
    me = os.getpid()
    before = _cpu_sample(sorted(everything | {me}))
    began = time.monotonic()
    time.sleep(window_s)
    after_pids = set(instance_pids()) | {a["pid"] for a in actor_processes()}
    after = _cpu_sample(sorted(after_pids | {me}))
    elapsed = time.monotonic() - began
    used: dict[int, float] = {}
    for pid, (created, cpu) in after.items():
        start = before.get(pid)
        used[pid] = cpu - start[1] if start is not None and start[0] == created else cpu

    def pct(pids) -> float:
        return 100.0 * sum(used.get(p, 0.0) for p in pids) / elapsed

    whole = after_pids - {me}
    return {
        "window_s": elapsed,
        "rafka_actors_pct": pct(actors & set(after)), "rafka_actors": len(actors & set(after)),
        "ray_instance_pct": pct(whole), "ray_processes": len(whole & set(after)),
        "driver_pct": pct({me}),
        "gone": len(set(before) - set(after)),
    }  # fmt: skip


def memory(pids: list[int]) -> dict[str, Any]:
    sizes = uss(pids)
    values = list(sizes.values())
    return {
        "processes": len(values), "uss_total_mib": sum(values) / MIB,
        "uss_min_mib": min(values) / MIB if values else None,
        "uss_median_mib": statistics.median(values) / MIB if values else None,
        "uss_max_mib": max(values) / MIB if values else None,
    }  # fmt: skip


# -- fencings ----------------------------------------------------------------------------------


def _session_logs() -> str | None:
    try:
        import ray

        return os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs")
    except Exception:
        return None


def fencing_lines(logs: str | None) -> int | None:
    """How many times the controller logged that it fenced a broker (every worker's log of
    the Ray session)."""
    if logs is None:
        return None
    count = 0
    for path in glob.glob(os.path.join(logs, "worker-*")):
        try:
            with open(path, errors="replace") as f:
                count += sum(line.count(FENCING_LINE) for line in f)
        except OSError:
            pass
    return count


class FenceWatch(threading.Thread):
    """Asks the controller for the brokers every FENCE_POLL_S and counts every broker that
    turns fenced; with the log lines, between ``start()`` and ``finish()``."""

    def __init__(self, namespace: str) -> None:
        super().__init__(name="scale-fence-watch", daemon=True)
        self.namespace = namespace
        self.logs = _session_logs()
        self.transitions = 0
        self.polls = 0
        self.failed_polls = 0
        self.fenced_now: set[int] = set()
        self.stop = threading.Event()
        self.lines_before = fencing_lines(self.logs)

    def run(self) -> None:
        import ray

        from rafka.actors.placement import CONTROLLER_NAME

        controller = None
        while not self.stop.is_set():
            try:
                if controller is None:
                    controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
                status = ray.get(controller.describe_cluster.remote(), timeout=10)
                fenced = {b["broker_id"] for b in status["brokers"] if b.get("fenced")}
                self.transitions += len(fenced - self.fenced_now)
                self.fenced_now = fenced
                self.polls += 1
            except Exception:  # a busy or restarting controller: counted, polled again
                self.failed_polls += 1
                controller = None
            self.stop.wait(FENCE_POLL_S)

    def finish(self) -> dict[str, Any]:
        self.stop.set()
        self.join(30)
        after = fencing_lines(self.logs)
        lines = None if after is None or self.lines_before is None else after - self.lines_before
        return {
            "fenced": max(self.transitions, lines or 0), "seen_by_polling": self.transitions,
            "logged": lines, "polls": self.polls, "failed_polls": self.failed_polls,
        }  # fmt: skip


# -- time to writable --------------------------------------------------------------------------


def time_to_writable(cluster, namespace: str, topic: str, partitions: int, replicas: int,
                     acks: int | str) -> dict[str, Any]:  # fmt: skip
    """Seconds from calling create_topic until each of its partitions acknowledged one
    record (sent to it explicitly), and the brokers fenced meanwhile."""
    from rafka.errors import RequestTimedOut

    admin = cluster.admin()
    watch = FenceWatch(namespace)
    watch.start()
    producer = None
    try:
        began = time.monotonic()
        created: float | None = None
        try:
            admin.create_topic(topic, partitions, replicas)
            created = time.monotonic() - began
        except RequestTimedOut as exc:  # the topic is recorded; its replicas still start
            _log(f"create_topic {topic}: {exc}; the writes wait for the replicas")
        producer = cluster.producer(acks=acks, linger_ms=5, delivery_timeout_ms=TIMEOUT_MS,
                                    max_block_ms=TIMEOUT_MS)  # fmt: skip
        futures = [producer.send(topic, b"w", partition=i) for i in range(partitions)]
        for i, future in enumerate(futures):
            try:
                future.result(TIMEOUT_MS / 1000)
            except Exception as exc:
                acked = sum(1 for f in futures if f.done() and f.exception() is None)
                raise RuntimeError(
                    f"{topic}: {acked} of {partitions} partitions acknowledged a write "
                    f"{time.monotonic() - began:.0f} s after create_topic; partition {i}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        writable = time.monotonic() - began
    finally:
        fencing = watch.finish()
        if producer is not None:
            producer.close(30)
    return {"partitions": partitions, "replication": replicas, "acks": acks,
            "create_topic_s": created, "writable_s": writable, "fencing": fencing}  # fmt: skip


# -- produce throughput ------------------------------------------------------------------------


def produce_rate(cluster, topic: str, partitions: int, count: int, value: bytes) -> float:
    """Records/s of one producer (acks=1, linger_ms=5) sending ``count`` records round robin
    over ``partitions`` partitions of ``topic``, to the last acknowledgement."""
    producer = cluster.producer(acks=1, linger_ms=5)
    try:
        send = producer.send
        started = time.perf_counter()
        for i in range(count):
            send(topic, value, partition=i % partitions)
        producer.flush()
        return count / (time.perf_counter() - started)
    finally:
        producer.close()


# -- the instances -----------------------------------------------------------------------------


class Skipped(Exception):
    """The services refused the setting: the mode is recorded as skipped."""


def _refused(exc: Exception) -> str:
    """The error of a refused setting, without the list of every known setting."""
    return f"{type(exc).__name__}: {str(exc).split('; known:')[0]}"


def _settings(per_actor: int, required: bool) -> tuple[dict[str, Any], str | None]:
    """The cluster settings for ``per_actor``, and why they were left out. A rafka without
    the setting raises Skipped when it is ``required`` (a packed mode)."""
    from rafka.cluster.settings import validate_settings
    from rafka.errors import InvalidConfig

    try:
        return validate_settings({SETTING: per_actor}), None
    except InvalidConfig as exc:
        if required:
            raise Skipped(_refused(exc)) from None
        return {}, _refused(exc)


def _embedded(data_dir: Path, namespace: str, settings: dict[str, Any]):
    import ray

    from bench.embedded import start_embedded
    from rafka.errors import InvalidConfig

    began = time.monotonic()
    try:
        cluster = start_embedded(data_dir, namespace, settings)
    except InvalidConfig as exc:
        ray.shutdown()
        raise Skipped(_refused(exc)) from None
    except BaseException:
        ray.shutdown()
        raise
    _log(f"scale: embedded rafka ({settings or 'default settings'}) started in "
         f"{time.monotonic() - began:.1f} s")  # fmt: skip
    return cluster


def _stop_embedded(cluster, data_dir: Path) -> None:
    import ray

    try:
        cluster.shutdown()
    except Exception as exc:  # the Ray instance goes anyway
        _log(f"scale: rafka did not shut down cleanly: {exc!r}")
    finally:
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


def _idle_figures(args, mode: dict[str, Any]) -> None:
    time.sleep(args.scale_settle_s)
    pids = replica_pids()
    mode["memory"] = memory(pids)
    mode["idle_cpu"] = idle_cpu(args.scale_idle_s)


def unpacked(args, data_dir: Path) -> dict[str, Any]:
    settings, unknown = _settings(1, required=False)
    namespace = f"rafka-bench-scale-unpacked-{os.getpid()}"
    mode: dict[str, Any] = {"settings": settings}
    if unknown:
        mode["settings_note"] = f"{SETTING} not given ({unknown}): one replica per actor"
    cluster = _embedded(data_dir, namespace, settings)
    try:
        topic = f"unpacked-{uuid.uuid4().hex[:6]}"
        mode["start"] = time_to_writable(cluster, namespace, topic,
                                         args.scale_unpacked_partitions, 1, 1)  # fmt: skip
        _log(f"scale unpacked: {json.dumps(mode['start'])}")
        _idle_figures(args, mode)
        m = mode["memory"]
        m["replicas"] = args.scale_unpacked_partitions
        m["mib_per_replica"] = m["uss_total_mib"] / m["replicas"]
        m["replicas_per_gib"] = 1024 / m["mib_per_replica"]
        mode["fenced_in_life"] = _life_fencings()
    finally:
        _stop_embedded(cluster, data_dir)
    return mode


def packed(args, data_dir: Path, value: bytes) -> dict[str, Any]:
    settings, _ = _settings(args.scale_per_actor, required=True)
    namespace = f"rafka-bench-scale-packed-{os.getpid()}"
    mode: dict[str, Any] = {"settings": settings}
    cluster = _embedded(data_dir, namespace, settings)
    try:
        admin = cluster.admin()
        base_topic = f"base-{uuid.uuid4().hex[:6]}"
        admin.create_topic(base_topic, 1, 1)
        producer = cluster.producer(acks=1, max_block_ms=TIMEOUT_MS,
                                    delivery_timeout_ms=TIMEOUT_MS)  # fmt: skip
        try:
            producer.send(base_topic, b"w", partition=0).result(TIMEOUT_MS / 1000)
        finally:
            producer.close(30)
        time.sleep(args.scale_settle_s)
        base = uss(replica_pids())
        mode["base"] = {"hosts": len(base),
                        "uss_mib": sum(base.values()) / len(base) / MIB if base else None}

        topic = f"packed-{uuid.uuid4().hex[:6]}"
        partitions = args.scale_packed_partitions
        mode["start"] = time_to_writable(cluster, namespace, topic, partitions, 1, 1)
        _log(f"scale packed: {json.dumps(mode['start'])}")
        _idle_figures(args, mode)
        m = mode["memory"]
        m["replicas"] = partitions + 1  # and the base topic's
        m["hosts"] = m["processes"]
        m["mib_per_replica"] = m["uss_total_mib"] / m["replicas"]
        m["replicas_per_gib"] = 1024 / m["mib_per_replica"]
        if mode["base"]["uss_mib"] is not None:
            beyond = m["uss_total_mib"] - m["hosts"] * mode["base"]["uss_mib"]
            m["mib_per_replica_beyond_base"] = beyond / m["replicas"]

        one = f"one-{uuid.uuid4().hex[:6]}"
        admin.create_topic(one, 1, 1)
        mode["produce"] = {
            "records": args.scale_records, "value_size": len(value),
            "one_partition_records_per_s": produce_rate(cluster, one, 1, args.scale_records,
                                                        value),
            "spread_partitions": partitions,
            "spread_records_per_s": produce_rate(cluster, topic, partitions, args.scale_records,
                                                 value),
        }  # fmt: skip
        p = mode["produce"]
        p["ratio"] = p["spread_records_per_s"] / p["one_partition_records_per_s"]
        _log(f"scale produce: {json.dumps(p)}")
        mode["fenced_in_life"] = _life_fencings()
    finally:
        _stop_embedded(cluster, data_dir)
    return mode


def rf3(args, data_dir: Path) -> dict[str, Any]:
    from rafka.actors.local_cluster import LocalCluster
    from rafka.errors import InvalidConfig

    settings, _ = _settings(args.scale_per_actor, required=True)
    namespace = f"rafka-bench-scale-rf3-{os.getpid()}"
    shutil.rmtree(data_dir, ignore_errors=True)
    local = LocalCluster(str(data_dir), ["d1", "d2", "d3"], namespace=namespace,
                         settings=settings)  # fmt: skip
    mode: dict[str, Any] = {"settings": settings, "disks": 3}
    try:
        began = time.monotonic()
        try:
            cluster = local.start()
        except InvalidConfig as exc:
            raise Skipped(_refused(exc)) from None
        _log(f"scale: LocalCluster ({settings}) started in {time.monotonic() - began:.1f} s")
        topic = f"rf3-{uuid.uuid4().hex[:6]}"
        mode["start"] = time_to_writable(cluster, namespace, topic, args.scale_rf3_partitions,
                                         3, "all")  # fmt: skip
        _log(f"scale rf3: {json.dumps(mode['start'])}")
        mode["fenced_in_life"] = _life_fencings()
        try:
            cluster.shutdown()
        except Exception as exc:
            _log(f"scale: rafka did not shut down cleanly: {exc!r}")
    finally:
        try:
            local.shutdown()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return mode


def _life_fencings() -> int | None:
    return fencing_lines(_session_logs())


def _run(name: str, modes: dict[str, Any], work: Callable[[], dict[str, Any]]) -> None:
    began = time.monotonic()
    try:
        modes[name] = {"status": "ok", **work()}
    except Skipped as exc:
        modes[name] = {"status": "skipped", "reason": str(exc)}
        _log(f"scale {name}: skipped: {exc}")
    except Exception as exc:  # the other modes still run; the workload fails at the end
        import traceback

        traceback.print_exc()
        modes[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    modes[name]["seconds"] = time.monotonic() - began


# -- the workload ------------------------------------------------------------------------------


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from bench.harness import row

    ctx.stop_embedded()  # one Ray connection per process: these instances are this workload's
    if ray.is_initialized():
        raise RuntimeError("scale starts Ray instances of its own; it cannot run while the "
                           "LocalCluster of produce-all, failover and controller runs")
    value = os.urandom(args.value_size)
    modes: dict[str, Any] = {}
    root = ctx.data_dir / "scale"
    try:
        _run("unpacked", modes, lambda: unpacked(args, root / "unpacked"))
        _run("packed", modes, lambda: packed(args, root / "packed", value))
        _run("rf3", modes, lambda: rf3(args, root / "rf3"))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "per_actor": args.scale_per_actor, "targets": TARGETS, "settle_s": args.scale_settle_s,
        "idle_s": args.scale_idle_s, "modes": modes,
        "peer": "none: a Tansu broker has no replica actors",
    }  # fmt: skip
    print(render(report))
    failed = {n: m["error"] for n, m in modes.items() if m["status"] == "error"}
    if failed:
        raise RuntimeError("scale: " + "; ".join(f"{n}: {e}" for n, e in failed.items()))
    return {"rows": rows(report, row), "report": report}


def rows(report: dict[str, Any], row) -> list[dict[str, Any]]:
    out = []
    modes = report["modes"]
    target = TARGETS
    per_actor = report["per_actor"]
    for name, label, goal in (("unpacked", "unpacked", target["unpacked_writable_s"]),
                              ("packed", f"packed {per_actor}/actor",
                               target["packed_writable_s"]),
                              ("rf3", f"rf3 packed {per_actor}/actor", None)):  # fmt: skip
        m = modes.get(name, {})
        if m.get("status") != "ok":
            continue
        s = m["start"]
        out.append(row(f"{label}: {s['partitions']} writable, {s['fencing']['fenced']} fenced",
                       "s", s["writable_s"], baseline=goal,
                       baseline_label="target" if goal else None,
                       higher_is_better=False))  # fmt: skip
    u, p = modes.get("unpacked", {}), modes.get("packed", {})
    if u.get("status") == "ok":
        out.append(row("unpacked: USS per replica", "MiB", u["memory"]["mib_per_replica"],
                       higher_is_better=False))  # fmt: skip
    if p.get("status") == "ok":
        m = p["memory"]
        unpacked_mib = u["memory"]["mib_per_replica"] if u.get("status") == "ok" else None
        out.append(row("packed: USS per replica, base counted", "MiB", m["mib_per_replica"],
                       baseline=unpacked_mib, baseline_label="unpacked" if unpacked_mib else None,
                       higher_is_better=False))  # fmt: skip
        beyond = m.get("mib_per_replica_beyond_base")
        if beyond is not None and beyond > 0:  # at tiny sizes noise can put it below 0
            out.append(row("packed: USS per replica beyond base", "MiB", beyond,
                           baseline=target["packed_mib_beyond_base"], baseline_label="target",
                           higher_is_better=False))  # fmt: skip
    for name, m in (("unpacked", u), ("packed", p)):
        if m.get("status") != "ok":
            continue
        cpu = m["idle_cpu"]
        for key, what in (("rafka_actors_pct", "rafka actors"),
                          ("ray_instance_pct", "Ray instance")):  # fmt: skip
            out.append(row(f"{name}: idle CPU, {what}", "% of a core", cpu[key],
                           baseline=target["idle_cpu_pct"], baseline_label="target",
                           higher_is_better=False))  # fmt: skip
    if p.get("status") == "ok":
        pr = p["produce"]
        out.append(row(f"produce over {pr['spread_partitions']} partitions", "records/s",
                       pr["spread_records_per_s"], baseline=pr["one_partition_records_per_s"],
                       baseline_label="one partition"))  # fmt: skip
    return out


def render(report: dict[str, Any]) -> str:
    def f(value, spec=".2f"):
        return "-" if value is None else format(value, spec)

    t = report["targets"]
    lines = [f"\nscale: replicas per actor {report['per_actor']} when packed; memory after "
             f"{report['settle_s']:g} s of quiet, idle CPU over {report['idle_s']:g} s"]
    for name, m in report["modes"].items():
        if m["status"] != "ok":
            lines.append(f"{name:<9} {m['status'].upper()}: {m.get('reason') or m.get('error')}")
            continue
        s = m["start"]
        goal = {"unpacked": t["unpacked_writable_s"], "packed": t["packed_writable_s"]}.get(name)
        lines.append(
            f"{name:<9} {s['partitions']} partitions RF={s['replication']} writable in "
            f"{s['writable_s']:.2f} s (create_topic {f(s['create_topic_s'])} s)"
            + (f", target <= {goal:g} s" if goal else "")
            + f"; brokers fenced: {s['fencing']['fenced']} during the start, "
            f"{f(m.get('fenced_in_life'), 'd')} in the instance's life"
        )  # fmt: skip
        if m.get("settings_note"):
            lines.append(f"{'':<9} {m['settings_note']}")
        if "memory" in m:
            mem, cpu = m["memory"], m["idle_cpu"]
            line = (f"{'':<9} memory: {mem['processes']} replica processes, "
                    f"{mem['uss_total_mib']:.0f} MiB USS for {mem['replicas']} replicas = "
                    f"{mem['mib_per_replica']:.2f} MiB each ({mem['replicas_per_gib']:.0f}/GiB)")
            if "base" in m:
                line += (f"; host base {f(m['base']['uss_mib'])} MiB, beyond it "
                         f"{f(mem.get('mib_per_replica_beyond_base'))} MiB per replica "
                         f"(target <= {t['packed_mib_beyond_base']:g})")
            lines.append(line)
            lines.append(f"{'':<9} idle CPU: rafka actors {cpu['rafka_actors_pct']:.2f}% "
                         f"({cpu['rafka_actors']} processes), Ray instance "
                         f"{cpu['ray_instance_pct']:.2f}% ({cpu['ray_processes']} processes), "
                         f"driver {cpu['driver_pct']:.2f}% of a core (target < "
                         f"{t['idle_cpu_pct']:g}%)")  # fmt: skip
        if "produce" in m:
            p = m["produce"]
            lines.append(f"{'':<9} produce {p['records']:,} records: over "
                         f"{p['spread_partitions']} partitions {p['spread_records_per_s']:,.0f}/s,"
                         f" one partition {p['one_partition_records_per_s']:,.0f}/s, ratio "
                         f"{p['ratio']:.2f}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - use `python -m bench scale`
    os.execvp(sys.executable, [sys.executable, "-m", "bench", "scale", *sys.argv[1:]])
