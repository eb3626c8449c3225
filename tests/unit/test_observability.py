"""The pure parts of rafka's observability, without Ray: log prefixes, metric tags and
definitions, the ISR/election/health classifications, lag, record counting from batch
headers, and that a replica's metric calls make one update per call (never per record)."""

from __future__ import annotations

import ast
import logging
import pathlib
import re

import numpy as np
import pytest

from rafka.actors import logs, metrics
from rafka.cluster.metadata import NO_LEADER, PartitionState
from rafka.storage import record_batch as rb

ROOT = pathlib.Path(__file__).resolve().parents[2]


# -- log prefixes -------------------------------------------------------------------------------


def test_log_prefix_names_the_actor_and_its_identity():
    assert logs.log_prefix("PartitionReplica", "orders", 3, 1) == (
        "[PartitionReplica orders-3 broker 1]"
    )
    assert logs.log_prefix("GroupCoordinator", shard=0) == "[GroupCoordinator shard 0]"
    assert logs.log_prefix("NodeAgent", disk="local", broker=2) == "[NodeAgent disk local broker 2]"
    assert logs.log_prefix("NodeAgent", disk="local", broker=None) == "[NodeAgent disk local]"
    assert logs.log_prefix("Controller") == "[Controller]"


def test_actor_logger_prefixes_messages_and_reports_the_caller(caplog):
    logger = logs.actor_logger("rafka.actors.test", "PartitionReplica", topic="orders",
                               partition=3, broker=1)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="rafka.actors.test"):
        logger.info("leads in epoch %d (ISR %s)", 4, [1, 2])
        logger.warning("no arguments, 100% literal")
    first, second = caplog.records
    prefix = "[PartitionReplica orders-3 broker 1]"
    assert first.getMessage() == f"{prefix} leads in epoch 4 (ISR [1, 2])"
    assert second.getMessage() == f"{prefix} no arguments, 100% literal"
    assert first.rafka_actor == prefix
    assert first.filename == pathlib.Path(__file__).name  # the caller, not the adapter


def test_a_percent_sign_in_the_prefix_is_not_a_format(caplog):
    logger = logs.ActorLogger(logging.getLogger("rafka.actors.test"), "[GroupCoordinator 5%]")
    with caplog.at_level(logging.INFO, logger="rafka.actors.test"):
        logger.info("loaded %d group(s)", 3)
    assert caplog.records[0].getMessage() == "[GroupCoordinator 5%] loaded 3 group(s)"


def test_relabel_changes_the_prefix(caplog):
    logger = logs.actor_logger("rafka.actors.test", "NodeAgent", disk="d1")
    logger.relabel(logs.log_prefix("NodeAgent", disk="d1", broker=7))
    with caplog.at_level(logging.INFO, logger="rafka.actors.test"):
        logger.info("registered")
    assert caplog.records[0].getMessage() == "[NodeAgent disk d1 broker 7] registered"


def test_process_labels_reach_every_rafka_line_once(caplog, monkeypatch):
    """In an actor's process, the storage and cluster layers' lines get the actor's prefix;
    lines an ActorLogger prefixed already keep one, other libraries' lines get none."""
    previous = logging.getLogRecordFactory()
    monkeypatch.setattr(logs, "_process_prefix", None)
    prefix = "[PartitionReplica b-1 broker 2]"
    actor = logs.actor_logger("rafka.actors.partition_replica", "PartitionReplica",
                              topic="b", partition=1, broker=2)  # fmt: skip
    try:
        logs.label_process_logs("[PartitionReplica a-0 broker 1]")
        logs.label_process_logs(prefix)  # replaces the first, adds no second layer
        with caplog.at_level(logging.INFO):
            logging.getLogger("rafka.storage.log").warning("%s: recovered", "/data/b-1")
            actor.warning("leads in epoch %d", 3)
            logging.getLogger("somelib").warning("theirs")
    finally:
        logging.setLogRecordFactory(previous)
    assert [r.getMessage() for r in caplog.records] == [
        f"{prefix} /data/b-1: recovered", f"{prefix} leads in epoch 3", "theirs",
    ]  # fmt: skip


def test_library_code_has_no_print_calls():
    """Library code logs; print() is for the CLI and the demo only."""
    offenders = []
    for package in ("actors", "cluster", "storage", "clients"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "print"):  # fmt: skip
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


# -- definitions and tags -----------------------------------------------------------------------


def test_every_metric_is_named_rafka_with_a_unit_and_tag_keys():
    for name, (kind, description, tag_keys) in metrics.DEFINITIONS.items():
        assert re.fullmatch(r"rafka_[a-z_]+", name), name
        assert kind in ("counter", "gauge", "histogram"), name
        assert re.search(r"\((ms|bytes|records|partitions|changes|elections|rebalances|"
                         r"segments)\)\.$", description), (name, description)  # fmt: skip
        assert isinstance(tag_keys, tuple) and tag_keys, name


def test_latency_buckets_span_a_tenth_of_a_millisecond_to_ten_seconds():
    bounds = metrics.LATENCY_BOUNDARIES_MS
    assert bounds[0] == 0.1 and bounds[-1] == 10_000
    assert bounds == sorted(set(bounds))


def test_partition_tags_are_strings():
    assert metrics.partition_tags("orders", 3) == {"topic": "orders", "partition": "3"}
    assert metrics.partition_tags("orders", 3, broker=1) == {
        "topic": "orders", "partition": "3", "broker": "1",
    }  # fmt: skip


# -- classifications ----------------------------------------------------------------------------


def test_isr_changes():
    assert metrics.isr_change([1, 2, 3], [1, 2], [1, 2, 3]) == (True, False)
    assert metrics.isr_change([1, 2], [1, 2, 3], [1, 2, 3]) == (False, True)
    assert metrics.isr_change([1, 2], [1, 3], [1, 2, 3]) == (True, True)
    assert metrics.isr_change([1, 2], [1, 2], [1, 2]) == (False, False)
    # A reassignment that drops broker 3 from the partition is no shrink.
    assert metrics.isr_change([1, 2, 3], [1, 2], [1, 2]) == (False, False)


def test_election_kinds():
    kind = metrics.election_kind
    assert kind(1, 5, [1, 2], 2, 6) == metrics.CLEAN  # failover inside the ISR
    assert kind(1, 5, [1], 2, 6) == metrics.UNCLEAN  # broker 2 was out of sync
    assert kind(2, 5, [1, 2], 1, 6, preferred=True) == metrics.PREFERRED
    assert kind(1, 5, [1, 2], 1, 6) == metrics.CLEAN  # a restarted leader's new epoch
    assert kind(NO_LEADER, 6, [1], 1, 7) == metrics.CLEAN  # the last ISR member came back
    assert kind(1, 5, [1, 2], 1, 5) is None  # an ISR change only
    assert kind(1, 5, [1], NO_LEADER, 6) is None  # left without a leader: no election


def test_partition_health():
    def p(replicas, isr, leader, removing=()):
        return PartitionState(0, list(replicas), list(isr), leader, 0, removing=list(removing))

    partitions = [
        p([1, 2, 3], [1, 2, 3], 1),  # healthy
        p([1, 2, 3], [1, 2], 1),  # under-replicated
        p([1, 2], [2], NO_LEADER),  # under-replicated and offline
        p([1, 2, 3], [1, 2], 1, removing=[3]),  # 3 is leaving: healthy
        p([1], [1], 2),  # leader 2 is fenced: offline
    ]
    assert metrics.partition_health(partitions, lambda b: b != 2) == (2, 2)


def test_consumer_lag_is_never_negative():
    assert metrics.consumer_lag(100, 40) == 60
    assert metrics.consumer_lag(100, 100) == 0
    assert metrics.consumer_lag(100, 120) == 0


def test_batch_records_reads_the_headers_only():
    one = rb.encode_batch([b"x" * 10] * 3)
    two = rb.encode_batch([b"y"] * 5, base_offset=3)
    data = one + two
    assert metrics.batch_records(data) == 8
    assert metrics.batch_records(np.frombuffer(data, dtype=np.uint8)) == 8
    assert metrics.batch_records(memoryview(data)[: len(one) + 20]) == 3  # truncated tail
    assert metrics.batch_records(b"") == 0


# -- what a replica records ---------------------------------------------------------------------


class _RecordedMetric:
    def __init__(self, name: str, updates: list) -> None:
        self.name = name
        self.updates = updates

    def inc(self, value, tags=None):
        assert value > 0, "Ray's Counter.inc refuses 0"
        self.updates.append((self.name, value, dict(tags or {})))

    def set(self, value, tags=None):
        self.updates.append((self.name, value, dict(tags or {})))

    observe = set


class _Recorder:
    """Stands in for the Ray metrics: records (metric, value, tags) per update."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, float, dict]] = []

    def __getattr__(self, name: str) -> _RecordedMetric:
        return _RecordedMetric(name, self.updates)


@pytest.fixture
def recorder(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setattr(metrics, "_registry", recorder)
    return recorder


def test_a_produce_call_makes_one_update_per_metric(recorder):
    m = metrics.PartitionMetrics("orders", 3, 1)
    m.produced(records=1000, size=104_000, acks=-1, latency_ms=2.5)
    assert recorder.updates == [
        ("records_in", 1000, {"topic": "orders", "partition": "3"}),
        ("bytes_in", 104_000, {"topic": "orders", "partition": "3"}),
        ("produce_latency_ms", 2.5, {"topic": "orders", "acks": "all"}),
    ]
    recorder.updates.clear()
    m.produced(records=0, size=0, acks=1, latency_ms=0.3)  # refused: latency only
    assert [u[0] for u in recorder.updates] == ["produce_latency_ms"]


def test_a_fetch_counts_records_from_headers_by_kind(recorder):
    m = metrics.PartitionMetrics("orders", 3, 1)
    data = rb.encode_batch([b"v"] * 7) + rb.encode_batch([b"w"] * 2, base_offset=7)
    m.fetched(metrics.REPLICATION, np.frombuffer(data, dtype=np.uint8), latency_ms=40.0)
    tags = {"topic": "orders", "partition": "3", "kind": "replication"}
    assert recorder.updates == [
        ("bytes_out", len(data), tags),
        ("records_out", 9, tags),
        ("fetch_latency_ms", 40.0, {"topic": "orders", "kind": "replication"}),
    ]
    recorder.updates.clear()
    m.fetched(metrics.CONSUMER, np.zeros(0, dtype=np.uint8), latency_ms=500.0)  # empty poll
    assert [u[0] for u in recorder.updates] == ["fetch_latency_ms"]


def test_log_gauges_name_the_replica(recorder):
    metrics.PartitionMetrics("orders", 3, 1).log_gauges(4096, 2)
    tags = {"topic": "orders", "partition": "3", "broker": "1"}
    assert recorder.updates == [("log_size_bytes", 4096, tags), ("log_segments", 2, tags)]


def test_controller_and_coordinator_updates(recorder):
    old = PartitionState(0, [1, 2], [1, 2], 1, 4)
    new = PartitionState(0, [1, 2], [2], 2, 5)
    metrics.partition_change("orders", 0, old, new)
    metrics.group_rebalanced("g", 2)
    metrics.group_rebalanced("g", 0)  # nothing to count
    metrics.group_lag("g", "orders", 0, 0)
    assert recorder.updates == [
        ("isr_shrinks", 1, {"topic": "orders", "partition": "0"}),
        ("leader_elections", 1, {"topic": "orders", "partition": "0", "kind": "clean"}),
        ("group_rebalances", 2, {"group": "g"}),
        ("consumer_lag", 0, {"group": "g", "topic": "orders", "partition": "0"}),
    ]


def test_metrics_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(metrics, "_registry", None)
    monkeypatch.setenv(metrics.ENV_SWITCH, "0")
    m = metrics.PartitionMetrics("orders", 0, 1)
    m.produced(10, 1000, 1, 1.0)  # no Ray, no error
    m.log_gauges(1, 1)
    assert isinstance(metrics.registry(), metrics._Ignored)


def test_a_hosts_replicas_log_with_their_own_prefixes_under_the_hosts_label(caplog, monkeypatch):
    """A host's process carries many replicas: each replica's lines keep its own prefix
    (logging one must never fail because the process label claimed the record first), and
    the layers below get the host's."""
    previous = logging.getLogRecordFactory()
    monkeypatch.setattr(logs, "_process_prefix", None)
    host = "[ReplicaHost slot 3 broker 1]"
    replicas = [logs.actor_logger("rafka.actors.replica_follower", "PartitionReplica",
                                  topic="t", partition=p, broker=1) for p in (0, 7)]  # fmt: skip
    try:
        logs.label_process_logs(host)
        with caplog.at_level(logging.INFO):
            replicas[0].warning("diverged after epoch %d; truncating", 4)
            replicas[1].error("could not write")
            logging.getLogger("rafka.storage.log").warning("recovered")
    finally:
        logging.setLogRecordFactory(previous)
    assert [r.getMessage() for r in caplog.records] == [
        "[PartitionReplica t-0 broker 1] diverged after epoch 4; truncating",
        "[PartitionReplica t-7 broker 1] could not write", f"{host} recovered",
    ]  # fmt: skip
    assert caplog.records[0].rafka_actor == "[PartitionReplica t-0 broker 1]"
