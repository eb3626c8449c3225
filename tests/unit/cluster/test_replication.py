"""Replication decisions of one partition: the leader's view of its followers (ISR proposals,
high watermark) and how a follower finds where its log diverged from the leader's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.replication import (
    REPLICA_LAG_TIME_MAX_MS,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    UNKNOWN_OFFSET,
    LeaderState,
    diverging_epoch,
    prefetch_offset,
    truncation_offset,
)
from rafka.storage.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache

LAG = 1000


def leader(replicas=(0, 1, 2), isr=None, leo=0, hw=0, now=0, lag=LAG, epoch=3) -> LeaderState:
    """Broker 0 leading ``replicas`` (the whole set in sync unless ``isr`` says otherwise)."""
    replicas = list(replicas)
    return LeaderState(
        0, replicas, list(replicas if isr is None else isr), leader_epoch=epoch,
        log_end_offset=leo, high_watermark=hw, now_ms=now, lag_time_max_ms=lag,
    )  # fmt: skip


def leos(state: LeaderState, members) -> list[int]:
    """The log end offsets the leader knows for ``members``."""
    return [
        state.log_end_offset if b == state.broker_id else state.followers[b].log_end_offset
        for b in members
    ]


# -- the high watermark ------------------------------------------------------------------------


def test_single_replica_high_watermark_is_the_log_end_offset():
    """Alone, the leader's every append is committed at once."""
    state = leader(replicas=[0])
    assert state.isr == [0]
    for leo in (1, 5, 42):
        assert state.on_local_append(leo) == leo


def test_high_watermark_is_the_smallest_log_end_offset_in_the_isr():
    """The high watermark waits for the slowest in-sync replica, the leader included."""
    state = leader()
    assert state.on_local_append(10) == 0
    assert state.on_follower_fetch(1, 10, now_ms=1) == 0  # follower 2 still at 0
    assert state.on_follower_fetch(2, 6, now_ms=1) == 6
    assert state.on_follower_fetch(2, 10, now_ms=2) == 10
    state.on_local_append(12)
    assert state.high_watermark == 10  # the leader's own end bounds it too


def test_out_of_sync_follower_does_not_hold_the_high_watermark_back():
    """A replica outside the ISR (and not joining) is not waited for."""
    state = leader(isr=[0, 1])
    state.on_local_append(10)
    assert state.on_follower_fetch(1, 10, now_ms=1) == 10
    assert state.followers[2].log_end_offset == UNKNOWN_OFFSET  # it never fetched


def test_high_watermark_never_moves_backwards():
    """A new leader keeps the high watermark it inherited while its followers' known offsets
    (0 until they fetch) are below it, and a follower fetching an older offset or an ISR
    change does not lower it."""
    state = leader(leo=20, hw=15)
    assert state.on_local_append(21) == 15
    assert state.on_follower_fetch(1, 21, 1) == 15
    assert state.on_follower_fetch(2, 21, 1) == 21
    assert state.on_follower_fetch(2, 3, 2) == 21
    assert state.on_isr_committed([0, 1, 2], partition_epoch=1) == 21


def test_pending_expansion_counts_the_joining_follower_for_the_high_watermark():
    """Once the leader proposes a follower for the ISR, the high watermark waits for it as if
    it were already in (KIP-497's maximal ISR): the controller may elect it at any moment."""
    state = leader(isr=[0, 1])
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=1)
    state.on_follower_fetch(2, 10, now_ms=1)
    proposal = state.proposed_isr(now_ms=1)
    assert proposal == [0, 1, 2]
    state.propose(proposal)
    assert state.maximal_isr == [0, 1, 2] and state.isr == [0, 1]
    state.on_local_append(15)
    assert state.on_follower_fetch(1, 15, now_ms=2) == 10  # follower 2 is still at 10
    assert state.on_follower_fetch(2, 15, now_ms=2) == 15


def test_refused_expansion_stops_counting_the_joining_follower():
    """After the controller refuses a proposal the follower it would have added no longer
    holds the high watermark back."""
    state = leader(isr=[0, 1])
    state.on_local_append(10)
    state.on_follower_fetch(2, 10, now_ms=1)
    state.propose(state.proposed_isr(now_ms=1))
    state.on_local_append(15)
    state.on_follower_fetch(1, 15, now_ms=2)
    assert state.high_watermark == 10
    state.on_proposal_refused()
    assert state.pending_isr is None and state.maximal_isr == [0, 1]
    assert state.on_follower_fetch(1, 15, now_ms=3) == 15


def test_pending_shrink_still_counts_the_removed_member_until_committed():
    """A follower proposed for removal keeps holding the high watermark back until the
    controller has recorded the smaller ISR (it could still be elected until then)."""
    state = leader()
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=500)
    state.on_follower_fetch(2, 4, now_ms=500)
    proposal = state.proposed_isr(now_ms=LAG + 1)
    assert proposal == [0, 1]
    state.propose(proposal)
    assert state.maximal_isr == [0, 1, 2]
    state.on_local_append(12)
    assert state.on_follower_fetch(1, 12, now_ms=LAG + 2) == 4
    assert state.on_isr_committed([0, 1], partition_epoch=1) == 12
    assert state.isr == [0, 1] and state.pending_isr is None


def test_isr_shrink_from_the_controller_lets_the_high_watermark_advance():
    """The controller's own change (fencing a dead follower), with no proposal pending, is
    applied and the high watermark moves up to the remaining members' minimum."""
    state = leader()
    state.on_local_append(8)
    state.on_follower_fetch(1, 8, now_ms=1)
    assert state.high_watermark == 0  # follower 2 never fetched
    assert state.on_isr_committed([0, 1], partition_epoch=4) == 8
    assert state.partition_epoch == 4


# -- min.insync.replicas -----------------------------------------------------------------------


def test_enough_in_sync_compares_the_committed_isr_with_min_insync_replicas():
    """acks=all needs at least min.insync.replicas members in the ISR the controller recorded:
    a pending removal still counts, a pending addition does not count yet."""
    state = leader(isr=[0, 1])
    assert state.enough_in_sync(2) and not state.enough_in_sync(3)
    state.on_follower_fetch(2, 0, now_ms=1)
    state.propose(state.proposed_isr(now_ms=1))
    assert state.pending_isr == [0, 1, 2]
    assert not state.enough_in_sync(3)
    state.on_isr_committed([0, 1, 2], partition_epoch=1)
    assert state.enough_in_sync(3)
    state.propose([0])
    assert state.enough_in_sync(3)  # the shrink is not recorded yet
    state.on_isr_committed([0], partition_epoch=2)
    assert state.enough_in_sync(1) and not state.enough_in_sync(2)


# -- leaving the ISR ---------------------------------------------------------------------------


def test_follower_lagging_longer_than_lag_time_is_proposed_for_removal():
    """A follower that has not reached the leader's log end for more than
    replica.lag.time.max.ms is proposed for removal; exactly the limit is still in sync."""
    state = leader()
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=500)
    state.on_follower_fetch(2, 4, now_ms=500)  # behind: last caught up when elected, at 0
    assert state.proposed_isr(now_ms=LAG) is None
    assert state.proposed_isr(now_ms=LAG + 1) == [0, 1]
    assert state.isr == [0, 1, 2]  # a proposal changes nothing by itself


def test_every_lagging_follower_is_proposed_for_removal_at_once():
    """When both followers lag, the proposal is the leader alone."""
    state = leader()
    state.on_local_append(7)
    assert state.proposed_isr(now_ms=LAG + 1) == [0]


def test_follower_that_stops_fetching_is_proposed_for_removal_even_when_idle():
    """A follower that had the whole log but stopped fetching leaves after the lag window,
    though nothing was appended since (its last caught-up time is its last fetch)."""
    state = leader(replicas=[0, 1])
    state.on_local_append(5)
    state.on_follower_fetch(1, 5, now_ms=200)
    assert state.proposed_isr(now_ms=200 + LAG) is None
    assert state.proposed_isr(now_ms=201 + LAG) == [0]


def test_new_leader_gives_every_follower_a_full_lag_window():
    """Followers start as caught up at election time, so none is dropped before it has had
    replica.lag.time.max.ms to fetch from the new leader."""
    state = leader(leo=50, hw=50, now=10_000)
    assert state.proposed_isr(now_ms=10_000 + LAG) is None
    assert state.proposed_isr(now_ms=10_001 + LAG) == [0]


def test_follower_caught_up_as_of_its_previous_fetch_stays_in_sync():
    """Kafka's rule: a follower of a busy leader that always fetches up to where the leader
    was at its previous fetch is never at the leader's current end, yet stays in sync; one
    that falls further behind leaves after the lag window."""
    state = leader(replicas=[0, 1])
    leader_end_at_previous_fetch = 0
    for step in range(1, 30):  # 5.8 s of fetches, every 200 ms, against a 1 s lag window
        now = step * 200
        state.on_follower_fetch(1, leader_end_at_previous_fetch, now_ms=now)
        leader_end_at_previous_fetch = state.log_end_offset
        state.on_local_append(state.log_end_offset + 10)  # the leader gets ahead again
        assert state.followers[1].log_end_offset < state.log_end_offset
        assert state.proposed_isr(now_ms=now) is None

    slow = leader(replicas=[0, 1])
    slow.on_local_append(10)
    for step in range(1, 30):
        now = step * 200
        slow.on_follower_fetch(1, step, now_ms=now)  # one record per fetch: falls behind
        slow.on_local_append(slow.log_end_offset + 10)
        if slow.proposed_isr(now_ms=now) is not None:
            break
    assert slow.proposed_isr(now_ms=now) == [0]
    assert now == 1200  # last caught up at 0 (election), so out just after 1000 ms


def test_pipelined_follower_reporting_one_fetch_late_stays_in_sync():
    """A follower that sends its next fetch before appending the last answer reports, with
    each fetch, the log end of two fetches back: it holds what the leader had at its fetch
    before the previous one. It is caught up as of that fetch and stays in the ISR under
    any load; one that holds less than the leader had three fetches back is lagging."""
    state = leader(replicas=[0, 1])
    ends = [0, 0]  # the leader's log end at the follower's last two fetches, oldest first
    for step in range(1, 30):  # 5.8 s of fetches, every 200 ms, against a 1 s lag window
        now = step * 200
        state.on_follower_fetch(1, ends[0], now_ms=now)
        ends = [ends[1], state.log_end_offset]
        state.on_local_append(state.log_end_offset + 10)
        assert state.proposed_isr(now_ms=now) is None
    assert state.followers[1].log_end_offset < state.high_watermark + 30

    slow = leader(replicas=[0, 1])
    history = [0, 0, 0]
    for step in range(1, 30):
        now = step * 200
        slow.on_follower_fetch(1, history[0], now_ms=now)  # three fetches behind
        history = history[1:] + [slow.log_end_offset]
        slow.on_local_append(slow.log_end_offset + 10)
        if slow.proposed_isr(now_ms=now) is not None:
            break
    assert slow.proposed_isr(now_ms=now) == [0]


def test_a_follower_restart_forgets_the_caught_up_history_of_its_earlier_life():
    state = leader(replicas=[0, 1])
    state.on_local_append(10)
    state.on_follower_fetch(1, 0, now_ms=100, incarnation=1)
    state.on_local_append(20)
    state.on_follower_fetch(1, 0, now_ms=1500, incarnation=2)  # restarted, holds nothing
    # Its earlier life's fetch at 100 ms (when the leader ended at 10) earns no credit.
    state.on_follower_fetch(1, 10, now_ms=1600, incarnation=2)
    assert state.followers[1].last_caught_up_ms == 0
    assert state.proposed_isr(now_ms=1600) == [0]


# -- joining the ISR ---------------------------------------------------------------------------


def test_follower_joins_once_it_reaches_the_high_watermark():
    """An out-of-sync follower is proposed for the ISR once its fetch offset reaches the high
    watermark, not before."""
    state = leader(replicas=[0, 1], isr=[0])
    state.on_local_append(10)
    assert state.high_watermark == 10
    state.on_follower_fetch(1, 9, now_ms=1)
    assert state.proposed_isr(now_ms=1) is None
    state.on_follower_fetch(1, 10, now_ms=2)
    assert state.proposed_isr(now_ms=2) == [0, 1]


def test_follower_joins_only_once_it_has_the_leaders_epoch_start_offset():
    """A follower at the (inherited) high watermark but short of what the leader held when it
    took over does not join: the leader's own earlier records are not yet safe on it."""
    state = leader(isr=[0, 1], leo=10, hw=6)
    assert state.epoch_start_offset == 10
    state.on_follower_fetch(2, 8, now_ms=1)
    assert state.high_watermark == 6 and state.proposed_isr(now_ms=1) is None
    state.on_follower_fetch(2, 10, now_ms=2)
    assert state.proposed_isr(now_ms=2) == [0, 1, 2]


def test_expansion_and_removal_are_proposed_together_in_a_stable_order():
    """One proposal both drops the laggard and adds the caught-up follower: the remaining
    members keep their order and joiners come after, sorted."""
    state = LeaderState(0, [0, 1, 2, 3], [1, 0, 2], leader_epoch=0, log_end_offset=0,
                        high_watermark=0, now_ms=0, lag_time_max_ms=LAG)  # fmt: skip
    state.on_local_append(4)
    state.on_follower_fetch(1, 4, now_ms=LAG)
    state.on_follower_fetch(3, 4, now_ms=LAG)
    assert state.proposed_isr(now_ms=LAG + 1) == [1, 0, 3]  # 2 leaves, 3 joins


def test_out_of_sync_replica_at_election_joins_by_fetching():
    """A replica the controller left out of the ISR is proposed once it reaches the high
    watermark."""
    state = leader(isr=[0, 1], leo=5, hw=5)
    state.on_follower_fetch(2, 5, now_ms=1)
    assert state.proposed_isr(now_ms=1) == [0, 1, 2]


# -- proposals and the controller's answers ----------------------------------------------------


def test_only_one_proposal_is_pending_at_a_time():
    """While a proposal is out, nothing new is proposed; the controller's answer settles it
    and the next change can be proposed."""
    state = leader()
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=LAG + 1)
    state.propose(state.proposed_isr(now_ms=LAG + 1))
    assert state.pending_isr == [0, 1]
    assert state.proposed_isr(now_ms=5 * LAG) is None  # follower 1 now lags too
    state.on_isr_committed([0, 1], partition_epoch=1)
    assert state.proposed_isr(now_ms=5 * LAG) == [0]


def test_refused_proposal_can_be_proposed_again():
    """After a refusal (stale epochs) nothing is pending and the same change is proposed."""
    state = leader()
    state.on_local_append(3)
    proposal = state.proposed_isr(now_ms=LAG + 1)
    state.propose(proposal)
    state.on_proposal_refused()
    assert state.pending_isr is None and state.isr == [0, 1, 2]
    assert state.proposed_isr(now_ms=LAG + 1) == proposal


def test_stale_isr_commit_is_ignored():
    """A partition state older than the one the leader holds (a late answer overtaken by a
    newer change) changes nothing: neither the ISR, nor the pending proposal, nor the high
    watermark."""
    state = LeaderState(0, [0, 1, 2], [0, 1, 2], 3, 0, 0, now_ms=0, lag_time_max_ms=LAG,
                        partition_epoch=5)  # fmt: skip
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=1)
    state.propose([0, 1])
    assert state.on_isr_committed([0, 1], partition_epoch=4) == 0
    assert state.isr == [0, 1, 2] and state.pending_isr == [0, 1]
    assert state.partition_epoch == 5
    assert state.on_isr_committed([0, 1], partition_epoch=6) == 10
    assert state.partition_epoch == 6 and state.pending_isr is None


def test_committed_isr_always_holds_the_leader_and_only_replicas():
    """An ISR from the controller is cut to the replicas and the leader is kept in it."""
    state = leader()
    state.on_isr_committed([1, 7], partition_epoch=1)
    assert sorted(state.isr) == [0, 1]
    state.on_isr_committed([], partition_epoch=2)
    assert state.isr == [0]


def test_isr_given_at_election_is_kept_and_unknown_members_ignored():
    """The ISR starts as the controller's, minus brokers that are not replicas, plus the
    leader."""
    state = LeaderState(0, [0, 1, 2], [1, 7], 0, 0, 0, now_ms=0)
    assert sorted(state.isr) == [0, 1]
    assert LeaderState(0, [0, 1], [], 0, 0, 0, now_ms=0).isr == [0]


def test_update_replicas_tracks_new_followers_and_forgets_removed_ones():
    """A reassignment adds followers (with a full lag window) and drops removed replicas
    from the followers and the ISR."""
    state = leader()
    state.update_replicas([0, 1, 3], now_ms=500)
    assert sorted(state.followers) == [1, 3]
    assert state.isr == [0, 1]
    assert state.followers[3].last_caught_up_ms == 500
    state.on_local_append(4)
    state.on_follower_fetch(1, 4, now_ms=501)
    state.on_follower_fetch(3, 4, now_ms=501)
    assert state.proposed_isr(now_ms=501) == [0, 1, 3]
    with pytest.raises(KeyError):
        state.on_follower_fetch(2, 4, now_ms=502)


def test_leader_must_be_a_replica():
    """A leader that is not among the replicas is a programming error."""
    with pytest.raises(ValueError, match="not among the replicas"):
        LeaderState(5, [0, 1], [0, 1], 0, 0, 0, now_ms=0)


@pytest.mark.parametrize("follower", [9, 0, -1])
def test_fetch_from_a_broker_that_is_not_a_follower_raises_key_error(follower):
    """Only the partition's followers fetch: anyone else (the leader included) is a KeyError
    naming it."""
    with pytest.raises(KeyError, match=str(follower)):
        leader().on_follower_fetch(follower, 0, now_ms=0)


def test_default_lag_time_is_kafkas_thirty_seconds():
    """replica.lag.time.max.ms defaults to 30 s."""
    state = LeaderState(0, [0, 1], [0, 1], 0, 1, 0, now_ms=0)
    assert REPLICA_LAG_TIME_MAX_MS == 30_000 == state.lag_time_max_ms
    assert state.proposed_isr(30_000) is None and state.proposed_isr(30_001) == [0]


# -- the leader's invariants under random histories --------------------------------------------


@st.composite
def leader_histories(draw):
    """Random interleavings of appends, follower fetches (each follower's offset only grows,
    never past the leader's end), clock ticks, proposals and the controller's answers:
    acceptance, refusal, its own removal of a follower, and late (stale) states."""
    return draw(st.lists(st.one_of(
        st.tuples(st.just("append"), st.integers(0, 5)),
        st.tuples(st.just("fetch"), st.sampled_from([1, 2, 3]), st.integers(0, 6)),
        st.tuples(st.just("tick"), st.integers(0, 2 * LAG)),
        st.tuples(st.just("propose")),
        st.tuples(st.just("accept")),
        st.tuples(st.just("refuse")),
        st.tuples(st.just("remove"), st.sampled_from([1, 2, 3])),
        st.tuples(st.just("stale"), st.lists(st.sampled_from([0, 1, 2, 3]), max_size=4)),
    ), max_size=80))  # fmt: skip


@given(leader_histories(), st.lists(st.sampled_from([1, 2, 3]), max_size=3, unique=True))
def test_leader_state_invariants_hold_under_any_history(ops, initial_followers_in_sync):
    """Whatever happens: the high watermark never decreases, never passes the leader's log
    end, and every member of the maximal ISR has it all (after appends, fetches and commits it
    is exactly their smallest log end offset); the leader stays in an ISR within the replicas;
    at most one proposal is out, and every proposal keeps the leader."""
    state = LeaderState(0, [0, 1, 2, 3], [0, *initial_followers_in_sync], leader_epoch=1,
                        log_end_offset=0, high_watermark=0, now_ms=0,
                        lag_time_max_ms=LAG)  # fmt: skip
    now = 0
    partition_epoch = 0
    last_hw = 0
    for op in ops:
        kind = op[0]
        recomputed = False
        if kind == "append":
            state.on_local_append(state.log_end_offset + op[1])
            recomputed = True
        elif kind == "fetch":
            progress = state.followers[op[1]]
            offset = min(progress.log_end_offset + op[2], state.log_end_offset)
            state.on_follower_fetch(op[1], offset, now)
            recomputed = True
        elif kind == "tick":
            now += op[1]
        elif kind == "propose":
            proposal = state.proposed_isr(now)
            if state.pending_isr is not None:
                assert proposal is None
            if proposal is not None:
                assert 0 in proposal
                assert len(set(proposal)) == len(proposal)
                state.propose(proposal)
        elif kind == "accept" and state.pending_isr is not None:
            partition_epoch += 1
            state.on_isr_committed(state.pending_isr, partition_epoch)
            recomputed = True
        elif kind == "refuse":
            state.on_proposal_refused()
        elif kind == "remove":
            partition_epoch += 1
            state.on_isr_committed([b for b in state.isr if b != op[1]], partition_epoch)
            recomputed = True
        elif kind == "stale":
            before = (list(state.isr), state.pending_isr, state.high_watermark)
            state.on_isr_committed(op[1], partition_epoch - 1)
            assert (state.isr, state.pending_isr, state.high_watermark) == before
        hw = state.high_watermark
        assert last_hw <= hw <= state.log_end_offset
        ends = leos(state, state.maximal_isr)
        # A follower that has not fetched yet (UNKNOWN_OFFSET) holds the high watermark
        # where it is, without lowering it.
        floor = min((e for e in ends if e != UNKNOWN_OFFSET), default=hw)
        assert hw <= floor
        if recomputed and UNKNOWN_OFFSET not in ends:
            assert hw == floor
        assert 0 in state.isr and set(state.isr) <= set(state.replicas)
        assert len(set(state.isr)) == len(state.isr)
        assert state.enough_in_sync(len(state.isr)) and not state.enough_in_sync(len(state.isr) + 1)
        last_hw = hw


# -- divergence: KIP-101/279/320 ---------------------------------------------------------------


class ReplicaLog:
    """A replica's log reduced to the leader epoch of each record, with a real leader-epoch
    cache kept the way the partition log keeps it."""

    def __init__(self, cache: LeaderEpochCache, epochs=()) -> None:
        self.cache = cache
        self.epochs: list[int] = []
        for epoch in epochs:
            self.append(epoch)

    def append(self, epoch: int, count: int = 1) -> None:
        self.cache.assign(epoch, len(self.epochs))
        self.epochs += [epoch] * count

    def become_leader(self, epoch: int) -> None:
        """Kafka's makeLeader: the new epoch starts at the log end, written or not."""
        self.cache.assign(epoch, len(self.epochs))

    @property
    def log_end_offset(self) -> int:
        return len(self.epochs)

    def end_for(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, self.log_end_offset)

    def truncate(self, offset: int) -> None:
        del self.epochs[offset:]
        self.cache.truncate_from_end(offset)


class MemoryEpochCache(LeaderEpochCache):
    """The real cache's logic with no checkpoint file (for property tests)."""

    def __init__(self) -> None:
        self.path = ""
        self.entries = []

    def _persist(self) -> None:
        pass


def reconcile(follower: ReplicaLog, leader: ReplicaLog, high_watermark: int = 0) -> list[int]:
    """The follower's fetch loop against the leader until the leader finds no divergence;
    returns the offsets the follower truncated to."""
    truncations = []
    for _ in range(50):
        answer = diverging_epoch(
            leader.end_for, follower.log_end_offset, follower.cache.latest_epoch
        )
        if answer is None:
            return truncations
        target = truncation_offset(follower.end_for, follower.log_end_offset, high_watermark,
                                   *answer)  # fmt: skip
        assert target < follower.log_end_offset, "a divergence answer must make progress"
        follower.truncate(target)
        truncations.append(target)
    raise AssertionError(f"no agreement after 50 rounds: {truncations}")


@pytest.fixture
def replica_log(tmp_path):
    """Make a ReplicaLog whose epoch cache is checkpointed in its own directory."""
    made = iter(range(100))

    def make(epochs=()) -> ReplicaLog:
        directory = tmp_path / f"replica-{next(made)}"
        directory.mkdir()
        return ReplicaLog(LeaderEpochCache(str(directory / CHECKPOINT_FILE)), epochs)

    return make


def test_follower_whose_log_is_a_prefix_of_the_leaders_is_not_diverging(replica_log):
    """Same last epoch and the leader's copy of that epoch reaches the fetch offset: no
    divergence, whether the follower is behind inside the epoch or at an epoch boundary."""
    leader_log = replica_log([0, 0, 0, 2, 2, 2])
    leader_log.become_leader(4)
    for follower in ([0, 0], [0, 0, 0], [0, 0, 0, 2], [0, 0, 0, 2, 2, 2]):
        assert diverging_epoch(leader_log.end_for, len(follower), follower[-1]) is None


def test_empty_follower_or_unknown_epoch_is_never_diverging(replica_log):
    """A follower with nothing (offset 0) or no epoch to name has nothing to compare."""
    leader_log = replica_log([0, 1])
    assert diverging_epoch(leader_log.end_for, 0, UNDEFINED_EPOCH) is None
    assert diverging_epoch(leader_log.end_for, 0, 5) is None
    assert diverging_epoch(leader_log.end_for, 7, UNDEFINED_EPOCH) is None


def test_follower_with_extra_uncommitted_records_from_an_old_epoch_truncates_them(replica_log):
    """KIP-101: the follower got records 3-4 of epoch 1 that the leader never got before it
    took over in epoch 2; the leader answers that epoch 1 ends at 3 for it, and the follower
    drops exactly the extra records, keeping the committed prefix."""
    leader_log = replica_log([1, 1, 1])
    leader_log.become_leader(2)
    leader_log.append(2, 3)
    follower = replica_log([1, 1, 1, 1, 1])
    assert diverging_epoch(leader_log.end_for, 5, 1) == (1, 3)
    assert truncation_offset(follower.end_for, 5, 3, 1, 3) == 3
    assert reconcile(follower, leader_log, high_watermark=3) == [3]
    assert follower.epochs == [1, 1, 1]
    assert diverging_epoch(leader_log.end_for, 3, 1) is None


def test_follower_that_led_an_epoch_the_leader_never_saw_truncates_in_two_rounds(replica_log):
    """KIP-279: a follower that led epoch 3 (never replicated) is told where the leader's
    epoch 2 ends, an epoch it never had, so it cuts back to the end of its own older epoch 0
    (6), asks again with epoch 0 and cuts to 4, where the leader's epoch 2 began."""
    leader_log = replica_log([0, 0, 0, 0, 2, 2, 2, 2])
    leader_log.become_leader(4)
    follower = replica_log([0, 0, 0, 0, 0, 0, 3, 3, 3])
    assert diverging_epoch(leader_log.end_for, 9, 3) == (2, 8)
    assert truncation_offset(follower.end_for, 9, 0, 2, 8) == 6
    assert reconcile(follower, leader_log) == [6, 4]
    assert follower.epochs == [0, 0, 0, 0]
    assert follower.cache.latest_epoch == 0


def test_follower_ahead_of_the_leader_in_the_same_epoch_truncates_to_the_leaders_end(
    replica_log,
):
    """The follower holds more of epoch 1 than the new leader, which ended epoch 1 at 4 and
    started epoch 2 there: the follower cuts back to 4."""
    leader_log = replica_log([0, 1, 1, 1])
    leader_log.become_leader(2)
    leader_log.append(2, 2)
    follower = replica_log([0, 1, 1, 1, 1, 1])
    assert diverging_epoch(leader_log.end_for, 6, 1) == (1, 4)
    assert truncation_offset(follower.end_for, 6, 0, 1, 4) == 4
    assert reconcile(follower, leader_log) == [4]
    assert follower.epochs == leader_log.epochs[:4]


def test_fetch_past_the_leaders_end_in_its_current_epoch_is_diverging(replica_log):
    """A follower claiming more of the leader's current epoch than the leader has is told
    where that epoch ends (the leader's log end)."""
    leader_log = replica_log([0, 0, 1])
    assert diverging_epoch(leader_log.end_for, 5, 1) == (1, 3)


def test_undefined_leader_answer_truncates_to_the_high_watermark(replica_log):
    """When the leader cannot say where the follower's epoch ends (it knows no epoch that
    late), the follower falls back to its high watermark, which every in-sync replica holds,
    and never past its own log end."""
    leader_log = replica_log([0, 0, 0])
    follower = replica_log([0, 0, 5, 5])
    answer = diverging_epoch(leader_log.end_for, 4, 5)
    assert answer == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert truncation_offset(follower.end_for, 4, 2, *answer) == 2
    assert truncation_offset(follower.end_for, 4, 9, *answer) == 4
    assert truncation_offset(follower.end_for, 4, 2, UNDEFINED_EPOCH, 3) == 2
    assert truncation_offset(follower.end_for, 4, 2, 0, UNDEFINED_OFFSET) == 2


def test_leader_that_records_its_epoch_at_election_corrects_a_follower_past_its_hw(replica_log):
    """After an unclean election, a leader that recorded its epoch's start when it took over
    (Kafka's makeLeader) makes a follower drop epoch-1 records it never had, even one below
    the follower's high watermark, where an "undefined" answer would have kept it."""
    follower = replica_log([0, 0, 1, 1])
    leader_log = replica_log([0, 0])
    assert diverging_epoch(leader_log.end_for, 4, 1) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert truncation_offset(follower.end_for, 4, 3, UNDEFINED_EPOCH, UNDEFINED_OFFSET) == 3
    leader_log.become_leader(2)
    assert diverging_epoch(leader_log.end_for, 4, 1) == (0, 2)
    assert reconcile(follower, leader_log, high_watermark=3) == [2]
    assert follower.epochs == [0, 0]


def test_follower_without_epoch_history_truncates_to_the_leaders_end(replica_log):
    """A follower whose epoch cache is empty (it kept no epochs) trusts the leader's end
    offset for the epoch, bounded by its own log end."""
    follower = ReplicaLog(replica_log().cache)
    follower.epochs = [0] * 6  # records, but no epoch entries
    assert truncation_offset(follower.end_for, 6, 0, 0, 4) == 4
    assert truncation_offset(follower.end_for, 6, 0, 0, 9) == 6


def test_truncation_never_goes_past_either_end(replica_log):
    """The result is at most the follower's log end and at most the leader's end offset."""
    follower = replica_log([0, 0, 1, 1])
    assert truncation_offset(follower.end_for, 4, 0, 1, 10) == 4
    assert truncation_offset(follower.end_for, 4, 0, 1, 3) == 3


@st.composite
def replica_histories(draw):
    """Three replicas' logs after random elections (clean or not), appends by the leader of
    each epoch, and followers copying from the leader after cutting back to the longest common
    prefix. One leader per epoch makes (offset, epoch) name one record, so equal epoch lists
    mean equal logs. Returns the logs, the last leader and its epoch."""
    logs: list[list[int]] = [[], [], []]
    leader_id, epoch = 0, 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["elect", "append", "append", "copy"]))
        if kind == "elect":
            leader_id, epoch = draw(st.integers(0, 2)), epoch + 1
        elif kind == "append":
            logs[leader_id] += [epoch] * draw(st.integers(1, 3))
        else:
            f = draw(st.sampled_from([b for b in range(3) if b != leader_id]))
            common = common_prefix(logs[f], logs[leader_id])
            logs[f] = logs[leader_id][: draw(st.integers(common, len(logs[leader_id])))]
    return logs, leader_id, epoch


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(replica_histories())
def test_followers_truncate_exactly_to_where_their_log_leaves_the_leaders(history):
    """For any history of elections, appends and partial copies, every follower's fetch loop
    ends with its log a prefix of the leader's, having dropped only records the leader does
    not hold (it truncates to the longest common prefix, never below)."""
    logs, leader_id, epoch = history
    leader_log = ReplicaLog(MemoryEpochCache(), logs[leader_id])
    leader_log.become_leader(epoch)
    for f in range(3):
        if f == leader_id:
            continue
        follower = ReplicaLog(MemoryEpochCache(), logs[f])
        reconcile(follower, leader_log)
        assert follower.epochs == logs[f][: common_prefix(logs[f], logs[leader_id])]


# -- prefetching followers ----------------------------------------------------------------------


def test_a_follower_prefetches_only_behind_by_a_chunk_and_not_throttled():
    """Behind by more than a size-cut answer: prefetch. A small answer (a follower keeping
    up with a trickle of records) appends first, so its progress reaches the leader at once."""
    full = {"answer_bytes": 1 << 20, "max_bytes": 1 << 20}
    assert prefetch_offset(records_end=100, leader_log_end=250, throttled=False, **full) == 100
    assert prefetch_offset(records_end=250, leader_log_end=250, throttled=False, **full) is None
    assert prefetch_offset(records_end=100, leader_log_end=250, throttled=True, **full) is None
    assert prefetch_offset(100, 250, False, answer_bytes=4096, max_bytes=1 << 20) is None
    assert prefetch_offset(100, 250, False, answer_bytes=1 << 19, max_bytes=1 << 20) == 100


def test_a_prefetching_followers_unwritten_records_never_count_for_the_high_watermark():
    """The fetch that goes out before an append reports the log end before it: the high
    watermark reaches those records only with the fetch after, once they are written."""
    state = leader(replicas=[0, 1], isr=[0, 1])
    state.on_local_append(300)
    state.on_follower_fetch(1, 0, now_ms=10)  # answered with records up to 100
    assert state.on_follower_fetch(1, 0, now_ms=11) == 0  # prefetch from 100, nothing written
    assert state.on_follower_fetch(1, 100, now_ms=12) == 100  # after the write
