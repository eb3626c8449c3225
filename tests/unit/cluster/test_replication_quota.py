"""Which replicas a move throttles and at what share of ``replication.throttled.rate``: only
replicas being added and not in sync, each at the broker's rate divided by the moves copying
into its broker or out of its leader's, so the shares of one broker never add up past the
rate; and which replicas must hear of a changed share."""

from __future__ import annotations

import random

from rafka.cluster.metadata import PartitionState
from rafka.cluster.replication_quota import MoveCounts, copying, count_moves, follower_rate

RATE = 1 << 20


def moving(partition: int, leader: int, isr: list[int], adding: list[int],
           removing: list[int] = ()) -> PartitionState:  # fmt: skip
    replicas = sorted(set(isr) | set(adding) | set(removing) | {leader})
    return PartitionState(partition, replicas, isr, leader, 5, adding=adding,
                          removing=list(removing))  # fmt: skip


def state_of(p: PartitionState, counts: MoveCounts, broker: int) -> dict:
    """What the controller tells ``broker``'s replica of ``p`` (the fields used here)."""
    return {"leader": p.leader, "isr": p.isr, "replicas": p.replicas, "adding": p.adding,
            "throttled_moves": counts.share(p, broker)}  # fmt: skip


def test_only_replicas_being_added_and_not_in_sync_copy_for_a_move():
    """An adding replica that joined the ISR is in sync (Kafka never throttles those), and a
    plain follower or the leader copy nothing for a move."""
    assert copying(moving(0, 1, [1], adding=[3])) == [3]
    assert copying(moving(0, 1, [1, 3], adding=[3, 4], removing=[2])) == [4]
    assert copying(PartitionState(0, [1, 2], [1], 1, 5)) == []


def test_moves_are_counted_per_destination_and_per_leader():
    """Each copying replica counts once for its broker (bytes taken in) and once for its
    partition's leader's broker (bytes sent)."""
    counts = count_moves([
        moving(0, 1, [1], adding=[3], removing=[1]),
        moving(1, 2, [2], adding=[3, 4], removing=[2]),
        moving(2, 1, [1, 3], adding=[3], removing=[1]),  # caught up: not counted
        PartitionState(3, [1, 2], [1, 2], 1, 5),
    ])  # fmt: skip
    assert counts.into == {3: 2, 4: 1}
    assert counts.out_of == {1: 1, 2: 2}


def test_a_copying_replica_is_told_its_shares_and_the_others_nothing():
    """The share is [moves into its broker, moves out of its leader's broker]; the leader,
    a plain follower and an in-sync adding replica get none."""
    p = moving(1, 2, [2], adding=[3, 4], removing=[2])
    q = moving(0, 1, [1], adding=[3], removing=[1])
    counts = count_moves([p, q])
    assert counts.share(p, 3) == [2, 2]
    assert counts.share(p, 4) == [1, 2]
    assert counts.share(q, 3) == [2, 1]
    assert counts.share(p, 2) is None
    assert counts.share(moving(2, 1, [1, 3], adding=[3]), 3) is None


def test_the_follower_rate_is_the_broker_rate_over_the_busier_side():
    """Two moves into broker 3 (one also out of broker 2 with another): each replica takes
    the rate over the larger count; rate 0, a replica not being added, one in sync and one
    caught up with the leader are not throttled at all."""
    p = moving(1, 2, [2], adding=[3, 4], removing=[2])
    q = moving(0, 1, [1], adding=[3], removing=[1])
    counts = count_moves([p, q])
    assert follower_rate(RATE, state_of(p, counts, 3), 3, caught_up=False) == RATE // 2
    assert follower_rate(RATE, state_of(q, counts, 3), 3, caught_up=False) == RATE // 2
    assert follower_rate(RATE, state_of(p, counts, 4), 4, caught_up=False) == RATE // 2
    assert follower_rate(0, state_of(p, counts, 3), 3, caught_up=False) == 0
    assert follower_rate(RATE, state_of(p, counts, 3), 3, caught_up=True) == 0
    in_sync = moving(2, 1, [1, 3], adding=[3])
    assert follower_rate(RATE, state_of(in_sync, counts, 3), 3, caught_up=False) == 0
    plain = PartitionState(3, [1, 2], [1], 1, 5)
    assert follower_rate(RATE, state_of(plain, counts, 2), 2, caught_up=False) == 0


def test_a_state_without_shares_takes_the_whole_rate_and_never_less_than_a_byte():
    """A state from before shares were sent divides by one; a tiny rate over many moves
    still lets a byte a second through (a rate of 0 would mean no limit)."""
    state = {"leader": 1, "isr": [1], "replicas": [1, 3], "adding": [3]}
    assert follower_rate(RATE, state, 3, caught_up=False) == RATE
    assert follower_rate(3, {**state, "throttled_moves": [10, 1]}, 3, caught_up=False) == 1


def test_the_shares_of_one_broker_never_add_up_past_its_rate():
    """Random moves among six brokers: for every broker, the rates of the replicas copying
    into it add up to at most the rate, and so do those copying from partitions it leads."""
    rng = random.Random(7)
    for _ in range(200):
        partitions = []
        for n in range(rng.randint(1, 12)):
            brokers = rng.sample(range(6), 4)
            leader, others = brokers[0], brokers[1:]
            adding = others[: rng.randint(0, 2)]
            isr = [leader] + [b for b in others if b not in adding and rng.random() < 0.5]
            partitions.append(moving(n, leader, isr, adding=adding))
        counts = count_moves(partitions)
        into: dict[int, int] = {}
        out_of: dict[int, int] = {}
        for p in partitions:
            for b in copying(p):
                rate = follower_rate(RATE, state_of(p, counts, b), b, caught_up=False)
                assert rate > 0
                into[b] = into.get(b, 0) + rate
                out_of[p.leader] = out_of.get(p.leader, 0) + rate
        assert all(total <= RATE for total in into.values())
        assert all(total <= RATE for total in out_of.values())


def test_a_changed_count_names_the_brokers_whose_shares_changed():
    """A new move into broker 3 changes broker 3's and its leader's counts; the replicas of
    other moves that depend on either must be told again, no others."""
    p = moving(0, 1, [1], adding=[3], removing=[1])
    far = moving(1, 5, [5], adding=[6], removing=[5])
    before = count_moves([p, far])
    q = moving(2, 2, [2], adding=[3], removing=[2])
    after = count_moves([p, far, q])
    assert after.changed(before) == {2, 3}
    assert after.changed(after) == set()
    pairs = [("t", p), ("t", far), ("t", q)]
    assert after.copying_through(pairs, {2, 3}) == [("t", p, 3), ("t", q, 3)]
    # A replica whose leader's count changed is told too.
    assert after.copying_through(pairs, {5}) == [("t", far, 6)]
