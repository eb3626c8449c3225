"""Retention: which whole segments of a log are old or large enough to delete.

A segment goes when every record in it is older than ``retention.ms`` (its largest timestamp
is past the horizon), when dropping it keeps the log at or above ``retention.bytes``, or when
it lies wholly below the log start offset. Only a prefix of the log ever goes, never the active
segment, and never a segment that reaches the high watermark: deleting a segment moves the log
start to the next segment's base, and the log start may not pass the high watermark (records
above it are not yet on every in-sync replica, and an acks=all producer is still waiting for
them). Kafka bounds ``deletableSegments`` the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.storage.segment import Segment

if TYPE_CHECKING:
    from rafka.storage.log import Log


def expired_segments(log: "Log", now_ms: int) -> list[Segment]:
    """The oldest segments that retention removes now: a prefix of the segments wholly below
    the high watermark (``now_ms`` in milliseconds, from the log's clock)."""
    candidates = log.segments_below(log.high_watermark)
    config = log.config
    # Below the log start offset (moved by delete_records): always deleted.
    count = len(log.segments_below(log.log_start_offset))
    if config.delete:
        if config.retention_ms >= 0:
            horizon = now_ms - config.retention_ms
            by_time = 0
            while by_time < len(candidates) and candidates[by_time].max_timestamp < horizon:
                by_time += 1
            count = max(count, by_time)
        if config.retention_bytes >= 0:
            excess = log.size_bytes - config.retention_bytes
            by_size = 0
            while by_size < len(candidates) and excess - candidates[by_size].size >= 0:
                excess -= candidates[by_size].size
                by_size += 1
            count = max(count, by_size)
    return candidates[:count]


def delete_expired_segments(log: "Log", now_ms: int) -> int:
    """Apply retention to ``log``; returns the bytes freed."""
    doomed = expired_segments(log, now_ms)
    return log.delete_segments(doomed) if doomed else 0
