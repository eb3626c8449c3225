"""Static members (group_instance_id) whose process restarts: the new process takes the
old member's place, its takeover is answered only once written, is undone if the write
fails, and causes a rebalance only when what the member subscribes to changed."""

import pytest

from rafka.cluster.consumer_protocol import encode_assignment, encode_subscription
from rafka.cluster.group import JOIN, SYNC, Group, GroupState
from rafka.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    NotEnoughReplicas,
    UnknownMemberId,
)

from .test_group import CONFIG, DELAY, REBALANCE, SESSION, written

WRITE_FAILED = NotEnoughReplicas("__consumer_offsets-0 has 1 in-sync replica; 2 required")


def sticky(topics=("t",), owned=(), generation=-1) -> list:
    return [("cooperative-sticky", encode_subscription(topics, owned, generation))]


def static_join(group, instance, member_id="", now=0, protocols=None, protocol_type="consumer"):
    return group.join(
        member_id, instance, "c", "host", protocol_type, protocols or sticky(), SESSION,
        REBALANCE, now,
    )  # fmt: skip


def complete(group, assignments: dict, now: int) -> None:
    """The leader syncs ``assignments`` and their record is written: the group is Stable."""
    written(group, group.sync(group.leader_id, None, group.generation, assignments, now), now)
    assert group.state == GroupState.STABLE


def static_group() -> tuple[Group, str, str]:
    """Static members i-a (leader, t-0) and i-b (t-1) in generation 2; each joined
    generation 2 declaring what it owned in generation 1, as a real consumer does."""
    group = Group("g", CONFIG, 0)
    a = static_join(group, "i-a")[0]
    b = static_join(group, "i-b")[0]
    group.tick(DELAY)
    assignment = {a: encode_assignment([("t", 0)]), b: encode_assignment([("t", 1)])}
    complete(group, assignment, 1)
    static_join(group, "i-a", a, now=3, protocols=sticky(owned=[("t", 0)], generation=1))
    static_join(group, "i-b", b, now=3, protocols=sticky(owned=[("t", 1)], generation=1))
    assert group.generation == 2
    complete(group, assignment, 4)
    return group, a, b


# -- the takeover is written before it is answered -----------------------------------------------


def test_a_static_takeover_is_answered_only_after_its_write_succeeds():
    """The new process waits for the group record naming it; the old member id is fenced
    at once; once written, the new member gets generation 2 and the old assignment."""
    group, a, b = static_group()
    new_b, effects = static_join(group, "i-b", now=10)
    assert (new_b, JOIN) not in effects.replies
    (write,) = effects.writes
    assert [m["member_id"] for m in group.metadata_record()["members"]] == [a, new_b]
    with pytest.raises(FencedInstanceId):
        group.heartbeat(b, "i-b", 2, 11)
    replies = group.persisted(write, 12).replies
    result = replies[(new_b, JOIN)]
    assert result.error is None and result.generation == 2 and not result.skip_assignment
    assert group.state == GroupState.STABLE and group.generation == 2
    answer = group.sync(new_b, "i-b", 2, None, 13).replies[(new_b, SYNC)]
    assert answer.assignment == encode_assignment([("t", 1)])


def test_a_failed_takeover_write_puts_the_old_member_back():
    """The record naming the new member id was not written: the old member id is back
    (leader again, same assignment), the new one is unknown, and the new process is
    told to retry (CoordinatorNotAvailable). Memory matches the log again."""
    group, a, b = static_group()
    before = group.metadata_record()
    new_a, effects = static_join(group, "i-a", now=10)
    assert group.leader_id == new_a
    (write,) = effects.writes
    replies = group.persist_failed(write, WRITE_FAILED, 12).replies
    assert isinstance(replies[(new_a, JOIN)].error, CoordinatorNotAvailable)
    assert group.metadata_record() == before
    assert group.leader_id == a and group.static_members["i-a"] == a
    group.heartbeat(a, "i-a", 2, 13)
    with pytest.raises(UnknownMemberId):
        group.heartbeat(new_a, None, 2, 13)
    assert group.state == GroupState.STABLE and group.generation == 2
    retried, effects = static_join(group, "i-a", now=20)  # the retry takes over again
    group.persisted(effects.writes[0], 21)
    assert group.static_members["i-a"] == retried


def test_a_takeover_overtaken_by_a_rebalance_is_not_undone():
    """If the group rebalanced while the takeover was written, the new member was
    answered by the rebalance and its id is in the generation's own record: a late
    failure of the takeover write changes nothing."""
    group, a, b = static_group()
    new_b, effects = static_join(group, "i-b", now=10)
    (takeover,) = effects.writes
    static_join(group, "i-c", now=11)  # a third member: the group rebalances
    rejoined = sticky(owned=[("t", 0)], generation=2)
    replies = static_join(group, "i-a", a, now=12, protocols=rejoined)[1].replies
    assert group.generation == 3 and replies[(new_b, JOIN)].generation == 3
    assert group.persist_failed(takeover, WRITE_FAILED, 13).replies == {}
    assert group.static_members["i-b"] == new_b and new_b in group.members


def test_a_takeover_of_a_takeover_reverts_to_the_member_last_written():
    """Two restarts in a row, both writes failing: the first new process is fenced by the
    second, and the second's failure brings back the member of the record, not the
    first new process."""
    group, a, b = static_group()
    first, effects1 = static_join(group, "i-b", now=10)
    second, effects2 = static_join(group, "i-b", now=11)
    assert isinstance(effects2.replies[(first, JOIN)].error, FencedInstanceId)
    assert group.persist_failed(effects1.writes[0], WRITE_FAILED, 12).replies == {}
    replies = group.persist_failed(effects2.writes[0], WRITE_FAILED, 13).replies
    assert isinstance(replies[(second, JOIN)].error, CoordinatorNotAvailable)
    assert group.static_members["i-b"] == b and set(group.members) == {a, b}


# -- a restart rebalances only if the subscription changed --------------------------------------


def test_a_restarted_static_member_with_the_same_topics_takes_over_without_a_rebalance():
    """The new process owns nothing and names no generation, so its subscription bytes
    differ from the old member's; its topics are the same, so no rebalance."""
    group, a, b = static_group()
    new_b, effects = static_join(group, "i-b", now=10)
    assert group.state == GroupState.STABLE and effects.writes
    assert group.generation == 2


def test_a_restarted_static_member_with_other_topics_makes_the_group_rebalance():
    """Subscribing to other topics changes the assignment: the group rebalances."""
    group, a, b = static_group()
    static_join(group, "i-b", now=10, protocols=sticky(topics=("t", "u")))
    assert group.state == GroupState.PREPARING_REBALANCE


def test_a_restarted_static_member_without_the_groups_assignor_makes_the_group_rebalance():
    """The new process no longer offers the assignor the group uses: rebalance."""
    group = Group("g", CONFIG, 0)
    data = encode_subscription(["t"])
    both = [("range", data), ("roundrobin", data)]
    a = static_join(group, "i-a", protocols=both)[0]
    static_join(group, "i-b", protocols=both)
    group.tick(DELAY)
    complete(group, {a: encode_assignment([("t", 0)])}, 1)
    assert group.protocol == "range"
    static_join(group, "i-b", now=10, protocols=[("roundrobin", data)])
    assert group.state == GroupState.PREPARING_REBALANCE


def test_other_protocol_types_compare_subscription_bytes_on_a_takeover():
    """The coordinator reads only "consumer" subscriptions; others must match exactly."""
    group = Group("g", CONFIG, 0)
    a = static_join(group, "i-a", protocols=[("x", b"1")], protocol_type="connect")[0]
    group.tick(DELAY)
    complete(group, {a: b"assigned"}, 1)
    effects = static_join(group, "i-a", now=10, protocols=[("x", b"1")],
                          protocol_type="connect")[1]  # fmt: skip
    assert group.state == GroupState.STABLE and effects.writes
    group.persisted(effects.writes[0], 11)
    static_join(group, "i-a", now=20, protocols=[("x", b"2")], protocol_type="connect")
    # a rebalance, at once complete: the new process is the only member
    assert group.state == GroupState.COMPLETING_REBALANCE and group.generation == 2


def test_a_member_rejoining_with_other_owned_partitions_still_makes_the_group_rebalance():
    """An ordinary rejoin compares the whole subscription: a cooperative member that
    revoked partitions rejoins declaring less owned, which starts the follow-up rebalance
    that hands the revoked partitions out."""
    group, a, b = static_group()
    static_join(group, "i-b", b, now=10, protocols=sticky(owned=[], generation=2))
    assert group.state == GroupState.PREPARING_REBALANCE
