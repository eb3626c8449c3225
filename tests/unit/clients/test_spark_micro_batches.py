"""A stream's micro-batches without Ray or Spark: the progress metadata a stream commits, and
planning each batch from a group's committed offsets (with the replay of a planned batch
that never finished)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients.spark_offsets import (
    BEFORE_FIRST_BATCH,
    EARLIEST,
    LATEST,
    PROGRESS_PREFIX,
    MicroBatch,
    PartitionBounds,
    parse_progress,
    plan_micro_batch,
    progress_metadata,
    unrecorded_starts,
)
from rafka.errors import OffsetOutOfRange

PB = PartitionBounds
TOPIC = "orders"

# -- progress metadata -------------------------------------------------------------------------


def test_progress_metadata_of_a_planned_batch_holds_its_id_and_end():
    assert progress_metadata(7, 1234) == 'rafka-stream:{"batch":7,"end":1234}'
    assert parse_progress(progress_metadata(7, 1234)) == (7, 1234)


def test_progress_metadata_of_a_done_batch_holds_only_its_id():
    assert progress_metadata(7) == 'rafka-stream:{"batch":7}'
    assert parse_progress(progress_metadata(7)) == (7, None)


@given(st.integers(0, 2**40), st.one_of(st.none(), st.integers(0, 2**62)))
def test_progress_metadata_round_trips(batch_id, end):
    metadata = progress_metadata(batch_id, end)
    assert metadata.startswith(PROGRESS_PREFIX)
    assert parse_progress(metadata) == (batch_id, end)


@pytest.mark.parametrize(
    "metadata",
    ["", "checkpoint 12", '{"batch": 3}', "rafka-stream:", "rafka-stream:not json",
     "rafka-stream:[1, 2]", 'rafka-stream:{"end": 5}', 'rafka-stream:{"batch": "x"}',
     'rafka-stream:{"batch": 1, "end": "y"}', 'rafka-stream:{"batch": null}'],
)  # fmt: skip
def test_metadata_not_committed_by_a_stream_parses_to_none(metadata):
    assert parse_progress(metadata) is None


# -- plan_micro_batch --------------------------------------------------------------------------


def plan(committed, bounds, starting=EARLIEST, max_records=None, committed_only=False):
    return plan_micro_batch(TOPIC, committed, bounds, starting, max_records, committed_only)


def done(batch: MicroBatch) -> dict[int, tuple[int, str]]:
    """What the stream commits when ``batch`` has run: its end offsets, marked done."""
    return {p: (end, progress_metadata(batch.batch_id)) for p, (_s, end) in batch.ranges.items()}


def planned(batch: MicroBatch) -> dict[int, tuple[int, str]]:
    """What the stream commits before ``batch`` runs: its start offsets with the plan."""
    return {
        p: (start, progress_metadata(batch.batch_id, end))
        for p, (start, end) in batch.ranges.items()
    }


def test_a_new_stream_reads_from_each_log_start_to_the_high_watermark_as_batch_zero():
    batch = plan({}, {0: PB(5, 20, 20), 1: PB(0, 3, 3)})
    assert batch == MicroBatch(0, {0: (5, 20), 1: (0, 3)}, replay=False)
    assert batch.records == 18


def test_a_stream_with_nothing_new_plans_no_batch():
    bounds = {0: PB(0, 20, 20), 1: PB(0, 0, 0)}
    assert plan({0: (20, progress_metadata(3))}, bounds) is None
    assert plan({}, {0: PB(7, 7, 7)}) is None
    assert plan({}, {}) is None


def test_the_next_batch_starts_at_the_committed_offsets_with_the_next_batch_id():
    committed = {0: (12, progress_metadata(4)), 1: (3, progress_metadata(4))}
    batch = plan(committed, {0: PB(0, 20, 20), 1: PB(0, 9, 9)})
    assert batch == MicroBatch(5, {0: (12, 20), 1: (3, 9)})


def test_a_planned_batch_that_did_not_finish_is_replayed_with_the_same_ranges():
    """Even with more records since, and a smaller max_records, the replay repeats the plan:
    a sink keyed by batch id sees the same records again."""
    first = plan({0: (10, progress_metadata(2))}, {0: PB(0, 30, 30), 1: PB(0, 5, 5)})
    assert first == MicroBatch(3, {0: (10, 30), 1: (0, 5)})
    again = plan(planned(first), {0: PB(0, 500, 500), 1: PB(0, 90, 90)}, max_records=2)
    assert again == MicroBatch(3, {0: (10, 30), 1: (0, 5)}, replay=True)
    after = plan(done(again), {0: PB(0, 500, 500), 1: PB(0, 90, 90)})
    assert after == MicroBatch(4, {0: (30, 500), 1: (5, 90)})


def test_a_replay_holds_only_the_partitions_of_the_latest_planned_batch():
    committed = {
        0: (10, progress_metadata(6, 15)),
        1: (4, progress_metadata(6, 4)),
        2: (50, progress_metadata(5)),
        3: (8, progress_metadata(5, 9)),
    }
    batch = plan(committed, {p: PB(0, 100, 100) for p in range(4)})
    assert batch == MicroBatch(6, {0: (10, 15), 1: (4, 4)}, replay=True)
    assert batch.records == 5


def test_partitions_without_a_commit_start_from_starting_offsets():
    bounds = {0: PB(5, 20, 20), 1: PB(0, 30, 30), 2: PB(0, 9, 9)}
    batch = plan({}, bounds, starting={0: 10, 1: LATEST})
    assert batch == MicroBatch(0, {0: (10, 20), 1: (30, 30), 2: (0, 9)})


def test_a_stream_starting_at_latest_sees_only_records_that_come_after():
    """'latest' is resolved once and recorded as where batch 0 starts; the plans that follow
    start there, however far the end has moved since."""
    bounds = {0: PB(0, 20, 20), 1: PB(4, 9, 9)}
    recorded = unrecorded_starts({}, bounds, LATEST, False)
    assert recorded == {0: (20, progress_metadata(BEFORE_FIRST_BATCH)),
                        1: (9, progress_metadata(BEFORE_FIRST_BATCH))}  # fmt: skip
    assert plan({}, bounds, starting=LATEST) is None
    assert plan(recorded, bounds, starting=LATEST) is None
    grown = {0: PB(0, 25, 25), 1: PB(4, 9, 9)}
    assert plan(recorded, grown, starting=LATEST) == MicroBatch(0, {0: (20, 25), 1: (9, 9)})


def test_starting_offsets_apply_until_the_stream_has_progress_then_new_partitions_start_early():
    bounds = {0: PB(0, 20, 20), 1: PB(3, 8, 8)}
    assert unrecorded_starts({0: (12, "by hand")}, bounds, LATEST, False) == {
        1: (8, progress_metadata(BEFORE_FIRST_BATCH))
    }
    assert unrecorded_starts({0: (12, progress_metadata(4))}, bounds, LATEST, False) == {
        1: (3, progress_metadata(4))
    }
    assert unrecorded_starts({0: (12, progress_metadata(4)), 1: (5, "")}, bounds, LATEST,
                             False) == {}  # fmt: skip


def test_a_partition_added_while_a_batch_is_planned_joins_the_batch_after_the_replay():
    bounds = {0: PB(0, 30, 30), 1: PB(0, 6, 6)}
    committed = {0: (10, progress_metadata(3, 30))}
    starts = unrecorded_starts(committed, bounds, LATEST, False)
    assert starts == {1: (0, progress_metadata(3))}
    replay = plan({**committed, **starts}, bounds)
    assert replay == MicroBatch(3, {0: (10, 30)}, replay=True)
    after = plan({**starts, **done(replay)}, bounds)
    assert after == MicroBatch(4, {0: (30, 30), 1: (0, 6)})


def test_latest_of_a_read_committed_stream_is_the_last_stable_offset():
    assert unrecorded_starts({}, {0: PB(0, 20, 12)}, LATEST, True) == {
        0: (12, progress_metadata(BEFORE_FIRST_BATCH))
    }


def test_a_starting_offset_past_the_end_waits_there():
    assert plan({}, {0: PB(0, 20, 20)}, starting={0: 30}) is None


def test_read_committed_stops_at_the_last_stable_offset():
    batch = plan({}, {0: PB(0, 20, 12)}, committed_only=True)
    assert batch == MicroBatch(0, {0: (0, 12)})
    assert plan({}, {0: PB(0, 20, 12)}, committed_only=False) == MicroBatch(0, {0: (0, 20)})


def test_offsets_committed_by_something_else_than_a_stream_are_where_batch_zero_starts():
    """After `rafka groups reset-offsets` (plain metadata) the stream goes on from there."""
    batch = plan({0: (15, ""), 1: (2, "by hand")}, {0: PB(0, 20, 20), 1: PB(0, 4, 4)})
    assert batch == MicroBatch(0, {0: (15, 20), 1: (2, 4)})


def test_a_committed_offset_below_the_log_start_is_out_of_range_and_says_how_to_recover():
    with pytest.raises(OffsetOutOfRange, match="next offset 3 of orders-0 is below the log start "
                                               "10: records were deleted") as e:
        plan({0: (3, progress_metadata(1))}, {0: PB(10, 20, 20)})
    assert "reset-offsets" in str(e.value)


def test_a_starting_offset_below_the_log_start_is_out_of_range():
    with pytest.raises(OffsetOutOfRange, match="below the log start 10"):
        plan({}, {0: PB(10, 20, 20)}, starting={0: 4})


def test_max_records_is_shared_in_proportion_to_each_partitions_backlog():
    bounds = {0: PB(0, 300, 300), 1: PB(0, 100, 100), 2: PB(0, 0, 0)}
    batch = plan({}, bounds, max_records=100)
    assert batch == MicroBatch(0, {0: (0, 75), 1: (0, 25), 2: (0, 0)})


def test_records_left_by_rounding_go_to_the_largest_backlogs_then_the_lowest_partitions():
    bounds = {0: PB(0, 1, 1), 1: PB(0, 1, 1), 2: PB(0, 1, 1)}
    assert plan({}, bounds, max_records=2).ranges == {0: (0, 1), 1: (0, 1), 2: (0, 0)}
    bounds = {0: PB(0, 1, 1), 1: PB(0, 5, 5), 2: PB(0, 1, 1)}
    assert plan({}, bounds, max_records=2).ranges == {0: (0, 0), 1: (0, 2), 2: (0, 0)}


def test_max_records_at_or_above_the_backlog_takes_all_of_it():
    bounds = {0: PB(0, 30, 30), 1: PB(0, 10, 10)}
    assert plan({}, bounds, max_records=40).ranges == {0: (0, 30), 1: (0, 10)}
    assert plan({}, bounds, max_records=10**9).ranges == {0: (0, 30), 1: (0, 10)}


def stream_bounds(most: int):
    return st.dictionaries(
        st.integers(0, 7),
        st.tuples(st.integers(0, most // 4), st.integers(0, most), st.integers(0, most)).map(
            lambda t: PB(t[0], t[0] + max(t[1], t[2]), t[0] + min(t[1], t[2]))
        ),
        max_size=6,
    )


@st.composite
def stream_state(draw, most: int = 2000):
    """Bounds (backlogs up to ``most`` records a partition), the group's committed offsets
    (done batches; some partitions never committed) and the starting offsets for the rest."""
    bounds = draw(stream_bounds(most))
    committed = {}
    batch_id = draw(st.integers(0, 1000))
    for p, b in bounds.items():
        if draw(st.booleans()):
            offset = draw(st.integers(b.log_start, b.high_watermark + 5))
            committed[p] = (offset, progress_metadata(batch_id))
    starting = draw(st.one_of(
        st.sampled_from([EARLIEST, LATEST]),
        st.fixed_dictionaries({
            p: st.one_of(st.sampled_from([EARLIEST, LATEST]),
                         st.integers(b.log_start, b.high_watermark + 5))
            for p, b in bounds.items()
        }),
    ))  # fmt: skip
    return bounds, committed, starting


@given(stream_state(), st.integers(1, 3000), st.booleans())
def test_a_micro_batch_never_exceeds_max_records_nor_any_partitions_backlog(
    state, max_records, committed_only
):
    """A batch takes min(max_records, backlog) records, never more than a partition has,
    starting where the partition's backlog starts, each partition's share within one record
    of its proportional share."""
    bounds, committed, starting = state
    unlimited = plan(committed, bounds, starting, None, committed_only)
    batch = plan(committed, bounds, starting, max_records, committed_only)
    if unlimited is None:
        assert batch is None
        return
    assert not batch.replay and batch.batch_id == unlimited.batch_id
    total = unlimited.records
    assert batch.records == min(max_records, total)
    assert set(batch.ranges) == set(unlimited.ranges) == set(bounds)
    for p, (start, end) in batch.ranges.items():
        full_start, full_end = unlimited.ranges[p]
        assert start == full_start <= end <= full_end
        share = max_records * (full_end - full_start) / total
        assert total <= max_records or abs((end - start) - share) < 1


@given(stream_state(most=80), st.one_of(st.none(), st.integers(1, 100)), st.booleans())
def test_planning_repeatedly_delivers_every_record_once_in_consecutive_batches(
    state, max_records, committed_only
):
    """Running the planned batches one after another (committing each as done) reads each
    partition's backlog exactly once, in order, with batch ids going up by one, and ends
    with nothing left to plan."""
    bounds, committed, starting = state
    first = plan(committed, bounds, starting, max_records, committed_only)
    if first is None:
        return
    read: dict[int, list[tuple[int, int]]] = {p: [] for p in bounds}
    batch, expected_id = first, first.batch_id
    state_committed = dict(committed)
    for _ in range(1_000):
        if batch is None:
            break
        assert batch.batch_id == expected_id and not batch.replay
        for p, (start, end) in batch.ranges.items():
            if end > start:
                read[p].append((start, end))
        state_committed.update(done(batch))
        expected_id += 1
        batch = plan(state_committed, bounds, starting, max_records, committed_only)
    assert batch is None
    for p, b in bounds.items():
        last = b.stable_end if committed_only else b.high_watermark
        start, end = first.ranges[p]
        pieces = read[p]
        if start >= last:  # committed or starting at (or past) the end: nothing to read
            assert end == start and pieces == []
            continue
        assert pieces[0][0] == start and pieces[-1][1] == last
        assert all(a[1] == b2[0] for a, b2 in zip(pieces, pieces[1:]))


@given(stream_state(), st.one_of(st.none(), st.integers(1, 700)), st.data())
def test_a_committed_plan_replays_the_same_batch_whatever_arrived_since(
    state, max_records, data
):
    bounds, committed, starting = state
    batch = plan(committed, bounds, starting, max_records)
    if batch is None:
        return
    grown = {
        p: PB(b.log_start, b.high_watermark + data.draw(st.integers(0, 100)), b.stable_end)
        for p, b in bounds.items()
    }
    replayed = plan({**committed, **planned(batch)}, grown, starting, max_records)
    assert replayed == MicroBatch(batch.batch_id, batch.ranges, replay=True)
