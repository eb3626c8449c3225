"""rafka's metrics, through Ray's metrics API, so Ray's Prometheus export serves them.

Every metric is defined here, once (``DEFINITIONS``: name, type, description with its unit,
tag keys). The actors call the small functions and the ``PartitionMetrics`` class below;
nothing else touches ``ray.util.metrics``. Ray exports each process's metrics through the
metrics agent of its node: ``http://<node ip>:<metrics export port>/metrics`` (the port is
``ray._private.worker._global_node.metrics_export_port`` in a driver, or ``--metrics-export-port``
of ``ray start``). Ray prefixes the names with ``ray_``, counters get ``_total`` (and, for
Ray's bug compatibility, a gauge copy without it unless ``RAY_EXPORT_COUNTER_AS_GAUGE=0``),
and it adds labels of its own (NodeAddress, WorkerId, SessionName, ...): ``rafka_records_in``
is scraped as ``ray_rafka_records_in_total{topic="orders",partition="3",WorkerId="..."}``. A
restarted actor is a new worker, so sum over WorkerId:
``sum by (topic) (rate(ray_rafka_records_in_total[1m]))``.

Costs: one update per produce or fetch call and counter, never per record (records out are
counted from the batch headers); the log size on a one-second timer and only when the log
changed; the consumer lag on a timer in the group coordinators. A Ray metric update costs
about 1 us.

``RAFKA_METRICS=0`` in the actors' environment turns every update into a no-op (for
benchmarks that want to measure without them). The metric objects are created lazily, once
per process, on first use; the pure helpers (tags, ISR and election classification, lag,
record counting) import no Ray and are unit-tested without it.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Any, Callable, Collection, Iterable

from rafka.cluster.load_rates import monotonic_ms
from rafka.cluster.metadata import NO_LEADER
from rafka.storage import record_batch as rb

log = logging.getLogger(__name__)

#: Latency histogram bucket bounds, ms: 0.1 ms to 10 s, about three per decade.
LATENCY_BOUNDARIES_MS = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
    1000.0, 2500.0, 5000.0, 10000.0,
]  # fmt: skip

#: Who a partition's records went out to (the ``kind`` tag of the out metrics).
CONSUMER = "consumer"  # client fetches (consumers, the group coordinator loading its state)
REPLICATION = "replication"  # followers' fetches, answered by the leader
EXPORT = "export"  # Spark reads: ranges exported as Arrow blocks
OUT_KINDS = (CONSUMER, REPLICATION, EXPORT)

#: Leader election kinds (the ``kind`` tag of rafka_leader_elections).
CLEAN = "clean"  # a new leader (or a new epoch) from the ISR
UNCLEAN = "unclean"  # a leader from outside the ISR (unclean.leader.election.enable)
PREFERRED = "preferred"  # leadership moved back to the preferred replica

#: Producer acks values as tag values.
ACKS_NAMES = {0: "0", 1: "1", -1: "all"}

#: How often a replica whose log changed refreshes its log size and segment count, s.
LOG_GAUGES_INTERVAL_S = 1.0

ENV_SWITCH = "RAFKA_METRICS"


# -- definitions --------------------------------------------------------------------------------

#: name -> (type, description with its unit, tag keys); the README's metrics table lists them.
DEFINITIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "rafka_records_in": (
        "counter", "Records appended by partition leaders from producers (records).",
        ("topic", "partition"),
    ),
    "rafka_bytes_in": (
        "counter", "Record-batch bytes appended by partition leaders from producers (bytes).",
        ("topic", "partition"),
    ),
    "rafka_records_out": (
        "counter", "Records sent out of a partition, by kind: consumer fetches, replication "
        "(fetches of followers, answered by the leader) or export (Spark blocks) (records).",
        ("topic", "partition", "kind"),
    ),
    "rafka_bytes_out": (
        "counter", "Record-batch bytes sent out of a partition, by kind: consumer, "
        "replication or export (bytes).",
        ("topic", "partition", "kind"),
    ),
    "rafka_produce_latency_ms": (
        "histogram", "Time a leader takes to answer a produce call, from its start to the "
        "answer, including waiting for acks=all (ms).",
        ("topic", "acks"),
    ),
    "rafka_fetch_latency_ms": (
        "histogram", "Time a replica takes to answer a fetch, including the long-poll wait "
        "for data (max_wait_ms), or to export a Spark block, by kind (ms).",
        ("topic", "kind"),
    ),
    "rafka_log_size_bytes": (
        "gauge", "Size of a replica's log on disk, all segments (bytes).",
        ("topic", "partition", "broker"),
    ),
    "rafka_log_segments": (
        "gauge", "Segments in a replica's log (segments).",
        ("topic", "partition", "broker"),
    ),
    "rafka_under_replicated_partitions": (
        "gauge", "Partitions of a topic with a replica out of the ISR, as the controller sees "
        "them (partitions).",
        ("topic",),
    ),
    "rafka_offline_partitions": (
        "gauge", "Partitions of a topic without a live leader, as the controller sees them "
        "(partitions).",
        ("topic",),
    ),
    "rafka_isr_shrinks": (
        "counter", "ISR changes accepted by the controller that removed a replica still "
        "assigned to the partition (changes).",
        ("topic", "partition"),
    ),
    "rafka_isr_expands": (
        "counter", "ISR changes accepted by the controller that added a replica (changes).",
        ("topic", "partition"),
    ),
    "rafka_leader_elections": (
        "counter", "Leader elections (a new leader or leader epoch), by kind: clean, unclean "
        "or preferred (elections).",
        ("topic", "partition", "kind"),
    ),
    "rafka_consumer_lag": (
        "gauge", "A consumer group's lag on a partition: high watermark minus committed "
        "offset, refreshed every few seconds by its group coordinator (records).",
        ("group", "topic", "partition"),
    ),
    "rafka_group_rebalances": (
        "counter", "Rebalances a consumer group completed (new generations) (rebalances).",
        ("group",),
    ),
}


class _Registry:
    """The Ray metric objects of this process, one per definition, as attributes named
    after the metric without its ``rafka_`` prefix."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        for name, (kind, description, tag_keys) in DEFINITIONS.items():
            if kind == "counter":
                metric: Any = Counter(name, description, tag_keys)
            elif kind == "gauge":
                metric = Gauge(name, description, tag_keys)
            else:
                metric = Histogram(name, description, LATENCY_BOUNDARIES_MS, tag_keys)
            setattr(self, name.removeprefix("rafka_"), metric)


class _Ignored:
    """Stands in for every metric when metrics are off: each update is a no-op."""

    def inc(self, value: float = 1.0, tags: dict | None = None) -> None:
        pass

    set = observe = inc

    def __getattr__(self, name: str) -> "_Ignored":
        return self


_registry: Any = None


def registry() -> Any:
    """This process's metrics, created on first use; no-ops with ``RAFKA_METRICS=0`` or when
    Ray's metrics cannot be created here."""
    global _registry
    if _registry is None:
        if os.environ.get(ENV_SWITCH, "1") == "0":
            _registry = _Ignored()
        else:
            try:
                _registry = _Registry()
            except Exception as e:  # metrics must never stop an actor from serving
                log.warning("rafka metrics are off in this process: %r", e)
                _registry = _Ignored()
    return _registry


# -- pure helpers -------------------------------------------------------------------------------


def partition_tags(topic: str, partition: int, **more: Any) -> dict[str, str]:
    """Tags naming one partition (Ray wants every tag value as a str)."""
    return {"topic": topic, "partition": str(partition), **{k: str(v) for k, v in more.items()}}


_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_AT = rb.HEADER_SIZE - _RECORD_COUNT.size  # the header's last field


def batch_records(data: Any) -> int:
    """Records in a buffer of whole record batches, read from the batch headers only (one
    struct read per batch, none per record). A truncated tail is not counted."""
    view = memoryview(data).cast("B")
    end = len(view)
    pos = 0
    count = 0
    while pos + rb.HEADER_SIZE <= end:
        _, length = rb.LENGTH_PREFIX.unpack_from(view, pos)
        if length <= 0:  # not a batch (the log only holds checked ones): stop, never loop
            break
        count += _RECORD_COUNT.unpack_from(view, pos + _RECORD_COUNT_AT)[0]
        pos += rb.LENGTH_PREFIX_SIZE + length
    return count


def elapsed_ms(started: float, now: float) -> float:
    """Milliseconds between two ``time.perf_counter()`` readings."""
    return (now - started) * 1000.0


def isr_change(
    old_isr: Collection[int], new_isr: Collection[int], new_replicas: Collection[int]
) -> tuple[bool, bool]:
    """(shrank, expanded) for one accepted partition change. A replica that left the ISR
    because a reassignment removed it from the partition is no shrink (it did not fall
    behind); one that joined is an expansion."""
    shrank = any(b not in new_isr and b in new_replicas for b in old_isr)
    expanded = any(b not in old_isr for b in new_isr)
    return shrank, expanded


def election_kind(
    old_leader: int,
    old_leader_epoch: int,
    old_isr: Collection[int],
    new_leader: int,
    new_leader_epoch: int,
    preferred: bool = False,
) -> str | None:
    """The kind of election a partition change was, or None when it was none (the leader
    epoch did not change, or the partition was left without a leader). ``preferred`` says
    the change was a preferred-leader election; a leader chosen from outside the ISR is
    unclean."""
    if new_leader_epoch == old_leader_epoch or new_leader == NO_LEADER:
        return None
    if new_leader not in old_isr:
        return UNCLEAN
    if preferred and new_leader != old_leader:
        return PREFERRED
    return CLEAN


def partition_health(partitions: Iterable[Any], is_live: Callable[[int], bool]) -> tuple[int, int]:
    """(under-replicated, offline) counts for partition states (``PartitionState``-like:
    replicas, removing, isr, leader). Under-replicated: a replica the partition is meant to
    keep (a reassignment's target) is out of the ISR. Offline: no leader, or its broker is
    not live."""
    under = offline = 0
    for p in partitions:
        removing = p.removing
        if any(b not in p.isr for b in p.replicas if b not in removing):
            under += 1
        if p.leader == NO_LEADER or not is_live(p.leader):
            offline += 1
    return under, offline


def consumer_lag(high_watermark: int, committed_offset: int) -> int:
    """Records a group has yet to commit on a partition (never negative: a commit may run
    ahead of a high watermark read a moment earlier)."""
    return max(0, high_watermark - committed_offset)


# -- what the actors call -----------------------------------------------------------------------


class PartitionMetrics:
    """The metrics of one partition replica, with its tag dicts built once (a produce or
    fetch call then costs a handful of metric updates, nothing per record)."""

    def __init__(self, topic: str, partition: int, broker_id: int) -> None:
        self.metrics = registry()
        # Bytes sent to consumers since ``counters_since_ms`` (this node's monotonic clock,
        # when the replica opened; its log counts the bytes appended from about then), kept
        # whether or not the Ray metrics are on: the broker's load reports read them.
        self.counters_since_ms = monotonic_ms()
        self.bytes_to_consumers = 0
        self._partition = partition_tags(topic, partition)
        self._replica = partition_tags(topic, partition, broker=broker_id)
        self._out = {kind: {**self._partition, "kind": kind} for kind in OUT_KINDS}
        self._fetch_latency = {kind: {"topic": topic, "kind": kind} for kind in OUT_KINDS}
        self._produce_latency = {
            acks: {"topic": topic, "acks": name} for acks, name in ACKS_NAMES.items()
        }

    def produced(self, records: int, size: int, acks: int, latency_ms: float) -> None:
        """A produce call answered: ``records`` and ``size`` bytes appended (0 if none)."""
        m = self.metrics
        if records > 0:
            m.records_in.inc(records, self._partition)
            m.bytes_in.inc(size, self._partition)
        tags = self._produce_latency.get(acks) or {"topic": self._partition["topic"],
                                                   "acks": str(acks)}  # fmt: skip
        m.produce_latency_ms.observe(latency_ms, tags)

    def sent(self, kind: str, records: int, size: int, latency_ms: float | None) -> None:
        """Records sent out of the partition (a fetch answer, an export)."""
        m = self.metrics
        if kind == CONSUMER:
            self.bytes_to_consumers += size
        if size > 0:
            m.bytes_out.inc(size, self._out[kind])
        if records > 0:
            m.records_out.inc(records, self._out[kind])
        if latency_ms is not None:
            m.fetch_latency_ms.observe(latency_ms, self._fetch_latency[kind])

    def fetched(self, kind: str, data: Any, latency_ms: float) -> None:
        """A fetch answered with ``data`` (whole batches, possibly empty)."""
        size = len(data)
        self.sent(kind, batch_records(data) if size else 0, size, latency_ms)

    def log_gauges(self, size_bytes: int, segments: int) -> None:
        """The replica's log size (bytes) and segment count."""
        self.metrics.log_size_bytes.set(size_bytes, self._replica)
        self.metrics.log_segments.set(segments, self._replica)


def partition_change(
    topic: str, partition: int, old: Any, new: Any, preferred: bool = False
) -> None:
    """The controller accepted a change of one partition (``PartitionState``s): count its
    ISR shrink or expansion and its election, if any."""
    m = registry()
    tags = partition_tags(topic, partition)
    shrank, expanded = isr_change(old.isr, new.isr, new.replicas)
    if shrank:
        m.isr_shrinks.inc(1, tags)
    if expanded:
        m.isr_expands.inc(1, tags)
    kind = election_kind(old.leader, old.leader_epoch, old.isr, new.leader, new.leader_epoch,
                         preferred)  # fmt: skip
    if kind is not None:
        m.leader_elections.inc(1, {**tags, "kind": kind})


def topic_health(topic: str, under_replicated: int, offline: int) -> None:
    """The controller's count of a topic's under-replicated and offline partitions."""
    m = registry()
    tags = {"topic": topic}
    m.under_replicated_partitions.set(under_replicated, tags)
    m.offline_partitions.set(offline, tags)


def group_rebalanced(group_id: str, rebalances: int = 1) -> None:
    """A group completed ``rebalances`` rebalances (generations)."""
    if rebalances > 0:
        registry().group_rebalances.inc(rebalances, {"group": group_id})


def group_lag(group_id: str, topic: str, partition: int, lag: int) -> None:
    """A group's lag on a partition (records)."""
    registry().consumer_lag.set(lag, {"group": group_id, **partition_tags(topic, partition)})
