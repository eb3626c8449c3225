"""The consumer-group state machine: joins, generations, syncs, sessions, static members,
and which offset commits are accepted. No Ray; the clock is a number passed in."""

import pytest

from rafka.cluster.consumer_protocol import encode_assignment, encode_subscription
from rafka.cluster.group import (
    JOIN,
    SYNC,
    CommittedOffset,
    Effects,
    Group,
    GroupConfig,
    GroupState,
)
from rafka.errors import (
    CommitFailed,
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)

CONFIG = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=100)
DELAY = CONFIG.initial_rebalance_delay_ms
SESSION = 1_000
REBALANCE = 5_000


def subscription(*topics: str) -> list:
    return [("range", encode_subscription(topics or ("t",)))]


def join(group, member_id="", now=0, instance=None, protocols=None, client="c"):
    return group.join(
        member_id, instance, client, "host", "consumer", protocols or subscription(), SESSION,
        REBALANCE, now,
    )  # fmt: skip


def written(group, effects, now: int) -> Effects:
    """The group's record was written for every write ``effects`` asked: what follows."""
    after = Effects()
    for write in effects.writes:
        after.merge(group.persisted(write, now))
    return after


def stable_group(n: int, config=CONFIG) -> tuple[Group, list[str]]:
    """A group of ``n`` members in generation 1, each given partition i of topic t."""
    group = Group("g", config, 0)
    ids = [join(group, client=f"c{i}")[0] for i in range(n)]
    group.tick(config.initial_rebalance_delay_ms)
    assert group.state == GroupState.COMPLETING_REBALANCE
    assignments = {m: encode_assignment([("t", i)]) for i, m in enumerate(ids)}
    effects = group.sync(group.leader_id, None, group.generation, assignments, 1)
    assert effects.persist
    for m in ids:
        if m != group.leader_id:
            group.sync(m, None, group.generation, None, 1)
    replies = written(group, effects, 1).replies
    assert {key[0] for key in replies} == set(ids)
    assert group.state == GroupState.STABLE
    return group, ids


def offsets(*partitions: int, offset: int = 10, metadata: str = "") -> dict:
    return {("t", p): CommittedOffset(offset, 0, metadata, 0) for p in partitions}


def test_first_member_waits_out_the_initial_rebalance_delay():
    """With group.initial.rebalance.delay.ms the first join is answered only once the delay
    has passed, so members starting together land in one generation."""
    group = Group("g", GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=300), 0)
    a, effects = join(group, now=0)
    assert effects.replies == {}
    b, effects = join(group, now=100)
    assert effects.replies == {}
    assert group.tick(350).replies == {}  # the second join extended the delay to 400
    replies = group.tick(400).replies
    assert set(replies) == {(a, JOIN), (b, JOIN)}
    assert replies[(a, JOIN)].generation == 1
    leader = replies[(a, JOIN)].leader_id
    assert len(replies[(leader, JOIN)].members) == 2


def test_three_members_form_one_generation_and_get_their_assignments_after_persisting():
    """The leader's assignment is handed out only after the group record is written."""
    group, ids = stable_group(3)
    assert group.generation == 1
    for i, m in enumerate(ids):
        result = group.sync(m, None, 1, None, 2).replies[(m, SYNC)]
        assert result.assignment == encode_assignment([("t", i)])


def test_a_new_member_makes_the_group_rebalance_and_the_others_learn_it_by_heartbeat():
    """A join to a stable group moves it to PreparingRebalance; old members' heartbeats
    answer RebalanceInProgress, and when all rejoined the generation grows."""
    group, (a, b) = stable_group(2)
    c, effects = join(group, now=10)
    assert group.state == GroupState.PREPARING_REBALANCE and effects.replies == {}
    with pytest.raises(RebalanceInProgress):
        group.heartbeat(a, None, 1, 20)
    join(group, a, now=30)
    replies = join(group, b, now=40)[1].replies
    assert set(replies) == {(a, JOIN), (b, JOIN), (c, JOIN)}
    assert group.generation == 2


def test_heartbeats_from_an_old_generation_or_unknown_member_are_refused():
    """A member of an older generation must rejoin; an unknown member id is refused."""
    group, (a, b) = stable_group(2)
    group.heartbeat(a, None, 1, 10)
    with pytest.raises(IllegalGeneration):
        group.heartbeat(a, None, 0, 10)
    with pytest.raises(UnknownMemberId):
        group.heartbeat("nobody", None, 1, 10)


def test_a_silent_member_is_removed_after_its_session_timeout():
    """No heartbeat within session_timeout_ms: the member is out and the group rebalances."""
    group, (a, b) = stable_group(2)
    group.heartbeat(a, None, 1, SESSION)
    assert group.tick(SESSION + 500).replies == {}
    assert b not in group.members and group.state == GroupState.PREPARING_REBALANCE
    replies = join(group, a, now=SESSION + 600)[1].replies
    assert replies[(a, JOIN)].generation == 2 and replies[(a, JOIN)].leader_id == a


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    """The join phase ends at the rebalance timeout without the members that did not
    rejoin."""
    group, (a, b) = stable_group(2)
    join(group, "", now=10, client="new")
    join(group, a, now=20)
    effects = group.tick(10 + REBALANCE)
    assert b not in group.members
    assert group.generation == 2 and len(effects.replies) == 2


def test_leaving_members_trigger_a_rebalance_and_the_last_one_empties_the_group():
    """LeaveGroup removes members at once; a group left by all is Empty and persisted."""
    group, (a, b) = stable_group(2)
    group.leave([(b, None)], 10)
    assert group.state == GroupState.PREPARING_REBALANCE
    replies = join(group, a, now=20)[1].replies
    assert replies[(a, JOIN)].generation == 2
    effects = group.leave([(a, None)], 30)
    assert group.state == GroupState.PREPARING_REBALANCE or group.state == GroupState.EMPTY
    effects.merge(group.tick(40))
    assert group.state == GroupState.EMPTY and group.generation == 3 and effects.persist


def test_a_static_member_that_comes_back_keeps_its_assignment_without_a_rebalance():
    """group_instance_id: a restarted process rejoining with no member id takes the old
    member's place and assignment in the same generation; the old id is fenced."""
    group = Group("g", CONFIG, 0)
    a = join(group, instance="i-a")[0]
    b = join(group, instance="i-b")[0]
    group.tick(DELAY)
    effects = group.sync(group.leader_id, None, 1, {a: encode_assignment([("t", 0)]),
                                                    b: encode_assignment([("t", 1)])}, 1)
    written(group, effects, 1)
    new_b, effects = join(group, "", now=50, instance="i-b")
    assert new_b != b and group.state == GroupState.STABLE and group.generation == 1
    result = written(group, effects, 55).replies[(new_b, JOIN)]
    assert result.generation == 1
    assert group.sync(new_b, "i-b", 1, None, 60).replies[(new_b, SYNC)].assignment == (
        encode_assignment([("t", 1)])
    )
    with pytest.raises(FencedInstanceId):
        group.heartbeat(b, "i-b", 1, 70)


def test_protocol_is_the_common_assignor_most_members_prefer():
    """The group uses an assignor every member supports, chosen by the members' votes."""
    group = Group("g", CONFIG, 0)
    data = encode_subscription(["t"])
    join(group, protocols=[("range", data), ("cooperative-sticky", data)])
    join(group, protocols=[("cooperative-sticky", data), ("range", data)])
    join(group, protocols=[("cooperative-sticky", data)])
    group.tick(DELAY)
    assert group.protocol == "cooperative-sticky"
    with pytest.raises(InconsistentGroupProtocol):
        join(group, protocols=[("roundrobin", data)])


def test_bad_joins_are_refused_with_typed_errors():
    """Empty group ids, sessions outside the cluster's bounds and full groups are refused."""
    with pytest.raises(InvalidGroupId):
        Group("", CONFIG, 0)
    group = Group("g", GroupConfig(min_session_timeout_ms=100, max_size=1), 0)
    with pytest.raises(InvalidSessionTimeout):
        group.join("", None, "c", "h", "consumer", subscription(), 10, REBALANCE, 0)
    join(group)
    with pytest.raises(GroupMaxSizeReached):
        join(group)
    assert len(group.members) == 1


def test_commits_are_accepted_only_from_current_members_for_their_own_partitions():
    """The coordinator refuses a commit for a partition the member does not own, from an
    older generation, or during the sync phase; nothing is applied."""
    group, (a, b) = stable_group(2)
    group.check_commit(a, None, 1, offsets(0))
    with pytest.raises(CommitFailed, match="t-1 not assigned"):
        group.check_commit(a, None, 1, offsets(0, 1))
    with pytest.raises(IllegalGeneration):
        group.check_commit(a, None, 0, offsets(0))
    with pytest.raises(UnknownMemberId):
        group.check_commit("gone", None, 1, offsets(0))
    with pytest.raises(OffsetMetadataTooLarge):
        group.check_commit(a, None, 1, offsets(0, metadata="x" * 5000))
    join(group, a, now=10)
    join(group, b, now=10)
    assert group.state == GroupState.COMPLETING_REBALANCE
    with pytest.raises(RebalanceInProgress):
        group.check_commit(a, None, 2, offsets(0))
    assert group.offsets == {}


def test_commits_from_outside_the_group_need_it_to_be_empty():
    """An admin reset (no member, generation -1) is refused while members are active."""
    group, _ = stable_group(1)
    with pytest.raises(NonEmptyGroup):
        group.check_commit("", None, -1, offsets(0), outside_group=True)
    empty = Group("h", CONFIG, 0)
    empty.check_commit("", None, -1, offsets(0), outside_group=True)
    empty.commit(offsets(0))
    assert empty.offsets[("t", 0)].offset == 10


def test_a_leader_that_never_sends_the_assignment_is_dropped_at_the_sync_deadline():
    """Followers waiting for the sync are not left hanging: the silent leader is removed
    and the group rebalances, telling the waiting followers to rejoin."""
    group = Group("g", CONFIG, 0)
    ids = [join(group)[0] for _ in range(2)]
    group.tick(DELAY)
    follower = next(m for m in ids if m != group.leader_id)
    group.sync(follower, None, 1, None, 10)
    effects = group.tick(REBALANCE + 10)
    assert effects.replies[(follower, SYNC)].error.__class__ is RebalanceInProgress
    assert list(group.members) == [follower]


def test_a_group_read_back_from_its_record_is_stable_with_the_same_assignment():
    """What the coordinator writes to __consumer_offsets restores members and assignment."""
    group, ids = stable_group(2)
    restored = Group.from_record("g", group.metadata_record(), CONFIG, 100)
    assert restored.state == GroupState.STABLE and restored.generation == 1
    assert {m: restored.members[m].assignment for m in ids} == {
        m: group.members[m].assignment for m in ids
    }
    restored.heartbeat(ids[0], None, 1, 200)


def test_offsets_of_a_group_empty_past_retention_expire():
    """Offsets of an empty group expire retention after it emptied or was last committed."""
    group = Group("g", GroupConfig(offsets_retention_ms=1_000), 0)
    group.commit({("t", 0): CommittedOffset(5, 0, "", 500)})
    assert group.expired_offsets(1_400) == {}
    assert group.expired_offsets(1_600) == {("t", 0): CommittedOffset(5, 0, "", 500)}


def test_deleting_a_group_with_members_is_refused():
    """A group with members cannot be marked dead; an empty one can."""
    group, _ = stable_group(1)
    with pytest.raises(NonEmptyGroup):
        group.mark_dead(10)
    empty = Group("h", CONFIG, 0)
    empty.mark_dead(10)
    assert empty.state == GroupState.DEAD


# -- KIP-394: a member id before the join ---------------------------------------------------------


def join_requiring_id(group, member_id="", now=0, instance=None):
    return group.join(
        member_id, instance, "c", "host", "consumer", subscription(), SESSION, REBALANCE, now,
        require_known_member_id=True,
    )  # fmt: skip


def test_a_join_without_a_member_id_is_given_one_and_asked_to_come_back_with_it():
    """KIP-394: the first join of a dynamic member gets MEMBER_ID_REQUIRED carrying a new id
    and adds no member; the join that names the id is admitted."""
    group = Group("g", CONFIG, 0)
    with pytest.raises(MemberIdRequired) as required:
        join_requiring_id(group)
    member_id = required.value.member_id
    assert member_id and not group.members
    joined, _ = join_requiring_id(group, member_id, now=10)
    assert joined == member_id and set(group.members) == {member_id}


def test_a_member_id_never_handed_out_or_expired_is_unknown():
    """Only ids the coordinator handed out are admitted, and only within the session
    timeout; after it the client starts over with an empty id."""
    group = Group("g", CONFIG, 0)
    with pytest.raises(UnknownMemberId):
        join_requiring_id(group, "made-up")
    with pytest.raises(MemberIdRequired) as required:
        join_requiring_id(group)
    with pytest.raises(UnknownMemberId):
        join_requiring_id(group, required.value.member_id, now=SESSION + 1)


def test_handed_out_member_ids_count_toward_group_max_size():
    """A retried first join cannot pile up ids past group.max.size."""
    group = Group("g", GroupConfig(min_session_timeout_ms=100, max_size=1), 0)
    with pytest.raises(MemberIdRequired):
        join_requiring_id(group)
    with pytest.raises(GroupMaxSizeReached):
        join_requiring_id(group)


def test_static_members_and_rafkas_own_clients_join_in_one_step():
    """A member with a group instance id, or a join that does not ask for the round trip
    (rafka's consumers, Kafka's JoinGroup before v4), is admitted at once."""
    group = Group("g", CONFIG, 0)
    static_id, _ = join_requiring_id(group, instance="i-1")
    dynamic_id, _ = join(group, now=1)
    assert set(group.members) == {static_id, dynamic_id}
