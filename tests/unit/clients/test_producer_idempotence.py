"""The per-partition idempotence state machine: stamps, epoch ends and bumps, and what a
failed batch becomes. Plain Python: no threads, no leader."""

from __future__ import annotations

import pytest

from rafka.clients.producer_batches import ProducerBatch
from rafka.clients.producer_idempotence import (
    MAX_EPOCH,
    EpochState,
    PartitionIdempotence,
    SendMode,
    Verdict,
)
from rafka.errors import (
    BrokerNotAvailable,
    IllegalState,
    InvalidRecord,
    NotEnoughReplicas,
    OutOfOrderSequence,
    RecordTooLarge,
)
from rafka.storage import record_batch as rb

PRODUCER_ID = 42


def batch(n: int, count: int = 1) -> ProducerBatch:
    b = ProducerBatch("t", 0, 0)
    b.order, b.count = (n,), count
    return b


def send(state: PartitionIdempotence, *batches: ProducerBatch) -> None:
    for b in batches:
        if b.sequence == rb.NO_SEQUENCE:
            state.stamp(b)
        state.sent(b)
        b.attempts += 1


def confirmed_state(epoch: int = 0) -> PartitionIdempotence:
    """A partition whose leader has acknowledged a first batch (three records) of ``epoch``."""
    state = PartitionIdempotence(PRODUCER_ID, epoch)
    first = batch(0, count=3)
    send(state, first)
    state.acknowledged(first)
    return state


def stamp(b: ProducerBatch) -> tuple[int, int, int]:
    return b.producer_id, b.producer_epoch, b.sequence


def refused(state, b, error, out_of_time=False) -> Verdict:
    return state.failed(b, error, maybe_written=False, out_of_time=out_of_time)


def unanswered(state, b, out_of_time=False) -> Verdict:
    return state.failed(b, BrokerNotAvailable("lost"), maybe_written=True, out_of_time=out_of_time)


def test_batches_are_stamped_with_consecutive_sequences_of_the_epoch():
    """Each batch takes the next sequences, as many as it has records."""
    state = PartitionIdempotence(PRODUCER_ID, 3)
    a, b = batch(1, count=4), batch(2, count=2)
    send(state, a, b)
    assert (stamp(a), stamp(b)) == ((PRODUCER_ID, 3, 0), (PRODUCER_ID, 3, 4))
    assert state.next_sequence == 6


def test_one_batch_at_a_time_until_the_leader_acknowledges_one_of_the_epoch():
    """A leader that does not know the producer takes any sequence, so a first batch goes
    alone; once one is acknowledged, batches are pipelined."""
    state = PartitionIdempotence(PRODUCER_ID, 0)
    assert state.next_send() == (SendMode.PROBE, None)
    first = batch(1)
    send(state, first)
    assert state.next_send() == (SendMode.NOTHING, None)
    state.acknowledged(first)
    assert state.next_send() == (SendMode.PIPELINE, None)


def test_a_batch_refused_for_good_ends_the_epoch_and_nothing_is_stamped_until_the_bump():
    """After a batch fails for good no batch is stamped or sent until the bump."""
    state = confirmed_state()
    bad, behind = batch(1), batch(2)
    send(state, bad, behind)
    assert refused(state, bad, InvalidRecord("bad")) is Verdict.FAIL
    assert state.state is EpochState.ENDING
    assert state.next_send() == (SendMode.NOTHING, None)
    with pytest.raises(IllegalState, match="ending"):
        state.stamp(batch(3))


def test_the_bump_waits_for_every_batch_in_flight_to_answer():
    """The epoch is bumped only when nothing of the partition is in flight any more."""
    state = confirmed_state()
    bad, behind = batch(1), batch(2)
    send(state, bad, behind)
    refused(state, bad, RecordTooLarge("too large"))
    assert not state.bump_due
    with pytest.raises(IllegalState, match="cannot be bumped"):
        state.bump()
    assert refused(state, behind, OutOfOrderSequence("gap")) is Verdict.RESTAMP
    assert state.bump_due


def test_the_bump_starts_the_next_epoch_at_sequence_zero_and_restamps_waiting_batches():
    """Batches certainly not written lose their old stamp and are stamped anew, in order,
    from sequence 0 of the next epoch."""
    state = confirmed_state(epoch=5)
    bad, behind = batch(1), batch(2, count=2)
    send(state, bad, behind)
    refused(state, bad, InvalidRecord("bad"))
    refused(state, behind, OutOfOrderSequence("gap"))
    assert behind.sequence == rb.NO_SEQUENCE and behind.encoded is None
    state.bump()
    assert (state.state, state.epoch, state.next_sequence) == (EpochState.OPEN, 6, 0)
    assert state.next_send() == (SendMode.PROBE, None)
    later = batch(3)
    send(state, behind, later)
    assert (stamp(behind), stamp(later)) == ((PRODUCER_ID, 6, 0), (PRODUCER_ID, 6, 2))


def test_a_batch_that_may_have_been_written_is_resent_under_its_old_stamp_first():
    """A lost answer: the batch is resent alone under the same stamp, even after another
    batch ended the epoch, and the bump waits until it is resolved."""
    state = confirmed_state()
    lost, bad, behind = batch(1), batch(2), batch(3)
    send(state, lost, bad, behind)
    old = stamp(lost)
    assert unanswered(state, lost) is Verdict.RESEND
    refused(state, bad, RecordTooLarge("too large"))
    assert refused(state, behind, OutOfOrderSequence("gap")) is Verdict.RESTAMP
    assert not state.bump_due
    assert state.next_send() == (SendMode.RESOLVE, lost)
    send(state, lost)
    assert stamp(lost) == old
    assert state.next_send() == (SendMode.NOTHING, None)
    state.acknowledged(lost)  # the leader had it: a duplicate, answered with its offset
    assert state.bump_due


def test_nothing_is_sent_while_a_batch_that_may_have_been_written_is_in_flight():
    """While a maybe-written batch is resent, no other batch may go, so it stays within the
    leader's memory of the producer's last five batches."""
    state = confirmed_state()
    lost = batch(1)
    send(state, lost)
    unanswered(state, lost)
    send(state, lost)
    assert state.next_send() == (SendMode.NOTHING, None)


def test_out_of_order_sequence_proves_a_maybe_written_batch_is_not_written():
    """A resent batch refused as out of order was never written: with nothing before it,
    the epoch ends and the batch is stamped again under the next one."""
    state = confirmed_state()
    lost = batch(1)
    send(state, lost)
    unanswered(state, lost)
    send(state, lost)
    assert refused(state, lost, OutOfOrderSequence("gap")) is Verdict.RESTAMP
    assert not lost.maybe_written
    assert state.bump_due


def test_out_of_order_behind_an_unresolved_batch_is_resent_as_it_is():
    """A batch refused as out of order while an earlier batch of its epoch is still
    unresolved keeps its stamp: the earlier batch may fill the gap."""
    state = confirmed_state()
    early, late = batch(1), batch(2)
    send(state, early, late)
    old = stamp(late)
    assert refused(state, late, OutOfOrderSequence("gap")) is Verdict.RESEND
    assert stamp(late) == old and state.state is EpochState.OPEN
    state.acknowledged(early)
    send(state, late)
    state.acknowledged(late)
    assert state.state is EpochState.OPEN


def test_a_retriable_refusal_is_resent_as_it_is_while_the_epoch_is_open():
    """A batch the leader's append refused for a passing reason is resent unchanged."""
    state = confirmed_state()
    b = batch(1)
    send(state, b)
    old = stamp(b)
    assert refused(state, b, NotEnoughReplicas("isr")) is Verdict.RESEND
    assert stamp(b) == old and not b.maybe_written


def test_a_maybe_written_batch_out_of_time_fails_and_ends_the_epoch():
    """Past its delivery timeout a batch with no clear answer fails; its stamp can be
    neither reused nor skipped, so the epoch ends."""
    state = confirmed_state()
    lost = batch(1)
    send(state, lost)
    assert unanswered(state, lost, out_of_time=True) is Verdict.FAIL
    assert lost.maybe_written
    assert state.state is EpochState.ENDING and state.bump_due


def test_a_maybe_written_batch_refused_for_good_on_a_resend_fails_at_once():
    """A resend refused for a reason no resend can change fails now (it may or may not
    have been written); waiting out the delivery timeout would not tell more."""
    state = confirmed_state()
    lost = batch(1, count=2)
    send(state, lost)
    unanswered(state, lost)
    send(state, lost)
    assert refused(state, lost, RecordTooLarge("too large")) is Verdict.FAIL
    assert lost.maybe_written


def test_a_batch_too_large_splits_and_its_halves_take_over_its_sequences():
    """A refused batch of several records splits; the halves carry its stamp range."""
    state = confirmed_state()
    big = batch(1, count=5)
    send(state, big)
    assert refused(state, big, RecordTooLarge("too large")) is Verdict.SPLIT
    first, second = batch(1, count=2), batch(1, count=3)
    first.order, second.order = (1, 0), (1, 1)
    state.split(big, [first, second])
    assert (stamp(first), stamp(second)) == ((PRODUCER_ID, 0, 3), (PRODUCER_ID, 0, 5))
    assert state.stamped == {first, second}


def test_halves_of_a_batch_split_while_the_epoch_ends_wait_for_the_next_epoch():
    """Split while the epoch is ending, the halves are stamped after the bump."""
    state = confirmed_state()
    bad, big = batch(1), batch(2, count=4)
    send(state, bad, big)
    refused(state, bad, InvalidRecord("bad"))
    assert refused(state, big, RecordTooLarge("too large")) is Verdict.SPLIT
    halves = [batch(2, count=2), batch(2, count=2)]
    state.split(big, halves)
    assert [h.sequence for h in halves] == [rb.NO_SEQUENCE] * 2
    assert state.bump_due


def test_past_the_last_epoch_the_bump_takes_a_new_producer_id():
    """Epoch 32767 cannot grow: the bump needs a fresh producer id and starts it at its
    epoch, sequence 0."""
    state = confirmed_state(epoch=MAX_EPOCH)
    bad = batch(1)
    send(state, bad)
    refused(state, bad, InvalidRecord("bad"))
    assert state.needs_producer_id
    with pytest.raises(IllegalState, match="new producer id"):
        state.bump()
    state.bump((PRODUCER_ID + 1, 0))
    nxt = batch(2)
    send(state, nxt)
    assert stamp(nxt) == (PRODUCER_ID + 1, 0, 0)


def test_at_most_five_batches_go_out_from_the_oldest_whose_outcome_is_unknown():
    """Batches acknowledged after an unanswered one were written after it: they keep
    their place in the window until it answers, so a resend of it stays recognisable."""
    state = confirmed_state()
    slow, *later = [batch(n) for n in range(1, 6)]
    send(state, slow, *later)
    for b in later:
        state.acknowledged(b)
    assert not state.may_send(batch(6))
    with pytest.raises(IllegalState, match="5 batches sent"):
        state.sent(batch(6))
    state.acknowledged(slow)
    assert state.may_send(batch(6)) and state.window == {}


def test_a_batch_that_may_have_been_written_holds_the_window_until_resolved():
    """An unclear answer keeps the batch's place: only its own resend may go."""
    state = confirmed_state()
    lost, *later = [batch(n) for n in range(1, 6)]
    send(state, lost, *later)
    unanswered(state, lost)
    for b in later:
        state.acknowledged(b)
    assert not state.may_send(batch(6)) and state.may_send(lost)
    assert state.next_send() == (SendMode.RESOLVE, lost)
    send(state, lost)
    state.acknowledged(lost)
    assert state.window == {}
