"""The partition log: offsets, reads, rolling, truncation, deletion, flushing, epochs."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.errors import (
    InvalidFetchSize,
    InvalidRecord,
    KafkaStorageError,
    OffsetOutOfRange,
    RecordTooLarge,
)
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

from .support import batch, read_all


def test_append_assigns_consecutive_offsets_from_zero(open_log):
    """Each batch gets the next offsets; the log end offset follows."""
    log = open_log()
    infos = [log.append_as_leader(batch([i] * 3), leader_epoch=0) for i in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert [r[0] for r in read_all(log)] == list(range(12))


def test_several_batches_in_one_append_are_written_together(open_log):
    """A buffer of several non-idempotent batches gets contiguous offsets in one call."""
    log = open_log()
    info = log.append_as_leader(batch([b"a", b"b"]) + batch([b"c"]), leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    assert [r[2] for r in read_all(log)] == [b"a", b"b", b"c"]


def test_read_respects_max_bytes_but_returns_at_least_one_batch(open_log):
    """A read stops at whole batches under max_bytes, yet never returns nothing when data exists."""
    log = open_log()
    for i in range(10):
        log.append_as_leader(batch([b"x" * 100]), leader_epoch=0)
    one = len(batch([b"x" * 100]))
    assert len(log.read(0, one * 3 + 5).records) == one * 3
    assert len(log.read(0, 1).records) == one


def test_read_stops_before_max_offset(open_log):
    """Passing the high watermark as max_offset hides batches at or past it."""
    log = open_log()
    for i in range(5):
        log.append_as_leader(batch([i, i]), leader_epoch=0)
    assert [r[0] for r in read_all(log, max_offset=6)] == list(range(6))
    assert len(log.read(6, 1 << 20, max_offset=6).records) == 0


def test_read_from_the_middle_of_a_batch_returns_that_batch(open_log):
    """Reading from an offset inside a batch starts with the batch holding it."""
    log = open_log()
    log.append_as_leader(batch(range(10)), leader_epoch=0)
    data = log.read(4, 1 << 20).records
    assert rb.read_header(data).base_offset == 0


def test_reads_outside_the_log_raise_offset_out_of_range(open_log):
    """Offsets below the log start or above the log end are rejected, naming the range."""
    log = open_log()
    log.append_as_leader(batch([1, 2]), leader_epoch=0)
    with pytest.raises(OffsetOutOfRange, match=r"outside the log \[0, 2\]"):
        log.read(3, 100)
    assert len(log.read(2, 100).records) == 0
    with pytest.raises(InvalidFetchSize):
        log.read(0, 0)


def test_segments_roll_at_segment_bytes_and_reads_cross_them(open_log):
    """The active segment rolls before it would pass segment.bytes; offsets stay contiguous."""
    log = open_log({"segment.bytes": 1000})
    for i in range(30):
        log.append_as_leader(batch([b"y" * 90]), leader_epoch=0)
    assert len(log.segments) > 3
    assert all(s.size <= 1000 for s in log.segments)
    assert [r[0] for r in read_all(log)] == list(range(30))
    names = sorted(os.listdir(log.directory))
    assert f"{log.segments[1].base_offset:020d}.log" in names


def test_segment_rolls_on_age(open_log):
    """A batch whose timestamp is segment.ms past the segment's first batch starts a new one."""
    log = open_log({"segment.ms": 1000})
    log.append_as_leader(batch([1], timestamp=10_000), leader_epoch=0)
    log.append_as_leader(batch([2], timestamp=10_500), leader_epoch=0)
    assert len(log.segments) == 1
    log.append_as_leader(batch([3], timestamp=11_001), leader_epoch=0)
    assert len(log.segments) == 2


def test_batch_over_max_message_bytes_is_rejected_and_nothing_is_lost(open_log):
    """RecordTooLarge names the limit; the log keeps what it had and accepts the next batch."""
    log = open_log({"max.message.bytes": 500})
    log.append_as_leader(batch([b"ok"]), leader_epoch=0)
    with pytest.raises(RecordTooLarge, match="max.message.bytes=500"):
        log.append_as_leader(batch([b"z" * 600]), leader_epoch=0)
    log.append_as_leader(batch([b"ok2"]), leader_epoch=0)
    assert [r[2] for r in read_all(log)] == [b"ok", b"ok2"]


def test_corrupt_or_empty_appends_are_rejected_whole(open_log):
    """A request with one corrupt batch writes none of its batches."""
    log = open_log()
    bad = bytearray(batch([b"b"]))
    bad[-1] ^= 1
    with pytest.raises(Exception, match="CRC"):
        log.append_as_leader(batch([b"a"]) + bytes(bad), leader_epoch=0)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(b"", leader_epoch=0)
    assert log.log_end_offset == 0


def test_clients_cannot_write_control_batches(open_log):
    """Transaction markers come only from a coordinator."""
    log = open_log()
    marker = rb.encode_control_batch(rb.ControlType.COMMIT, producer_id=1, producer_epoch=0,
                                     coordinator_epoch=0, timestamp=1)
    with pytest.raises(InvalidRecord, match="transaction coordinator"):
        log.append_as_leader(marker, leader_epoch=0)
    assert log.append_as_leader(marker, leader_epoch=0, allow_control=True).first_offset == 0


def test_unwritable_data_directory_is_a_storage_error(tmp_path):
    """A data directory that cannot be created says so and how to fix it."""
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(KafkaStorageError, match="cannot be written.*writable directory"):
        Log(str(blocker / "topic-0"))


def test_topic_compression_type_recompresses_to_its_codec(open_log):
    """compression.type=zstd stores batches in zstd whatever the producer used."""
    log = open_log({"compression.type": "zstd"})
    log.append_as_leader(batch([b"a", b"b"], codec=rb.Codec.GZIP), leader_epoch=0)
    assert rb.read_header(log.read(0, 1000).records).codec is rb.Codec.ZSTD
    assert [r[2] for r in read_all(log)] == [b"a", b"b"]


def test_log_append_time_overrides_producer_timestamps(open_log, clock):
    """message.timestamp.type=LogAppendTime stamps records with the log's clock."""
    log = open_log({"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(batch([b"a"], timestamp=5), leader_epoch=0)
    assert info.log_append_time == clock.now
    assert read_all(log)[0][3] == clock.now


def test_offset_for_timestamp_finds_first_record_at_or_after(open_log):
    """The first record with a timestamp at or after the target is found across segments."""
    log = open_log({"segment.bytes": 300, "index.interval.bytes": 1})
    for i in range(40):
        log.append_as_leader(
            rb.encode_batch([b"v", b"w"], timestamps=[1000 + 10 * i, 1005 + 10 * i]),
            leader_epoch=0,
        )
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1005) == (1, 1005)
    assert log.offset_for_timestamp(1006) == (2, 1010)
    assert log.offset_for_timestamp(1391) == (79, 1395)
    assert log.offset_for_timestamp(1396) is None


@given(st.lists(st.integers(1, 8), min_size=1, max_size=30), st.integers(400, 2000))
@settings(max_examples=30)
def test_offsets_strictly_increase_whatever_the_batch_sizes(tmp_path_factory, sizes, seg_bytes):
    """Offsets read back strictly increase and match what each append reported."""
    log = Log(str(tmp_path_factory.mktemp("log") / "t-0"), LogConfig.from_dict(
        {"segment.bytes": seg_bytes, "index.interval.bytes": 64}))
    expected = []
    for n in sizes:
        info = log.append_as_leader(batch([b"v" * 20] * n), leader_epoch=0)
        expected += range(info.first_offset, info.last_offset + 1)
    got = [r[0] for r in read_all(log)]
    assert got == expected == list(range(sum(sizes)))
    log.close()


def test_truncate_to_removes_the_tail_across_segments(open_log):
    """truncate_to drops every record at or past the offset, whole batches, across segments."""
    log = open_log({"segment.bytes": 400})
    for i in range(20):
        log.append_as_leader(batch([i, i]), leader_epoch=i // 5)
    log.update_high_watermark(40)
    assert log.truncate_to(13) == 12  # the batch holding 12..13 goes whole
    assert [r[0] for r in read_all(log)] == list(range(12))
    assert log.high_watermark == 12
    assert log.latest_epoch == 1
    assert log.append_as_leader(batch([b"new"]), leader_epoch=9).first_offset == 12


def test_truncate_below_log_start_restarts_the_log_empty(open_log):
    """Truncating below the log start empties the log and starts it at the offset."""
    log = open_log()
    log.append_as_leader(batch([1, 2, 3]), leader_epoch=0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append_as_leader(batch([b"x"]), leader_epoch=1).first_offset == 100


def test_delete_records_moves_log_start_and_survives_reopen(open_log):
    """delete_records raises the log start (no further than the high watermark), persistently."""
    log = open_log({"segment.bytes": 300})
    for i in range(20):
        log.append_as_leader(batch([i]), leader_epoch=0)
    with pytest.raises(OffsetOutOfRange, match="high watermark"):
        log.delete_records(5)
    log.update_high_watermark(20)
    segments_before = len(log.segments)
    assert log.delete_records(11) == 11
    assert len(log.segments) < segments_before
    with pytest.raises(OffsetOutOfRange):
        log.read(10, 100)
    log.close()
    again = open_log({"segment.bytes": 300})
    assert again.log_start_offset == 11
    assert read_all(again)[0][0] == 11


def test_flush_messages_fsyncs_and_moves_the_recovery_point(open_log):
    """flush.messages=N flushes after N records; an explicit flush moves the recovery point."""
    log = open_log({"flush.messages": 5})
    log.append_as_leader(batch([1, 2, 3]), leader_epoch=0)
    assert log.recovery_point == 0 and log.unflushed_messages == 3
    log.append_as_leader(batch([4, 5]), leader_epoch=0)
    assert log.recovery_point == 5 and log.unflushed_messages == 0
    log.append_as_leader(batch([6]), leader_epoch=0)
    log.flush()
    assert log.recovery_point == 6


def test_flush_ms_flushes_from_the_timer(open_log, clock):
    """maybe_flush flushes once flush.ms has passed since the last flush."""
    log = open_log({"flush.ms": 1000})
    log.append_as_leader(batch([1]), leader_epoch=0)
    assert not log.maybe_flush()
    clock.advance(1000)
    assert log.maybe_flush()
    assert log.recovery_point == 1


def test_leader_epochs_are_cached_and_answer_followers(open_log):
    """Each new epoch's start offset is recorded and persisted; end offsets follow KIP-279."""
    log = open_log()
    log.append_as_leader(batch([1, 2]), leader_epoch=0)   # 0..1
    log.append_as_leader(batch([3]), leader_epoch=2)      # 2
    log.append_as_leader(batch([4, 5]), leader_epoch=2)   # 3..4
    log.append_as_leader(batch([6]), leader_epoch=5)      # 5
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (2, 2), (5, 5)]
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(1) == (0, 2)
    assert log.end_offset_for_epoch(3) == (2, 5)
    assert log.end_offset_for_epoch(5) == (5, 6)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    log.close()
    assert [tuple(e) for e in open_log().epoch_cache.entries] == [(0, 0), (2, 2), (5, 5)]


def test_follower_append_keeps_leader_offsets_and_epochs(open_log, tmp_path):
    """Batches copied from a leader keep their offsets; going backwards is refused."""
    leader = open_log(directory=tmp_path / "leader-0")
    for i in range(3):
        leader.append_as_leader(batch([i, i]), leader_epoch=3)
    follower = open_log(directory=tmp_path / "follower-0")
    data = leader.read(0, 1 << 20).records
    follower.append_as_follower(data)
    assert read_all(follower) == read_all(leader)
    assert follower.latest_epoch == 3
    with pytest.raises(InvalidRecord, match="below the log end"):
        follower.append_as_follower(data)


def test_high_watermark_stays_between_log_start_and_log_end(open_log):
    """The high watermark is clamped into [log start, log end] and survives a clean reopen."""
    log = open_log()
    log.append_as_leader(batch([1, 2, 3]), leader_epoch=0)
    assert log.update_high_watermark(10) == 3
    assert log.update_high_watermark(-5) == 0
    log.update_high_watermark(2)
    log.close()
    assert open_log().high_watermark == 2


def test_clean_reopen_keeps_everything_and_checks_nothing_twice(open_log):
    """A cleanly closed log reopens with the same offsets and a clean report."""
    log = open_log({"segment.bytes": 500})
    for i in range(20):
        log.append_as_leader(batch([i]), leader_epoch=0)
    before = read_all(log)
    log.close()
    again = open_log({"segment.bytes": 500})
    assert again.recovery_report.clean_shutdown
    assert not again.recovery_report.dropped_data
    assert read_all(again) == before
    assert again.append_as_leader(batch([b"n"]), leader_epoch=0).first_offset == 20


def test_segment_rolls_on_age_when_the_first_batch_has_timestamp_zero(open_log):
    """Timestamp 0 is a time like any other: the segment still rolls segment.ms after it."""
    log = open_log({"segment.ms": 1000})
    log.append_as_leader(batch([1], timestamp=0), leader_epoch=0)
    log.append_as_leader(batch([2], timestamp=1001), leader_epoch=0)
    assert len(log.segments) == 2
