"""Which replicas change host actor: a hot one leaves a shared host for a new one, a long-cold
lone one joins a shared host, within ``replicas.per.actor`` and without going back and forth."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.cluster import controller
from rafka.cluster.host_packing import (
    COLD,
    COOLDOWN_MS,
    HOT,
    PackingHistory,
    decide,
    replica_loads,
)
from rafka.cluster.hosting import host_loads, named_replicas, place
from rafka.cluster.metadata import MetadataImage

HOT_BPS = 1000.0  # the threshold of these tests, bytes/s


def _apply(image: MetadataImage, records) -> None:
    image.check(records)
    for r in records:
        image.apply(r, image.offset + 1)


def _cluster(partitions: int, per_actor: int, brokers=(0,), rf: int = 1):
    image = MetadataImage()
    for b in brokers:
        _apply(image, [{"type": "broker", "broker_id": b, "disk": f"d{b}", "rack": None}])
    topic_id, records = controller.create_topic(image, "t", partitions, rf, None,
                                                sorted(image.brokers))  # fmt: skip
    _apply(image, records)
    _apply(image, place(image, sorted(named_replicas(image)), per_actor))
    return image, topic_id


def _carry_out(image, history, decided, now):
    for r in decided:
        _apply(image, [r.record()])
        history.rehosted(r.key, now)


def test_a_hot_replica_in_a_shared_host_gets_a_new_host_of_its_own():
    image, t = _cluster(4, per_actor=4)
    loads = {(t, p, 0): 10.0 for p in range(4)} | {(t, 2, 0): 5 * HOT_BPS}
    decided = decide(image, loads, 4, HOT_BPS, PackingHistory(), 0)
    assert [(r.key, r.from_slot, r.to_slot, r.reason) for r in decided] == [
        ((t, 2, 0), 0, 1, HOT)]
    _apply(image, [decided[0].record()])
    assert host_loads(image) == {0: {0: 3, 1: 1}}
    assert image.next_host_slot[0] == 2  # slot 1 is used now: never handed out again


def test_nothing_moves_with_one_replica_per_actor():
    image, t = _cluster(3, per_actor=1)
    loads = {(t, p, 0): 5 * HOT_BPS for p in range(3)}
    assert decide(image, loads, 1, HOT_BPS, PackingHistory(), 0) == []


def test_a_lone_hot_replica_stays_and_at_most_one_moves_per_broker_per_round():
    image, t = _cluster(4, per_actor=4)
    loads = {(t, p, 0): 5 * HOT_BPS + p for p in range(4)}
    decided = decide(image, loads, 4, HOT_BPS, PackingHistory(), 0)
    assert [r.key for r in decided] == [(t, 3, 0)]  # the hottest first


def test_a_replica_being_reassigned_or_of_unknown_load_is_left_alone():
    image, t = _cluster(2, per_actor=2)
    assert decide(image, {(t, 0, 0): 5 * HOT_BPS}, 2, HOT_BPS, PackingHistory(), 0,
                  busy={(t, 0, 0)}) == []  # fmt: skip
    assert decide(image, {}, 2, HOT_BPS, PackingHistory(), 0) == []


def test_a_lone_replica_joins_the_fullest_shared_host_only_after_a_cold_cooldown():
    image, t = _cluster(5, per_actor=4)  # host 0: 4 replicas, host 1: partition 4 alone
    history = PackingHistory()
    loads = {(t, p, 0): 10.0 for p in range(5)}
    _apply(image, [{"type": "hosted", "topic_id": t, "partition": 3, "broker_id": 0,
                    "slot": 1}])  # fmt: skip
    assert host_loads(image) == {0: {0: 3, 1: 2}}
    _apply(image, [{"type": "hosted", "topic_id": t, "partition": 4, "broker_id": 0,
                    "slot": 5}])  # fmt: skip
    assert decide(image, loads, 4, HOT_BPS, history, 0) == []
    assert decide(image, loads, 4, HOT_BPS, history, COOLDOWN_MS - 1) == []
    decided = decide(image, loads, 4, HOT_BPS, history, COOLDOWN_MS)
    assert [(r.key, r.from_slot, r.to_slot, r.reason) for r in decided] == [
        ((t, 4, 0), 5, 0, COLD)]


def test_a_warm_reading_restarts_the_cold_clock():
    """Between half the threshold and the threshold a replica is neither: its cold clock
    starts again (hysteresis)."""
    image, t = _cluster(3, per_actor=2)  # host 0: partitions 0 and 1, host 1: partition 2
    history = PackingHistory()
    cold = {(t, p, 0): 10.0 for p in range(3)}
    warm = cold | {(t, 2, 0): 0.6 * HOT_BPS}
    decide(image, cold, 4, HOT_BPS, history, 0)
    decide(image, warm, 4, HOT_BPS, history, COOLDOWN_MS // 2)
    assert decide(image, cold, 4, HOT_BPS, history, COOLDOWN_MS) == []  # cold again since
    assert decide(image, cold, 4, HOT_BPS, history, 2 * COOLDOWN_MS - 1) == []
    assert decide(image, cold, 4, HOT_BPS, history, 2 * COOLDOWN_MS) != []


def test_two_lone_cold_replicas_pair_up_when_no_shared_host_has_room():
    image, t = _cluster(2, per_actor=1)  # one host each
    history = PackingHistory()
    loads = {(t, p, 0): 0.0 for p in range(2)}
    decide(image, loads, 4, HOT_BPS, history, 0)
    decided = decide(image, loads, 4, HOT_BPS, history, COOLDOWN_MS)
    assert [(r.key, r.from_slot, r.to_slot) for r in decided] == [((t, 1, 0), 1, 0)]


def test_a_cold_replica_never_joins_a_host_with_a_hot_one():
    image, t = _cluster(3, per_actor=2)  # host 0: partitions 0 and 1, host 1: partition 2
    history = PackingHistory()
    loads = {(t, 0, 0): 5 * HOT_BPS, (t, 1, 0): 0.0, (t, 2, 0): 0.0}
    history.rehosted((t, 0, 0), 0)  # it stays where it is for now
    decide(image, loads, 3, HOT_BPS, history, 0)
    assert decide(image, loads, 3, HOT_BPS, history, COOLDOWN_MS - 1) == []


def test_replica_loads_count_bytes_out_for_the_leader_only():
    image, t = _cluster(1, per_actor=2, brokers=(0, 1), rf=2)
    p = image.topics[t].partitions[0]

    class View:
        topic, partition, replicas, leader = "t", 0, tuple(p.replicas), p.leader
        bytes_in_per_s, bytes_out_per_s = 100.0, 50.0

    loads = replica_loads(image, [View()], known_brokers={0, 1})
    follower = [b for b in p.replicas if b != p.leader][0]
    assert loads == {(t, 0, p.leader): 150.0, (t, 0, follower): 100.0}
    assert replica_loads(image, [View()], known_brokers={follower}) == {}


# -- properties ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    per_actor=st.integers(2, 5),
    partitions=st.integers(1, 12),
    rounds=st.lists(st.lists(st.sampled_from([0.0, 300.0, 700.0, 5000.0]), min_size=12,
                             max_size=12), min_size=1, max_size=30),  # fmt: skip
)
def test_packing_keeps_hosts_within_per_actor_and_never_moves_a_replica_twice_in_a_cooldown(
    per_actor, partitions, rounds
):
    """Whatever the loads do, round after round (one a minute): no host holds more than
    ``per_actor`` replicas, a re-hosted replica stays for the cooldown, a new host takes a
    slot never used, and at most one replica of a broker moves per round."""
    image, t = _cluster(partitions, per_actor, brokers=(0, 1), rf=2)
    history = PackingHistory()
    last_move: dict = {}
    used: dict[int, set[int]] = {b: {s for k, s in image.hosts.items() if k[2] == b}
                                 for b in (0, 1)}  # fmt: skip
    for i, levels in enumerate(rounds):
        now = i * 60_000
        loads = {k: levels[k[1]] for k in named_replicas(image)}
        decided = decide(image, loads, per_actor, HOT_BPS, history, now)
        assert len({r.broker_id for r in decided}) == len(decided)
        for r in decided:
            assert r.key not in last_move or now - last_move[r.key] >= COOLDOWN_MS
            if r.reason == HOT:
                assert r.to_slot not in used[r.broker_id]
            else:
                assert r.to_slot in used[r.broker_id]
            last_move[r.key] = now
            used[r.broker_id].add(r.to_slot)
        _carry_out(image, history, decided, now)
        for slots in host_loads(image).values():
            assert max(slots.values()) <= per_actor


@settings(max_examples=60, deadline=None)
@given(
    per_actor=st.integers(2, 5),
    partitions=st.integers(1, 12),
    levels=st.lists(st.sampled_from([0.0, 300.0, 700.0, 5000.0]), min_size=12, max_size=12),
)
def test_packing_converges_under_steady_loads(per_actor, partitions, levels):
    """With loads that stay as they are, the moves stop: afterwards every hot replica is
    alone in its host, and no round moves anything."""
    image, t = _cluster(partitions, per_actor, brokers=(0, 1), rf=2)
    history = PackingHistory()
    loads = {k: levels[k[1]] for k in named_replicas(image)}
    now = 0
    quiet = 0
    for _ in range(4 * partitions + 40):
        decided = decide(image, loads, per_actor, HOT_BPS, history, now)
        _carry_out(image, history, decided, now)
        quiet = quiet + 1 if not decided else 0
        now += COOLDOWN_MS // 2
    assert quiet >= 10
    counts = host_loads(image)
    for key, slot in image.hosts.items():
        if loads[key] > HOT_BPS:
            assert counts[key[2]][slot] == 1
