"""End-to-end latency at a fixed offered rate: rafka next to the peer, in one run.

Workload: one topic with one partition, ``--value-size``-byte values (100 by default). A
producer in the harness's process sends at each rate of ``--latency-rates`` records per
second for ``--latency-seconds`` seconds (1,000/s and 10,000/s for 2 s by default; acks=1,
linger ``--latency-linger-ms``, 0 by default) while one consumer in another process reads
the partition from its start and polls in a loop. ``bench.latency_all`` measures acks=all on
RF=3 the same way on a multi-node cluster. Each
value starts with its sequence number and the time it was handed to ``send()``
(``time.monotonic_ns()``: CLOCK_MONOTONIC, one clock for every process of the machine); the
consumer takes the time when a poll returns, and a record's latency is that time minus the
time it carries. So latency = producer queueing (linger) + the produce request + the append +
the fetch answer + the consumer's poll loop, and p50 / p99 / p99.9 are taken over every record.

Pacing: record ``i`` is due at ``start + i / rate``; the producer sleeps until it is due, or
sends at once when behind (a burst after an oversleep), and stamps the time it actually
calls ``send()``. The report keeps the rate achieved and how far behind the schedule the
producer fell, so a run where the producer could not keep the rate says so.

Both sides: the same rate, size, linger and acks=1. The consumers' fetch wait differs, each
side set as its informed user would: rafka's replica answers a waiting fetch as soon as a
record arrives, so its wait (``--latency-fetch-wait-ms``, 100 ms) only bounds idle polls;
Tansu holds every fetch for the whole ``fetch.wait.max.ms`` (see PEER_FETCH_MAX_WAIT_MS), so
the peer's consumer gets 1 ms (``--latency-peer-fetch-wait-ms``), its best latency, at the
cost of a fetch per millisecond.
rafka: ``cluster.producer(acks=1, linger_ms=...)``, the consumer a Ray actor
(``consumer.poll``); peer: confluent-kafka's Producer and a Consumer in a spawned process
against the Tansu broker. Before the clock starts, warm-up records (sequence -1, not counted)
are sent until the consumer has seen one, so connecting and the first fetch are not measured.

Ratios are peer / rafka for latencies: above 1 means rafka's records arrive sooner.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import multiprocessing
import os
import queue
import struct
import sys
import threading
import time
import uuid
from typing import Any, Callable

# Sequence number (-1: warm-up) and monotonic send time in ns. A format, not a struct.Struct:
# this module goes to Ray's workers by value, and a Struct does not pickle.
HEADER = ">qq"
HEADER_SIZE = struct.calcsize(HEADER)
WARM_UP = -1
WARM_UP_EVERY_S = 0.02
WARM_UP_GIVE_UP_S = 60.0
DRAIN_GIVE_UP_S = 60.0
FETCH_MAX_WAIT_MS = 100
# Tansu 0.6 does not answer a waiting fetch when a record arrives: it holds it for all of
# fetch.wait.max.ms, so the peer's latency follows that setting (p50 at 500 records/s measured
# on the dev machine: 1 ms -> 3.8 ms, 5 -> 6.5, 100 -> 78, 500 -> 481). A user after low
# latency would set it low, so the peer gets the lowest that makes sense.
PEER_FETCH_MAX_WAIT_MS = 1
#: The environment switch of rafka's direct channels (``rafka.actors.direct_channel``).
CHANNEL_SWITCH = "RAFKA_DIRECT_CHANNEL"
#: Points of each side's latency CDF in the report (``cdf_ms``), drawn by bench.chart.
CDF_POINTS = 200
PERCENTILES = (("p50_ms", 50.0, "p50"), ("p99_ms", 99.0, "p99"), ("p999_ms", 99.9, "p99.9"))

TINY = {"latency_rates": "1000", "latency_seconds": 1.0}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--latency-rates", default="1000,10000",
                       help="records per second offered, comma-separated: one measurement "
                       "per rate (default 1000,10000)")
    # Two seconds by default: on Tansu 0.6's memory storage the peer's consumer stops
    # receiving after a few seconds of a steady stream (about 5,000-15,000 records), and a
    # run it cannot finish gives it no figures. rafka holds up for any duration.
    group.add_argument("--latency-seconds", type=float, default=2.0,
                       help="seconds of sending at that rate (default 2)")
    group.add_argument("--latency-linger-ms", type=float, default=0,
                       help="producer linger on both sides, ms (default 0)")
    group.add_argument("--latency-fetch-wait-ms", type=int, default=FETCH_MAX_WAIT_MS,
                       help="rafka consumer's fetch_max_wait_ms: how long a replica may hold a "
                       f"fetch with no data (default {FETCH_MAX_WAIT_MS})")
    group.add_argument("--latency-actor-calls", choices=("on", "off"), default="on",
                       help="also measure rafka with its clients' produce and fetch calls as "
                       "Ray actor calls instead of direct channels (the path before them), "
                       "beside the channel figures (default on)")
    group.add_argument("--latency-peer-fetch-wait-ms", type=int, default=PEER_FETCH_MAX_WAIT_MS,
                       help="the peer consumer's fetch.wait.max.ms (default "
                       f"{PEER_FETCH_MAX_WAIT_MS}: Tansu holds a fetch for all of it)")  # fmt: skip


# -- the two ends, same for both sides ---------------------------------------------------------


class Collector:
    """The consumer's side: latencies (ns) of the measured records, and whether a warm-up
    record has arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.latencies = array.array("q")
        self.warm = threading.Event()
        self.done = threading.Event()
        self.duplicates = 0
        self._seen = bytearray(expected)

    def take(self, values, now_ns: int) -> None:
        unpack = struct.Struct(HEADER).unpack_from
        for value in values:
            seq, sent = unpack(value)
            if seq < 0:
                self.warm.set()
            elif self._seen[seq]:
                self.duplicates += 1
            else:
                self._seen[seq] = 1
                self.latencies.append(now_ns - sent)
        if len(self.latencies) >= self.expected:
            self.done.set()

    def report(self) -> dict[str, Any]:
        return {"latencies_ns": self.latencies.tobytes(), "duplicates": self.duplicates}


def drive(send: Callable[[bytes], Any], rate: float, count: int, value_size: int) -> dict:
    """Send ``count`` records at ``rate`` per second through ``send(value)``."""
    pad = os.urandom(max(0, value_size - HEADER_SIZE))
    pack = struct.Struct(HEADER).pack
    interval_ns = 1e9 / rate
    clock, sleep = time.monotonic_ns, time.sleep
    behind_max = 0
    start = clock()
    for i in range(count):
        due = start + int(i * interval_ns)
        now = clock()
        if now < due:
            sleep((due - now) / 1e9)
            now = clock()
        elif now - due > behind_max:
            behind_max = now - due
        send(pack(i, now) + pad)
    seconds = (clock() - start) / 1e9
    return {"sent": count, "send_seconds": seconds, "achieved_rate": count / seconds,
            "max_behind_schedule_ms": behind_max / 1e6}  # fmt: skip


def warm_up(send: Callable[[bytes], Any], is_warm: Callable[[], bool], value_size: int) -> float:
    """Send warm-up records until the consumer has seen one; answers the seconds it took."""
    value = struct.pack(HEADER, WARM_UP, 0) + bytes(max(0, value_size - HEADER_SIZE))
    began = time.monotonic()
    while not is_warm():
        if time.monotonic() - began > WARM_UP_GIVE_UP_S:
            raise RuntimeError(f"the consumer saw no record within {WARM_UP_GIVE_UP_S:g} s")
        send(value)
        time.sleep(WARM_UP_EVERY_S)
    return time.monotonic() - began


def figures(latencies_ns: bytes, sent: int, duplicates: int) -> dict[str, Any]:
    import numpy as np

    values = np.frombuffer(latencies_ns, dtype=np.int64) / 1e6  # ms
    out: dict[str, Any] = {"received": int(values.size), "lost": sent - int(values.size),
                           "duplicates": duplicates}  # fmt: skip
    if values.size:
        for name, q, _ in PERCENTILES:
            out[name] = float(np.percentile(values, q))
        out["max_ms"] = float(values.max())
        out["mean_ms"] = float(values.mean())
        out["cdf_ms"] = cdf_points(values)
    return out


def cdf_points(values_ms, points: int = CDF_POINTS) -> list[list[float]]:
    """The latency distribution as ``[[ms, fraction of records at or below it], ...]``:
    ``points`` evenly spaced quantiles plus the tail (p99, p99.9, p99.99, max), enough to
    draw a CDF without keeping every record's latency in the report."""
    import numpy as np

    fractions = np.unique(np.concatenate([
        np.linspace(0.0, 1.0, points), [0.99, 0.999, 0.9999, 1.0],
    ]))  # fmt: skip
    quantiles = np.quantile(np.asarray(values_ms, dtype=np.float64), fractions)
    return [[float(q), float(f)] for q, f in zip(quantiles, fractions)]


# -- rafka -------------------------------------------------------------------------------------


def _rafka_consumer_class():
    import ray
    from ray import cloudpickle

    # Ray workers get this module by value: bench/ is not on their path.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote(num_cpus=0, max_restarts=0)
    class RafkaLatencyConsumer:
        def __init__(self, cluster, topic: str, expected: int, fetch_wait_ms: int) -> None:
            from rafka import TopicPartition

            self.collector = Collector(expected)
            self.stop = threading.Event()
            self.consumer = cluster.consumer(
                auto_offset_reset="earliest", fetch_max_wait_ms=fetch_wait_ms,
                max_poll_records=10_000,
            )  # fmt: skip
            self.consumer.assign([TopicPartition(topic, 0)])
            self.poll_ms = fetch_wait_ms
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

        def _run(self) -> None:
            poll, clock, take = self.consumer.poll, time.monotonic_ns, self.collector.take
            try:
                while not self.stop.is_set() and not self.collector.done.is_set():
                    records = poll(timeout_ms=self.poll_ms)
                    if records:
                        now = clock()
                        take([r.value for r in records], now)
            finally:
                self.consumer.close()

        def warm(self) -> bool:
            return self.collector.warm.is_set()

        def result(self, timeout_s: float) -> dict[str, Any]:
            self.collector.done.wait(timeout_s)
            self.stop.set()
            self.thread.join(10)
            return self.collector.report()

    return RafkaLatencyConsumer


def parse_rates(text: str) -> list[float]:
    """``--latency-rates``: positive records-per-second figures, comma-separated."""
    try:
        rates = [float(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        rates = []
    if not rates or any(rate <= 0 for rate in rates):
        raise SystemExit(f"--latency-rates wants positive numbers, comma-separated "
                         f"(e.g. 1000,10000); got {text!r}")  # fmt: skip
    return rates


@contextlib.contextmanager
def clients_channels(on: bool):
    """While inside, this process's clients use direct channels to replica hosts (``on``,
    the default) or actor calls only (``RAFKA_DIRECT_CHANNEL=0``); replicas' own follower
    fetches are the cluster's to decide."""
    before = os.environ.get(CHANNEL_SWITCH)
    if on:
        os.environ.pop(CHANNEL_SWITCH, None)
    else:
        os.environ[CHANNEL_SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CHANNEL_SWITCH, None)
        else:
            os.environ[CHANNEL_SWITCH] = before


def run_rafka(
    cluster, rate: float, count: int, value_size: int, linger_ms: float, fetch_wait_ms: int,
    topic: str | None = None, direct_channels: bool = True, **producer_settings: Any,
) -> dict:
    """One measurement on rafka: into ``topic`` (a fresh one-partition RF=1 topic, deleted
    after, when None) with a producer of ``producer_settings`` (acks=1 unless given);
    ``direct_channels`` False: the producer and the consumer make actor calls only."""
    import ray

    admin = cluster.admin()
    own_topic = topic is None
    if own_topic:
        topic = f"latency-{uuid.uuid4().hex[:8]}"
        admin.create_topic(topic, partitions=1)
    consumer = None
    try:
        consumer_class = _rafka_consumer_class()
        if not direct_channels:
            consumer_class = consumer_class.options(
                runtime_env={"env_vars": {CHANNEL_SWITCH: "0"}}
            )  # fmt: skip
        consumer = consumer_class.remote(cluster, topic, count, fetch_wait_ms)
        with clients_channels(direct_channels):
            producer = cluster.producer(**{"acks": 1, **producer_settings}, linger_ms=linger_ms)
            try:
                send = producer.send

                def send_one(value: bytes) -> None:
                    send(topic, value)

                warm_s = warm_up(send_one, lambda: ray.get(consumer.warm.remote()), value_size)
                sent = drive(send_one, rate, count, value_size)
                producer.flush()
            finally:
                producer.close()
        report = ray.get(consumer.result.remote(DRAIN_GIVE_UP_S))
    finally:
        if consumer is not None:
            ray.kill(consumer, no_restart=True)
        if own_topic:
            admin.delete_topic(topic)
    return {**sent, "warm_up_s": warm_s,
            **figures(report["latencies_ns"], count, report["duplicates"])}  # fmt: skip


# -- the peer ----------------------------------------------------------------------------------


def _peer_consumer(bootstrap: str, topic: str, expected: int, fetch_wait_ms: int, out,
                   stop) -> None:  # fmt: skip
    """A confluent-kafka consumer in its own process: puts ("warm",) on ``out`` when the first
    warm-up record arrives, and ("result", report) once every record has (or ``stop``)."""
    import confluent_kafka as ck

    collector = Collector(expected)
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "fetch.wait.max.ms": fetch_wait_ms,
        "socket.nagle.disable": True,
    })  # fmt: skip
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    told_warm = False
    take, clock, consume = collector.take, time.monotonic_ns, consumer.consume
    try:
        while not stop.is_set() and not collector.done.is_set():
            messages = consume(num_messages=10_000, timeout=fetch_wait_ms / 1000)
            if messages:
                now = clock()
                take([m.value() for m in messages if m.error() is None], now)
            if not told_warm and collector.warm.is_set():
                out.put(("warm",))
                told_warm = True
    finally:
        consumer.close()
        out.put(("result", collector.report()))


def run_peer(
    bootstrap: str, rate: float, count: int, value_size: int, linger_ms: float, fetch_wait_ms: int
) -> dict:
    import confluent_kafka as ck

    from bench import peer

    topic = f"latency-{uuid.uuid4().hex[:8]}"
    peer.create_topic(bootstrap, topic, 1)
    context = multiprocessing.get_context("spawn")
    messages, stop = context.Queue(), context.Event()
    process = context.Process(
        target=_peer_consumer, args=(bootstrap, topic, count, fetch_wait_ms, messages, stop),
        daemon=True,
    )
    process.start()
    errors: list[Any] = []
    producer = ck.Producer({
        "bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False,
        "linger.ms": linger_ms, "delivery.report.only.error": True,
        "socket.nagle.disable": True,
        "on_delivery": lambda err, msg: errors.append(err),
    })  # fmt: skip
    produce, poll = producer.produce, producer.poll
    warm = False

    def send_one(value: bytes) -> None:
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.001)
        poll(0)

    def is_warm() -> bool:
        nonlocal warm
        try:
            warm = warm or messages.get_nowait()[0] == "warm"
        except queue.Empty:
            pass
        return warm

    try:
        warm_s = warm_up(send_one, is_warm, value_size)
        sent = drive(send_one, rate, count, value_size)
        if producer.flush(DRAIN_GIVE_UP_S):
            raise RuntimeError("the peer's producer did not deliver every record")
        if errors:
            raise RuntimeError(f"{len(errors)} deliveries failed, first: {errors[0]}")
        report = None
        deadline = time.monotonic() + DRAIN_GIVE_UP_S
        while report is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if stop.is_set():
                    raise RuntimeError("the peer's consumer sent no result")
                stop.set()  # it sends what it has when it stops
                deadline += 10
                continue
            try:
                kind, *rest = messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if kind == "result":
                report = rest[0]
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()
    return {**sent, "warm_up_s": warm_s,
            **figures(report["latencies_ns"], count, report["duplicates"])}  # fmt: skip


# -- the workload ------------------------------------------------------------------------------


def workload(ctx, args: argparse.Namespace) -> dict[str, Any]:
    """The harness's ``latency`` workload: answers rows for the summary and the full report."""
    from bench.harness import row

    rates, seconds, size = parse_rates(args.latency_rates), args.latency_seconds, args.value_size
    if seconds <= 0 or size < HEADER_SIZE:
        raise SystemExit(f"--latency-seconds must be > 0 and --value-size >= {HEADER_SIZE}")
    linger, wait = args.latency_linger_ms, args.latency_fetch_wait_ms
    peer_wait = args.latency_peer_fetch_wait_ms
    report: dict[str, Any] = {
        "rates": rates, "seconds": seconds, "value_size": size,
        "acks": 1, "linger_ms": linger, "fetch_max_wait_ms": wait,
        "peer_fetch_wait_max_ms": peer_wait,
        "clock": "time.monotonic_ns (CLOCK_MONOTONIC), send() call to poll return",
        "ratio": "peer / rafka: above 1 means rafka's latency is lower",
        "runs": [], "series": [],
    }  # fmt: skip
    rows = []
    broker = ctx.peer()
    for rate in rates:
        count = max(1, round(rate * seconds))
        run: dict[str, Any] = {"rate": rate, "records": count}
        run["rafka"] = mine = run_rafka(ctx.embedded(), rate, count, size, linger, wait)
        print(f"rafka at {rate:,.0f}/s: " + _line(mine), file=sys.stderr)
        if mine.get("lost"):
            raise RuntimeError(f"{mine['lost']} of {count} records never reached rafka's "
                               f"consumer at {rate:,.0f}/s")  # fmt: skip
        before: dict[str, Any] = {}
        if args.latency_actor_calls == "on":
            run["rafka_actor_calls"] = before = run_rafka(
                ctx.embedded(), rate, count, size, linger, wait, direct_channels=False
            )  # fmt: skip
            print(f"rafka at {rate:,.0f}/s, actor calls: " + _line(before), file=sys.stderr)
        theirs: dict[str, Any] = {}
        if broker is not None:
            run["peer"] = theirs = run_peer(broker.bootstrap, rate, count, size, linger,
                                            peer_wait)  # fmt: skip
            print(f"peer  at {rate:,.0f}/s: " + _line(theirs), file=sys.stderr)
            if theirs.get("lost"):
                # Percentiles over the records that did arrive would flatter the peer.
                run["peer_incomplete"] = (
                    f"the peer's consumer received {theirs['received']:,} of {count:,} records"
                    f" within {DRAIN_GIVE_UP_S:g} s of the last send; its percentiles are left "
                    "out of the summary"
                )  # fmt: skip
                print("peer:  " + run["peer_incomplete"], file=sys.stderr)
                theirs = {}
        report["runs"].append(run)
        report["series"].append(series(f"rafka acks=1 RF=1 @ {rate:,.0f}/s", rate, mine))
        if theirs:
            report["series"].append(series(f"peer acks=1 @ {rate:,.0f}/s", rate, theirs))
        if before:
            report["series"].append(series(f"rafka actor calls @ {rate:,.0f}/s", rate, before))
        rows += [
            row(f"{label} at {rate:,.0f}/s", "ms", mine.get(name), peer=theirs.get(name),
                higher_is_better=False)
            for name, _, label in PERCENTILES
        ]  # fmt: skip
        if before:
            rows += [
                row(f"{label} at {rate:,.0f}/s, vs actor calls", "ms", mine.get(name),
                    baseline=before.get(name), baseline_label="actor calls",
                    higher_is_better=False)
                for name, _, label in PERCENTILES
            ]  # fmt: skip
    return {"rows": rows, "report": report}


def series(label: str, rate: float, side: dict[str, Any]) -> dict[str, Any]:
    """One line of the latency CDF chart (``bench.chart``) with its percentiles."""
    return {"label": label, "rate": rate, "cdf_ms": side.get("cdf_ms", []),
            **{name: side.get(name) for name, _, _ in PERCENTILES}}  # fmt: skip


def _line(side: dict[str, Any]) -> str:
    nan = float("nan")
    return (f"p50 {side.get('p50_ms', nan):.2f} ms, p99 {side.get('p99_ms', nan):.2f} ms, "
            f"p99.9 {side.get('p999_ms', nan):.2f} ms, max {side.get('max_ms', nan):.2f} ms; "
            f"{side['received']:,} records, sent at {side['achieved_rate']:,.0f}/s "
            f"(at most {side['max_behind_schedule_ms']:.1f} ms behind schedule)")  # fmt: skip
