"""Consumer-group partition assignors: Kafka's documented examples, validity, balance and
stickiness properties, the cooperative two-round protocol, and strategy configuration."""

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients.assignors import (
    ASSIGNORS,
    DEFAULT_STRATEGY,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    make_assignors,
    rebalance_protocol,
    revoked_partitions,
)
from rafka.errors import InvalidConfig
from rafka.types import TopicPartition

ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
EAGER = [RangeAssignor, RoundRobinAssignor, StickyAssignor]
STICKY = [StickyAssignor, CooperativeStickyAssignor]
TOPICS = ["t0", "t1", "t2", "t3"]


def tps(spec: str) -> list[TopicPartition]:
    """'t0p0 t1p2' -> [TopicPartition('t0', 0), TopicPartition('t1', 2)]."""
    out = []
    for item in spec.split():
        topic, partition = item.split("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


def all_partitions(counts, subscriptions):
    topics = {t for s in subscriptions.values() for t in s.topics if t in counts}
    return {TopicPartition(t, p) for t in topics for p in range(counts[t])}


def check_valid(counts, subscriptions, result, exactly_once=True):
    """Every member is a key, lists are sorted, members get only their topics' partitions,
    and every subscribed partition is assigned exactly (or at most) once."""
    assert set(result) == set(subscriptions)
    given_out = Counter()
    for member, assigned in result.items():
        assert assigned == sorted(assigned)
        for tp in assigned:
            assert tp.topic in subscriptions[member].topics
            assert 0 <= tp.partition < counts[tp.topic]
        given_out.update(assigned)
    assert all(n == 1 for n in given_out.values())
    if exactly_once:
        assert set(given_out) == all_partitions(counts, subscriptions)


def valid_owners(counts, subscriptions):
    """partition -> the one member claiming it at the highest generation among its claimants."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for m, s in subscriptions.items():
        for tp in set(s.owned_partitions):
            if tp.topic in s.topics and tp.partition < counts.get(tp.topic, 0):
                claims.setdefault(tp, []).append((s.generation, m))
    owners = {}
    for tp, claimants in claims.items():
        top = max(g for g, _ in claimants)
        holders = [m for g, m in claimants if g == top]
        if len(holders) == 1:
            owners[tp] = holders[0]
    return owners


def follow_up(subscriptions, result, generation):
    """The next round's subscriptions: each member now owns what it was just assigned."""
    return {m: s._replace(owned_partitions=tuple(result[m]), generation=generation)
            for m, s in subscriptions.items()}


@st.composite
def groups(draw, same_topics=False, with_owned=True):
    """Partition counts, and subscriptions possibly naming a missing topic, static ids and
    (possibly conflicting, stale or invalid) owned partitions."""
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS[: draw(st.integers(1, len(TOPICS)))]}
    n = draw(st.integers(1, 7))
    common = tuple(draw(st.lists(st.sampled_from(TOPICS + ["ghost"]), min_size=1, unique=True)))
    claimable = [TopicPartition(t, p) for t in TOPICS + ["ghost"] for p in range(11)]
    subscriptions = {}
    for i in range(n):
        topics = common if same_topics else tuple(
            draw(st.lists(st.sampled_from(TOPICS + ["ghost"]), max_size=3, unique=True)))
        owned = tuple(draw(st.lists(st.sampled_from(claimable), max_size=8, unique=True))
                      ) if with_owned else ()
        subscriptions[f"m{i}"] = Subscription(
            topics, owned, draw(st.integers(-1, 3)),
            draw(st.sampled_from([None, f"static-{n - i}"])))
    return counts, subscriptions


def balanced_start(counts, members):
    """A balanced, valid assignment of ``counts`` over ``members`` at generation 1."""
    subscriptions = {m: Subscription(tuple(counts)) for m in members}
    result = RoundRobinAssignor().assign(counts, subscriptions)
    return follow_up(subscriptions, result, 1)


# -- Kafka's documented examples ---------------------------------------------------------


def test_range_gives_contiguous_ranges_with_extras_first_as_kafka_documents():
    """Two members on t0 and t1 with three partitions each: C0 gets two of each, C1 one."""
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_roundrobin_deals_all_partitions_in_turn_as_kafka_documents():
    """Two members on t0 and t1 with three partitions each get alternating partitions."""
    subs = {"C1": Subscription(("t0", "t1")), "C0": Subscription(("t0", "t1"))}
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)
    assert result == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}


def test_roundrobin_skips_members_not_subscribed_as_kafka_documents():
    """Kafka's unequal example: C0 on t0, C1 on t0,t1, C2 on t0,t1,t2 (1, 2, 3 partitions)."""
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")),
            "C2": Subscription(("t0", "t1", "t2"))}
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert result == {"C0": tps("t0p0"), "C1": tps("t1p0"),
                      "C2": tps("t1p1 t2p0 t2p1 t2p2")}


def test_sticky_keeps_every_partition_when_a_member_leaves_as_kafka_documents():
    """Kafka's sticky example: after C1 leaves, C0 and C2 keep all they had and split C1's."""
    owned = {"C0": "t0p0 t1p1 t3p0", "C2": "t1p0 t2p1"}
    subs = {m: Subscription(tuple(TOPICS), tuple(tps(o)), 1) for m, o in owned.items()}
    result = StickyAssignor().assign(dict.fromkeys(TOPICS, 2), subs)
    check_valid(dict.fromkeys(TOPICS, 2), subs, result)
    assert [len(v) for v in result.values()] == [4, 4]
    for m, o in owned.items():
        assert set(tps(o)) <= set(result[m])


def test_sticky_general_case_matches_kafka_documented_example():
    """Unequal subscriptions: a fresh assignment, then C0 leaving, give Kafka's results."""
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")),
            "C2": Subscription(("t0", "t1", "t2"))}
    first = StickyAssignor().assign(counts, subs)
    assert first == {"C0": tps("t0p0"), "C1": tps("t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}
    del subs["C0"]
    second = StickyAssignor().assign(counts, follow_up(subs, first, 1))
    assert second == {"C1": tps("t0p0 t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}


def test_range_and_roundrobin_order_static_members_by_instance_id_before_dynamic_ones():
    """Static members sort by group.instance.id ahead of dynamic ones, whatever their ids."""
    subs = {"a": Subscription(("t0",)), "z": Subscription(("t0",), group_instance_id="i1"),
            "y": Subscription(("t0",), group_instance_id="i0")}
    assert RangeAssignor().assign({"t0": 3}, subs) == {
        "y": tps("t0p0"), "z": tps("t0p1"), "a": tps("t0p2")}
    assert RoundRobinAssignor().assign({"t0": 4}, subs) == {
        "y": tps("t0p0 t0p3"), "z": tps("t0p1"), "a": tps("t0p2")}


# -- validity properties, every assignor -------------------------------------------------


@pytest.mark.parametrize("cls", EAGER)
@given(group=groups())
def test_eager_assignors_assign_every_subscribed_partition_exactly_once(cls, group):
    """Each partition of each subscribed, existing topic goes to exactly one subscriber."""
    counts, subs = group
    check_valid(counts, subs, cls().assign(counts, subs))


@given(group=groups())
def test_cooperative_assigns_at_most_once_and_never_what_another_member_owns(group):
    """One cooperative round never hands out a partition whose valid owner is someone else."""
    counts, subs = group
    result = CooperativeStickyAssignor().assign(counts, subs)
    check_valid(counts, subs, result, exactly_once=False)
    owners = valid_owners(counts, subs)
    for m, assigned in result.items():
        assert all(owners.get(tp, m) == m for tp in assigned)


@given(group=groups())
def test_cooperative_assigns_every_partition_exactly_once_after_the_follow_up_round(group):
    """Feeding round one back as owned partitions, round two assigns everything, revoking
    nothing."""
    counts, subs = group
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(counts, subs)
    second = assignor.assign(counts, follow_up(subs, first, 10))
    check_valid(counts, subs, second)
    for m in subs:
        assert revoked_partitions(first[m], second[m], "cooperative") == set()


@pytest.mark.parametrize("cls", ALL)
@given(group=groups(), seed=st.integers(0, 2**32))
def test_assignment_does_not_depend_on_subscription_order(cls, group, seed):
    """Shuffling the subscriptions dict gives the same assignment."""
    counts, subs = group
    items = list(subs.items())
    random.Random(seed).shuffle(items)
    assert cls().assign(counts, dict(items)) == cls().assign(counts, subs)


@pytest.mark.parametrize("cls", ALL)
def test_missing_topics_and_empty_subscriptions_get_nothing(cls):
    """Topics absent from the metadata are ignored; a member subscribed to nothing gets []."""
    subs = {"a": Subscription(()), "b": Subscription(("later",)), "c": Subscription(("t0",))}
    assert cls().assign({"t0": 2}, subs) == {"a": [], "b": [], "c": tps("t0p0 t0p1")}
    assert cls().assign({}, {}) == {}


@pytest.mark.parametrize("cls", ALL)
def test_negative_partition_count_is_rejected(cls):
    """A negative partition count raises ValueError."""
    with pytest.raises(ValueError, match="negative"):
        cls().assign({"t0": -1}, {"a": Subscription(("t0",))})


# -- balance --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RoundRobinAssignor, StickyAssignor])
@given(group=groups(same_topics=True))
def test_identical_subscriptions_give_counts_within_one(cls, group):
    """With identical subscriptions, member counts differ by at most one."""
    counts, subs = group
    sizes = [len(v) for v in cls().assign(counts, subs).values()]
    assert max(sizes) - min(sizes) <= 1


@given(group=groups(same_topics=True))
def test_cooperative_is_balanced_within_one_after_the_follow_up_round(group):
    """Cooperative-sticky reaches a within-one balance once revoked partitions are handed on."""
    counts, subs = group
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(counts, subs)
    sizes = [len(v) for v in assignor.assign(counts, follow_up(subs, first, 10)).values()]
    assert max(sizes) - min(sizes) <= 1


@given(group=groups(same_topics=True, with_owned=False))
def test_range_is_balanced_within_one_per_topic(group):
    """Range gives each subscriber of a topic a share of it within one of the others."""
    counts, subs = group
    result = RangeAssignor().assign(counts, subs)
    for topic in set(subs["m0"].topics) & set(counts):
        sizes = [sum(tp.topic == topic for tp in v) for v in result.values()]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("cls", STICKY)
@given(group=groups())
def test_sticky_balances_as_well_as_the_subscriptions_allow(cls, group):
    """No chain of hand-overs leads from a member to one with two fewer partitions (so the
    largest load and the sum of squared loads are as small as any valid assignment's)."""
    counts, subs = group
    assignor = cls()
    result = assignor.assign(counts, subs)
    if cls is CooperativeStickyAssignor:
        result = assignor.assign(counts, follow_up(subs, result, 10))
    load = {m: len(v) for m, v in result.items()}
    for source in subs:
        reachable, frontier = {source}, [source]
        while frontier:
            topics = {tp.topic for tp in result[frontier.pop()]}
            for m, s in subs.items():
                if m not in reachable and topics & set(s.topics):
                    reachable.add(m)
                    frontier.append(m)
        assert min(load[m] for m in reachable) >= load[source] - 1


def test_sticky_balances_through_a_chain_of_members():
    """A overloaded on t0 and C underloaded on t1 are balanced through B, on both topics."""
    subs = {"A": Subscription(("t0",), tuple(tps("t0p0 t0p1 t0p2")), 1),
            "B": Subscription(("t0", "t1"), tuple(tps("t0p3 t1p0")), 1),
            "C": Subscription(("t1",), tuple(tps("t1p1")), 1)}
    result = StickyAssignor().assign({"t0": 4, "t1": 2}, subs)
    assert [len(v) for v in result.values()] == [2, 2, 2]
    assert sum(len(set(v) & set(subs[m].owned_partitions)) for m, v in result.items()) == 4


# -- stickiness -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", STICKY)
@given(counts=st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1),
       size=st.integers(1, 8), change=st.sampled_from(["add", "remove"]),
       which=st.integers(0, 100))
def test_adding_or_removing_a_member_moves_only_the_minimum(cls, counts, size, change, which):
    """Every survivor keeps min(owned, new count) of its partitions, as many as balance allows."""
    subs = balanced_start(counts, [f"m{i}" for i in range(size)])
    if change == "add":
        subs["new"] = Subscription(tuple(counts))
    elif size > 1:
        del subs[f"m{which % size}"]
    target = StickyAssignor().assign(counts, subs)
    sizes = sorted(len(v) for v in target.values())
    assert sizes[-1] - sizes[0] <= 1
    owned = {m: set(s.owned_partitions) for m, s in subs.items()}
    for m, assigned in target.items():
        assert len(owned[m] & set(assigned)) == min(len(owned[m]), len(assigned))
    minimum, extra = divmod(sum(counts.values()), len(subs))
    best = sum(min(len(o), minimum) for o in owned.values()) + min(
        extra, sum(len(o) > minimum for o in owned.values()))
    assert sum(len(owned[m] & set(v)) for m, v in target.items()) == best
    result = cls().assign(counts, subs)
    for m in subs:
        assert owned[m] & set(result[m]) == owned[m] & set(target[m])


@pytest.mark.parametrize("cls", STICKY)
def test_conflicting_claims_go_to_the_higher_generation(cls):
    """Two members claiming one partition: the higher generation keeps it."""
    subs = {"a": Subscription(("t0",), tuple(tps("t0p1")), 4),
            "b": Subscription(("t0",), tuple(tps("t0p1")), 5)}
    assert cls().assign({"t0": 2}, subs) == {"a": tps("t0p0"), "b": tps("t0p1")}


def test_claims_tied_at_the_highest_generation_are_all_dropped():
    """Two same-generation claims on one partition count as nobody owning it: the sticky
    assignor hands it out at once; the cooperative one holds it back until neither claims it,
    since both may still be reading it."""
    subs = {"a": Subscription(("t0",)), "b": Subscription(("t0",), tuple(tps("t0p0")), 3),
            "c": Subscription(("t0",), tuple(tps("t0p0")), 3)}
    assert StickyAssignor().assign({"t0": 1}, subs) == {"a": tps("t0p0"), "b": [], "c": []}
    result = CooperativeStickyAssignor().assign({"t0": 1}, subs)
    assert result == {"a": [], "b": [], "c": []}
    after = {m: Subscription(("t0",), (), 4) for m in subs}  # b and c revoked it
    assert sum(map(len, CooperativeStickyAssignor().assign({"t0": 1}, after).values())) == 1


def test_claims_on_unsubscribed_or_missing_partitions_are_dropped():
    """Owned partitions of a dropped topic, a missing topic or past the count do not count as
    owned; the cooperative assignor still holds a claimed partition back from the others
    (its claimant may still be reading it) until the claim is gone."""
    subs = {"a": Subscription(("t0",), tuple(tps("t1p0 t0p5 gonep0")), 7),
            "b": Subscription(("t1",))}
    assert StickyAssignor().assign({"t0": 1, "t1": 1}, subs) == {
        "a": tps("t0p0"), "b": tps("t1p0")}  # fmt: skip
    result = CooperativeStickyAssignor().assign({"t0": 1, "t1": 1}, subs)
    assert result == {"a": tps("t0p0"), "b": []}
    subs["a"] = Subscription(("t0",), tuple(tps("t0p0")), 8)
    result = CooperativeStickyAssignor().assign({"t0": 1, "t1": 1}, subs)
    assert result == {"a": tps("t0p0"), "b": tps("t1p0")}


@given(group=groups())
def test_cooperative_never_hands_a_claimed_partition_to_another_member(group):
    """Whatever the claims, a partition goes to a member only if no other member claims it,
    or the member is its valid owner."""
    counts, subs = group
    owners = valid_owners(counts, subs)
    for m, given in CooperativeStickyAssignor().assign(counts, subs).items():
        for tp in given:
            others = {o for o, s in subs.items() if o != m and tp in set(s.owned_partitions)}
            assert owners.get(tp) == m or not others, (tp, m, others)


# -- cooperative protocol -------------------------------------------------------------


def test_cooperative_joiner_gets_partitions_only_in_the_second_round():
    """A new member gets nothing while others still own its share, then gets its share."""
    counts = {"t0": 4, "t1": 2}
    subs = balanced_start(counts, ["m0", "m1"])
    subs["m2"] = Subscription(tuple(counts))
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(counts, subs)
    assert first["m2"] == []
    assert sum(map(len, first.values())) == 4
    second = assignor.assign(counts, follow_up(subs, first, 2))
    assert [len(v) for v in second.values()] == [2, 2, 2]
    check_valid(counts, subs, second)


@given(group=groups())
def test_cooperative_revokes_only_partitions_that_move_elsewhere(group):
    """A valid owner revokes exactly the partitions the sticky target gives to someone else."""
    counts, subs = group
    result = CooperativeStickyAssignor().assign(counts, subs)
    target = StickyAssignor().assign(counts, subs)
    owners = valid_owners(counts, subs)
    for m in subs:
        assert set(result[m]) <= set(target[m])
        owned = {tp for tp, o in owners.items() if o == m}
        assert revoked_partitions(owned, result[m], "cooperative") == owned - set(target[m])


def test_revoked_partitions_by_protocol():
    """Eager revokes everything owned; cooperative only what was not assigned again."""
    owned, assigned = tps("t0p0 t0p1"), tps("t0p1 t0p2")
    assert revoked_partitions(owned, assigned, "eager") == set(owned)
    assert revoked_partitions(owned, assigned, "cooperative") == set(tps("t0p0"))
    with pytest.raises(ValueError):
        revoked_partitions(owned, assigned, "lazy")


# -- configuration --------------------------------------------------------------------


def test_make_assignors_accepts_names_classes_instances_and_lists():
    """Names (also comma-separated or Kafka class names), classes and instances all work."""
    assert [a.name for a in make_assignors(DEFAULT_STRATEGY)] == ["range", "cooperative-sticky"]
    assert [a.name for a in make_assignors()] == ["range", "cooperative-sticky"]
    assert [type(a) for a in make_assignors("sticky")] == [StickyAssignor]
    assert [a.name for a in make_assignors("roundrobin, range")] == ["roundrobin", "range"]
    mine = RangeAssignor()
    assert make_assignors([mine, RoundRobinAssignor])[0] is mine
    assert [a.name for a in make_assignors(
        ["org.apache.kafka.clients.consumer.CooperativeStickyAssignor"])] == [
        "cooperative-sticky"]
    assert {n: c.name for n, c in ASSIGNORS.items()} == {
        "range": "range", "roundrobin": "roundrobin", "sticky": "sticky",
        "cooperative-sticky": "cooperative-sticky"}


@pytest.mark.parametrize("strategy", [[], "", "fancy", ["range", "fancy"], ["range", "range"],
                                      [42], None, Assignor])
def test_make_assignors_rejects_unknown_empty_and_duplicate_strategies(strategy):
    """Unknown names, empty lists and repeated assignors raise InvalidConfig."""
    with pytest.raises(InvalidConfig):
        make_assignors(strategy)


def test_unknown_assignor_error_lists_the_known_names():
    """The error for an unknown name says which names are known."""
    with pytest.raises(InvalidConfig, match="range, roundrobin, sticky, cooperative-sticky"):
        make_assignors("fancy")


def test_rebalance_protocol_is_cooperative_only_if_every_assignor_is():
    """Kafka picks the protocol all assignors support: eager unless every one is cooperative."""
    assert rebalance_protocol(make_assignors("cooperative-sticky")) == "cooperative"
    assert rebalance_protocol(make_assignors(DEFAULT_STRATEGY)) == "eager"
    assert rebalance_protocol(make_assignors(["sticky", "roundrobin"])) == "eager"
    with pytest.raises(InvalidConfig):
        rebalance_protocol([])


# -- scale ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL)
def test_thousand_partitions_over_a_hundred_members_assign_validly(cls):
    """1,000 partitions over 100 members, half moving and with unequal subscriptions, get a
    valid assignment (the search over moves terminates at this scale)."""
    counts = {f"t{i}": 100 for i in range(10)}
    rng = random.Random(7)
    subs = {}
    for i in range(100):
        topics = tuple(counts) if i % 2 else tuple(rng.sample(sorted(counts), 4))
        first = i // 10 * 10
        owned = tuple(TopicPartition(f"t{i % 10}", p) for p in range(first, first + 10))
        subs[f"member-{i:03}"] = Subscription(topics, owned, 1)
    for members in (subs, {m: s._replace(topics=tuple(counts)) for m, s in subs.items()}):
        result = cls().assign(counts, members)
        check_valid(counts, members, result, exactly_once=cls is not CooperativeStickyAssignor)
