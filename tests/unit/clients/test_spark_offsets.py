"""Offsets of Spark reads without Ray or Spark: parsing Spark's offset options, resolving a
batch read's ranges and splitting them into blocks. (A stream's micro-batches are in
test_spark_micro_batches.py.)"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients.spark_offsets import (
    EARLIEST,
    LATEST,
    PartitionBounds,
    check_isolation_level,
    parse_offsets,
    resolve_range,
    split_ranges,
)
from rafka.errors import OffsetOutOfRange
from rafka.types import TopicPartition

TP = TopicPartition
PB = PartitionBounds
TOPIC = "orders"

# -- parse_offsets -----------------------------------------------------------------------------


def test_earliest_and_latest_mean_every_partition_from_its_start_or_end():
    assert parse_offsets("earliest", TOPIC, "starting_offsets") == EARLIEST == -2
    assert parse_offsets("latest", TOPIC, "ending_offsets") == LATEST == -1


def test_a_dict_of_partition_offsets_may_use_minus_two_and_minus_one():
    assert parse_offsets({0: 42, 1: -2, 2: -1, 3: 0}, TOPIC, "starting_offsets") == {
        0: 42, 1: EARLIEST, 2: LATEST, 3: 0,
    }  # fmt: skip


def test_topic_partition_keys_of_the_read_topic_give_their_partitions():
    spec = {TP(TOPIC, 0): 5, TP(TOPIC, 3): -2}
    assert parse_offsets(spec, TOPIC, "starting_offsets") == {0: 5, 3: EARLIEST}


def test_a_topic_partition_of_another_topic_is_refused_naming_both_topics():
    with pytest.raises(ValueError, match="but the read is of 'orders'") as info:
        parse_offsets({TP("payments", 0): 5}, TOPIC, "starting_offsets")
    assert "payments" in str(info.value)
    assert "starting_offsets" in str(info.value)


def test_spark_json_offsets_with_minus_two_mean_earliest():
    spec = '{"orders": {"0": 42, "1": -2, "2": -1}}'
    assert parse_offsets(spec, TOPIC, "starting_offsets") == {0: 42, 1: EARLIEST, 2: LATEST}


def test_a_dict_in_spark_form_keyed_by_topic_is_accepted():
    assert parse_offsets({TOPIC: {"0": 7, 1: 8}}, TOPIC, "ending_offsets") == {0: 7, 1: 8}


def test_json_keyed_by_partition_numbers_alone_is_accepted():
    assert parse_offsets('{"0": 5, "3": -2}', TOPIC, "starting_offsets") == {0: 5, 3: EARLIEST}


def test_spark_json_of_a_topic_named_by_digits_is_read_by_topic():
    """A topic may be named '123': its entry maps partitions to offsets, so it is a topic,
    not partition 123 with a dict for an offset."""
    assert parse_offsets('{"123": {"0": 5, "1": -1}}', "123", "starting_offsets") == {
        0: 5, 1: LATEST,
    }  # fmt: skip


def test_empty_dict_and_empty_json_name_no_partition():
    assert parse_offsets({}, TOPIC, "starting_offsets") == {}
    assert parse_offsets("{}", TOPIC, "starting_offsets") == {}


def test_spark_json_naming_another_topic_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"names topics \['payments'\], but the read is of"):
        parse_offsets('{"payments": {"0": 1}}', TOPIC, "starting_offsets")


def test_spark_json_naming_partition_numbers_where_topics_belong_names_them_as_topics():
    """{"0": {...}}: a mapping under "0" is a topic's entry, and "0" is not the read's topic."""
    with pytest.raises(ValueError, match=r"names topics \['0'\]"):
        parse_offsets('{"0": {"1": 2}}', TOPIC, "starting_offsets")


def test_a_string_that_is_neither_a_keyword_nor_json_is_refused_with_an_example():
    with pytest.raises(ValueError, match="neither 'earliest', 'latest' nor Spark's JSON") as info:
        parse_offsets("newest", TOPIC, "starting_offsets")
    message = str(info.value)
    assert "starting_offsets='newest'" in message
    assert '{"orders": {"0": 42, "1": -2}}' in message  # the example names the read's topic


@pytest.mark.parametrize(
    "spec, kind",
    [(42, "int"), ([0, 1], "list"), (None, "NoneType"), (1.5, "float"), ("[0, 1]", "list"),
     ("42", "int")],
)  # fmt: skip
def test_an_offset_spec_that_is_no_mapping_is_a_type_error_naming_its_type(spec, kind):
    with pytest.raises(TypeError, match=f"must be 'earliest', 'latest', a dict .*not {kind}$"):
        parse_offsets(spec, TOPIC, "starting_offsets")


def test_a_topic_entry_that_is_no_mapping_is_a_type_error():
    with pytest.raises(TypeError, match=r"starting_offsets\['orders'\] must map partitions"):
        parse_offsets('{"orders": 5}', TOPIC, "starting_offsets")


@pytest.mark.parametrize(
    "spec",
    [{0: 1, "x": 2}, {1.5: 10}, {True: 3}, {None: 1}, {(0,): 1}],
    ids=["word", "float", "bool", "none", "tuple"],
)
def test_a_key_that_is_no_partition_number_is_refused(spec):
    """A float or bool key is not silently truncated to a partition number."""
    with pytest.raises(ValueError, match="is not a partition number"):
        parse_offsets(spec, TOPIC, "starting_offsets")


@pytest.mark.parametrize("spec", [{-1: 5}, '{"orders": {"-3": 5}}', {"-1": 0}])
def test_a_negative_partition_is_refused(spec):
    with pytest.raises(ValueError, match=r"partition -\d is negative"):
        parse_offsets(spec, TOPIC, "starting_offsets")


@pytest.mark.parametrize("offset", [-3, -100, 1.0, "5", True, False, None, [1]])
def test_an_offset_that_is_no_int_of_at_least_minus_two_is_refused(offset):
    with pytest.raises(ValueError, match=r"offset of partition 4 must be an int >= 0, or -2") as e:
        parse_offsets({4: offset}, TOPIC, "ending_offsets")
    assert str(e.value).startswith("ending_offsets:")


partition_offsets = st.dictionaries(st.integers(0, 50), st.integers(-2, 10**12), max_size=8)


@given(partition_offsets)
def test_dict_topic_partition_and_spark_json_forms_parse_alike(offsets):
    """The same offsets given as {p: o}, {TopicPartition: o}, Spark's JSON or JSON keyed by
    partition parse to the same {partition: offset}."""
    spark_json = json.dumps({TOPIC: {str(p): o for p, o in offsets.items()}})
    by_partition_json = json.dumps({str(p): o for p, o in offsets.items()})
    forms = [offsets, {TP(TOPIC, p): o for p, o in offsets.items()}, spark_json, by_partition_json]
    for form in forms:
        assert parse_offsets(form, TOPIC, "starting_offsets") == offsets


# -- check_isolation_level ---------------------------------------------------------------------


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_known_isolation_levels_pass_through(level):
    assert check_isolation_level(level) == level


@pytest.mark.parametrize("level", ["READ_COMMITTED", "committed", "", None])
def test_an_unknown_isolation_level_is_refused_listing_the_known_ones(level):
    with pytest.raises(ValueError, match="must be one of read_uncommitted, read_committed") as e:
        check_isolation_level(level)
    assert repr(level) in str(e.value)


# -- resolve_range -----------------------------------------------------------------------------

BOUNDS = {0: PB(0, 100, 80), 1: PB(10, 50, 50)}


def test_earliest_to_latest_reads_from_each_log_start_to_its_high_watermark():
    assert resolve_range(TOPIC, BOUNDS, EARLIEST, LATEST, False) == {0: (0, 100), 1: (10, 50)}


def test_read_committed_ends_at_the_last_stable_offset():
    assert resolve_range(TOPIC, BOUNDS, EARLIEST, LATEST, True) == {0: (0, 80), 1: (10, 50)}


def test_partitions_not_named_read_from_earliest_and_to_latest():
    ranges = resolve_range(TOPIC, BOUNDS, {1: 20}, {0: 30}, False)
    assert ranges == {0: (0, 30), 1: (20, 50)}


def test_per_partition_minus_two_and_minus_one_resolve_to_the_bounds():
    ranges = resolve_range(TOPIC, BOUNDS, {0: EARLIEST, 1: EARLIEST}, {0: LATEST, 1: 30}, True)
    assert ranges == {0: (0, 80), 1: (10, 30)}


def test_an_empty_range_is_allowed():
    assert resolve_range(TOPIC, BOUNDS, {0: 40}, {0: 40}, False)[0] == (40, 40)


def test_a_topic_with_no_partition_bounds_reads_nothing():
    assert resolve_range(TOPIC, {}, EARLIEST, LATEST, False) == {}


def test_a_batch_read_starting_at_latest_is_refused():
    with pytest.raises(ValueError, match="starting_offsets='latest' reads nothing"):
        resolve_range(TOPIC, BOUNDS, LATEST, LATEST, False)


def test_a_batch_read_ending_at_earliest_is_refused():
    with pytest.raises(ValueError, match="ending_offsets='earliest' reads nothing"):
        resolve_range(TOPIC, BOUNDS, EARLIEST, EARLIEST, False)


def test_one_partition_starting_at_latest_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"starting offset -1 \(latest\) of partition 1"):
        resolve_range(TOPIC, BOUNDS, {1: LATEST}, LATEST, False)


def test_one_partition_ending_at_earliest_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"ending offset -2 \(earliest\) of partition 0"):
        resolve_range(TOPIC, BOUNDS, EARLIEST, {0: EARLIEST}, False)


@pytest.mark.parametrize("option", ["starting_offsets", "ending_offsets"])
def test_offsets_of_partitions_the_topic_lacks_are_out_of_range(option):
    given_offsets = {0: 5, 7: 5, 9: 1}
    starting = given_offsets if option == "starting_offsets" else EARLIEST
    ending = given_offsets if option == "ending_offsets" else LATEST
    with pytest.raises(OffsetOutOfRange, match=rf"{option} names partitions \[7, 9\]") as e:
        resolve_range(TOPIC, BOUNDS, starting, ending, False)
    assert "partitions 0..1" in str(e.value)


def test_a_start_below_the_log_start_is_out_of_range_and_says_records_were_deleted():
    with pytest.raises(OffsetOutOfRange, match="starting offset 5 of orders-1 is below its log "
                                               r"start 10 \(those records were deleted\)"):
        resolve_range(TOPIC, BOUNDS, {1: 5}, LATEST, False)


def test_an_end_past_the_high_watermark_is_out_of_range():
    with pytest.raises(OffsetOutOfRange, match=r"ending offset 101 of orders-0 is past what is "
                                               r"readable \(100\)"):
        resolve_range(TOPIC, BOUNDS, EARLIEST, {0: 101}, False)


def test_read_committed_may_not_end_past_the_last_stable_offset():
    assert resolve_range(TOPIC, BOUNDS, EARLIEST, {0: 90}, False)[0] == (0, 90)
    with pytest.raises(OffsetOutOfRange, match=r"ending offset 90 of orders-0 is past what is "
                                               r"readable \(80\)"):
        resolve_range(TOPIC, BOUNDS, EARLIEST, {0: 90}, True)


def test_a_start_after_the_end_is_out_of_range():
    with pytest.raises(OffsetOutOfRange, match="starting offset 30 of orders-0 is after its "
                                               "ending offset 20"):
        resolve_range(TOPIC, BOUNDS, {0: 30}, {0: 20}, False)


bounds_strategy = st.dictionaries(
    st.integers(0, 6),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000)).map(
        lambda t: PB(min(t), max(t), sorted(t)[1])
    ),
    max_size=5,
)


@given(bounds_strategy, st.booleans(), st.data())
def test_resolved_ranges_lie_within_what_each_partition_holds(bounds, committed_only, data):
    starting = {p: data.draw(st.integers(b.log_start, b.stable_end)) for p, b in bounds.items()}
    ranges = resolve_range(TOPIC, bounds, starting, LATEST, committed_only)
    assert set(ranges) == set(bounds)
    for p, (start, end) in ranges.items():
        b = bounds[p]
        assert b.log_start <= start == starting[p] <= end
        assert end == (b.stable_end if committed_only else b.high_watermark)


# -- split_ranges ------------------------------------------------------------------------------


def test_a_range_splits_into_even_blocks_of_at_most_max_records():
    assert split_ranges({0: (0, 10)}, 4) == [(0, 0, 3), (0, 3, 6), (0, 6, 10)]


def test_a_range_that_fits_is_one_block():
    assert split_ranges({2: (5, 9), 0: (0, 4)}, 4) == [(0, 0, 4), (2, 5, 9)]


def test_empty_ranges_give_no_blocks():
    assert split_ranges({0: (7, 7), 1: (3, 3)}, 10, min_blocks=5) == []
    assert split_ranges({}, 10) == []


def test_min_blocks_splits_the_largest_range_first():
    blocks = split_ranges({0: (0, 100), 1: (0, 10)}, 1000, min_blocks=3)
    assert blocks == [(0, 0, 50), (0, 50, 100), (1, 0, 10)]


def test_min_blocks_beyond_the_records_gives_one_block_per_record():
    assert split_ranges({0: (10, 13)}, 100, min_blocks=10) == [(0, 10, 11), (0, 11, 12),
                                                              (0, 12, 13)]  # fmt: skip


@pytest.mark.parametrize("max_records", [0, -1])
def test_max_records_below_one_is_refused(max_records):
    with pytest.raises(ValueError, match=f"max_records_per_block must be >= 1, not {max_records}"):
        split_ranges({0: (0, 10)}, max_records)


@pytest.mark.parametrize("min_blocks", [0, -3])
def test_min_blocks_below_one_is_refused(min_blocks):
    with pytest.raises(ValueError, match=f"min_partitions must be >= 1, not {min_blocks}"):
        split_ranges({0: (0, 10)}, 5, min_blocks)


ranges_strategy = st.dictionaries(
    st.integers(0, 20),
    st.tuples(st.integers(0, 10_000), st.integers(0, 400)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=6,
)


@given(ranges_strategy, st.integers(1, 500), st.integers(1, 60))
def test_split_ranges_covers_every_range_once_in_contiguous_blocks_within_the_limits(
    ranges, max_records, min_blocks
):
    """Blocks are non-empty, at most max_records, in (partition, offset) order, cover each
    non-empty range exactly once without gaps, and number at least min_blocks when there are
    that many records, and no more than needed."""
    blocks = split_ranges(ranges, max_records, min_blocks)
    total = sum(end - start for start, end in ranges.values())
    assert blocks == sorted(blocks)
    for p, start, end in blocks:
        assert 0 < end - start <= max_records
    for p, (start, end) in ranges.items():
        mine = [(s, e) for q, s, e in blocks if q == p]
        if end == start:
            assert mine == []
            continue
        assert mine[0][0] == start and mine[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert {p for p, _s, _e in blocks} == {p for p, (s, e) in ranges.items() if e > s}
    needed = sum(-(-(end - start) // max_records) for start, end in ranges.values())
    assert len(blocks) == max(needed, min(min_blocks, total))
