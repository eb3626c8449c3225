"""Which offset commits a group accepts: Kafka checks the member and its generation; rafka
also keeps a "consumer" member to the partitions it holds in that generation (assigned, or
declared owned when it joined), and tells commits from outside the group apart."""

import pytest

from rafka.cluster.consumer_protocol import encode_assignment, encode_subscription
from rafka.cluster.group import Group, GroupState
from rafka.errors import (
    CommitFailed,
    FencedInstanceId,
    IllegalGeneration,
    NonEmptyGroup,
    RebalanceInProgress,
    UnknownMemberId,
)

from .test_group import CONFIG, DELAY, REBALANCE, SESSION, join, offsets, stable_group, written


def cooperative(owned=(), generation=-1, topics=("t",)) -> list:
    return [("cooperative-sticky", encode_subscription(topics, owned, generation))]


def cooperative_group() -> tuple[Group, str, str]:
    """Generation 1: member a owns t-0 and t-1. Generation 2: b joined, a rejoined declaring
    both owned and was assigned t-0 only (t-1 is revoked, to move to b in generation 3)."""
    group = Group("g", CONFIG, 0)
    a = join(group, protocols=cooperative())[0]
    group.tick(DELAY)
    written(group, group.sync(a, None, 1, {a: encode_assignment([("t", 0), ("t", 1)])}, 1), 1)
    b = join(group, now=10, protocols=cooperative(), client="b")[0]
    join(group, a, now=20, protocols=cooperative([("t", 0), ("t", 1)], 1))
    assert group.state == GroupState.COMPLETING_REBALANCE and group.generation == 2
    assignments = {a: encode_assignment([("t", 0)]), b: encode_assignment([])}
    written(group, group.sync(a, None, 2, assignments, 30), 30)
    assert group.state == GroupState.STABLE
    return group, a, b


def test_a_member_commits_partitions_it_gives_up_in_a_cooperative_rebalance():
    """Committing in on_partitions_revoked: a partition the member declared owned when it
    joined this generation, and was not assigned again, is still its to commit."""
    group, a, _ = cooperative_group()
    group.check_commit(a, None, 2, offsets(0, 1))


def test_a_member_may_not_commit_partitions_it_neither_owned_nor_was_assigned():
    """A partition outside both the member's assignment and what it declared owned is
    refused with CommitFailed naming it."""
    group, a, b = cooperative_group()
    with pytest.raises(CommitFailed, match="t-2 not assigned"):
        group.check_commit(a, None, 2, offsets(0, 2))
    with pytest.raises(CommitFailed, match="t-0, t-1 not assigned"):
        group.check_commit(b, None, 2, offsets(0, 1))


def test_the_owned_partitions_that_count_are_those_of_the_join_that_formed_the_generation():
    """A member that rejoins (declaring less owned) may still commit what it declared for
    the current generation until the next one forms; what it declares now counts only
    from the generation that join forms."""
    group, a, _ = cooperative_group()
    join(group, a, now=40, protocols=cooperative([("t", 0), ("t", 2)], 2))
    assert group.state == GroupState.PREPARING_REBALANCE
    group.check_commit(a, None, 2, offsets(0, 1))
    with pytest.raises(CommitFailed, match="t-2 not assigned"):
        group.check_commit(a, None, 2, offsets(2))


def test_a_group_read_back_from_its_record_knows_what_its_members_declared_owned():
    """After a coordinator restart the members' declared partitions still count."""
    group, a, _ = cooperative_group()
    restored = Group.from_record("g", group.metadata_record(), CONFIG, 100)
    restored.check_commit(a, None, 2, offsets(0, 1))
    with pytest.raises(CommitFailed):
        restored.check_commit(a, None, 2, offsets(2))


def test_other_protocol_types_are_checked_by_member_and_generation_only():
    """The coordinator does not read payloads of protocol types other than "consumer"."""
    group = Group("g", CONFIG, 0)
    m = group.join("", None, "c", "h", "connect", [("x", b"opaque")], SESSION, REBALANCE, 0)[0]
    group.tick(DELAY)
    written(group, group.sync(m, None, 1, {m: b"also opaque"}, 1), 1)
    group.check_commit(m, None, 1, offsets(0, 7))
    with pytest.raises(IllegalGeneration):
        group.check_commit(m, None, 0, offsets(0))


def test_commits_are_refused_during_the_sync_phase_from_strangers_fenced_or_stale_members():
    """CompletingRebalance, an unknown member, a fenced instance and an old generation are
    refused, whatever the partitions."""
    group = Group("g", CONFIG, 0)
    a = join(group, instance="i-a")[0]
    group.tick(DELAY)
    with pytest.raises(RebalanceInProgress):
        group.check_commit(a, "i-a", 1, offsets(0))
    written(group, group.sync(a, "i-a", 1, {a: encode_assignment([("t", 0)])}, 1), 1)
    group.check_commit(a, "i-a", 1, offsets(0))
    with pytest.raises(UnknownMemberId):
        group.check_commit("stranger", None, 1, offsets(0))
    with pytest.raises(IllegalGeneration):
        group.check_commit(a, "i-a", 0, offsets(0))
    join(group, "", now=10, instance="i-a")
    with pytest.raises(FencedInstanceId):
        group.check_commit(a, "i-a", 1, offsets(0))


# -- commits from outside the group --------------------------------------------------------------


def test_an_expelled_member_without_a_member_id_cannot_commit_into_an_empty_group():
    """A subscribed consumer whose member id was reset after it was expelled commits as a
    member: refused with a message telling it to rejoin, so it cannot rewind the progress
    of the partitions' next owner, even while the group is empty."""
    group, _ = stable_group(1)
    group.tick(SESSION * 10)  # a's session expired
    assert group.is_empty
    with pytest.raises(UnknownMemberId, match="rejoin"):
        group.check_commit("", None, -1, offsets(0))
    with pytest.raises(UnknownMemberId, match="rejoin"):
        group.check_commit("", None, 1, offsets(0))
    current, (b,) = stable_group(1)
    with pytest.raises(IllegalGeneration, match="rejoin"):
        current.check_commit(b, None, -1, offsets(0))


def test_a_commit_from_outside_the_group_names_no_member_and_no_generation():
    """outside_group with a member id or a generation is a contradiction, refused."""
    empty = Group("h", CONFIG, 0)
    with pytest.raises(UnknownMemberId, match="outside"):
        empty.check_commit("m-1", None, -1, offsets(0), outside_group=True)
    with pytest.raises(IllegalGeneration, match="outside"):
        empty.check_commit("", None, 3, offsets(0), outside_group=True)


# -- commits inside a transaction ------------------------------------------------------------------


def test_a_transactional_commit_without_member_or_generation_is_accepted_while_members_consume():
    """TxnOffsetCommit v0-2 (and a producer given only the group id) names no member and no
    generation: Kafka accepts it whatever the group's members and state, as the older
    protocol has no way to name them. A plain commit from outside is still refused."""
    group, _ = stable_group(2)
    group.check_commit("", None, -1, offsets(0, 1), outside_group=True, transactional=True)
    with pytest.raises(NonEmptyGroup):
        group.check_commit("", None, -1, offsets(0), outside_group=True)
    join(group, now=10, client="c9")  # a third member: the group rebalances
    group.tick(REBALANCE)
    assert group.state == GroupState.COMPLETING_REBALANCE
    group.check_commit("", None, -1, offsets(0), outside_group=True, transactional=True)


def test_a_transactional_commit_without_member_still_names_no_member_and_no_generation():
    """Only the member-less form skips the member checks: a member id or a generation
    with outside_group is a contradiction, refused as for any commit from outside."""
    group, _ = stable_group(1)
    with pytest.raises(UnknownMemberId, match="outside"):
        group.check_commit("m-1", None, -1, offsets(0), outside_group=True, transactional=True)
    with pytest.raises(IllegalGeneration, match="outside"):
        group.check_commit("", None, 1, offsets(0), outside_group=True, transactional=True)


def test_a_transactional_commit_by_a_member_is_checked_as_a_member_s_but_not_held_by_the_sync():
    """KIP-447: a member's transactional commit names its generation, so a zombie of an
    older one is refused; the group's sync phase does not refuse it (Kafka does not
    enforce the group's state on transactional commits). What it may commit there is what
    it declared owned when it joined."""
    group = Group("g", CONFIG, 0)
    a = join(group, protocols=cooperative([("t", 0)], 0))[0]
    group.tick(DELAY)
    assert group.state == GroupState.COMPLETING_REBALANCE
    with pytest.raises(RebalanceInProgress):
        group.check_commit(a, None, 1, offsets(0))
    group.check_commit(a, None, 1, offsets(0), transactional=True)
    with pytest.raises(IllegalGeneration):
        group.check_commit(a, None, 0, offsets(0), transactional=True)
    with pytest.raises(UnknownMemberId):
        group.check_commit("stranger", None, 1, offsets(0), transactional=True)
    with pytest.raises(CommitFailed, match="t-1 not assigned"):
        group.check_commit(a, None, 1, offsets(1), transactional=True)
