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
from rafka.errors import NotLeaderOrFollower, RafkaError, error_class

#: Records per block unless asked otherwise (about 130 MB of 100-byte records in Arrow).
DEFAULT_RECORDS_PER_BLOCK = 1_000_000
#: How long a snapshot keeps retrying a partition whose leader moves or restarts.
RETRY_FOR_S = 30.0


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
    """Each partition's log start and high watermark, from its leader. Without transactions
    the last stable offset is the high watermark."""
    described = _with_retries(lambda: _describe_leaders(cluster, topic), f"offsets of {topic}")
    return {
        d["partition"]: PartitionBounds(
            d["log_start_offset"], d["high_watermark"], d["high_watermark"]
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
    return snapshot_ranges(cluster, topic, ranges, records_per_block, min_blocks)


def snapshot_ranges(
    cluster,
    topic: str,
    ranges: dict[int, tuple[int, int]],
    records_per_block: int = DEFAULT_RECORDS_PER_BLOCK,
    min_blocks: int = 1,
) -> TopicSnapshot:
    """The blocks of the given [start, end) ranges, which must be readable (committed)."""
    pieces = split_ranges(ranges, records_per_block, min_blocks)
    snapshot = TopicSnapshot(topic, dict(ranges))
    snapshot.blocks = _with_retries(lambda: _export(cluster, topic, pieces), f"blocks of {topic}")
    return snapshot


def _export(cluster, topic: str, pieces: list[tuple[int, int, int]]) -> list[Block]:
    gateway = cluster.gateway
    meta = cluster.metadata.topic(topic)
    calls = []
    for partition, start, end in pieces:
        leader = meta.partitions[partition].leader
        replica = cluster.metadata.replica(meta, partition)
        calls.append((partition, start, end, leader, gateway.send(replica, "export_block",
                                                                   start, end)))  # fmt: skip
    answers = gateway.get([c[-1] for c in calls], RETRY_FOR_S)
    blocks = []
    for (partition, start, end, leader, _ref), answer in zip(calls, answers):
        errno, message, refs, rows = answer
        if errno:
            cluster.metadata.invalidate(topic)
            raise error_class(errno)(message)
        blocks.append(Block(partition, start, end, rows, leader, refs[0]))
    return blocks


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
