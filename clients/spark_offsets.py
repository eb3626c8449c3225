"""Offsets for Spark reads of a topic: parsing Spark's offset options, splitting a read into
blocks, and planning the micro-batches of a stream. Plain Python: no Ray, no Spark.

Offsets follow Spark's Kafka source: ``"earliest"``, ``"latest"``, or per partition, as a dict
(``{0: 42, 1: -2}``, ``{TopicPartition("t", 0): 42}``) or as Spark's JSON
(``'{"t": {"0": 42, "1": -2}}'``), where -2 means earliest and -1 latest. A range is
half-open: [start, end).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from rafka.errors import OffsetOutOfRange
from rafka.types import TopicPartition

EARLIEST = -2
LATEST = -1
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class PartitionBounds:
    """What a partition holds: [log_start, high_watermark) is readable; ``stable_end`` is
    where a read_committed reader stops (the last stable offset)."""

    log_start: int
    high_watermark: int
    stable_end: int


def check_isolation_level(level: str) -> str:
    if level not in ISOLATION_LEVELS:
        raise ValueError(
            f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, not {level!r}"
        )
    return level


def parse_offsets(spec: Any, topic: str, option: str) -> dict[int, int] | int:
    """``spec`` as EARLIEST/LATEST (one value for every partition) or {partition: offset}
    (offsets may be EARLIEST/LATEST). ``option`` names the argument in error messages."""
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            raise ValueError(
                f"{option}={spec!r} is neither 'earliest', 'latest' nor Spark's JSON form "
                f'(for example \'{{"{topic}": {{"0": 42, "1": -2}}}}\')'
            ) from None
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"{option} must be 'earliest', 'latest', a dict {{partition: offset}} or Spark's "
            f"JSON string, not {type(spec).__name__}"
        )
    if set(spec) and all(isinstance(k, str) for k in spec) and (
        any(isinstance(v, Mapping) for v in spec.values())
        or not any(k.lstrip("-").isdigit() for k in spec)
    ):
        # Spark's form, keyed by topic first (a topic's name may be all digits: its value
        # is then a mapping, where a partition's is an offset).
        unknown = sorted(set(spec) - {topic})
        if unknown:
            raise ValueError(f"{option} names topics {unknown}, but the read is of {topic!r}")
        spec = spec.get(topic, {})
        if not isinstance(spec, Mapping):
            raise TypeError(f"{option}[{topic!r}] must map partitions to offsets")
    out: dict[int, int] = {}
    for key, offset in spec.items():
        if isinstance(key, TopicPartition):
            if key.topic != topic:
                raise ValueError(f"{option} names {key}, but the read is of {topic!r}")
            partition = key.partition
        else:
            try:
                if isinstance(key, bool) or not isinstance(key, (numbers.Integral, str)):
                    raise TypeError  # 1.5 or True is no partition number, not partition 1
                partition = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"{option}: {key!r} is not a partition number") from None
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise ValueError(
                f"{option}: the offset of partition {partition} must be an int >= 0, or -2 "
                f"(earliest) or -1 (latest), not {offset!r}"
            )
        if partition < 0:
            raise ValueError(f"{option}: partition {partition} is negative")
        out[partition] = offset
    return out


def resolve_range(
    topic: str,
    bounds: Mapping[int, PartitionBounds],
    starting: dict[int, int] | int,
    ending: dict[int, int] | int,
    committed_only: bool,
) -> dict[int, tuple[int, int]]:
    """The [start, end) of each partition of a batch read. As in Spark, a read may not start
    at 'latest' nor end at 'earliest'; a partition not named in a per-partition dict reads
    from earliest / to latest. OffsetOutOfRange for offsets outside what a partition holds
    (records below the log start are gone: start from 'earliest' instead)."""
    if starting == LATEST:
        raise ValueError("starting_offsets='latest' reads nothing in a batch read; "
                         "use 'earliest' or offsets")  # fmt: skip
    if ending == EARLIEST:
        raise ValueError("ending_offsets='earliest' reads nothing; use 'latest' or offsets")
    for option, given in (("starting_offsets", starting), ("ending_offsets", ending)):
        if isinstance(given, dict):
            unknown = sorted(set(given) - set(bounds))
            if unknown:
                raise OffsetOutOfRange(
                    f"{option} names partitions {unknown} of {topic!r}, which has partitions "
                    f"0..{len(bounds) - 1}"
                )
    ranges = {}
    for partition, b in sorted(bounds.items()):
        last = b.stable_end if committed_only else b.high_watermark
        start = starting.get(partition, EARLIEST) if isinstance(starting, dict) else starting
        end = ending.get(partition, LATEST) if isinstance(ending, dict) else ending
        if start == LATEST:
            raise ValueError(f"starting offset -1 (latest) of partition {partition} reads "
                             "nothing in a batch read")  # fmt: skip
        if end == EARLIEST:
            raise ValueError(f"ending offset -2 (earliest) of partition {partition} reads "
                             "nothing")  # fmt: skip
        start = b.log_start if start == EARLIEST else start
        end = last if end == LATEST else end
        where = f"{topic}-{partition}"
        if start < b.log_start:
            raise OffsetOutOfRange(
                f"starting offset {start} of {where} is below its log start {b.log_start} "
                "(those records were deleted); start from 'earliest' or a later offset"
            )
        if end > last:
            raise OffsetOutOfRange(
                f"ending offset {end} of {where} is past what is readable ({last}); end at "
                "'latest' or an earlier offset"
            )
        if start > end:
            raise OffsetOutOfRange(
                f"starting offset {start} of {where} is after its ending offset {end}"
            )
        ranges[partition] = (start, end)
    return ranges


def split_ranges(
    ranges: Mapping[int, tuple[int, int]], max_records: int, min_blocks: int = 1
) -> list[tuple[int, int, int]]:
    """(partition, start, end) blocks covering ``ranges``: each at most ``max_records``
    records, and at least ``min_blocks`` in all when there are that many records (the
    largest ranges split first, as Spark's ``minPartitions``). Empty ranges give none."""
    if max_records < 1:
        raise ValueError(f"max_records_per_block must be >= 1, not {max_records}")
    if min_blocks < 1:
        raise ValueError(f"min_partitions must be >= 1, not {min_blocks}")
    sizes = {p: end - start for p, (start, end) in ranges.items() if end > start}
    total = sum(sizes.values())
    pieces = {p: -(-n // max_records) for p, n in sizes.items()}
    while sum(pieces.values()) < min(min_blocks, total):
        # Split the partition whose blocks are largest.
        p = max(pieces, key=lambda q: (sizes[q] / pieces[q], -q))
        if sizes[p] <= pieces[p]:
            break
        pieces[p] += 1
    blocks = []
    for p in sorted(pieces):
        start, end = ranges[p]
        n = pieces[p]
        for i in range(n):
            blocks.append((p, start + (end - start) * i // n, start + (end - start) * (i + 1) // n))
    return blocks


# -- micro-batches ---------------------------------------------------------------------------

#: Committed-offset metadata of a stream's progress: a JSON object after this prefix.
PROGRESS_PREFIX = "rafka-stream:"


def progress_metadata(batch_id: int, planned_end: int | None = None) -> str:
    """The metadata committed with an offset. With ``planned_end`` the offset is where batch
    ``batch_id`` starts and the batch ends at ``planned_end`` (written before the batch
    runs); without, batch ``batch_id`` is done and the offset is where it ended."""
    entry: dict[str, int] = {"batch": batch_id}
    if planned_end is not None:
        entry["end"] = planned_end
    return PROGRESS_PREFIX + json.dumps(entry, separators=(",", ":"))


def parse_progress(metadata: str) -> tuple[int, int | None] | None:
    """(batch id, planned end or None) from committed metadata; None when the offset was not
    committed by a stream."""
    if not metadata.startswith(PROGRESS_PREFIX):
        return None
    try:
        entry = json.loads(metadata[len(PROGRESS_PREFIX):])
        end = entry.get("end")
        return int(entry["batch"]), None if end is None else int(end)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


#: The batch id whose end a stream's recorded starting offsets are: batch 0 starts there.
BEFORE_FIRST_BATCH = -1


def unrecorded_starts(
    committed: Mapping[int, tuple[int, str]],
    bounds: Mapping[int, PartitionBounds],
    starting: dict[int, int] | int,
    committed_only: bool,
) -> dict[int, tuple[int, str]]:
    """{partition: (offset, metadata)} to commit for each partition of ``bounds`` the group
    has no offset for, before any batch is planned from them. As Spark's Kafka source
    resolves its starting offsets once and writes them to the offset log, a stream records
    where it starts, so 'latest' means the end when the stream began, not at each plan.

    Before a stream has started (no committed offset carries a stream's progress) such a
    partition starts at ``starting``; afterwards it is a partition added since, read from its
    log start (its records all came after the start, as in Spark). The metadata marks the
    offset as the end of the latest batch seen (BEFORE_FIRST_BATCH for a new stream), so the
    next batch starts there."""
    missing = sorted(set(bounds) - set(committed))
    if not missing:
        return {}
    progress = [pr for pr in (parse_progress(m) for _o, m in committed.values()) if pr]
    started = bool(progress)
    metadata = progress_metadata(max((pr[0] for pr in progress), default=BEFORE_FIRST_BATCH))
    out = {}
    for partition in missing:
        b = bounds[partition]
        given = EARLIEST
        if not started:
            given = starting.get(partition, EARLIEST) if isinstance(starting, dict) else starting
        last = b.stable_end if committed_only else b.high_watermark
        out[partition] = (b.log_start if given == EARLIEST else last if given == LATEST
                          else given, metadata)  # fmt: skip
    return out


@dataclass(frozen=True)
class MicroBatch:
    """One batch of a stream: ``ranges`` per partition, ``replay`` when it repeats a batch
    that was planned (and maybe run) but not committed."""

    batch_id: int
    ranges: dict[int, tuple[int, int]]
    replay: bool = False

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def plan_micro_batch(
    topic: str,
    committed: Mapping[int, tuple[int, str]],
    bounds: Mapping[int, PartitionBounds],
    starting: dict[int, int] | int,
    max_records: int | None,
    committed_only: bool,
) -> MicroBatch | None:
    """The next batch of a stream from the group's ``committed`` {partition: (offset,
    metadata)}: a batch planned and not finished is repeated with the same ranges (so a sink
    keyed by batch id sees the same records again); otherwise from each committed offset (or
    ``starting`` for partitions without one) to the readable end, at most ``max_records``
    records shared in proportion to each partition's backlog. None when nothing is new.
    Partitions without a committed offset start where ``unrecorded_starts`` puts them (a
    stream commits those first, so they hold still from plan to plan)."""
    committed = {**unrecorded_starts(committed, bounds, starting, committed_only), **committed}
    progress = {p: parse_progress(m) for p, (_o, m) in committed.items()}
    planned = {p: pr for p, pr in progress.items() if pr is not None and pr[1] is not None}
    if planned:
        batch_id = max(pr[0] for pr in planned.values())
        ranges = {
            p: (committed[p][0], pr[1]) for p, pr in planned.items() if pr[0] == batch_id
        }
        return MicroBatch(batch_id, ranges, replay=True)
    done = [pr[0] for pr in progress.values() if pr is not None]
    batch_id = max(done) + 1 if done else 0
    backlog: dict[int, tuple[int, int]] = {}
    for partition, b in sorted(bounds.items()):
        last = b.stable_end if committed_only else b.high_watermark
        start = committed[partition][0]
        if start < b.log_start:
            raise OffsetOutOfRange(
                f"the stream's next offset {start} of {topic}-{partition} is below the log "
                f"start {b.log_start}: records were deleted before they were processed. "
                "Reset the group's offsets (rafka groups reset-offsets) to go on"
            )
        backlog[partition] = (start, max(start, last))
    lags = {p: end - start for p, (start, end) in backlog.items()}
    total = sum(lags.values())
    if total == 0:
        return None
    if max_records is not None and total > max_records:
        # Largest remainders: each share is its exact proportion rounded down or up.
        quota = {p: max_records * lag // total for p, lag in lags.items()}
        spare = max_records - sum(quota.values())
        for p in sorted(lags, key=lambda q: (-(max_records * lags[q] % total), q)):
            if spare <= 0:
                break
            if quota[p] < lags[p]:
                quota[p] += 1
                spare -= 1
        backlog = {p: (start, start + quota[p]) for p, (start, _end) in backlog.items()}
    return MicroBatch(batch_id, backlog)
