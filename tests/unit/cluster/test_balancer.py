"""The balancer's plans: a joined broker takes its share, a drained one ends empty, a lost one
is replaced after the healing delay, racks and disks are respected, the throttle holds, and
repeated planning over random clusters converges without moving a replica back."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from rafka.cluster.balancer import HARD_GOALS, active_goals, plan
from rafka.cluster.balancer_types import (
    BalancerSettings,
    BrokerView,
    ClusterView,
    Goal,
    Mode,
    MoveHistory,
    PartitionView,
    Plan,
)

MINUTE = 60_000
NOW = 100 * MINUTE


def cluster(brokers: int, partitions: int, rf: int, racks: int = 0, empty: tuple = (),
            size: int = 0) -> ClusterView:  # fmt: skip
    """Brokers 0..brokers-1 (racks named round robin when ``racks``), partitions of topic
    "t" placed round robin over the brokers not in ``empty``, leader first, all in sync."""
    views = tuple(BrokerView(b, rack=f"r{b % racks}" if racks else None,
                             disk_capacity=10**9 if size else 0) for b in range(brokers))
    used = [b for b in range(brokers) if b not in empty]
    assert rf <= len(used), "a partition's replicas are on distinct brokers"
    parts = []
    for p in range(partitions):
        replicas = tuple(used[(p + i) % len(used)] for i in range(rf))
        parts.append(PartitionView("t", p, replicas, replicas[0], replicas, size_bytes=size))
    return with_disk(ClusterView(views, tuple(parts)))


def with_disk(view: ClusterView) -> ClusterView:
    """``view`` with each broker's disk use the sum of its replicas' sizes."""
    used = Counter()
    for p in view.partitions:
        for b in p.replicas:
            used[b] += p.size_bytes
    brokers = tuple(dataclasses.replace(b, disk_used=used[b.broker_id]) for b in view.brokers)
    return ClusterView(brokers, view.partitions)


def apply(view: ClusterView, result: Plan) -> ClusterView:
    """The cluster once every move and election of ``result`` is done (the new replicas in
    sync, a leader whose replica left replaced by an in-sync one that stays)."""
    parts = {p.key: p for p in view.partitions}
    for m in result.moves:
        p = parts[(m.topic, m.partition)]
        leader = p.leader
        if leader == m.source:
            leader = next((b for b in m.replicas if b in p.isr and b != m.destination), -1)
        parts[p.key] = dataclasses.replace(p, replicas=m.replicas, isr=m.replicas, leader=leader)
    for lm in result.leader_moves:
        p = parts[(lm.topic, lm.partition)]
        assert lm.leader in p.isr, lm
        parts[p.key] = dataclasses.replace(p, leader=lm.leader)
    return with_disk(ClusterView(view.brokers, tuple(parts.values())))


def run(view: ClusterView, settings: BalancerSettings, goals=None, rounds: int = 200,
        step_ms: int = MINUTE) -> tuple[ClusterView, list[Plan]]:  # fmt: skip
    """Plan, carry out, plan again until a plan is empty; every plan is checked."""
    history, now, plans = MoveHistory(), NOW, []
    for _ in range(rounds):
        result = plan(view, settings, history, now, goals)
        check_plan(view, result, settings, history, now)
        plans.append(result)
        if result.empty:
            return view, plans
        for m in result.moves:
            history.record(m, now)
        view = apply(view, result)
        now += step_ms
    raise AssertionError(f"no convergence in {rounds} rounds; last plan {plans[-1]}")


def check_plan(view: ClusterView, result: Plan, settings: BalancerSettings,
               history: MoveHistory, now_ms: int) -> None:  # fmt: skip
    """What every plan must respect: a replica moves to a live broker that stays, never
    twice onto the same broker nor, for a soft goal, back to one it left within the
    cooldown; racks spanned
    never fall (but to empty a leaving broker); no disk goes above the threshold; the
    throttle holds."""
    brokers = {b.broker_id: b for b in view.brokers}
    racks = {b.broker_id: b.rack for b in view.brokers}
    parts = {p.key: p for p in view.partitions}
    touched: Counter = Counter()
    for p in view.partitions:
        if p.adding or p.removing:
            for b in set(p.adding) | set(p.removing) | {p.leader}:
                touched[b] += 1
    moved = [(m.topic, m.partition) for m in result.moves]
    assert len(moved) == len(set(moved)), f"a partition moved twice in one plan: {moved}"
    for m in result.moves:
        key = (m.topic, m.partition)
        before = parts[key].replicas
        assert len(set(m.replicas)) == len(m.replicas) == len(before), m
        assert brokers[m.destination].alive and not brokers[m.destination].draining, m
        if m.goal not in HARD_GOALS:
            assert not history.left_recently(key, m.destination, now_ms,
                                             settings.cooldown_ms), m  # fmt: skip
        if None not in racks.values() and m.goal not in (Goal.RACK_AWARE, Goal.LEAVING):
            assert len({racks[b] for b in m.replicas}) >= len({racks[b] for b in before}), m
        busy = {m.destination, parts[key].leader} | ({m.source} if brokers[m.source].alive
                                                      else set())  # fmt: skip
        for b in busy:
            touched[b] += 1
    for b, n in touched.items():
        assert n <= settings.max_moves_per_broker, (b, n, result.moves)
    after = apply(view, result)
    for b in after.brokers:
        before_use = brokers[b.broker_id].disk_used
        if b.disk_capacity and b.disk_used > before_use:
            assert b.disk_used <= settings.disk_threshold * b.disk_capacity, b


def replica_counts(view: ClusterView, brokers) -> list[int]:
    counts = Counter(b for p in view.partitions for b in p.replicas)
    return [counts[b] for b in brokers]


def leader_counts(view: ClusterView, brokers) -> list[int]:
    counts = Counter(p.leader for p in view.partitions)
    return [counts[b] for b in brokers]


def test_a_joined_broker_takes_its_share_of_replicas_and_leaders():
    view = cluster(brokers=4, partitions=12, rf=2, empty=(3,))
    goals = active_goals(Mode.NODE_ADD, balancing_node_add=True)
    final, plans = run(view, BalancerSettings(), goals)
    counts = replica_counts(final, range(4))
    assert max(counts) - min(counts) <= 1 and sum(counts) == 24
    leaders = leader_counts(final, range(4))
    assert max(leaders) - min(leaders) <= 1
    assert all(m.goal is Goal.REPLICA_COUNT for p in plans for m in p.moves)


def test_node_add_mode_moves_nothing_unless_a_node_is_being_balanced():
    view = cluster(brokers=4, partitions=12, rf=2, empty=(3,))
    assert plan(view, BalancerSettings(), MoveHistory(), NOW).empty
    assert plan(view, BalancerSettings(mode=Mode.OFF), MoveHistory(), NOW,
                active_goals(Mode.OFF)).empty  # fmt: skip


def test_a_drained_broker_hands_over_its_leaderships_then_ends_empty():
    view = cluster(brokers=4, partitions=12, rf=2)
    brokers = tuple(dataclasses.replace(b, draining=b.broker_id == 1) for b in view.brokers)
    view = ClusterView(brokers, view.partitions)
    first = plan(view, BalancerSettings(), MoveHistory(), NOW)
    assert first.leader_moves and all(lm.leader != 1 for lm in first.leader_moves)
    final, _ = run(view, BalancerSettings())
    assert replica_counts(final, [1]) == [0] and leader_counts(final, [1]) == [0]
    assert sum(replica_counts(final, range(4))) == 24


def test_a_lost_broker_is_replaced_from_the_in_sync_replicas_after_the_healing_delay():
    view = cluster(brokers=4, partitions=8, rf=3)
    settings = BalancerSettings(heal_after_ms=10 * MINUTE)
    lost = tuple(dataclasses.replace(b, dead_since_ms=NOW - 5 * MINUTE) if b.broker_id == 2
                 else b for b in view.brokers)  # fmt: skip
    isr = tuple(dataclasses.replace(p, isr=tuple(b for b in p.replicas if b != 2),
                                    leader=next(b for b in p.replicas if b != 2))
                for p in view.partitions)  # fmt: skip
    early = ClusterView(lost, isr)
    assert plan(early, settings, MoveHistory(), NOW).empty  # it may still come back
    late = ClusterView(tuple(dataclasses.replace(b, dead_since_ms=NOW - 11 * MINUTE)
                             if b.broker_id == 2 else b for b in view.brokers), isr)
    final, _ = run(late, settings)
    assert replica_counts(final, [2]) == [0]
    assert all(len(p.replicas) == 3 and 2 not in p.replicas for p in final.partitions)
    assert plan(late, BalancerSettings(mode=Mode.OFF), MoveHistory(), NOW).empty


def test_replicas_on_one_rack_move_to_the_rack_they_miss():
    view = cluster(brokers=4, partitions=1, rf=2, racks=2)
    (p,) = view.partitions
    stacked = dataclasses.replace(p, replicas=(0, 2), leader=0, isr=(0, 2))  # both on r0
    result = plan(ClusterView(view.brokers, (stacked,)), BalancerSettings(), MoveHistory(),
                  NOW, active_goals(Mode.CONTINUOUS))  # fmt: skip
    (move,) = result.moves
    assert move.goal is Goal.RACK_AWARE and move.source == 2 and move.destination in (1, 3)


def test_a_broker_above_its_disk_threshold_sheds_its_largest_partitions():
    view = cluster(brokers=3, partitions=6, rf=1, empty=(2,), size=300 * 10**6)
    # brokers 0 and 1 hold 900 MB each of 1 GB: above 80%; broker 2 is empty
    final, plans = run(view, BalancerSettings(), (Goal.DISK_CAPACITY,))
    assert all(b.disk_used <= 0.8 * b.disk_capacity for b in final.brokers)
    assert {m.goal for p in plans for m in p.moves} == {Goal.DISK_CAPACITY}


def test_the_throttle_bounds_moves_per_broker_and_in_the_cluster():
    view = cluster(brokers=6, partitions=60, rf=1, empty=(3, 4, 5))
    settings = BalancerSettings(max_moves_per_broker=2, max_moves=4)
    result = plan(view, settings, MoveHistory(), NOW, (Goal.REPLICA_COUNT,))
    assert len(result.moves) == 4
    check_plan(view, result, settings, MoveHistory(), NOW)
    moving = tuple(dataclasses.replace(p, adding=(3,), removing=(p.replicas[0],))
                   if p.partition == 0 else p for p in view.partitions)  # fmt: skip
    result = plan(ClusterView(view.brokers, moving), settings, MoveHistory(), NOW,
                  (Goal.REPLICA_COUNT,))  # fmt: skip
    assert len(result.moves) == 3 and Counter(m.destination for m in result.moves)[3] <= 1


def test_a_partition_moved_within_the_cooldown_stays_and_never_goes_back():
    view = cluster(brokers=3, partitions=3, rf=1, empty=(2,))
    settings = BalancerSettings()
    first = plan(view, settings, MoveHistory(), NOW, (Goal.REPLICA_COUNT,))
    (move,) = first.moves
    history = MoveHistory()
    history.record(move, NOW)
    # An imbalance the other way: only the moved partition could fix it, and it is cooling.
    after = apply(view, first)
    flipped = tuple(dataclasses.replace(p, replicas=(move.source,), leader=move.source,
                                        isr=(move.source,))
                    if p.key != (move.topic, move.partition) else p for p in after.partitions)
    later = ClusterView(after.brokers, flipped)
    result = plan(later, settings, history, NOW + MINUTE, (Goal.REPLICA_COUNT,))
    assert all((m.topic, m.partition) != (move.topic, move.partition) for m in result.moves)


@pytest.mark.parametrize("seed", range(40))
def test_repeated_plans_over_random_clusters_converge_and_respect_every_hard_goal(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 8)
    racks = rng.choice([0, 2, 3])
    rf = rng.randint(1, min(3, n))
    sized = rng.random() < 0.5
    brokers = []
    for b in range(n):
        dead = NOW - rng.choice([MINUTE, 20 * MINUTE]) if rng.random() < 0.1 else None
        brokers.append(BrokerView(
            b, rack=f"r{b % racks}" if racks else None, dead_since_ms=dead,
            draining=rng.random() < 0.1, disk_capacity=10**9 if sized else 0,
        ))  # fmt: skip
    live = [b.broker_id for b in brokers if b.alive] or [0]
    partitions = []
    for p in range(rng.randint(1, 40)):
        replicas = tuple(rng.sample(range(n), rf))
        isr = tuple(b for b in replicas if b in live) or replicas[:1]
        partitions.append(PartitionView(
            "t", p, replicas, isr[0], isr, size_bytes=rng.randint(1, 60) * 10**6 if sized else 0,
            bytes_in_per_s=rng.choice([0.0, 1e3, 5e4]), bytes_out_per_s=rng.choice([0.0, 2e4]),
        ))  # fmt: skip
    view = with_disk(ClusterView(tuple(brokers), tuple(partitions)))
    settings = BalancerSettings(mode=Mode.CONTINUOUS, max_moves_per_broker=rng.randint(1, 3))
    final, plans = run(view, settings, rounds=300)
    moved: dict[tuple, list] = {}
    for p in plans:
        for m in p.moves:
            if m.goal not in HARD_GOALS:
                moved.setdefault((m.topic, m.partition), []).append((m.source, m.destination))
    for key, hops in moved.items():  # no ping-pong: a soft goal never undoes a soft move
        for i, (source, destination) in enumerate(hops):
            assert (destination, source) not in hops[i + 1:], (key, hops)


@pytest.mark.parametrize("seed", range(20))
def test_on_a_healthy_cluster_repeated_plans_end_with_replica_counts_within_one(seed):
    """Rounds a cooldown apart (nothing is held back by it): the counts end balanced, which
    is how a joined broker ends with its share."""
    rng = random.Random(1000 + seed)
    n = rng.randint(2, 7)
    rf = rng.randint(1, min(3, n))
    view = cluster(brokers=n, partitions=rng.randint(1, 30), rf=rf,
                   empty=tuple(rng.sample(range(n), rng.randint(0, n - rf))))  # fmt: skip
    final, _ = run(view, BalancerSettings(mode=Mode.CONTINUOUS), step_ms=11 * MINUTE)
    counts = replica_counts(final, range(n))
    assert max(counts) - min(counts) <= 1, counts


def test_a_lost_brokers_replica_goes_back_to_a_broker_the_partition_left_if_that_is_all():
    """Healing is a hard goal: the cooldown's no-return rule does not keep a partition
    short of its replicas."""
    brokers = (BrokerView(0), BrokerView(1, dead_since_ms=NOW - 20 * MINUTE), BrokerView(3))
    p = PartitionView("t", 0, (3, 1), 3, (3,))
    history = MoveHistory()
    history.left_at[("t", 0, 0)] = NOW - MINUTE  # it left broker 0 a minute ago
    result = plan(ClusterView(brokers, (p,)), BalancerSettings(), history, NOW)
    (move,) = result.moves
    assert (move.source, move.destination, move.goal) == (1, 0, Goal.LEAVING)


def test_a_drain_completes_for_single_replica_partitions_and_brokers_sharing_one():
    """The new replica copies from the leader, which may be the draining broker itself: a
    partition of one replica, or one whose every in-sync replica drains, still moves."""
    brokers = (BrokerView(0, draining=True), BrokerView(1, draining=True), BrokerView(2),
               BrokerView(3))  # fmt: skip
    parts = (PartitionView("t", 0, (0,), 0, (0,)), PartitionView("t", 1, (0, 1), 0, (0, 1)))
    final, _ = run(ClusterView(brokers, parts), BalancerSettings())
    assert all(set(p.replicas) <= {2, 3} for p in final.partitions), final.partitions


def test_a_partition_without_a_live_in_sync_leader_is_not_moved():
    """Nothing could copy its log to a new replica: the move would never complete."""
    brokers = (BrokerView(0, dead_since_ms=NOW - MINUTE), BrokerView(1), BrokerView(2),
               BrokerView(3))  # fmt: skip
    leaderless = PartitionView("t", 0, (0, 1), -1, (0,))
    others = tuple(PartitionView("t", p, (1, 2), 1, (1, 2)) for p in range(1, 5))
    result = plan(ClusterView(brokers, (leaderless, *others)), BalancerSettings(),
                  MoveHistory(), NOW, tuple(Goal))  # fmt: skip
    assert all(m.partition != 0 for m in result.moves), result.moves


def test_a_leader_serving_as_many_copies_as_the_throttle_allows_starts_no_more():
    """The new replicas copy from the leader: it counts against the throttle as the
    brokers adding and removing replicas do."""
    brokers = tuple(BrokerView(b) for b in range(5))
    busy = tuple(PartitionView("t", p, (0, 1), 0, (0, 1), adding=(1,), removing=(2,))
                 for p in range(2))  # broker 0 leads two copies already
    idle = tuple(PartitionView("t", p, (0, 2), 0, (0, 2)) for p in range(2, 12))
    settings = BalancerSettings(max_moves_per_broker=2)
    result = plan(ClusterView(brokers, busy + idle), settings, MoveHistory(), NOW,
                  (Goal.REPLICA_COUNT,))  # fmt: skip
    assert result.moves == [] and Goal.REPLICA_COUNT in result.violations


@pytest.mark.parametrize("seed", range(20))
def test_no_plan_takes_a_partitions_last_copy_on_a_named_disk_to_an_ephemeral_one(seed):
    # Two named disks hold everything; autoscaled (ephemeral) brokers join. Every goal runs,
    # with brokers draining too: a partition that had a copy on a named disk keeps one,
    # unless emptying a leaving broker left no named disk to take it.
    rng = random.Random(seed)
    named, joined = 2, rng.randint(1, 4)
    brokers = tuple(BrokerView(b, ephemeral=b >= named,
                               draining=b > named and rng.random() < 0.2)
                    for b in range(named + joined))  # fmt: skip
    partitions = tuple(
        PartitionView("t", p, r, r[0], r, bytes_in_per_s=rng.choice([0.0, 1e4, 1e5]))
        for p, r in enumerate(tuple(rng.sample(range(named), rng.randint(1, named)))
                              for _ in range(rng.randint(4, 24)))
    )  # fmt: skip
    view = ClusterView(brokers, partitions)
    settings = BalancerSettings(mode=Mode.CONTINUOUS, max_moves_per_broker=3)
    final, plans = run(view, settings, rounds=100)
    assert any(p.moves for p in plans)  # the joined brokers did get replicas
    for p in final.partitions:
        assert any(b < named for b in p.replicas), (p.key, p.replicas)
