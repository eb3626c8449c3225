"""Kafka's own client against rafka's Kafka listener and against Tansu, in one run.

Workload (``python -m bench kafka``): confluent-kafka (librdkafka) produces ``--kafka-records``
values of ``--value-size`` bytes to a fresh one-partition topic, then a fresh consumer reads
them back from offset 0. The same code and client settings run against (a) rafka's listener
(an embedded rafka of its own, started with ``listeners=PLAINTEXT://127.0.0.1:0``) and (b) the
Tansu broker of ``bench/peer.py``. Producer: acks=all, enable.idempotence=true, linger.ms=5,
batch.size 1 MB and a deep local queue (as bench/peer.py's produce). Consumer: bench/peer.py's
consume (fetch.min.bytes at its default of 1, a deep prefetch queue). Rounds alternate rafka
and Tansu; the summary keeps the best round of each side (the JSON keeps every round).

Figures and units:
  records/s, MB/s   records (MB = 10**6 value bytes) per wall second of the timed region:
                    first produce() to the end of flush(); assign() to the last record
  p50/p99 ms        produce latency, librdkafka's ``Message.latency()`` (produce() call to the
                    broker's acknowledgement) of one record in ``LATENCY_SAMPLE_EVERY``
                    (a delivery callback per record would cost the client loop ~1 us each).
                    The producer runs flat out, so this is mostly the time a record waits in
                    the client's queue: latency under saturation, not at a fixed rate (that
                    is the ``latency`` workload)
  CPU-s per M       CPU seconds (user + system, all threads) a process spent during the phase,
                    per million records; ``cores`` = CPU seconds / wall seconds, so a process
                    near 1.0 is a saturated single-threaded Python process

"Where the time goes": rafka's processes are the benchmark client (this process: Python and
librdkafka's threads; its main thread, the Python loop, is also shown alone), the listener
actor, the partition's host actor, the controller, every other rafka actor together, and the
rest of the Ray instance (gcs_server, raylet, idle workers); ``machine`` is the whole
machine's busy CPU time (other programs included), for comparison, and ``rest of machine``
the part of it outside the listed processes. Tansu's are the client and the broker.

Each topic first gets one untimed warm-up record from the producer that then runs the timed
loop (so the clock starts with a producer id held and the partition writable), and the timed
loop sends ``--kafka-records`` - 1; the consumer reads all ``--kafka-records``. A group
coordinator is asked once per broker before the first round (rafka creates its offsets topic
then). The figures' arithmetic and tables are in bench/kafka_report.py;
``python -m bench.kafka_wire [kafka.json]`` prints a saved run's tables in Markdown.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable

from bench.kafka_report import (CLIENT_THREAD, PHASES, cpu_figures, latency_figures,
                                markdown, render, summarise, summary_rows)

MB = 10**6
TINY = {"kafka_records": 20_000, "kafka_rounds": 1}
LATENCY_SAMPLE_EVERY = 100
#: How long a new topic may take to accept an idempotent producer, s (rafka refuses until the
#: replica is open and, just after start, until the listener has the ACLs).
WRITABLE_TIMEOUT_S = 60.0
LISTENERS = "PLAINTEXT://127.0.0.1:0"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--kafka-records", type=int, default=1_000_000,
                       help="records per round, produced then consumed by confluent-kafka "
                       "(default 1000000)")  # fmt: skip
    group.add_argument("--kafka-rounds", type=int, default=3,
                       help="rounds, rafka and Tansu each; the best counts (default 3)")


# -- processes and their CPU time --------------------------------------------------------------


def _process_cpu(pids: list[int]) -> float | None:
    """User + system CPU seconds of ``pids`` (all their threads); None if all are gone."""
    import psutil

    total, found = 0.0, False
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system
        found = True
    return total if found else None


def _machine_cpu() -> float:
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _main_thread_cpu() -> float | None:
    import psutil

    native = threading.main_thread().native_id
    for thread in psutil.Process().threads():
        if thread.id == native:
            return thread.user_time + thread.system_time
    return None


def snapshot(processes: dict[str, list[int]]) -> dict[str, float]:
    """label -> cumulative CPU seconds now, plus ``machine`` and this process's main thread
    (``CLIENT_THREAD``: the client's Python loop, apart from librdkafka's threads)."""
    out = {label: cpu for label, pids in processes.items()
           if (cpu := _process_cpu(pids)) is not None}  # fmt: skip
    if (main := _main_thread_cpu()) is not None:
        out[CLIENT_THREAD] = main
    out["machine"] = _machine_cpu()
    return out


def rafka_processes(cluster, topic: str, exclude: set[int]) -> dict[str, list[int]]:
    """label -> pids of the embedded rafka this process started, for ``topic``'s leader.
    ``exclude``: this process's other children (the Tansu broker)."""
    import psutil
    import ray

    from rafka.actors.kafka_listener import LISTENER_PREFIX
    from rafka.actors.placement import CONTROLLER_NAME
    from rafka.cluster.hosting import NO_HOST, host_name

    deadline = time.monotonic() + WRITABLE_TIMEOUT_S
    while True:  # a new replica has no host slot until its host actor has it open
        leader, _, slot = cluster.metadata.refresh([topic])[topic].partitions[0]
        if slot != NO_HOST or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    host = host_name(leader, slot)
    # The GCS's actor table: Ray's state API (list_actors) needs the dashboard, which the
    # embedded instance does not run.
    actors = [(a.get("Name") or "", a["Pid"]) for a in ray._private.state.actors().values()
              if a.get("State") == "ALIVE" and a.get("Pid")]  # fmt: skip
    out: dict[str, list[int]] = {"client": [os.getpid()], "listener": [], "partition host": [],
                                 "controller": [], "other rafka actors": []}  # fmt: skip
    for name, pid in actors:
        if name.startswith(LISTENER_PREFIX):
            out["listener"].append(pid)
        elif name == host:
            out["partition host"].append(pid)
        elif name == CONTROLLER_NAME:
            out["controller"].append(pid)
        else:
            out["other rafka actors"].append(pid)
    if not out["listener"] or not out["partition host"]:
        raise RuntimeError(f"no live listener or host {host} among the actors: {actors}")
    taken = {pid for pids in out.values() for pid in pids} | exclude
    out["ray system"] = [p.pid for p in psutil.Process().children(recursive=True)
                         if p.pid not in taken]  # fmt: skip
    return out


def tansu_processes(broker) -> dict[str, list[int]]:
    """label -> pids: this process (client) and the Tansu broker (this process's child
    running ``broker.binary``)."""
    import psutil

    pids = []
    for child in psutil.Process().children():
        try:
            if child.cmdline()[:1] == [broker.binary]:
                pids.append(child.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return {"client": [os.getpid()], "tansu broker": pids}


# -- the client phases -------------------------------------------------------------------------


def producer_config(bootstrap: str) -> dict[str, Any]:
    """Both brokers' producer: bench/peer.py's idempotent acks=all settings, with success
    reports on (the latency sample needs them; ``produce`` asks for them on sampled records
    only)."""
    return {
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.size": 1_000_000, "batch.num.messages": 1_000_000,
        "compression.type": "none", "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
    }  # fmt: skip


def ready_producer(bootstrap: str, topic: str, config: dict[str, Any],
                   timeout_s: float = WRITABLE_TIMEOUT_S) -> tuple[Any, float]:  # fmt: skip
    """A producer that has written one warm-up record to ``topic``, and the seconds that took.

    The clock of a timed produce must start after the producer holds its producer id (which
    librdkafka asks for up to ~0.5 s after connecting), and after a new partition takes writes
    (rafka answers LEADER_NOT_AVAILABLE until its replica is open, just after a start until
    the listener has the ACLs; librdkafka backs off 100 ms per try). A producer refused its
    producer id is dead for librdkafka: each try makes a new one."""
    from bench.peer import _import_confluent_kafka

    ck = _import_confluent_kafka()
    began = time.monotonic()
    last: Any = None
    while time.monotonic() - began < timeout_s:
        failed: list[Any] = []
        # The config as given: this producer runs the timed loop (a short message.timeout.ms
        # here would expire records queued behind a slow broker there).
        producer = ck.Producer(config)
        try:
            producer.produce(topic, b"warm-up", on_delivery=lambda err, msg: failed.append(err))
            if producer.flush(15) == 0 and failed == [None]:
                return producer, time.monotonic() - began
            last = failed or "no answer in 15 s"
        except ck.KafkaException as exc:
            last = exc
        producer.purge()  # a late warm-up record would only be one more record in the topic
        producer.flush(1)
        time.sleep(0.5)
    raise RuntimeError(f"{bootstrap} took no idempotent write within {timeout_s:g} s: {last}")


def produce(bootstrap: str, topic: str, count: int, value_size: int,
            on_start: Callable[[], None] = lambda: None,
            timeout_s: float = 600.0) -> dict[str, Any]:  # fmt: skip
    """One warm-up record (untimed, see ``ready_producer``), then ``count`` random values:
    records/s from the first produce() to the end of flush(), and the latency of every
    LATENCY_SAMPLE_EVERY-th record. ``on_start`` is called just before the clock starts.

    Only the sampled records have a delivery callback (a Python call per record would be a
    client cost of ~1 us each, as large as the loop's own): a failure elsewhere shows as
    the last record's offset, which must be ``count`` (the warm-up record is at 0), or as a
    client error (a fatal one ends an idempotent producer)."""
    errors: list[Any] = []
    latencies: list[float] = []
    last_offset: list[int] = []

    def on_sample(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        if (latency := msg.latency()) is not None:
            latencies.append(latency)
        last_offset[:] = [msg.offset()]

    producer, ready_s = ready_producer(bootstrap, topic, {
        **producer_config(bootstrap), "error_cb": errors.append})  # fmt: skip
    value = os.urandom(value_size)  # random: compression must not flatter either side
    produce_one, poll = producer.produce, producer.poll  # bound once: the loop is the benchmark
    every = LATENCY_SAMPLE_EVERY
    on_start()
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                if i % every and i != count - 1:
                    produce_one(topic, value)
                else:
                    produce_one(topic, value, on_delivery=on_sample)
                break
            except BufferError:
                poll(0.001)  # local queue full: let librdkafka drain it, then retry
        if i % 1000 == 0:
            poll(0)
    left = producer.flush(timeout_s)
    seconds = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} records still undelivered after {timeout_s:g} s")
    if errors:
        raise RuntimeError(f"{len(errors)} client or delivery errors, first: {errors[0]}")
    if last_offset != [count]:
        raise RuntimeError(f"the last record is at offset {last_offset}, not {count}: records "
                           "were lost or duplicated")  # fmt: skip
    return {"records": count, "seconds": seconds, "records_per_s": count / seconds,
            "mb_per_s": count * value_size / seconds / MB, "ready_s": ready_s,
            "latency": latency_figures(latencies)}  # fmt: skip


def warm_coordinator(bootstrap: str, topic: str, timeout_s: float = WRITABLE_TIMEOUT_S) -> float:
    """Ask a group coordinator for a group's committed offset of ``topic``; the seconds it
    took. The first FindCoordinator of a rafka cluster creates the offsets topic (seconds),
    and the consumer's ListOffsets waits behind it on the same connection: without this the
    first consume round would time that."""
    from bench.peer import _import_confluent_kafka

    ck = _import_confluent_kafka()
    began = time.monotonic()
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                            "group.id": f"rafka-bench-warm-{uuid.uuid4().hex[:8]}"})  # fmt: skip
    try:
        consumer.committed([ck.TopicPartition(topic, 0)], timeout=timeout_s)
    finally:
        consumer.close()
    return time.monotonic() - began


def _phase(run: Callable[[Callable[[], None]], dict], processes: dict[str, list[int]],
           records: int) -> dict:  # fmt: skip
    """``run(on_start)``'s figures with the CPU time of ``processes`` from ``on_start()`` (or
    from the call, if ``run`` never calls it) to the end."""
    before: dict[str, float] = {}

    def on_start() -> None:
        before.update(snapshot(processes))

    on_start()
    figures = run(on_start)
    figures["cpu"] = cpu_figures(before, snapshot(processes), records, figures["seconds"])
    return figures


def _consume(bootstrap: str, topic: str, count: int, value_size: int) -> dict:
    from bench import peer

    figures = peer.consume(bootstrap, topic, count, value_size=value_size)
    return {k: figures[k] for k in ("records", "seconds", "records_per_s", "mb_per_s")}


def _one_side(bootstrap: str, topic: str, processes: dict, args: argparse.Namespace) -> dict:
    """A fresh topic's phases: a warm-up record and ``records - 1`` produced (timed), all
    ``records`` consumed (timed); the consumer's batches divide a round number evenly."""
    n, size = args.kafka_records, args.value_size
    return {
        "produce": _phase(lambda start: produce(bootstrap, topic, n - 1, size, start),
                          processes, n - 1),
        # The consumer's clock starts at assign(), after it connects (a few ms of CPU).
        "consume": _phase(lambda start: _consume(bootstrap, topic, n, size), processes, n),
    }


# -- the workload ------------------------------------------------------------------------------


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """``kafka``: an embedded rafka with a PLAINTEXT listener of its own (stopped at the end),
    and the run's Tansu broker; rounds of produce + consume on each, in fresh topics."""
    import ray

    from bench import peer
    from bench.embedded import start_embedded
    from bench.harness import NAMESPACE, row

    if ray.is_initialized():
        raise RuntimeError("the kafka workload starts a rafka of its own: run it before the "
                           "workloads that share one (the harness's order does)")  # fmt: skip
    broker = ctx.peer()
    data_dir = ctx.data_dir / "kafka"
    began = time.monotonic()
    cluster = start_embedded(data_dir, f"{NAMESPACE}-kafka", {"listeners": LISTENERS})
    rounds: list[dict] = []
    coordinator_s: dict[str, float] = {}  # side -> first group coordinator answer, s
    try:
        bootstrap = cluster.bootstrap_servers
        _log(f"kafka: rafka with a listener at {bootstrap} started in "
             f"{time.monotonic() - began:.1f} s")  # fmt: skip
        admin = cluster.admin()
        tansu_pids = tansu_processes(broker) if broker is not None else None
        exclude = set(tansu_pids["tansu broker"]) if tansu_pids else set()
        for i in range(args.kafka_rounds):
            r: dict[str, Any] = {}
            topic = f"kafka-{uuid.uuid4().hex[:8]}"
            admin.create_topic(topic, partitions=1)
            if i == 0:
                coordinator_s["rafka"] = warm_coordinator(bootstrap, topic)
            r["rafka"] = _one_side(bootstrap, topic, rafka_processes(cluster, topic, exclude),
                                   args)  # fmt: skip
            admin.delete_topic(topic)
            if broker is not None:
                peer.create_topic(broker.bootstrap, topic, 1)
                if i == 0:
                    coordinator_s["tansu"] = warm_coordinator(broker.bootstrap, topic)
                r["tansu"] = _one_side(broker.bootstrap, topic, tansu_pids, args)
                peer.delete_topic(broker.bootstrap, topic)
            rounds.append(r)
            _log(f"kafka round {i + 1}: " + ", ".join(
                f"{side} {phase} {r[side][phase]['records_per_s']:,.0f}/s"
                for side in r for phase in PHASES))  # fmt: skip
    finally:
        try:
            cluster.shutdown()
        finally:
            ray.shutdown()
    summary = summarise(rounds)
    report = {
        "records": args.kafka_records, "value_size": args.value_size, "partitions": 1,
        "acks": "all", "idempotent": True, "linger_ms": 5,
        "producer": {k: v for k, v in producer_config("").items() if k != "bootstrap.servers"},
        "latency_sample_every": LATENCY_SAMPLE_EVERY, "listeners": LISTENERS,
        "first_coordinator_s": coordinator_s, "rounds": rounds, "summary": summary,
    }  # fmt: skip
    print(render(report))
    return {"rows": summary_rows(summary, row), "report": report}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.kafka_wire [kafka.json]``: the Markdown tables of a saved run."""
    import json
    from pathlib import Path

    from bench.harness import RESULTS_DIR

    parser = argparse.ArgumentParser(prog="python -m bench.kafka_wire", description=main.__doc__)
    parser.add_argument("path", nargs="?", default=str(RESULTS_DIR / "kafka.json"))
    path = Path(parser.parse_args(argv).path)
    detail = json.loads(path.read_text())
    print(f"`{detail['command']}` on {detail['machine']['cpus']} CPUs "
          f"({detail['machine']['cpu_model']})\n")  # fmt: skip
    print(markdown(detail["report"]))


if __name__ == "__main__":
    main()
