"""Kafka's topic-name rules and the rack-unaware replica placement."""

from __future__ import annotations

import collections
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.placement import assign_replicas
from rafka.cluster.topics import (
    CONSUMER_OFFSETS,
    MAX_NAME_LENGTH,
    TRANSACTION_STATE,
    collision_key,
    is_internal,
    validate_topic_name,
)
from rafka.errors import InvalidReplicationFactor, InvalidTopic

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
