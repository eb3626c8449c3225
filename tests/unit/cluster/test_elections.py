"""The controller's partition decisions: who leads, who is in sync, and how a replica set
moves. Each function returns the next PartitionState (None when nothing changes) and never
edits the one it was given."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.elections import (
    alter_isr,
    cancel_reassignment,
    choose_leader,
    complete_reassignment,
    elect_if_leaderless,
    fence_broker,
    preferred_leader,
    reassign,
    replica_restarted,
)
from rafka.cluster.metadata import NO_LEADER, PartitionState
from rafka.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidReplicaAssignment,
    InvalidUpdateVersion,
    NotLeaderOrFollower,    NoReassignmentInProgress,
)

ALL = {0, 1, 2}


def ps(replicas=(0, 1, 2), isr=None, leader=None, leader_epoch=5, partition_epoch=10,
       adding=(), removing=()) -> PartitionState:  # fmt: skip
    """A partition led by its first replica with every replica in sync, unless told."""
    replicas = list(replicas)
    isr = list(replicas if isr is None else isr)
    return PartitionState(
        0, replicas, isr, isr[0] if leader is None else leader, leader_epoch, partition_epoch,
        list(adding), list(removing),
    )  # fmt: skip


def bumped(p: PartitionState, new: PartitionState, leader_changed: bool) -> bool:
    """``new`` carries exactly the epoch bumps a change of ``p`` requires."""
    return new.partition_epoch == p.partition_epoch + 1 and new.leader_epoch == (
        p.leader_epoch + (1 if leader_changed else 0)
    )


# -- choose_leader -----------------------------------------------------------------------------


def test_live_in_sync_current_leader_keeps_leading():
    """An election does not move leadership away from a live in-sync leader, preferred or
    not."""
    assert choose_leader(ps(leader=2), ALL, unclean=False) == (2, "kept")


def test_leader_is_the_first_live_isr_member_in_preferred_order():
    """Replica order, not ISR order, decides: the first replica that is in sync and live."""
    p = ps(replicas=[2, 0, 1], isr=[1, 0], leader=NO_LEADER)
    assert choose_leader(p, ALL, unclean=False) == (0, "clean")
    assert choose_leader(p, {1, 2}, unclean=False) == (1, "clean")


def test_replicas_a_reassignment_keeps_are_preferred_over_those_it_removes():
    """During a reassignment the target replicas come first, the leaving ones last."""
    p = ps(replicas=[0, 1, 2], leader=NO_LEADER, removing=[0])
    assert choose_leader(p, ALL, unclean=False) == (1, "clean")
    assert choose_leader(p, {0}, unclean=False) == (0, "clean")


def test_no_live_isr_member_means_no_leader_without_unclean_election():
    """An out-of-sync live replica never leads unless unclean election is enabled."""
    p = ps(isr=[0], leader=NO_LEADER)
    assert choose_leader(p, {1, 2}, unclean=False) == (NO_LEADER, "none")
    assert choose_leader(p, set(), unclean=True) == (NO_LEADER, "none")


def test_unclean_election_picks_the_first_live_replica_and_says_so():
    """With unclean election enabled, the first live replica in preferred order leads and
    the answer is flagged unclean."""
    p = ps(isr=[0], leader=NO_LEADER)
    assert choose_leader(p, {2, 1}, unclean=True) == (1, "unclean")


# -- fence_broker ------------------------------------------------------------------------------


def test_fenced_follower_leaves_the_isr_and_the_leader_stays():
    """A dead follower is removed from the ISR; the leader and its epoch are unchanged, the
    partition epoch goes up by one."""
    p = ps()
    new = fence_broker(p, 1, {0, 2}, unclean=False)
    assert (new.leader, new.isr) == (0, [0, 2])
    assert bumped(p, new, leader_changed=False)


def test_fenced_leader_is_replaced_by_the_next_isr_member_in_preferred_order():
    """A dead leader leaves the ISR and the next live in-sync replica takes over in a new
    leader epoch."""
    p = ps(replicas=[0, 1, 2], isr=[0, 2, 1])
    new = fence_broker(p, 0, {1, 2}, unclean=False)
    assert (new.leader, new.isr) == (1, [2, 1])
    assert bumped(p, new, leader_changed=True)


def test_fenced_leader_replacement_skips_dead_isr_members():
    """Only live in-sync replicas can be elected."""
    new = fence_broker(ps(), 0, {2}, unclean=False)
    assert (new.leader, new.isr) == (2, [1, 2])


def test_live_set_may_still_name_the_fenced_broker():
    """The fenced broker is never re-elected even when the caller's live set still lists it."""
    new = fence_broker(ps(), 0, ALL, unclean=False)
    assert new.leader == 1 and 0 not in new.isr


def test_last_isr_member_dying_leaves_no_leader_and_stays_in_the_isr():
    """When the last in-sync replica dies, the ISR keeps it (it holds every committed record)
    and the partition has no leader, in a new leader epoch."""
    p = ps(isr=[0])
    new = fence_broker(p, 0, {1, 2}, unclean=False)
    assert (new.leader, new.isr) == (NO_LEADER, [0])
    assert bumped(p, new, leader_changed=True)


def test_unclean_election_on_fencing_makes_the_new_leader_the_whole_isr():
    """With unclean election enabled, a live out-of-sync replica leads and is the ISR alone."""
    p = ps(isr=[0])
    new = fence_broker(p, 0, {1, 2}, unclean=True)
    assert (new.leader, new.isr) == (1, [1])
    assert bumped(p, new, leader_changed=True)


def test_fencing_a_clean_replacement_is_preferred_over_unclean_even_when_enabled():
    """Unclean election is a last resort: a live in-sync replica wins first."""
    new = fence_broker(ps(isr=[0, 2]), 0, {1, 2}, unclean=True)
    assert (new.leader, new.isr) == (2, [2])


def test_fencing_an_out_of_sync_replica_changes_nothing():
    """A broker neither in the ISR nor leading is not part of any decision."""
    assert fence_broker(ps(isr=[0, 1]), 2, {0, 1}, unclean=False) is None


def test_fencing_the_last_member_of_a_leaderless_partition_again_changes_nothing():
    """Repeating a fence is idempotent: no new state, no epoch bump."""
    p = fence_broker(ps(isr=[0]), 0, {1, 2}, unclean=False)
    assert fence_broker(p, 0, {1, 2}, unclean=False) is None


# -- elect_if_leaderless -----------------------------------------------------------------------


def test_partition_with_a_live_leader_needs_no_election():
    """A live leader is left alone."""
    assert elect_if_leaderless(ps(), ALL, unclean=False) is None


def test_last_isr_member_coming_back_leads_again_in_a_new_epoch():
    """A leaderless partition elects its in-sync replica as soon as it is live again."""
    p = ps(isr=[0], leader=NO_LEADER)
    new = elect_if_leaderless(p, {0, 1}, unclean=False)
    assert (new.leader, new.isr) == (0, [0])
    assert bumped(p, new, leader_changed=True)


def test_leaderless_partition_stays_leaderless_while_no_isr_member_is_live():
    """An out-of-sync replica coming back does not make a leader (clean election)."""
    assert elect_if_leaderless(ps(isr=[0], leader=NO_LEADER), {1, 2}, unclean=False) is None


def test_enabling_unclean_election_elects_an_out_of_sync_replica_alone():
    """Turning unclean election on lets a live out-of-sync replica lead with ISR itself."""
    p = ps(isr=[0], leader=NO_LEADER)
    new = elect_if_leaderless(p, {2}, unclean=True)
    assert (new.leader, new.isr) == (2, [2])
    assert bumped(p, new, leader_changed=True)


def test_dead_leader_not_yet_fenced_is_replaced_by_a_live_isr_member():
    """A leader absent from the live set is replaced (it may stay in the ISR until fenced)."""
    new = elect_if_leaderless(ps(), {1, 2}, unclean=False)
    assert (new.leader, new.isr) == (1, [0, 1, 2])


def test_dead_leader_with_no_live_isr_member_leaves_the_partition_leaderless():
    """Leadership is withdrawn from a dead leader even when nobody can replace it."""
    p = ps(isr=[0])
    new = elect_if_leaderless(p, {1}, unclean=False)
    assert (new.leader, new.isr) == (NO_LEADER, [0])
    assert bumped(p, new, leader_changed=True)


# -- replica_restarted -------------------------------------------------------------------------


def test_clean_restart_of_the_leader_keeps_it_leading_in_a_new_epoch():
    """A leader whose actor restarted after a clean stop leads again, with every replica still
    in sync, but in a new leader epoch so its new records cannot be confused with old ones."""
    p = ps()
    new = replica_restarted(p, 0, ALL, unclean=False, clean=True)
    assert (new.leader, new.isr) == (0, [0, 1, 2])
    assert bumped(p, new, leader_changed=True)


def test_unclean_restart_of_the_leader_hands_over_to_another_live_isr_member():
    """After an unclean stop the leader may have lost unflushed records: it leaves the ISR
    and the next live in-sync replica leads."""
    p = ps()
    new = replica_restarted(p, 0, ALL, unclean=False, clean=False)
    assert (new.leader, new.isr) == (1, [1, 2])
    assert bumped(p, new, leader_changed=True)


def test_unclean_restart_of_the_only_isr_member_keeps_it_leading_in_a_new_epoch():
    """The last in-sync replica stays in the ISR even after an unclean stop, and leads again
    in a new epoch."""
    p = ps(isr=[0])
    new = replica_restarted(p, 0, ALL, unclean=False, clean=False)
    assert (new.leader, new.isr) == (0, [0])
    assert bumped(p, new, leader_changed=True)


def test_unclean_restart_of_the_leader_whose_other_isr_members_are_dead():
    """The restarted leader does not lead while another candidate may come back with
    everything: the partition waits, leaderless, with the restarted replica still a candidate
    marked unclean (so it can win if every candidate lost its tail), unless unclean election
    lets the restarted replica lead alone."""
    p = ps(isr=[0, 1])
    new = replica_restarted(p, 0, {0, 2}, unclean=False, clean=False, position=(5, 90))
    assert (new.leader, new.isr, new.unclean_logs) == (NO_LEADER, [0, 1], {0: (5, 90)})
    assert bumped(p, new, leader_changed=True)
    new = replica_restarted(p, 0, {0}, unclean=True, clean=False)
    assert (new.leader, new.isr) == (0, [0])
    assert bumped(p, new, leader_changed=True)  # same leader, but a new epoch


def test_unclean_restart_of_a_follower_takes_it_out_of_the_isr():
    """A follower that may have lost records rejoins by catching up; the leader stays."""
    p = ps()
    new = replica_restarted(p, 2, ALL, unclean=False, clean=False)
    assert (new.leader, new.isr) == (0, [0, 1])
    assert bumped(p, new, leader_changed=False)


def test_clean_restart_of_a_follower_changes_nothing():
    """A follower that stopped cleanly keeps its place."""
    assert replica_restarted(ps(), 2, ALL, unclean=False, clean=True) is None
    assert replica_restarted(ps(isr=[0, 1]), 2, ALL, unclean=False, clean=False) is None


def test_restart_of_a_broker_that_holds_no_replica_changes_nothing():
    """Only the partition's replicas matter."""
    assert replica_restarted(ps(), 7, ALL | {7}, unclean=False, clean=False) is None


def test_restart_of_the_last_isr_member_elects_it_in_a_leaderless_partition():
    """A leaderless partition whose last in-sync replica restarts gets it as leader, even
    when the caller's live set does not list it yet, and even after an unclean stop."""
    p = ps(isr=[1], leader=NO_LEADER)
    for clean in (True, False):
        new = replica_restarted(p, 1, {0}, unclean=False, clean=clean)
        assert (new.leader, new.isr) == (1, [1])
        assert bumped(p, new, leader_changed=True)


def test_restart_of_an_out_of_sync_replica_of_a_leaderless_partition():
    """It does not lead without unclean election, and leads alone with it."""
    p = ps(isr=[1], leader=NO_LEADER)
    assert replica_restarted(p, 2, set(), unclean=False, clean=True) is None
    new = replica_restarted(p, 2, set(), unclean=True, clean=True)
    assert (new.leader, new.isr) == (2, [2])


# -- preferred_leader --------------------------------------------------------------------------


def test_leadership_returns_to_the_preferred_replica_when_it_is_live_and_in_sync():
    """The preferred replica (first in the replica list) takes leadership back in a new
    epoch; the ISR is unchanged."""
    p = ps(leader=2)
    new = preferred_leader(p, ALL)
    assert (new.leader, new.isr) == (0, [0, 1, 2])
    assert bumped(p, new, leader_changed=True)


@pytest.mark.parametrize(
    "state, live",
    [(ps(), ALL), (ps(isr=[1, 2], leader=1), ALL), (ps(leader=1), {1, 2})],
    ids=["already-preferred", "preferred-out-of-sync", "preferred-dead"],
)
def test_preferred_election_changes_nothing_when_not_possible_or_needed(state, live):
    """Nothing changes when the preferred replica already leads, is out of sync, or is dead."""
    assert preferred_leader(state, live) is None


def test_preferred_replica_during_a_reassignment_is_the_targets_first():
    """While replicas are being removed, the preferred leader is the first one kept."""
    p = ps(replicas=[0, 1, 2], leader=0, removing=[0])
    assert preferred_leader(p, ALL).leader == 1


# -- alter_isr ---------------------------------------------------------------------------------


def test_leader_may_shrink_the_isr_in_its_current_epochs():
    """A valid shrink is recorded in the ISR's existing order, with the partition epoch up by
    one and the leader epoch unchanged."""
    p = ps(isr=[0, 2, 1])
    new = alter_isr(p, 0, 5, 10, [1, 0], ALL)
    assert (new.leader, new.isr) == (0, [0, 1])
    assert bumped(p, new, leader_changed=False)


def test_leader_may_add_a_live_replica_to_the_isr():
    """A live replica joins at the end of the ISR."""
    p = ps(isr=[0, 1])
    new = alter_isr(p, 0, 5, 10, [2, 0, 1], ALL)
    assert new.isr == [0, 1, 2]
    assert bumped(p, new, leader_changed=False)


def test_isr_proposal_equal_to_the_current_isr_changes_nothing():
    """The same members in any order are no change: the state comes back as it was."""
    p = ps()
    assert alter_isr(p, 0, 5, 10, [2, 1, 0], ALL) == p


def test_dead_member_may_stay_in_the_isr():
    """Only joining replicas need to be live; removing a dead one is not required."""
    new = alter_isr(ps(), 0, 5, 10, [0, 2], {0})
    assert new.isr == [0, 2]


@pytest.mark.parametrize(
    "leader, leader_epoch, partition_epoch, new_isr, live, error, message",
    [
        (1, 5, 10, [0, 1], ALL, NotLeaderOrFollower, "leader is 0"),
        (0, 4, 10, [0, 1], ALL, FencedLeaderEpoch, "leader epoch 4"),
        (0, 6, 10, [0, 1], ALL, FencedLeaderEpoch, "current epoch is 5"),
        (0, 5, 9, [0, 1], ALL, InvalidUpdateVersion, "partition epoch 9"),
        (0, 5, 11, [0, 1], ALL, InvalidUpdateVersion, "current one is 10"),
        (0, 5, 10, [0, 1, 2], {0, 1}, IneligibleReplica, r"\[2\] are not alive"),
        (0, 5, 10, [1, 2], ALL, InvalidReplicaAssignment, "must hold the leader 0"),
        (0, 5, 10, [0, 7], ALL | {7}, InvalidReplicaAssignment, "only replicas"),
        (0, 5, 10, [0, 1, 1], ALL, InvalidReplicaAssignment, "once"),
    ],
    ids=["wrong-leader", "stale-leader-epoch", "newer-leader-epoch", "stale-partition-epoch",
         "newer-partition-epoch", "dead-joiner", "leader-missing", "not-a-replica",
         "duplicate"],  # fmt: skip
)
def test_invalid_isr_proposal_is_refused_with_a_typed_error_and_changes_nothing(
    leader, leader_epoch, partition_epoch, new_isr, live, error, message
):
    """Only the current leader, in its current leader and partition epochs, may change the
    ISR, keeping itself in it, naming only replicas (each once) and adding only live ones."""
    p = ps(isr=[0, 1])
    before = copy.deepcopy(p)
    with pytest.raises(error, match=message):
        alter_isr(p, leader, leader_epoch, partition_epoch, new_isr, live)
    assert p == before


def test_isr_proposal_to_a_leaderless_partition_is_refused():
    """Nobody leads, so no broker may change the ISR."""
    with pytest.raises(NotLeaderOrFollower):
        alter_isr(ps(isr=[0], leader=NO_LEADER), 0, 5, 10, [0], ALL)


# -- reassign and complete_reassignment --------------------------------------------------------


def test_reassignment_adds_the_target_replicas_and_keeps_the_old_ones_until_done():
    """Starting a move lists the target first, then the replicas to remove; the leader and
    ISR stay, and only the partition epoch goes up."""
    p = ps(replicas=[0, 1, 2])
    new = reassign(p, [3, 1, 4], brokers=range(5))
    assert new.replicas == [3, 1, 4, 0, 2]
    assert (new.adding, new.removing) == ([3, 4], [0, 2])
    assert new.target_replicas == [3, 1, 4]
    assert (new.leader, new.isr) == (0, [0, 1, 2])
    assert bumped(p, new, leader_changed=False)


def test_reassignment_to_the_current_replicas_changes_nothing():
    """Asking for the replica list the partition already has is no change."""
    assert reassign(ps(), [0, 1, 2], brokers=range(3)) is None


def test_reordering_replicas_changes_only_the_preferred_order():
    """The same brokers in another order need no copying: nothing is added or removed."""
    new = reassign(ps(), [2, 0, 1], brokers=range(3))
    assert (new.replicas, new.adding, new.removing) == ([2, 0, 1], [], [])


@pytest.mark.parametrize(
    "target, message",
    [([], "at least one broker"), ([1, 1], "each once"), ([0, 9], r"\[9\] are not registered")],
    ids=["empty", "duplicate", "unknown-broker"],
)
def test_invalid_reassignment_is_refused(target, message):
    """A target must name registered brokers, at least one, each once."""
    with pytest.raises(InvalidReplicaAssignment, match=message):
        reassign(ps(), target, brokers=range(3))


def test_second_reassignment_while_one_is_in_progress_is_refused():
    """One move at a time per partition; the refusal says how to cancel the first."""
    moving = reassign(ps(), [0, 1, 3], brokers=range(4))
    with pytest.raises(InvalidReplicaAssignment, match="already being reassigned.*cancel"):
        reassign(moving, [0, 1, 2], brokers=range(4))


def test_the_same_reassignment_again_changes_nothing():
    """A retried request for the move already under way is not refused."""
    moving = reassign(ps(), [0, 1, 3], brokers=range(4))
    assert reassign(moving, [0, 1, 3], brokers=range(4)) is None


def test_cancelling_a_reassignment_goes_back_to_the_original_replicas():
    """The added replicas leave the replica set and the ISR (even in sync); the epochs
    move on; a leader among the original replicas stays."""
    moving = reassign(ps(), [0, 3, 4], brokers=range(5))
    half = alter_isr(moving, 0, 5, 11, [0, 1, 2, 3], set(range(5)))
    back = cancel_reassignment(half, set(range(5)), unclean=False)
    assert (back.replicas, back.isr, back.adding, back.removing) == ([0, 1, 2], [0, 1, 2], [], [])
    assert (back.leader, back.leader_epoch, back.partition_epoch) == (0, 5, 13)


def test_cancelling_moves_leadership_off_an_added_replica_with_a_new_epoch():
    """The original replicas keep the order the replica list has them in (Kafka's revert
    does the same), so the target's kept replicas come first."""
    moving = reassign(ps(), [3, 1], brokers=range(4))
    led = PartitionState(0, moving.replicas, [3, 1, 0], 3, 6, 12, moving.adding, moving.removing)
    back = cancel_reassignment(led, set(range(4)), unclean=False)
    assert back.replicas == [1, 0, 2] and back.leader == 1 and back.leader_epoch == 7
    assert back.isr == [1, 0]


def test_cancelling_without_a_reassignment_or_without_an_original_replica_in_sync_is_refused():
    with pytest.raises(NoReassignmentInProgress):
        cancel_reassignment(ps(), ALL, unclean=False)
    moving = reassign(ps(replicas=(0,)), [1], brokers=range(2))
    only_new = PartitionState(0, moving.replicas, [1], 1, 6, 12, moving.adding, moving.removing)
    with pytest.raises(InvalidReplicaAssignment, match="none of them is in sync"):
        cancel_reassignment(only_new, {0, 1}, unclean=False)


def test_reassignment_does_not_complete_before_every_added_replica_is_in_sync():
    """Completion waits for all the added replicas to join the ISR; nothing to complete
    without a reassignment."""
    moving = reassign(ps(), [0, 3, 4], brokers=range(5))
    assert complete_reassignment(moving, set(range(5)), unclean=False) is None
    half = alter_isr(moving, 0, 5, 11, [0, 1, 2, 3], set(range(5)))
    assert half.adding == [3, 4] and half.isr == [0, 1, 2, 3]
    assert complete_reassignment(ps(), ALL, unclean=False) is None


def test_added_replica_joining_the_isr_completes_the_reassignment_in_one_change():
    """When the last added replica joins, the same change drops the removed replicas from
    the replica list and the ISR, with the partition epoch up by one."""
    live = set(range(4))
    moving = reassign(ps(), [0, 1, 3], brokers=range(4))
    done = alter_isr(moving, 0, 5, 11, [0, 1, 2, 3], live)
    assert (done.replicas, done.isr, done.adding, done.removing) == ([0, 1, 3], [0, 1, 3], [], [])
    assert (done.leader, done.leader_epoch, done.partition_epoch) == (0, 5, 12)


def test_leader_outside_the_target_moves_into_it_when_the_reassignment_completes():
    """A leader that is being removed hands over to the first live in-sync target replica in
    target order, in a new leader epoch."""
    live = set(range(5))
    moving = reassign(ps(), [4, 3], brokers=range(5))
    in_sync = alter_isr(moving, 0, 5, 11, [0, 1, 2, 3, 4], live)
    assert (in_sync.replicas, in_sync.isr, in_sync.leader) == ([4, 3], [3, 4], 4)
    assert in_sync.leader_epoch == 6 and in_sync.partition_epoch == 12


def test_shrinking_the_replica_set_completes_at_once_when_the_target_is_in_sync():
    """Nothing to copy: complete_reassignment right after reassign finishes the move."""
    moving = reassign(ps(), [1, 2], brokers=range(3))
    done = complete_reassignment(moving, ALL, unclean=False)
    assert (done.replicas, done.isr, done.leader) == ([1, 2], [1, 2], 1)
    assert bumped(moving, done, leader_changed=True)


def test_reassignment_waits_while_no_target_replica_is_in_sync():
    """If no kept replica is in sync, completing would leave an empty ISR: it waits."""
    moving = reassign(ps(isr=[0]), [1, 2], brokers=range(3))
    assert complete_reassignment(moving, ALL, unclean=False) is None


def test_completed_reassignment_without_a_live_target_isr_member_has_no_leader():
    """The leader leaves with the removed replicas; without a live in-sync target replica
    (and no unclean election) nobody leads until one comes back."""
    moving = reassign(ps(isr=[0, 1]), [1, 2], brokers=range(3))
    done = complete_reassignment(moving, {0, 2}, unclean=False)
    assert (done.replicas, done.isr, done.leader) == ([1, 2], [1], NO_LEADER)
    done = complete_reassignment(moving, {0, 2}, unclean=True)
    assert (done.replicas, done.isr, done.leader) == ([1, 2], [2], 2)


# -- invariants under any sequence of decisions -------------------------------------------------


BROKERS = range(4)


@st.composite
def decision_sequences(draw):
    """Random operations on a partition of three replicas among four brokers, with unclean
    election on or off. A broker may die some time before it is fenced."""
    b = st.integers(0, 3)
    return draw(st.booleans()), draw(st.lists(st.one_of(
        st.tuples(st.just("die"), b),
        st.tuples(st.just("die"), b),
        st.tuples(st.just("fence"), b),
        st.tuples(st.just("unfence"), b),
        st.tuples(st.just("restart"), b, st.booleans()),
        st.tuples(st.just("restart"), b, st.booleans()),
        st.tuples(st.just("alter"), st.sets(b), st.integers(-1, 1)),
        st.tuples(st.just("preferred")),
        st.tuples(st.just("reassign"), st.lists(b, min_size=1, max_size=4, unique=True)),
        st.tuples(st.just("complete")),
    ), max_size=40))  # fmt: skip


def check_invariants(p: PartitionState) -> None:
    assert p.isr and set(p.isr) <= set(p.replicas)
    assert len(set(p.isr)) == len(p.isr) and len(set(p.replicas)) == len(p.replicas)
    assert p.leader == NO_LEADER or p.leader in p.isr
    assert set(p.adding) <= set(p.replicas) and set(p.removing) <= set(p.replicas)
    assert p.target_replicas


@given(decision_sequences())
def test_partition_invariants_hold_for_any_sequence_of_decisions(case):
    """Whatever brokers die, come back, restart, propose ISRs or move replicas, the ISR is a
    non-empty subset of the replicas, the leader is in it or there is none, a new leader was
    live and in sync (or is the ISR alone, after an unclean election), only live replicas
    join the ISR, leader epochs never go back and grow by one per leader change, every change
    raises the partition epoch by exactly one, and no decision edits the state it is given."""
    unclean, ops = case
    p = ps(leader_epoch=0, partition_epoch=0)
    live = set(BROKERS)
    for op in ops:
        before = copy.deepcopy(p)
        kind = op[0]
        new = None
        if kind == "die":
            live.discard(op[1])  # dead, not fenced yet: no decision until it is
        elif kind == "fence":
            live.discard(op[1])
            new = fence_broker(p, op[1], live, unclean)
        elif kind == "unfence":
            live.add(op[1])
            new = elect_if_leaderless(p, live, unclean)
        elif kind == "restart":
            live.add(op[1])
            new = replica_restarted(p, op[1], live, unclean, clean=op[2])
        elif kind == "alter":
            proposal = sorted(op[1] | ({p.leader} if p.leader != NO_LEADER else set()))
            try:
                new = alter_isr(p, p.leader, p.leader_epoch, p.partition_epoch + op[2],
                                proposal, live)  # fmt: skip
            except (NotLeaderOrFollower, InvalidUpdateVersion, IneligibleReplica,
                    InvalidReplicaAssignment):  # fmt: skip
                new = None
            else:
                assert op[2] == 0 and p.leader != NO_LEADER
                new = None if new == p else new
        elif kind == "preferred":
            new = preferred_leader(p, live)
        elif kind == "reassign":
            try:
                new = reassign(p, op[1], BROKERS)
            except InvalidReplicaAssignment:
                new = None
        else:
            new = complete_reassignment(p, live, unclean)
        assert p == before, "decisions never edit the state they are given"
        if new is None:
            continue
        check_invariants(new)
        assert new != p
        assert new.partition_epoch == p.partition_epoch + 1
        assert new.leader_epoch >= p.leader_epoch
        if new.leader != p.leader:
            assert new.leader_epoch == p.leader_epoch + 1
        if new.leader not in (NO_LEADER, p.leader):
            assert new.leader in live
            # in sync before, or just admitted by the same ISR change, or unclean and alone
            assert new.leader in p.isr or kind == "alter" or new.isr == [new.leader]
        assert set(new.isr) - set(p.isr) <= live | {new.leader}
        p = new
