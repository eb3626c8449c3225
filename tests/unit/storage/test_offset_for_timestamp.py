"""Finding an offset by timestamp (Kafka's ListOffsets by time) once delete_records has moved
the log start offset inside a segment, and with timestamps that are not monotonic.

The answer is the first record, in offset order, at or above the log start offset whose
timestamp is at or after the target, as (offset, timestamp); None when there is none."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

from .support import read_all

T = 1_000_000


def append(log: Log, timestamps: list[int]) -> None:
    """One batch with a record per timestamp."""
    log.append_as_leader(rb.encode_batch([b"v"] * len(timestamps), timestamps=timestamps), 0)


def delete_before(log: Log, offset: int) -> None:
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_records(offset) == offset


def expected(log: Log, target: int) -> tuple[int, int] | None:
    """The answer by reading every record from the log start."""
    return next(((o, t) for o, _k, _v, t in read_all(log) if t >= target), None)


def test_an_early_timestamp_finds_the_log_start_record_after_delete_records(open_log):
    """Five batches of three records with rising timestamps in one segment; the log start
    lands inside the third batch. A timestamp before every record finds the log start."""
    log = open_log()
    for b in range(5):
        append(log, [T + 10 * (3 * b + i) for i in range(3)])
    delete_before(log, 7)
    assert len(log.segments) == 1
    assert log.offset_for_timestamp(0) == (7, T + 70)
    assert log.offset_for_timestamp(T) == (7, T + 70)
    assert log.offset_for_timestamp(T + 55) == (7, T + 70)  # offset 6's time, below the start
    assert log.offset_for_timestamp(T + 71) == (8, T + 80)
    assert log.offset_for_timestamp(T + 140) == (14, T + 140)


def test_a_timestamp_past_every_record_finds_nothing_after_delete_records(open_log):
    log = open_log()
    for b in range(5):
        append(log, [T + 10 * (3 * b + i) for i in range(3)])
    delete_before(log, 7)
    assert log.offset_for_timestamp(T + 141) is None


def test_a_start_on_a_batch_boundary_finds_the_first_record_of_that_batch(open_log):
    log = open_log()
    for b in range(4):
        append(log, [T + 10 * (2 * b + i) for i in range(2)])
    delete_before(log, 4)
    assert log.offset_for_timestamp(0) == (4, T + 40)


def test_a_later_batch_is_found_when_the_first_match_lies_below_the_log_start(open_log):
    """The first batch reaching the target holds its only matching record below the log
    start; the match at or above it sits in a later batch of the same segment."""
    log = open_log()
    append(log, [T, T + 5000])  # offsets 0-1
    append(log, [T + 100, T + 200])  # 2-3
    append(log, [T + 2000, T + 6000])  # 4-5
    delete_before(log, 2)
    assert log.offset_for_timestamp(T + 4000) == (5, T + 6000)
    assert log.offset_for_timestamp(T + 1500) == (4, T + 2000)
    assert log.offset_for_timestamp(T + 150) == (3, T + 200)
    assert log.offset_for_timestamp(T + 6001) is None


def test_non_monotonic_timestamps_give_the_first_offset_at_or_after_the_target(open_log):
    """Offset order decides, not time order: a later, earlier-stamped record never wins over
    an earlier offset that reaches the target."""
    log = open_log({"index.interval.bytes": 1})
    append(log, [T + 300, T + 100, T + 200])  # 0-2
    append(log, [T + 50, T + 400])  # 3-4
    append(log, [T + 250, T + 350])  # 5-6
    assert log.offset_for_timestamp(T + 150) == (0, T + 300)
    assert log.offset_for_timestamp(T + 310) == (4, T + 400)
    delete_before(log, 1)
    assert log.offset_for_timestamp(T + 150) == (2, T + 200)
    assert log.offset_for_timestamp(T + 210) == (4, T + 400)
    delete_before(log, 5)
    assert log.offset_for_timestamp(T + 210) == (5, T + 250)
    assert log.offset_for_timestamp(T + 300) == (6, T + 350)
    assert log.offset_for_timestamp(T + 360) is None


def test_the_time_index_start_is_used_when_it_lies_past_the_log_start(open_log):
    """With a dense time index the scan starts at its entry, not at the log start; the
    answer is the same."""
    log = open_log({"index.interval.bytes": 1})
    for b in range(40):
        append(log, [T + 10 * (2 * b + i) for i in range(2)])
    delete_before(log, 3)
    assert log.offset_for_timestamp(T + 605) == (61, T + 610)
    assert log.offset_for_timestamp(T) == (3, T + 30)


def test_a_match_in_a_later_segment_is_found_when_the_start_segment_has_none(open_log):
    """Several segments: the records reaching the target in the segment holding the log
    start all lie below it, so the answer comes from the next segment."""
    log = open_log({"segment.bytes": 400, "index.interval.bytes": 1})
    append(log, [T + 9000, T + 1])  # offsets 0-1, in the first segment
    while len(log.segments) < 3:
        append(log, [T + 2, T + 3])
    delete_before(log, 1)
    assert log.segments[0].base_offset == 0 and log.segments[1].base_offset > 2
    later = log.log_end_offset
    append(log, [T + 9500])
    assert log.offset_for_timestamp(T + 5000) == (later, T + 9500)
    assert log.offset_for_timestamp(T + 2) == (2, T + 2)  # still in the first segment


@given(
    batches=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=5), min_size=1,
                     max_size=25),
    segment_bytes=st.sampled_from([300, 600, 1 << 20]),
    index_interval=st.sampled_from([1, 200, 4096]),
    start_fraction=st.floats(0, 1),
    targets=st.lists(st.integers(-1, 62), min_size=1, max_size=8),
    reopen=st.booleans(),
)  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_the_answer_is_the_first_record_at_or_above_the_log_start_reaching_the_target(
    tmp_path_factory, batches, segment_bytes, index_interval, start_fraction, targets, reopen
):
    """Against a scan of every record from the log start, for any timestamps (in or out of
    order), segment sizes, index density, log start and reopening."""
    directory = str(tmp_path_factory.mktemp("log") / "t-0")
    config = LogConfig.from_dict(
        {"segment.bytes": segment_bytes, "index.interval.bytes": index_interval}
    )
    log = Log(directory, config)
    for stamps in batches:
        append(log, [T + s for s in stamps])
    delete_before(log, int(start_fraction * log.log_end_offset))
    if reopen:
        log.close()
        log = Log(directory, config)
    for target in targets:
        assert log.offset_for_timestamp(T + target) == expected(log, T + target), target
    log.close()
