"""Retention by time, by size and by log start offset; the active segment always stays."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.errors import OffsetOutOfRange
from rafka.storage import Log, LogConfig
from rafka.storage.retention import delete_expired_segments

from .support import FakeClock, batch, read_all

HOUR = 3_600_000


def fill(log, n, timestamp, size=90):
    for i in range(n):
        log.append_as_leader(batch([b"r" * size], [b"k%d" % i], timestamp=timestamp),
                             leader_epoch=0)  # fmt: skip


def test_retention_ms_deletes_segments_whose_newest_record_is_too_old(open_log, clock):
    """Segments entirely older than retention.ms go; a segment with any newer record stays."""
    log = open_log({"retention.ms": HOUR, "segment.bytes": 500})
    fill(log, 10, clock.now - 2 * HOUR)
    fill(log, 10, clock.now)
    log.update_high_watermark(log.log_end_offset)
    old_end = 10
    freed = delete_expired_segments(log, clock.now)
    assert freed > 0
    assert log.log_start_offset <= old_end
    assert all(s.max_timestamp >= clock.now - HOUR for s in log.segments[:-1])
    assert [r[0] for r in read_all(log)][-10:] == list(range(10, 20))


def test_retention_bytes_keeps_the_log_at_or_above_the_limit(open_log, clock):
    """The oldest segments go while the log stays at least retention.bytes big."""
    log = open_log({"retention.bytes": 1500, "segment.bytes": 500})
    fill(log, 30, clock.now)
    log.update_high_watermark(log.log_end_offset)
    delete_expired_segments(log, clock.now)
    assert log.size_bytes >= 1500
    assert log.size_bytes - log.segments[0].size < 1500
    assert log.log_start_offset == log.segments[0].base_offset


def test_compact_only_policy_ignores_time_and_size_retention(open_log, clock):
    """cleanup.policy=compact deletes nothing by age or size."""
    log = open_log({"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 1,
                    "segment.bytes": 500})
    fill(log, 20, clock.now - HOUR)
    log.update_high_watermark(log.log_end_offset)
    assert delete_expired_segments(log, clock.now) == 0


def test_retention_survives_reopen(open_log, clock):
    """The moved log start offset is remembered after a restart."""
    log = open_log({"retention.bytes": 500, "segment.bytes": 500})
    fill(log, 20, clock.now)
    log.update_high_watermark(log.log_end_offset)
    delete_expired_segments(log, clock.now)
    start = log.log_start_offset
    assert start > 0
    log.close()
    assert open_log({"retention.bytes": 500, "segment.bytes": 500}).log_start_offset == start


@given(
    st.lists(st.integers(0, 5 * HOUR), min_size=1, max_size=40),
    st.integers(-1, 5 * HOUR),
    st.integers(-1, 5000),
)
@settings(max_examples=40)
def test_retention_never_removes_the_active_segment(tmp_path_factory, ages, retention_ms,
                                                     retention_bytes):
    """Whatever the ages and limits, the active segment and the log end offset stay."""
    clock = FakeClock()
    log = Log(str(tmp_path_factory.mktemp("r") / "t-0"), LogConfig.from_dict(
        {"retention.ms": retention_ms, "retention.bytes": retention_bytes,
         "segment.bytes": 400}), clock)
    for age in ages:
        log.append_as_leader(batch([b"v" * 50], timestamp=clock.now - age), leader_epoch=0)
    active, end = log.active_segment, log.log_end_offset
    log.update_high_watermark(end)
    delete_expired_segments(log, clock.now)
    assert log.active_segment is active and log.segments
    assert log.log_end_offset == end
    assert log.log_start_offset <= active.base_offset
    remaining = [r[0] for r in read_all(log)]
    assert remaining == list(range(log.log_start_offset, end))
    log.close()


def test_retention_deletes_only_segments_wholly_below_the_high_watermark(open_log, clock):
    """Old or surplus segments at or above the high watermark stay, and the high watermark
    does not move: an acks=all wait is never answered by retention."""
    log = open_log({"retention.ms": HOUR, "retention.bytes": 1, "segment.bytes": 500})
    fill(log, 30, clock.now - 2 * HOUR)
    committed = log.segments[2].base_offset + 1  # inside the third segment
    log.update_high_watermark(committed)
    delete_expired_segments(log, clock.now)
    assert log.high_watermark == committed
    assert log.log_start_offset == log.segments[0].base_offset <= committed
    assert log.segments[0].next_offset > committed  # the segment holding the HW stays
    assert [r[0] for r in read_all(log)] == list(range(log.log_start_offset, 30))


def test_deleting_segments_past_the_high_watermark_is_refused(open_log, clock):
    """delete_segments never moves the log start past the high watermark; it says why."""
    log = open_log({"segment.bytes": 500})
    fill(log, 20, clock.now)
    log.update_high_watermark(1)
    with pytest.raises(OffsetOutOfRange, match="high watermark 1"):
        log.delete_segments(log.segments[:2])
    assert log.log_start_offset == 0
    assert [r[0] for r in read_all(log)] == list(range(20))
