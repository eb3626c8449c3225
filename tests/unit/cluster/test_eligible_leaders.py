"""Eligible leader replicas and unclean recovery (Kafka's KIP-966), and persisted replica
epochs: who may lead after correlated faults, decided without Ray."""

from __future__ import annotations

import msgpack

from rafka.cluster import controller as decisions
from rafka.cluster.elections import (
    alter_isr,
    elect_if_leaderless,
    fence_broker,
    replica_restarted,
)
from rafka.cluster.metadata import NO_LEADER, MetadataImage, PartitionState
from rafka.errors import IneligibleReplica

import pytest

MIN_ISR = 2


def ps(isr=(0, 1, 2), leader=0, elr=(), marked=None, replicas=(0, 1, 2)) -> PartitionState:
    return PartitionState(0, list(replicas), list(isr), leader, 5, 10, [], [], list(elr),
                          dict(marked or {}))  # fmt: skip


def all_lose_power(p: PartitionState, order=(0, 1, 2)) -> PartitionState:
    """Every broker dies at once; the controller fences them one by one as their heartbeats
    lapse, each fencing seeing the ones after it still alive."""
    live = set(p.replicas)
    for b in order:
        live.discard(b)
        p = fence_broker(p, b, live, unclean=False, min_isr=MIN_ISR) or p
    return p


# -- eligible leader replicas ------------------------------------------------------------------


def test_a_replica_leaving_an_isr_below_min_isr_becomes_eligible():
    """A member that leaves while the ISR is below min ISR holds everything committed (the
    high watermark stood still), so it stays a candidate; one leaving an ISR still at min ISR
    does not."""
    p = fence_broker(ps(), 2, {0, 1}, unclean=False, min_isr=MIN_ISR)
    assert (p.isr, p.elr) == ([0, 1], [])
    p = fence_broker(p, 1, {0}, unclean=False, min_isr=MIN_ISR)
    assert (p.isr, p.elr, p.leader) == ([0], [1], 0)


def test_an_isr_shrink_proposed_below_min_isr_keeps_the_removed_member_eligible():
    """The leader's own shrink follows the same rule as fencing."""
    p = ps(isr=(0, 1))
    new = alter_isr(p, 0, 5, 10, [0], {0, 1, 2}, min_isr=MIN_ISR)
    assert (new.isr, new.elr) == ([0], [1])


def test_eligible_replicas_are_dropped_once_the_isr_is_back_at_min_isr():
    """When a follower rejoins and the ISR reaches min ISR, the high watermark moves again
    and the eligible replicas no longer hold everything committed."""
    p = ps(isr=(0,), elr=(1,))
    new = alter_isr(p, 0, 5, 10, [0, 2], {0, 1, 2}, min_isr=MIN_ISR)
    assert (new.isr, new.elr) == ([0, 2], [])


def test_an_eligible_replica_leads_when_no_isr_member_is_live():
    """With the last ISR member down, a live eligible replica leads; the member that is down
    stays eligible."""
    p = ps(isr=(0,), leader=NO_LEADER, elr=(1,))
    new = elect_if_leaderless(p, {1, 2}, unclean=False, min_isr=MIN_ISR)
    assert (new.leader, new.isr, new.elr) == (1, [1], [0])


def test_a_replica_outside_the_candidates_never_leads_without_unclean_election():
    """Replica 2 left the ISR while it was still at min ISR: it may lack committed records."""
    p = all_lose_power(ps())
    assert p.candidates == [2, 1] and p.leader == NO_LEADER
    assert elect_if_leaderless(p, {0}, unclean=False, min_isr=MIN_ISR) is None


# -- correlated power loss ---------------------------------------------------------------------


def test_correlated_power_loss_elects_the_longest_log_once_every_candidate_reported():
    """Every replica restarts uncleanly: the partition waits until every candidate has
    reported, then the longest log (epoch first, then end offset) leads alone."""
    p = all_lose_power(ps())
    p = replica_restarted(p, 0, set(), False, clean=False, position=(5, 100), min_isr=MIN_ISR) or p
    assert p.leader == NO_LEADER  # 0 is not a candidate: candidates may hold more
    p = replica_restarted(p, 1, {0}, False, clean=False, position=(5, 120), min_isr=MIN_ISR)
    assert p.leader == NO_LEADER and p.unclean_logs == {0: (5, 100), 1: (5, 120)}
    p = replica_restarted(p, 2, {0, 1}, False, clean=False, position=(5, 110), min_isr=MIN_ISR)
    assert (p.leader, p.isr, p.elr, p.unclean_logs) == (1, [1], [], {})


def test_a_replica_outside_the_candidates_wins_with_a_longer_log_than_theirs():
    """Replica 0 left the ISR while it still met min ISR, so it is no candidate; but when
    every candidate lost its tail, its longer log of the same epoch holds records they lost,
    and it leads rather than have it truncate them."""
    p = all_lose_power(ps())
    p = replica_restarted(p, 0, set(), False, clean=False, position=(5, 500), min_isr=MIN_ISR) or p
    p = replica_restarted(p, 1, {0}, False, clean=False, position=(5, 120), min_isr=MIN_ISR)
    p = replica_restarted(p, 2, {0, 1}, False, clean=False, position=(5, 110), min_isr=MIN_ISR)
    assert (p.leader, p.isr) == (0, [0])


def test_the_last_isr_member_does_not_win_with_a_shorter_log():
    """The member fenced last used to lead whatever its log length; now a longer candidate
    log wins, compared by leader epoch before end offset."""
    p = all_lose_power(ps())
    p = replica_restarted(p, 2, {0, 1}, False, clean=False, position=(5, 900), min_isr=MIN_ISR)
    p = replica_restarted(p, 1, {0, 2}, False, clean=False, position=(6, 10), min_isr=MIN_ISR)
    assert (p.leader, p.isr) == (1, [1])


def test_a_clean_candidate_is_preferred_over_unclean_ones():
    """A candidate that shut down cleanly lost nothing: it leads, and the candidates that
    restarted uncleanly leave the ISR and the eligible replicas to catch up."""
    p = all_lose_power(ps())
    p = replica_restarted(p, 1, {0}, False, clean=False, position=(5, 999), min_isr=MIN_ISR)
    p = replica_restarted(p, 2, {0, 1}, False, clean=True, position=(5, 100), min_isr=MIN_ISR)
    assert (p.leader, p.isr, p.elr, p.unclean_logs) == (2, [2], [], {})


def test_an_unclean_restart_while_another_replica_leads_leaves_the_candidates():
    """With a live leader the restarted replica is an ordinary follower that must catch up."""
    p = ps(isr=(0, 1), elr=(2,))
    new = replica_restarted(p, 2, {0, 1}, False, clean=False, position=(5, 1), min_isr=MIN_ISR)
    assert (new.leader, new.isr, new.elr) == (0, [0, 1], [])


def test_a_single_replica_partition_comes_back_after_an_unclean_restart():
    """With one replica there is nothing to wait for: it is the longest log."""
    p = ps(isr=(0,), replicas=(0,))
    new = replica_restarted(p, 0, set(), False, clean=False, position=(5, 7))
    assert (new.leader, new.isr, new.leader_epoch) == (0, [0], 6)


def test_partition_record_round_trips_candidates_through_msgpack():
    """The record survives the metadata log's encoding (msgpack maps need string keys)."""
    p = ps(isr=(0,), leader=NO_LEADER, elr=(1,), marked={1: (5, 120)})
    record = msgpack.unpackb(msgpack.packb(p.to_record("t")))
    assert PartitionState.from_record(record) == p


# -- replica epochs ----------------------------------------------------------------------------


def test_replica_epochs_grow_survive_a_replay_and_go_with_their_topic():
    """Each start gets a number above every earlier one, rebuilt exactly from the records
    (a controller restart), and a deleted topic's epochs are forgotten."""
    image = MetadataImage()
    offset = 0
    for record in [{"type": "topic", "topic_id": "t", "name": "a", "config": {},
                    "internal": False}]:  # fmt: skip
        image.apply(record, offset)
        offset += 1
    created, records = decisions.reserve_replica_epoch(image)
    for record in records:
        image.apply(record, offset)
        offset += 1
    first, records = decisions.start_replica(image, "t", 0, 1)
    for record in records:
        image.apply(record, offset)
        offset += 1
    second, records = decisions.start_replica(image, "t", 0, 1)
    for record in records:
        image.apply(record, offset)
        offset += 1
    assert created < first < second
    assert decisions.replica_epochs_of(image, "t", 0) == {1: second}
    replayed = MetadataImage()
    for i, record in enumerate(image.to_records()):
        replayed.apply(record, i)
    assert replayed.replica_epochs == image.replica_epochs
    assert replayed.next_replica_epoch == image.next_replica_epoch
    image.apply({"type": "delete", "topic_id": "t"}, offset)
    assert decisions.replica_epochs_of(image, "t", 0) == {}


def test_a_replica_that_restarted_since_it_caught_up_may_not_join():
    """The leader saw it fetch in an older epoch than the one the controller handed out at
    its last start; a newer epoch (a replica created again after a move) may join."""
    p = ps(isr=(0, 1))
    with pytest.raises(IneligibleReplica):
        alter_isr(p, 0, 5, 10, [0, 1, 2], {0, 1, 2}, {2: 3}, {2: 4})
    new = alter_isr(p, 0, 5, 10, [0, 1, 2], {0, 1, 2}, {2: 5}, {2: 4})
    assert new.isr == [0, 1, 2]


def test_a_replica_whose_disk_fails_leaves_the_isr_and_is_never_eligible():
    """It could not write as a leader either, so it does not join the eligible replicas
    even when the ISR is left below min ISR."""
    from rafka.cluster.elections import replica_failed

    p = ps(isr=(0, 1))
    new = replica_failed(p, 1, {0, 1, 2}, unclean=False, min_isr=MIN_ISR)
    assert (new.leader, new.isr, new.elr) == (0, [0], [])


def test_a_down_candidate_with_a_longer_log_is_waited_for_a_down_outsider_is_not():
    """Every candidate reported: the longest live log leads unless a candidate that went
    down again reported a longer one; a replica outside the candidates is not waited for."""
    p = ps(isr=(1,), leader=NO_LEADER, elr=(2,), marked={1: (5, 80), 2: (5, 100), 0: (5, 90)})
    assert elect_if_leaderless(p, {0, 1}, unclean=False, min_isr=MIN_ISR) is None
    p = ps(isr=(1,), leader=NO_LEADER, elr=(2,), marked={1: (5, 80), 2: (5, 100), 0: (5, 200)})
    new = elect_if_leaderless(p, {1, 2}, unclean=False, min_isr=MIN_ISR)
    assert (new.leader, new.isr) == (2, [2])


def test_a_preferred_election_leaves_a_leaderless_partition_to_the_recovery_rules():
    """The preferred replica restarted uncleanly and another candidate has not reported: the
    periodic preferred election must not make it leader."""
    from rafka.cluster.elections import preferred_leader

    p = ps(isr=(0,), leader=NO_LEADER, elr=(1,), marked={0: (5, 80)})
    assert preferred_leader(p, {0, 1, 2}) is None


def test_a_failed_replica_s_reported_log_no_longer_counts():
    """Its disk cannot write: its position leaves the longest-log choice."""
    from rafka.cluster.elections import replica_failed

    p = ps(isr=(1,), leader=NO_LEADER, marked={3: (5, 500)}, replicas=(1, 2, 3))
    new = replica_failed(p, 3, {1, 2}, unclean=False, min_isr=1)
    assert 3 not in new.unclean_logs
