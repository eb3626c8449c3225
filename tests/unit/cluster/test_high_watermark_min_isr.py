"""The leader exposes records only once ``min.insync.replicas`` replicas are in sync (Kafka's
KIP-966, part 1): the high watermark holds still while the committed ISR is smaller."""

from __future__ import annotations

from rafka.cluster.replication import LeaderState


def leader(isr, min_isr, replicas=(0, 1, 2)) -> LeaderState:
    return LeaderState(0, list(replicas), list(isr), leader_epoch=1, log_end_offset=0,
                       high_watermark=0, now_ms=0, min_insync_replicas=min_isr)  # fmt: skip


def test_high_watermark_holds_still_while_the_isr_is_below_min_isr():
    """A leader alone in its ISR, with min ISR 2, appends but commits nothing: a record held
    by one machine only is never shown to consumers."""
    state = leader(isr=[0], min_isr=2)
    assert state.on_local_append(10) == 0
    assert state.under_min_isr


def test_high_watermark_moves_once_the_isr_is_back_at_min_isr():
    """When the controller commits a larger ISR the held-back records become visible."""
    state = leader(isr=[0], min_isr=2)
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=1)
    assert state.high_watermark == 0
    assert state.on_isr_committed([0, 1], partition_epoch=1) == 10


def test_a_pending_expansion_does_not_count_towards_min_isr():
    """Only the controller's committed ISR counts: a proposal may still be refused."""
    state = leader(isr=[0], min_isr=2)
    state.on_local_append(10)
    state.on_follower_fetch(1, 10, now_ms=1)
    state.propose([0, 1])
    assert state.on_follower_fetch(1, 10, now_ms=2) == 0


def test_min_isr_is_capped_at_the_replica_count():
    """Kafka's effective min ISR: a single-replica partition with min ISR 2 still commits."""
    state = leader(isr=[0], min_isr=2, replicas=(0,))
    assert state.on_local_append(5) == 5


def test_lowering_min_isr_lets_the_high_watermark_advance():
    """A config change applies at once."""
    state = leader(isr=[0], min_isr=2)
    state.on_local_append(7)
    assert state.set_min_insync_replicas(1) == 7
