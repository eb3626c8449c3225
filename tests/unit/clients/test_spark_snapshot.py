"""Making a snapshot's blocks without Ray: a fake gateway whose replicas answer
``export_block`` on a fake clock (each replica works on its blocks one after another, each
taking ``cost_s``), and whose leaders move when the test says. Covers retries after a leader
change and each block's own time budget."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from rafka.clients import topic_snapshot
from rafka.clients.topic_snapshot import snapshot_ranges
from rafka.errors import (
    BrokerNotAvailable,
    InvalidRecord,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    RafkaError,
    RequestTimedOut,
)

TOPIC = "clicks"


class FakeTime:
    """Stands in for the ``time`` module: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class Replica:
    """One broker's replica of one partition: log start, and a high watermark that may
    reach ``caught_up`` only at ``catches_up_at`` (a new leader behind the old one's)."""

    def __init__(self, partition: int, broker: int, log_start: int, hw: int) -> None:
        self.partition, self.broker = partition, broker
        self.log_start, self.hw = log_start, hw
        self.catches_up_at: float | None = None
        self.caught_up = hw
        self.leader = True
        self.busy_until = 0.0

    def high_watermark(self, now: float) -> int:
        if self.catches_up_at is not None and now >= self.catches_up_at:
            return self.caught_up
        return self.hw


class FakeGateway:
    def __init__(self, clock: FakeTime, cost_s: float) -> None:
        self.clock = clock
        self.cost_s = cost_s
        self.replicas: dict[tuple[int, int], Replica] = {}
        self.leaders: dict[int, int] = {}
        self.pending: dict[int, tuple[float, tuple]] = {}  # ref -> (ready at, answer)
        self.exports: list[tuple[int, int, int, int]] = []  # (broker, partition, start, end)
        self.refs = itertools.count()
        self.errors: dict[tuple[int, int], list[RafkaError]] = {}  # raised instead of answers

    def add(self, partition: int, broker: int, log_start: int, hw: int) -> Replica:
        replica = self.replicas[(partition, broker)] = Replica(partition, broker, log_start, hw)
        self.leaders.setdefault(partition, broker)
        return replica

    # -- the calls a snapshot makes --------------------------------------------------------

    def send(self, handle: Replica, method: str, *args) -> int:
        assert method == "export_block"
        start, end, _committed_only = args
        now = self.clock.now
        handle.busy_until = max(now, handle.busy_until) + self.cost_s
        ready = handle.busy_until
        self.exports.append((handle.broker, handle.partition, start, end))
        hw = handle.high_watermark(ready)
        if not handle.leader:
            answer = (NotLeaderOrFollower.errno, "not the leader", [], 0)
        elif not handle.log_start <= start <= end <= hw:
            answer = (OffsetOutOfRange.errno, f"[{start}, {end}) outside [{handle.log_start}, "
                      f"{hw})", [], 0)  # fmt: skip
        else:
            answer = (0, "", [("block", handle.partition, start, end)], end - start)
        ref = next(self.refs)
        self.pending[ref] = (ready, answer)
        return ref

    def describe(self, handle: Replica) -> int:
        ref = next(self.refs)
        now = self.clock.now
        self.pending[ref] = (now, {
            "partition": handle.partition, "role": "leader" if handle.leader else "follower",
            "log_start_offset": handle.log_start, "high_watermark": handle.high_watermark(now),
        })  # fmt: skip
        return ref

    def wait(self, refs: list, num_returns: int = 1, timeout_s: float | None = None):
        assert refs and num_returns == 1
        first = min(self.pending[r][0] for r in refs)
        limit = self.clock.now + (timeout_s if timeout_s is not None else 1e9)
        if first > limit:
            self.clock.now = limit
            return [], list(refs)
        self.clock.now = max(self.clock.now, first)
        ready = [r for r in refs if self.pending[r][0] <= self.clock.now]
        return ready, [r for r in refs if r not in ready]

    def get(self, refs, timeout_s: float | None = None):
        many = isinstance(refs, list)
        refs = refs if many else [refs]
        last = max(self.pending[r][0] for r in refs)
        limit = self.clock.now + (timeout_s if timeout_s is not None else 1e9)
        if last > limit:
            self.clock.now = limit
            raise RequestTimedOut("a partition replica did not answer in time")
        self.clock.now = max(self.clock.now, last)
        answers = [self.pending[r][1] for r in refs]
        return answers if many else answers[0]


class FakeMetadata:
    def __init__(self, gateway: FakeGateway) -> None:
        self.gateway = gateway
        self.invalidations = 0

    def topic(self, name: str):
        partitions = [SimpleNamespace(leader=self.gateway.leaders[p])
                      for p in sorted(self.gateway.leaders)]  # fmt: skip
        return SimpleNamespace(name=name, partitions=partitions)

    def replica(self, meta, partition: int) -> Replica:
        return self.gateway.replicas[(partition, meta.partitions[partition].leader)]

    def invalidate(self, name: str) -> None:
        self.invalidations += 1


@pytest.fixture
def clock(monkeypatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(topic_snapshot, "time", fake)
    return fake


def fake_cluster(clock: FakeTime, cost_s: float = 0.1) -> SimpleNamespace:
    gateway = FakeGateway(clock, cost_s)
    return SimpleNamespace(gateway=gateway, metadata=FakeMetadata(gateway))


def move_leader(cluster, partition: int, to: int) -> None:
    gateway = cluster.gateway
    gateway.replicas[(partition, gateway.leaders[partition])].leader = False
    gateway.leaders[partition] = to


def test_a_read_retries_while_a_new_leaders_high_watermark_is_below_the_planned_end(clock):
    """After a leader change the new leader's high watermark can sit below the old one's
    for a moment: the block is asked again (with backoff) until the new leader has it."""
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=0, hw=100)
    lagging = cluster.gateway.add(0, broker=2, log_start=0, hw=60)
    lagging.catches_up_at, lagging.caught_up = clock.now + 2.0, 100
    move_leader(cluster, 0, to=2)
    snapshot = snapshot_ranges(cluster, TOPIC, {0: (0, 100)}, records_per_block=50)
    assert [(b.partition, b.start, b.end, b.rows, b.broker) for b in snapshot.blocks] == [
        (0, 0, 50, 50, 2), (0, 50, 100, 50, 2)
    ]
    assert snapshot.rows == 100
    # The block that was readable was not asked for again.
    assert cluster.gateway.exports.count((2, 0, 0, 50)) == 1


def test_a_read_after_the_leader_moved_asks_the_new_leader(clock):
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=0, hw=10)
    cluster.gateway.add(0, broker=3, log_start=0, hw=10)
    cluster.gateway.replicas[(0, 1)].leader = False  # the metadata still names broker 1

    real_invalidate = cluster.metadata.invalidate

    def invalidate(name):  # the refreshed metadata names the new leader
        real_invalidate(name)
        cluster.gateway.leaders[0] = 3

    cluster.metadata.invalidate = invalidate
    snapshot = snapshot_ranges(cluster, TOPIC, {0: (0, 10)})
    assert [(b.broker, b.rows) for b in snapshot.blocks] == [(3, 10)]
    assert cluster.metadata.invalidations == 1


def test_records_deleted_below_a_planned_start_fail_the_read_at_once(clock):
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=40, hw=100)
    began = clock.now
    with pytest.raises(OffsetOutOfRange, match="log start 40.*deleted"):
        snapshot_ranges(cluster, TOPIC, {0: (0, 100)})
    assert clock.now - began < 1.0  # no retrying what cannot come back


def test_a_high_watermark_that_never_reaches_the_planned_end_fails_after_bounded_retries(clock):
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=0, hw=60)
    began = clock.now
    with pytest.raises(OffsetOutOfRange, match=r"\[0, 100\) outside"):
        snapshot_ranges(cluster, TOPIC, {0: (0, 100)})
    attempts = len(cluster.gateway.exports)
    assert 3 <= attempts <= 100
    assert clock.now - began <= topic_snapshot.RETRY_FOR_S + 5


def test_each_block_has_its_own_time_budget_so_a_long_partition_is_read(clock):
    """Forty blocks of one partition taking 5 s each: 200 s in all, far past one block's
    budget, and each block finishes within its own."""
    cluster = fake_cluster(clock, cost_s=5.0)
    cluster.gateway.add(0, broker=1, log_start=0, hw=40_000)
    cluster.gateway.add(1, broker=2, log_start=0, hw=20_000)
    ranges = {0: (0, 40_000), 1: (0, 20_000)}
    snapshot = snapshot_ranges(cluster, TOPIC, ranges, records_per_block=1_000)
    assert snapshot.rows == 60_000 and len(snapshot.blocks) == 60
    assert [(b.partition, b.start) for b in snapshot.blocks] == sorted(
        [(0, s) for s in range(0, 40_000, 1_000)] + [(1, s) for s in range(0, 20_000, 1_000)]
    )
    assert len(cluster.gateway.exports) == 60  # nothing timed out and was asked again


def test_a_block_that_outlives_its_budget_is_asked_again_then_fails_timed_out(clock):
    cluster = fake_cluster(clock, cost_s=10_000.0)
    cluster.gateway.add(0, broker=1, log_start=0, hw=10)
    with pytest.raises(RequestTimedOut, match=r"block \[0, 10\) of clicks-0 within 30 s"):
        snapshot_ranges(cluster, TOPIC, {0: (0, 10)})
    assert len(cluster.gateway.exports) >= 2


def test_an_error_that_is_not_retriable_fails_the_read_at_once(clock, monkeypatch):
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=0, hw=10)
    real_send = cluster.gateway.send

    def corrupt(handle, method, *args):
        ref = real_send(handle, method, *args)
        ready, _answer = cluster.gateway.pending[ref]
        cluster.gateway.pending[ref] = (ready, (InvalidRecord.errno, "bad record", [], 0))
        return ref

    monkeypatch.setattr(cluster.gateway, "send", corrupt)
    with pytest.raises(InvalidRecord, match="bad record"):
        snapshot_ranges(cluster, TOPIC, {0: (0, 10)})
    assert len(cluster.gateway.exports) == 1


def test_an_unreachable_replica_is_retried(clock, monkeypatch):
    cluster = fake_cluster(clock)
    cluster.gateway.add(0, broker=1, log_start=0, hw=10)
    real_replica = cluster.metadata.replica
    failures = [BrokerNotAvailable("replica actor is not running")] * 2

    def replica(meta, partition):
        if failures:
            raise failures.pop()
        return real_replica(meta, partition)

    monkeypatch.setattr(cluster.metadata, "replica", replica)
    assert snapshot_ranges(cluster, TOPIC, {0: (0, 10)}).rows == 10
