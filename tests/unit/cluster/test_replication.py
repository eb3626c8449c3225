"""A partition leader's bookkeeping: the ISR, the high watermark and when followers leave and
rejoin."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster.replication import REPLICA_LAG_TIME_MAX_MS, LeaderState

LAG = 1000


def leader(replicas=(0, 1, 2), isr=None, leo=0, hw=0, now=0, lag=LAG) -> LeaderState:
    replicas = list(replicas)
    return LeaderState(
        0, replicas, list(replicas if isr is None else isr), leader_epoch=3,
        log_end_offset=leo, high_watermark=hw, now_ms=now, lag_time_max_ms=lag,
    )  # fmt: skip


def test_single_replica_high_watermark_is_the_log_end_offset():
    """Alone, the leader's every append is committed at once."""
    state = leader(replicas=[0])
    assert state.isr == [0]
    for leo in (1, 5, 42):
        assert state.on_local_append(leo) == leo
        assert state.high_watermark == leo


def test_with_followers_high_watermark_is_the_smallest_isr_log_end_offset():
    """The high watermark waits for the slowest in-sync replica."""
    state = leader()
    assert state.on_local_append(10) == 0
    assert state.on_follower_fetch(1, 10, now_ms=1) == 0  # follower 2 still at 0
    assert state.on_follower_fetch(2, 6, now_ms=1) == 6
    assert state.on_follower_fetch(2, 10, now_ms=2) == 10


def test_high_watermark_never_exceeds_the_leaders_log_end():
    """Followers at the leader's end cannot push the high watermark past it."""
    state = leader()
    state.on_local_append(5)
    state.on_follower_fetch(1, 5, 1)
    state.on_follower_fetch(2, 5, 1)
    assert state.high_watermark == 5
    state.on_local_append(9)
    assert state.high_watermark == 5


def test_high_watermark_never_moves_backwards():
    """A new leader keeps the high watermark it inherited even while its followers' known
    offsets (0 until they fetch) are below it, and a follower refetching an older offset
    does not lower it."""
    state = leader(leo=20, hw=15)
    assert state.on_local_append(21) == 15
    assert state.on_follower_fetch(1, 21, 1) == 15
    assert state.on_follower_fetch(2, 21, 1) == 21
    assert state.on_follower_fetch(2, 3, 2) == 21


@st.composite
def histories(draw):
    """Random interleavings of appends, follower fetches (never past the leader's end) and
    ISR shrinks, with time moving forward."""
    ops = []
    leo = 0
    now = 0
    for _ in range(draw(st.integers(1, 60))):
        now += draw(st.integers(0, 2 * LAG))
        kind = draw(st.sampled_from(["append", "fetch", "fetch", "shrink"]))
        if kind == "append":
            leo += draw(st.integers(0, 5))
            ops.append(("append", leo, now))
        elif kind == "fetch":
            ops.append(("fetch", draw(st.sampled_from([1, 2])), draw(st.integers(0, leo)), now))
        else:
            ops.append(("shrink", now))
    return ops


@given(histories())
def test_high_watermark_is_monotonic_and_bounded_by_isr_progress(ops):
    """Whatever happens, the high watermark never decreases, never passes the leader's log
    end, and is at least the smallest log end offset in the ISR; the leader stays in the ISR
    and the ISR stays within the replicas."""
    state = leader()
    last_hw = state.high_watermark
    for op in ops:
        if op[0] == "append":
            state.on_local_append(op[1])
        elif op[0] == "fetch":
            state.on_follower_fetch(op[1], op[2], op[3])
        else:
            state.shrink_isr(op[1])
        hw = state.high_watermark
        assert hw >= last_hw
        assert hw <= state.log_end_offset
        isr_leos = [
            state.log_end_offset if b == 0 else state.followers[b].log_end_offset
            for b in state.isr
        ]
        assert hw >= min(isr_leos)
        assert 0 in state.isr and set(state.isr) <= set(state.replicas)
        assert len(set(state.isr)) == len(state.isr)
        last_hw = hw


def test_follower_that_lags_too_long_is_dropped_and_high_watermark_advances():
    """A follower that has not reached the leader's end for more than lag_time_max_ms leaves
    the ISR; without it the high watermark moves up to the remaining replicas' minimum."""
    state = leader(now=0)
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=500)
    state.on_follower_fetch(2, 4, now_ms=500)  # behind: last caught up at 0
    assert state.high_watermark == 4
    assert state.shrink_isr(now_ms=LAG) == []  # exactly the limit: still in
    assert state.shrink_isr(now_ms=LAG + 1) == [2]
    assert state.isr == [0, 1]
    assert state.high_watermark == 10


def test_follower_caught_up_recently_is_not_dropped():
    """Fetching up to the leader's end resets the lag clock."""
    state = leader(replicas=[0, 1], now=0)
    state.on_local_append(3)
    state.on_follower_fetch(1, 3, now_ms=900)
    state.on_local_append(8)  # the follower is behind again, but caught up at 900
    assert state.shrink_isr(now_ms=900 + LAG) == []
    assert state.shrink_isr(now_ms=901 + LAG) == [1]


def test_dropping_every_follower_leaves_the_leader_alone_with_hw_at_its_end():
    """When every follower lags, the leader alone is the ISR and commits its whole log."""
    state = leader()
    state.on_local_append(7)
    assert sorted(state.shrink_isr(now_ms=LAG + 1)) == [1, 2]
    assert state.isr == [0]
    assert state.high_watermark == 7
    assert state.on_local_append(9) == 9


def test_follower_rejoins_when_it_reaches_the_high_watermark():
    """An out-of-sync follower is back in the ISR once its fetch offset reaches the high
    watermark, not before."""
    state = leader(replicas=[0, 1])
    state.on_local_append(10)
    state.shrink_isr(now_ms=LAG + 1)
    assert state.isr == [0] and state.high_watermark == 10
    state.on_follower_fetch(1, 9, now_ms=LAG + 2)
    assert state.isr == [0]
    state.on_follower_fetch(1, 10, now_ms=LAG + 3)
    assert state.isr == [0, 1]
    state.on_local_append(12)
    assert state.high_watermark == 10  # waits for the rejoined follower again
    assert state.on_follower_fetch(1, 12, now_ms=LAG + 4) == 12


def test_isr_given_at_election_is_kept_and_unknown_members_ignored():
    """The ISR starts as the controller's, minus brokers that are not replicas, plus the
    leader."""
    state = LeaderState(0, [0, 1, 2], [1, 7], 0, 0, 0, now_ms=0)
    assert sorted(state.isr) == [0, 1]
    assert LeaderState(0, [0, 1], [], 0, 0, 0, now_ms=0).isr == [0]


def test_out_of_sync_replica_at_election_rejoins_by_fetching():
    """A replica the controller left out of the ISR joins once it reaches the high
    watermark."""
    state = leader(replicas=[0, 1, 2], isr=[0, 1], leo=5, hw=5)
    state.on_follower_fetch(2, 5, now_ms=1)
    assert sorted(state.isr) == [0, 1, 2]


def test_leader_must_be_a_replica():
    """A leader that is not among the replicas is a programming error."""
    with pytest.raises(ValueError, match="not among the replicas"):
        LeaderState(5, [0, 1], [0, 1], 0, 0, 0, now_ms=0)


@pytest.mark.parametrize("follower", [9, 0, -1])
def test_fetch_from_a_broker_that_is_not_a_follower_raises_key_error(follower):
    """Only the partition's followers fetch: anyone else (the leader included) is a
    KeyError naming it."""
    state = leader()
    with pytest.raises(KeyError, match=str(follower)):
        state.on_follower_fetch(follower, 0, now_ms=0)


def test_enough_in_sync_compares_the_isr_size_with_min_insync_replicas():
    """acks=all needs at least min.insync.replicas in the ISR."""
    state = leader()
    assert state.enough_in_sync(1) and state.enough_in_sync(3)
    assert not state.enough_in_sync(4)
    state.on_local_append(1)
    state.on_follower_fetch(1, 1, now_ms=LAG)
    state.shrink_isr(now_ms=LAG + 1)
    assert state.isr == [0, 1]
    assert state.enough_in_sync(2) and not state.enough_in_sync(3)


def test_default_lag_time_is_kafkas_thirty_seconds():
    """replica.lag.time.max.ms defaults to 30 s."""
    state = LeaderState(0, [0, 1], [0, 1], 0, 1, 0, now_ms=0)
    assert REPLICA_LAG_TIME_MAX_MS == 30_000 == state.lag_time_max_ms
    assert state.shrink_isr(30_000) == [] and state.shrink_isr(30_001) == [1]
