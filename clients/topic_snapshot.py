"""A consistent snapshot of a topic as Arrow blocks in Ray's object store, made where the
data lies: the first half of a Spark read (``rafka.clients.spark`` turns the blocks into a
DataFrame), usable on its own by any Ray program.

The end of every partition is fixed once, from its leader's high watermark, before any block
is made; each block is then one range of one partition, made and owned by a replica of that
partition (``PartitionReplica.export_block``), so it sits on that replica's node. The driver
only ever holds references: no record passes through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rafka.clients.spark_offsets import (
    PartitionBounds,
    check_isolation_level,
    parse_offsets,
    resolve_range,
    split_ranges,
)
from rafka.errors import (
    NotLeaderOrFollower,
    OffsetOutOfRange,
    RafkaError,
    RequestTimedOut,
    error_class,
)

#: Records per block unless asked otherwise (about 130 MB of 100-byte records in Arrow).
DEFAULT_RECORDS_PER_BLOCK = 1_000_000
#: How long a snapshot keeps retrying a partition's offsets, or one block, after the first
#: failure (a leader that moves or restarts, a new leader's high watermark still behind).
RETRY_FOR_S = 30.0
#: First and largest pause between attempts (doubling in between), as Kafka's
#: retry.backoff.ms and retry.backoff.max.ms.
RETRY_BACKOFF_S = 0.1
MAX_RETRY_BACKOFF_S = 1.0
#: One attempt at one block may take this long, plus a second for every
#: MIN_EXPORT_RECORDS_PER_S records in it (well below what a replica reads and encodes).
BLOCK_BUDGET_S = 30.0
MIN_EXPORT_RECORDS_PER_S = 50_000
#: Blocks asked of one partition's leader at once. The replica works on two at a time
#: (actors/block_export.RANGES_IN_FLIGHT); more would only queue there, eating their budget.
BLOCKS_IN_FLIGHT_PER_PARTITION = 2


@dataclass(frozen=True)
class Block:
    """One range of one partition: ``ref`` is the object ref of its Arrow IPC stream bytes
    (KAFKA_SOURCE_SCHEMA), ``broker`` the broker whose replica made and owns it."""

    partition: int
    start: int
    end: int
    rows: int
    broker: int
    ref: Any


@dataclass
class TopicSnapshot:
    """The blocks of one read, in (partition, offset) order. A block may hold fewer rows than
    its range has offsets (compaction removes records; transaction markers are no records).
    Holding the snapshot keeps the blocks alive; ``release`` lets Ray free them."""

    topic: str
    ranges: dict[int, tuple[int, int]]
    blocks: list[Block] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)

    @property
    def refs(self) -> list:
        return [b.ref for b in self.blocks]

    def release(self) -> None:
        self.blocks = []


def partition_bounds(cluster, topic: str) -> dict[int, PartitionBounds]:
    """Each partition's log start, high watermark and last stable offset, from its leader
    (a leader that does not report the last stable offset has no transactions: it is the
    high watermark)."""
    described = _with_retries(lambda: _describe_leaders(cluster, topic), f"offsets of {topic}")
    return {
        d["partition"]: PartitionBounds(
            d["log_start_offset"], d["high_watermark"],
            d.get("last_stable_offset", d["high_watermark"]),
        )
        for d in described
    }


def _describe_leaders(cluster, topic: str) -> list[dict]:
    described = cluster.admin().partition_offsets(topic)
    for d in described:
        if d["role"] != "leader":
            cluster.metadata.invalidate(topic)
            raise NotLeaderOrFollower(f"{topic}-{d['partition']}'s leader moved; retrying")
    return described


def snapshot_topic(
    cluster,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    isolation_level: str = "read_committed",
    records_per_block: int = DEFAULT_RECORDS_PER_BLOCK,
    min_blocks: int = 1,
) -> TopicSnapshot:
    """Fix each partition's range (see ``spark_offsets.resolve_range``) and have the
    partitions' leaders make its blocks, all in parallel. Raises the typed error of a bad
    offset before any block is made."""
    committed_only = check_isolation_level(isolation_level) == "read_committed"
    starting = parse_offsets(starting_offsets, topic, "starting_offsets")
    ending = parse_offsets(ending_offsets, topic, "ending_offsets")
    bounds = partition_bounds(cluster, topic)
    ranges = resolve_range(topic, bounds, starting, ending, committed_only)
    return snapshot_ranges(cluster, topic, ranges, records_per_block, min_blocks,
                           committed_only)  # fmt: skip


def snapshot_ranges(
    cluster,
    topic: str,
    ranges: dict[int, tuple[int, int]],
    records_per_block: int = DEFAULT_RECORDS_PER_BLOCK,
    min_blocks: int = 1,
    committed_only: bool = False,
) -> TopicSnapshot:
    """The blocks of the given [start, end) ranges, which must be readable (committed; with
    ``committed_only``, below the last stable offset, and the records of aborted
    transactions are left out)."""
    pieces = split_ranges(ranges, records_per_block, min_blocks)
    snapshot = TopicSnapshot(topic, dict(ranges))
    snapshot.blocks = _BlockExport(cluster, topic, pieces, committed_only).run()
    return snapshot


def block_budget_s(records: int) -> float:
    """Seconds one attempt at a block of ``records`` records may take once sent."""
    return BLOCK_BUDGET_S + records / MIN_EXPORT_RECORDS_PER_S


@dataclass
class _Job:
    """One block being made: its range, its retry state, and the attempt in flight (its
    object ref, the broker asked, and when the attempt times out)."""

    index: int
    partition: int
    start: int
    end: int
    first_failure: float | None = None
    not_before: float = 0.0
    backoff: float = RETRY_BACKOFF_S
    ref: Any = None
    broker: int = -1
    deadline: float = 0.0


class _BlockExport:
    """Asks each partition's leader for its blocks, at most BLOCKS_IN_FLIGHT_PER_PARTITION
    at a time, so a block's budget (``block_budget_s``) runs while its replica works on it
    rather than while it queues behind the partition's other blocks. A block whose attempt
    fails with a retriable error, or times out, is asked again (the leader looked up anew)
    with backoff, for up to RETRY_FOR_S after its first failure; blocks already made are
    kept. An OffsetOutOfRange is retried too (a new leader's high watermark may lag the
    planned end for a moment), unless the range starts below the log start: those records
    are gone."""

    def __init__(self, cluster, topic: str, pieces: list[tuple[int, int, int]],
                 committed_only: bool = False) -> None:  # fmt: skip
        self.committed_only = committed_only
        self.cluster = cluster
        self.gateway = cluster.gateway
        self.topic = topic
        self.jobs = [_Job(i, p, start, end) for i, (p, start, end) in enumerate(pieces)]
        self.blocks: dict[int, Block] = {}

    def run(self) -> list[Block]:
        waiting = list(self.jobs)  # in (partition, offset) order
        flying: dict[Any, _Job] = {}
        while waiting or flying:
            now = time.monotonic()
            busy = {}
            for job in flying.values():
                busy[job.partition] = busy.get(job.partition, 0) + 1
            for job in list(waiting):
                full = busy.get(job.partition, 0) >= BLOCKS_IN_FLIGHT_PER_PARTITION
                if job.not_before > now or full:
                    continue
                waiting.remove(job)
                try:
                    self._send(job, now)
                except RafkaError as e:
                    self._failed(job, e, waiting)
                    continue
                flying[job.ref] = job
                busy[job.partition] = busy.get(job.partition, 0) + 1
            if not flying:
                if waiting:
                    time.sleep(max(0.0, min(j.not_before for j in waiting) - time.monotonic()))
                continue
            # Wake for the first deadline, or the first backoff that ends for a partition
            # with room; a block waiting for room waits for an answer, which wakes us anyway.
            wake = min(j.deadline for j in flying.values())
            for job in waiting:
                if busy.get(job.partition, 0) < BLOCKS_IN_FLIGHT_PER_PARTITION:
                    wake = min(wake, job.not_before)
            ready, _rest = self.gateway.wait(
                list(flying), num_returns=1, timeout_s=max(0.0, wake - time.monotonic())
            )
            for ref in ready:
                job = flying.pop(ref)
                try:
                    self._answered(job, self.gateway.get(ref))
                except RafkaError as e:
                    self._failed(job, e, waiting)
            now = time.monotonic()
            for ref, job in list(flying.items()):
                if now >= job.deadline:
                    del flying[ref]
                    self._failed(job, RequestTimedOut(
                        f"broker {job.broker} did not make block [{job.start}, {job.end}) of "
                        f"{self.topic}-{job.partition} within "
                        f"{block_budget_s(job.end - job.start):.0f} s; read again, or in smaller "
                        "blocks (max_records_per_partition)"
                    ), waiting)  # fmt: skip
        return [self.blocks[job.index] for job in self.jobs]

    def _send(self, job: _Job, now: float) -> None:
        meta = self.cluster.metadata.topic(self.topic)
        replica = self.cluster.metadata.replica(meta, job.partition)
        job.broker = meta.partitions[job.partition].leader
        job.ref = self.gateway.send(replica, "export_block", job.start, job.end,
                                    self.committed_only)  # fmt: skip
        job.deadline = now + block_budget_s(job.end - job.start)

    def _answered(self, job: _Job, answer: tuple) -> None:
        errno, message, refs, rows = answer
        if errno:
            raise error_class(errno)(message)
        self.blocks[job.index] = Block(job.partition, job.start, job.end, rows, job.broker,
                                       refs[0])  # fmt: skip

    def _failed(self, job: _Job, error: RafkaError, waiting: list[_Job]) -> None:
        """Queue ``job`` again after a backoff, or raise ``error`` when it may not be."""
        self.cluster.metadata.invalidate(self.topic)
        if isinstance(error, OffsetOutOfRange):
            self._check_not_deleted(job)
        elif not error.retriable:
            raise error
        now = time.monotonic()
        if job.first_failure is None:
            job.first_failure = now
        if now + job.backoff > job.first_failure + RETRY_FOR_S:
            raise error
        job.not_before = now + job.backoff
        job.backoff = min(job.backoff * 2, MAX_RETRY_BACKOFF_S)
        job.ref = None
        waiting.append(job)
        waiting.sort(key=lambda j: j.index)

    def _check_not_deleted(self, job: _Job) -> None:
        """OffsetOutOfRange for a range below the leader's log start (deleted by retention
        or deleteRecords since the read was planned): nothing to wait for."""
        try:
            meta = self.cluster.metadata.topic(self.topic)
            replica = self.cluster.metadata.replica(meta, job.partition)
            described = self.gateway.get(self.gateway.describe(replica), BLOCK_BUDGET_S)
        except RafkaError:
            return  # the retry finds out
        if job.start < described["log_start_offset"]:
            raise OffsetOutOfRange(
                f"block [{job.start}, {job.end}) of {self.topic}-{job.partition} starts below "
                f"its log start {described['log_start_offset']}: those records were deleted "
                "after the read was planned; read again from 'earliest' or a later offset"
            )


def _with_retries(attempt, what: str):
    deadline = time.monotonic() + RETRY_FOR_S
    backoff = 0.05
    while True:
        try:
            return attempt()
        except RafkaError as e:
            if not e.retriable or time.monotonic() + backoff > deadline:
                raise
        time.sleep(backoff)
        backoff = min(backoff * 2, 1.0)
