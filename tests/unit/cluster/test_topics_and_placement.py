"""Kafka's topic-name rules and the replica placement, rack-unaware and rack-aware."""

from __future__ import annotations

import collections
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.placement import assign_replicas, rack_alternated
from rafka.cluster.topics import (
    CONSUMER_OFFSETS,
    MAX_NAME_LENGTH,
    TRANSACTION_STATE,
    collision_key,
    is_internal,
    validate_topic_name,
)
from rafka.errors import InvalidReplicaAssignment, InvalidReplicationFactor, InvalidTopic

LEGAL = string.ascii_letters + string.digits + "._-"

# -- topic names -------------------------------------------------------------------------------


@given(st.text(LEGAL, min_size=1, max_size=MAX_NAME_LENGTH).filter(lambda n: n not in (".", "..")))
def test_any_name_of_legal_characters_up_to_249_is_accepted(name):
    """Names of 1-249 characters from [a-zA-Z0-9._-] (other than '.' and '..') pass and come
    back unchanged."""
    assert validate_topic_name(name) == name


def test_a_249_character_name_is_accepted_and_250_refused():
    """249 characters is the limit; the error says the length and the limit."""
    assert MAX_NAME_LENGTH == 249
    assert validate_topic_name("a" * 249) == "a" * 249
    mixed = (LEGAL * 4)[:249]
    assert len(mixed) == 249 and validate_topic_name(mixed) == mixed
    with pytest.raises(InvalidTopic, match="250 characters.*249"):
        validate_topic_name("a" * 250)


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_and_dot_dot_are_refused(name):
    """'.' and '..' would be directory names, not topics."""
    with pytest.raises(InvalidTopic, match="cannot be"):
        validate_topic_name(name)


def test_empty_name_is_refused():
    with pytest.raises(InvalidTopic, match="empty"):
        validate_topic_name("")


@pytest.mark.parametrize(
    "name, bad", [("my topic", " "), ("a\tb", "\t"), ("tópico", "ó"), ("日本", "日"),
                  ("a/b", "/"), ("a:b", ":"), ("a\nb", "\n")],
)  # fmt: skip
def test_names_with_spaces_or_non_ascii_or_other_characters_are_refused(name, bad):
    """Any character outside [a-zA-Z0-9._-] is refused, and the error shows it."""
    with pytest.raises(InvalidTopic, match="legal characters") as info:
        validate_topic_name(name)
    assert repr(bad).strip("'") in str(info.value) or bad in str(info.value)


@given(
    st.text(min_size=1, max_size=30)
    .filter(lambda n: any(c not in LEGAL for c in n))
)
def test_any_name_with_an_illegal_character_is_refused(name):
    """Every name holding a character outside the legal set raises InvalidTopic."""
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["orders\n", "a.b-c_9\n"])
def test_a_name_ending_in_a_newline_is_refused(name):
    """A trailing newline is an illegal character like any other."""
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


@pytest.mark.parametrize("name", [None, 7, b"orders", ["orders"], 1.5])
def test_names_that_are_not_str_are_refused_naming_the_type(name):
    with pytest.raises(InvalidTopic, match=type(name).__name__):
        validate_topic_name(name)


def test_internal_topics_are_the_offsets_and_transaction_topics():
    assert is_internal(CONSUMER_OFFSETS) and is_internal(TRANSACTION_STATE)
    assert not is_internal("orders") and not is_internal("__consumer_offsets2")


def test_collision_key_equates_dot_and_underscore_only():
    assert collision_key("a.b_c") == collision_key("a_b.c") == "a_b_c"
    assert collision_key("a-b") != collision_key("a_b")


# -- replica placement -------------------------------------------------------------------------

brokers_st = st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True)


@given(brokers_st, st.data(), st.text(min_size=1, max_size=32), st.integers(1, 60))
def test_every_replica_list_has_rf_distinct_live_brokers(brokers, data, topic_id, count):
    """Each partition gets exactly rf replicas, all different, all among the brokers."""
    rf = data.draw(st.integers(1, len(brokers)))
    plan = assign_replicas(topic_id, 0, count, rf, brokers)
    assert sorted(plan) == list(range(count))
    for replicas in plan.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@given(brokers_st, st.data(), st.text(min_size=1, max_size=32), st.integers(0, 50))
def test_leaders_spread_evenly_over_the_brokers(brokers, data, topic_id, first):
    """Over any run of consecutive partitions, leader counts per broker differ by at most
    one; over a multiple of the broker count every broker leads equally often and holds
    equally many replicas."""
    rf = data.draw(st.integers(1, len(brokers)))
    n = len(brokers)
    count = data.draw(st.integers(1, 5 * n))
    plan = assign_replicas(topic_id, first, count, rf, brokers)
    leaders = collections.Counter(replicas[0] for replicas in plan.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    whole = assign_replicas(topic_id, first, 3 * n, rf, brokers)
    assert collections.Counter(r[0] for r in whole.values()) == {b: 3 for b in brokers}
    held = collections.Counter(b for r in whole.values() for b in r)
    assert held == {b: 3 * rf for b in brokers}


def test_many_partitions_over_few_brokers_give_near_equal_leader_counts():
    """1000 partitions on 7 brokers: each broker leads 142 or 143."""
    plan = assign_replicas("orders-id", 0, 1000, 3, list(range(7)))
    counts = collections.Counter(r[0] for r in plan.values())
    assert set(counts.values()) <= {142, 143} and sum(counts.values()) == 1000


@given(brokers_st, st.text(max_size=32), st.integers(0, 20), st.integers(1, 30), st.data())
def test_placement_is_deterministic_for_a_topic_id(brokers, topic_id, first, count, data):
    """The same topic id, brokers and range give the same plan, whatever the broker order."""
    rf = data.draw(st.integers(1, len(brokers)))
    plan = assign_replicas(topic_id, first, count, rf, brokers)
    assert plan == assign_replicas(topic_id, first, count, rf, list(brokers))
    assert plan == assign_replicas(topic_id, first, count, rf, list(reversed(brokers)))


def test_different_topic_ids_start_on_different_brokers():
    """The starting broker comes from the topic id, so topics do not all lead on one broker."""
    starts = {assign_replicas(f"topic-{i}", 0, 1, 1, list(range(5)))[0][0] for i in range(50)}
    assert len(starts) > 1


@given(brokers_st, st.text(max_size=32), st.integers(1, 30), st.integers(1, 30), st.data())
def test_added_partitions_continue_the_plan_of_the_first_ones(brokers, topic_id, a, b, data):
    """Placing partitions a..a+b-1 later (first_partition > 0) gives what placing all a+b at
    once would have given; earlier partitions are not touched."""
    rf = data.draw(st.integers(1, len(brokers)))
    whole = assign_replicas(topic_id, 0, a + b, rf, brokers)
    head = assign_replicas(topic_id, 0, a, rf, brokers)
    tail = assign_replicas(topic_id, a, b, rf, brokers)
    assert sorted(tail) == list(range(a, a + b))
    assert {**head, **tail} == whole


@pytest.mark.parametrize("rf, brokers", [(4, [0, 1, 2]), (2, [5]), (1, []), (0, [0]), (-3, [0])])
def test_impossible_replication_factor_raises(rf, brokers):
    """rf above the broker count, or below one, raises InvalidReplicationFactor."""
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas("t", 0, 1, rf, brokers)


def test_replication_factor_equal_to_broker_count_puts_a_replica_everywhere():
    plan = assign_replicas("t", 0, 6, 3, [10, 20, 30])
    assert all(sorted(r) == [10, 20, 30] for r in plan.values())


def test_zero_partitions_is_an_empty_plan():
    assert assign_replicas("t", 4, 0, 1, [0]) == {}


def test_rack_unaware_plan_is_pinned():
    """The rack-unaware plan is Kafka's walk with a fixed shift; these exact lists are what
    rafka has always produced for this topic id (placement must not drift between
    versions, or grown topics would not continue their plan)."""
    assert assign_replicas("orders-id", 0, 6, 3, [0, 1, 2, 3, 4]) == {
        0: [1, 0, 2], 1: [2, 1, 3], 2: [3, 2, 4], 3: [4, 3, 0], 4: [0, 4, 1], 5: [1, 0, 2],
    }


# -- rack-aware placement ----------------------------------------------------------------------


@st.composite
def racked_brokers(draw, equal_racks: bool = False):
    """(brokers, racks): unique broker ids, each with a rack out of 1-5 racks (with
    ``equal_racks``, every rack holds the same number of brokers)."""
    rack_count = draw(st.integers(1, 5))
    if equal_racks:
        per_rack = draw(st.integers(1, 3))
        brokers = draw(st.lists(st.integers(0, 1000), min_size=rack_count * per_rack,
                                max_size=rack_count * per_rack, unique=True))  # fmt: skip
        names = draw(st.permutations([f"rack-{i}" for i in range(rack_count)]))
        return brokers, {b: names[i % rack_count] for i, b in enumerate(brokers)}
    brokers = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    names = [f"rack-{i}" for i in range(rack_count)]
    return brokers, {b: draw(st.sampled_from(names)) for b in brokers}


@given(racked_brokers(), st.data(), st.text(max_size=32), st.integers(0, 40), st.integers(0, 60))
def test_rack_aware_replica_lists_have_rf_distinct_brokers(racked, data, topic_id, first, count):
    """Each partition gets exactly rf replicas, all different, all among the brokers."""
    brokers, racks = racked
    rf = data.draw(st.integers(1, len(brokers)))
    plan = assign_replicas(topic_id, first, count, rf, brokers, racks)
    assert sorted(plan) == list(range(first, first + count))
    for replicas in plan.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@given(racked_brokers(), st.data(), st.text(max_size=32), st.integers(1, 60))
def test_each_partition_spans_as_many_racks_as_it_can(racked, data, topic_id, count):
    """The first min(rf, racks) replicas of every partition are on pairwise different
    racks, so a partition spans exactly min(rf, number of racks) racks."""
    brokers, racks = racked
    rf = data.draw(st.integers(1, len(brokers)))
    spread = min(rf, len(set(racks.values())))
    for replicas in assign_replicas(topic_id, 0, count, rf, brokers, racks).values():
        assert len({racks[b] for b in replicas[:spread]}) == spread
        assert len({racks[b] for b in replicas}) == spread


@given(racked_brokers(), st.data(), st.text(max_size=32), st.integers(0, 50))
def test_rack_aware_leaders_spread_evenly_over_the_brokers(racked, data, topic_id, first):
    """Leaders walk the rack-alternated broker list one partition at a time, so over any
    run of consecutive partitions the brokers' leader counts differ by at most one, and
    over k * brokers consecutive partitions every broker leads exactly k."""
    brokers, racks = racked
    n = len(brokers)
    rf = data.draw(st.integers(1, n))
    count = data.draw(st.integers(1, 5 * n))
    plan = assign_replicas(topic_id, first, count, rf, brokers, racks)
    leaders = collections.Counter(replicas[0] for replicas in plan.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    whole = assign_replicas(topic_id, first, 3 * n, rf, brokers, racks)
    assert collections.Counter(r[0] for r in whole.values()) == {b: 3 for b in brokers}


@given(racked_brokers(equal_racks=True), st.data(), st.text(max_size=32), st.integers(0, 50))
def test_with_equal_racks_leaders_and_replicas_spread_evenly(racked, data, topic_id, first):
    """When every rack holds as many brokers: over any run of consecutive partitions the
    racks' leader counts differ by at most one, and over 3 * brokers consecutive
    partitions every broker holds exactly 3 * rf replicas. (The alternated list then has
    rack i % racks at place i, so which offsets from the leader's place are taken does not
    depend on the leader: the same pattern shifted round once per n partitions.)"""
    brokers, racks = racked
    n = len(brokers)
    rf = data.draw(st.integers(1, n))
    count = data.draw(st.integers(1, 3 * n))
    plan = assign_replicas(topic_id, first, count, rf, brokers, racks)
    by_rack = collections.Counter(racks[r[0]] for r in plan.values())
    counts = [by_rack.get(rack, 0) for rack in set(racks.values())]
    assert max(counts) - min(counts) <= 1
    whole = assign_replicas(topic_id, first, 3 * n, rf, brokers, racks)
    assert collections.Counter(b for r in whole.values() for b in r) == {
        b: 3 * rf for b in brokers
    }


@given(racked_brokers(), st.text(max_size=32), st.integers(0, 20), st.integers(1, 30), st.data())
def test_rack_aware_placement_is_deterministic(racked, topic_id, first, count, data):
    """The same topic id, racks and range give the same plan whatever the order of the
    broker list or of the rack map, and rack entries of other brokers are ignored."""
    brokers, racks = racked
    rf = data.draw(st.integers(1, len(brokers)))
    plan = assign_replicas(topic_id, first, count, rf, brokers, racks)
    shuffled = data.draw(st.permutations(brokers))
    reordered = dict(reversed(list(racks.items())))
    assert plan == assign_replicas(topic_id, first, count, rf, shuffled, reordered)
    extra = {**racks, 5000: "elsewhere", 5001: None}
    assert plan == assign_replicas(topic_id, first, count, rf, brokers, extra)


@given(racked_brokers(), st.text(max_size=32), st.integers(1, 30), st.integers(1, 30), st.data())
def test_rack_aware_added_partitions_continue_the_plan(racked, topic_id, a, b, data):
    """Placing partitions a..a+b-1 later gives what placing all a+b at once would have."""
    brokers, racks = racked
    rf = data.draw(st.integers(1, len(brokers)))
    whole = assign_replicas(topic_id, 0, a + b, rf, brokers, racks)
    head = assign_replicas(topic_id, 0, a, rf, brokers, racks)
    tail = assign_replicas(topic_id, a, b, rf, brokers, racks)
    assert {**head, **tail} == whole


@given(brokers_st, st.text(max_size=32), st.integers(0, 20), st.integers(0, 30), st.data())
def test_no_racks_or_a_single_rack_gives_the_rack_unaware_plan(brokers, topic_id, first,
                                                                 count, data):  # fmt: skip
    """Racks all None, an empty map, or one rack for every broker change nothing: the plan
    is the rack-unaware one, bit for bit."""
    rf = data.draw(st.integers(1, len(brokers)))
    plain = assign_replicas(topic_id, first, count, rf, brokers)
    for racks in (None, {}, dict.fromkeys(brokers), dict.fromkeys(brokers, "only")):
        assert assign_replicas(topic_id, first, count, rf, brokers, racks) == plain


def test_rack_aware_plan_is_pinned():
    """Three racks of two brokers, rf 3: every partition on all three racks, leaders going
    round the racks; the exact lists pin the algorithm."""
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assert assign_replicas("orders", 0, 6, 3, list(racks), racks) == {
        0: [4, 1, 3], 1: [1, 3, 5], 2: [3, 5, 0], 3: [5, 0, 2], 4: [0, 2, 4], 5: [2, 4, 1],
    }


def test_rack_alternated_takes_one_broker_per_rack_in_turn():
    """Racks by name, brokers by id within a rack; a rack that runs out is skipped
    (Kafka's getRackAlternatedBrokerList)."""
    assert rack_alternated({0: "a", 1: "a", 2: "b", 3: "c", 4: "c"}) == [0, 2, 3, 1, 4]
    assert rack_alternated({7: "z", 3: "y", 5: "y", 1: "x"}) == [1, 3, 7, 5]


def test_brokers_with_and_without_racks_are_refused_naming_them():
    """A mix raises InvalidReplicaAssignment naming the brokers without a rack, those with
    one, and the node label that fixes it; a broker missing from the map has no rack."""
    with pytest.raises(InvalidReplicaAssignment) as info:
        assign_replicas("t", 0, 3, 2, [0, 1, 2, 3], {0: "a", 1: None, 2: "b"})
    message = str(info.value)
    assert "broker(s) 1, 3 have no rack" in message
    assert "0 ('a'), 2 ('b')" in message and "--labels rafka-rack=<rack>" in message
    assert InvalidReplicaAssignment.errno == 39


def test_replication_factor_is_checked_before_racks():
    """Too few brokers raises InvalidReplicationFactor even when the racks are mixed."""
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas("t", 0, 1, 3, [0, 1], {0: "a"})
