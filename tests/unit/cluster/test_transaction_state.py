"""The transaction coordinator's decisions (rafka.cluster.transaction_state): every allowed
and refused transition, epochs that never go back, the move to a new producer id, retried
EndTxn, fencing, timeouts and expiry, with transaction version 2's bump at every end."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.cluster.transaction_end import end_txn
from rafka.cluster.transaction_state import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    Markers,
    ProducerIdAndEpoch,
    TxnDecision,
    TxnMetadata,
    TxnState,
    add_partitions,
    check_transition,
    complete,
    describe,
    expired,
    init_producer_id,
    is_valid_transition,
    list_transactions,
    pending_completion,
    timed_out,
    verify_partition,
)
from rafka.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
    TransactionAbortable,
)

S = TxnState
TID = "orders-writer"
PID = 100
EPOCH = 5
NOW = 1_000_000
TIMEOUT = 60_000
MAX_TIMEOUT = 900_000
P0, P1, P2 = ("orders", 0), ("orders", 1), ("audit", 0)
IDLE = [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT]
PREPARE = [S.PREPARE_COMMIT, S.PREPARE_ABORT]


class Ids:
    """A producer-id allocator that counts its calls."""

    def __init__(self, first: int = 1000) -> None:
        self._ids = itertools.count(first)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return next(self._ids)


def meta(state: TxnState, epoch: int = EPOCH, **changes) -> TxnMetadata:
    """A transactional id in ``state``; a transaction (Ongoing, Prepare*) holds P0 and P1."""
    busy = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
    fields = dict(
        transactional_id=TID, producer_id=PID, producer_epoch=epoch, last_producer_epoch=-1,
        previous_producer_id=-1, timeout_ms=TIMEOUT, state=state,
        partitions=frozenset({P0, P1}) if busy else frozenset(),
        start_ms=NOW - 1_000 if busy else -1, last_update_ms=NOW - 500,
    )  # fmt: skip
    fields.update(changes)
    return TxnMetadata(**fields)


def init(current, expected=None, ids=None, timeout=TIMEOUT, now=NOW) -> TxnDecision:
    return init_producer_id(current, TID, timeout, now, ids or Ids(), MAX_TIMEOUT, expected)


def ok(decision: TxnDecision) -> TxnDecision:
    assert decision.error is None, decision.error
    return decision


def refused(decision: TxnDecision, error: type) -> TxnDecision:
    assert type(decision.error) is error, decision
    assert decision.metadata is None and decision.markers is None and decision.answer is None
    return decision


def _after_commit(epoch: int = EPOCH) -> TxnMetadata:
    """The producer committed at ``epoch``: CompleteCommit at epoch + 1."""
    decision = ok(end_txn(meta(S.ONGOING, epoch), PID, epoch, True, NOW))
    return complete(decision.metadata, NOW + 1)


# -- the table of transitions ------------------------------------------------------------------


def test_valid_previous_states_are_the_ones_the_notes_list():
    """Kafka's table, with server-side defense's abort from Empty/Complete*."""
    idle = set(IDLE)
    assert {k: set(v) for k, v in VALID_PREVIOUS.items()} == {
        S.EMPTY: idle, S.ONGOING: idle | {S.ONGOING}, S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: idle | {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT}, S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING}, S.DEAD: idle,
    }  # fmt: skip


@pytest.mark.parametrize("from_state, to_state", list(itertools.product(S, S)))
def test_check_transition_allows_exactly_the_listed_moves(from_state, to_state):
    """Every pair of states: allowed iff listed; any other move raises InvalidTxnState."""
    current = meta(from_state)
    if from_state in VALID_PREVIOUS[to_state]:
        assert is_valid_transition(from_state, to_state)
        check_transition(current, to_state)
    else:
        assert not is_valid_transition(from_state, to_state)
        with pytest.raises(InvalidTxnState, match=f"{from_state.value} to {to_state.value}"):
            check_transition(current, to_state)


def test_metadata_refuses_partitions_outside_a_transaction_and_epochs_out_of_range():
    """The record's invariants hold on construction, whatever built it."""
    with pytest.raises(ValueError):
        meta(S.EMPTY, partitions=frozenset({P0}))
    with pytest.raises(ValueError):
        meta(S.EMPTY, epoch=MAX_EPOCH + 1)
    with pytest.raises(ValueError):
        meta(S.COMPLETE_COMMIT, next_producer_id=7)
    assert meta(S.ONGOING, partitions=[["orders", 0]]).partitions == frozenset({P0})


def test_a_refusal_persists_nothing_and_markers_need_a_record():
    """TxnDecision cannot say both 'refuse' and 'persist', nor markers without a record."""
    with pytest.raises(ValueError):
        TxnDecision(meta(S.EMPTY), error=InvalidTxnState("x"))
    with pytest.raises(ValueError):
        TxnDecision(markers=Markers(PID, 1, True, frozenset()))


# -- InitProducerId ----------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, MAX_TIMEOUT + 1])
def test_init_refuses_a_timeout_out_of_range(timeout):
    """transaction_timeout_ms must be > 0 and at most transaction.max.timeout.ms."""
    decision = refused(init(None, timeout=timeout), InvalidTransactionTimeout)
    assert str(MAX_TIMEOUT) in str(decision.error)
    ok(init(None, timeout=MAX_TIMEOUT))


@pytest.mark.parametrize("current", [None, meta(S.DEAD)], ids=["unknown", "dead"])
def test_init_of_an_unknown_or_dead_id_gets_a_new_producer_id_at_epoch_0(current):
    """A new life: Empty, epoch 0, nothing remembered; any `expected` is accepted."""
    ids = Ids()
    decision = ok(init(current, expected=(PID, 3), ids=ids))
    assert decision.answer == ProducerIdAndEpoch(1000, 0) and ids.calls == 1
    assert decision.metadata == TxnMetadata(
        TID, 1000, 0, -1, -1, TIMEOUT, S.EMPTY, frozenset(), -1, NOW
    )


@pytest.mark.parametrize("state", IDLE)
def test_init_of_an_idle_id_bumps_the_epoch_and_takes_the_new_timeout(state):
    """Empty/Complete*: same producer id, epoch + 1, Empty; no producer id is used up."""
    ids = Ids()
    decision = ok(init(meta(state), ids=ids, timeout=30_000))
    assert decision.answer == (PID, EPOCH + 1) and ids.calls == 0
    new = decision.metadata
    assert (new.state, new.producer_epoch, new.last_producer_epoch) == (S.EMPTY, EPOCH + 1, -1)
    assert (new.timeout_ms, new.last_update_ms, new.start_ms) == (30_000, NOW, -1)


@pytest.mark.parametrize("state", IDLE)
def test_init_at_the_last_epoch_moves_to_a_new_producer_id(state):
    """The epoch would reach MAX_EPOCH: a new producer id at epoch 0, the old one kept."""
    decision = ok(init(meta(state, MAX_EPOCH - 1)))
    new = decision.metadata
    assert decision.answer == (1000, 0)
    assert (new.producer_id, new.producer_epoch, new.previous_producer_id) == (1000, 0, PID)
    assert ok(init(meta(state, MAX_EPOCH - 2))).answer == (PID, MAX_EPOCH - 1)


def test_init_while_a_transaction_is_ongoing_fences_it_and_answers_concurrent_transactions():
    """The running transaction is aborted with a bumped epoch (markers carry it); its old
    epoch is forgotten, so the fenced producer cannot pass for a retry."""
    decision = init(meta(S.ONGOING))
    assert decision.error is None and isinstance(decision.answer, ConcurrentTransactions)
    new = decision.metadata
    assert (new.state, new.producer_epoch, new.last_producer_epoch) == (
        S.PREPARE_ABORT, EPOCH + 1, -1
    )
    assert new.partitions == {P0, P1} and new.start_ms == NOW - 1_000
    assert decision.markers == Markers(PID, EPOCH + 1, False, frozenset({P0, P1}))


def test_a_fenced_transaction_completes_and_the_retry_gets_a_fresh_epoch_the_zombie_cannot_use():
    """Init (fence) -> abort markers -> CompleteAbort -> init again: epoch + 2; every call of
    the old producer is ProducerFenced."""
    fenced = complete(init(meta(S.ONGOING)).metadata, NOW + 1)
    assert fenced.state == S.COMPLETE_ABORT and fenced.partitions == frozenset()
    retry = ok(init(fenced, now=NOW + 2))
    assert retry.answer == (PID, EPOCH + 2)
    for current in (fenced, retry.metadata):
        refused(end_txn(current, PID, EPOCH, False, NOW), ProducerFenced)
        refused(add_partitions(current, PID, EPOCH, [P0], NOW), ProducerFenced)
        assert isinstance(verify_partition(current, PID, EPOCH, P0), ProducerFenced)
        refused(init(current, expected=(PID, EPOCH)), ProducerFenced)


@pytest.mark.parametrize("state", PREPARE)
def test_init_while_a_transaction_completes_is_concurrent_transactions(state):
    """The markers of the previous transaction are being written: retry later."""
    refused(init(meta(state)), ConcurrentTransactions)


@pytest.mark.parametrize("expected", [(PID + 1, EPOCH), (PID, EPOCH - 1), (PID, EPOCH + 1)])
@pytest.mark.parametrize("state", IDLE + [S.ONGOING] + PREPARE)
def test_init_with_an_expected_identity_that_is_not_the_holders_is_fenced(state, expected):
    """KIP-360: a producer re-initialising with an id/epoch the coordinator did not give it
    last (nor just before) is a zombie."""
    refused(init(meta(state), expected=expected), ProducerFenced)


def test_init_with_the_holders_identity_bumps_and_its_retry_is_idempotent():
    """The holder re-initialises: epoch + 1, its old epoch remembered; the retry of that
    init is answered the same identity with nothing written (or only the new timeout)."""
    first = ok(init(meta(S.EMPTY), expected=(PID, EPOCH)))
    assert first.answer == (PID, EPOCH + 1) and first.metadata.last_producer_epoch == EPOCH
    again = ok(init(first.metadata, expected=(PID, EPOCH), now=NOW + 5))
    assert again.metadata is None and again.answer == first.answer
    longer = ok(init(first.metadata, expected=(PID, EPOCH), timeout=TIMEOUT * 2))
    assert longer.answer == first.answer
    assert (longer.metadata.producer_epoch, longer.metadata.timeout_ms) == (EPOCH + 1, TIMEOUT * 2)


def test_a_retried_init_after_the_move_to_a_new_producer_id_gets_the_same_new_id():
    """The old (id, epoch) is the previous identity of the new id: answered, not bumped."""
    ids = Ids()
    first = ok(init(meta(S.EMPTY, MAX_EPOCH - 1), expected=(PID, MAX_EPOCH - 1), ids=ids))
    assert first.answer == (1000, 0) and first.metadata.last_producer_epoch == MAX_EPOCH - 1
    again = ok(init(first.metadata, expected=(PID, MAX_EPOCH - 1), ids=ids))
    assert again.metadata is None and again.answer == (1000, 0) and ids.calls == 1


def test_the_holder_re_initialising_mid_transaction_aborts_it_and_its_retry_is_answered():
    """Ongoing with expected == the holder: aborted on its behalf (old epoch remembered);
    after the abort completes its retry gets the bumped epoch, no further bump."""
    decision = init(meta(S.ONGOING), expected=(PID, EPOCH))
    assert isinstance(decision.answer, ConcurrentTransactions)
    assert decision.metadata.last_producer_epoch == EPOCH
    refused(init(decision.metadata, expected=(PID, EPOCH)), ConcurrentTransactions)
    aborted = complete(decision.metadata, NOW + 1)
    retry = ok(init(aborted, expected=(PID, EPOCH)))
    assert retry.answer == (PID, EPOCH + 1) and retry.metadata.state == S.EMPTY


def test_a_delayed_re_init_after_the_producer_began_a_transaction_is_refused():
    """The previous identity while Ongoing is stale: it must not abort the new transaction."""
    current = meta(S.ONGOING, EPOCH + 1, last_producer_epoch=EPOCH)
    refused(init(current, expected=(PID, EPOCH)), ProducerFenced)


# -- AddPartitionsToTxn ------------------------------------------------------------------------


@pytest.mark.parametrize("state", IDLE)
def test_add_partitions_begins_a_transaction_from_an_idle_id(state):
    """Empty/Complete* -> Ongoing with the partitions; the transaction starts now."""
    decision = ok(add_partitions(meta(state), PID, EPOCH, [P0, ["orders", 1]], NOW))
    new = decision.metadata
    assert (new.state, new.partitions, new.start_ms) == (S.ONGOING, {P0, P1}, NOW)
    assert (new.producer_id, new.producer_epoch) == (PID, EPOCH) and decision.answer is None


def test_add_partitions_to_an_ongoing_transaction_keeps_its_start_and_adds_the_rest():
    """Ongoing -> Ongoing with the union; start_ms unchanged."""
    new = ok(add_partitions(meta(S.ONGOING), PID, EPOCH, [P1, P2], NOW)).metadata
    assert new.partitions == {P0, P1, P2} and new.start_ms == NOW - 1_000


def test_add_partitions_already_in_the_transaction_writes_nothing():
    """Every partition present: success with no record."""
    assert ok(add_partitions(meta(S.ONGOING), PID, EPOCH, [P1], NOW)) == TxnDecision()
    assert ok(add_partitions(meta(S.EMPTY), PID, EPOCH, [], NOW)) == TxnDecision()


@pytest.mark.parametrize("state", PREPARE)
def test_add_partitions_while_the_previous_transaction_completes_is_concurrent(state):
    """Prepare* at the producer's new epoch: retriable, nothing written."""
    current = meta(state, EPOCH + 1, last_producer_epoch=EPOCH)
    refused(add_partitions(current, PID, EPOCH + 1, [P2], NOW), ConcurrentTransactions)


@pytest.mark.parametrize(
    "current, producer_id, epoch, error",
    [(None, PID, EPOCH, InvalidProducerIdMapping),
     (meta(S.DEAD), PID, EPOCH, InvalidProducerIdMapping),
     (meta(S.ONGOING), PID + 1, EPOCH, InvalidProducerIdMapping),
     (meta(S.ONGOING), PID, EPOCH - 1, ProducerFenced),
     (meta(S.ONGOING), PID, EPOCH + 1, InvalidProducerEpoch),
     (meta(S.EMPTY), PID, EPOCH - 1, ProducerFenced),
     (meta(S.EMPTY, MAX_EPOCH), PID, MAX_EPOCH, InvalidProducerEpoch)],
    ids=["unknown", "dead", "other-id", "older", "newer", "older-idle", "reserved-epoch"],
)  # fmt: skip
def test_add_partitions_refuses_an_identity_that_is_not_the_holders(
    current, producer_id, epoch, error
):
    """Unknown ids and other producer ids are a mapping error, older epochs fenced, newer
    ones (and MAX_EPOCH, never given out) an invalid epoch."""
    refused(add_partitions(current, producer_id, epoch, [P0], NOW), error)
    assert isinstance(verify_partition(current, producer_id, epoch, P0), error)


# -- the partition leader's verification (KIP-890) ---------------------------------------------


def test_verify_accepts_only_a_partition_of_the_ongoing_transaction_of_that_exact_identity():
    """Ongoing, same producer id and epoch, partition added: None."""
    assert verify_partition(meta(S.ONGOING), PID, EPOCH, ("orders", 1)) is None


@pytest.mark.parametrize(
    "current, partition, error",
    [(meta(S.ONGOING), P2, TransactionAbortable),
     (meta(S.EMPTY), P0, TransactionAbortable),
     (meta(S.COMPLETE_COMMIT), P0, TransactionAbortable),
     (meta(S.COMPLETE_ABORT), P0, TransactionAbortable),
     (meta(S.PREPARE_COMMIT), P0, ConcurrentTransactions),
     (meta(S.PREPARE_ABORT), P0, ConcurrentTransactions)],
    ids=["not-added", "empty", "complete-commit", "complete-abort", "prepare-commit",
         "prepare-abort"],
)  # fmt: skip
def test_verify_refuses_a_write_outside_an_ongoing_transaction_that_holds_the_partition(
    current, partition, error
):
    """Not added (or no transaction): TransactionAbortable, as Kafka 4; completing: retry."""
    assert isinstance(verify_partition(current, PID, EPOCH, partition), error)


def test_a_produce_of_the_committed_transaction_cannot_land_in_the_next_one():
    """After a commit at epoch e the producer's next transaction is at e + 1: a delayed
    write at e to a partition of the new transaction is refused."""
    begun = ok(add_partitions(_after_commit(), PID, EPOCH + 1, [P0], NOW + 2)).metadata
    assert verify_partition(begun, PID, EPOCH + 1, P0) is None
    assert isinstance(verify_partition(begun, PID, EPOCH, P0), TransactionAbortable)
    refused(add_partitions(begun, PID, EPOCH, [P2], NOW), TransactionAbortable)


# -- EndTxn ------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_of_an_ongoing_transaction_prepares_with_a_bumped_epoch(commit):
    """Ongoing -> Prepare*: the commit point. Markers and the answer carry epoch + 1; the
    old epoch is remembered to recognise a retry."""
    ids = Ids()
    decision = ok(end_txn(meta(S.ONGOING), PID, EPOCH, commit, NOW, ids))
    new = decision.metadata
    assert new.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert (new.producer_epoch, new.last_producer_epoch, new.partitions) == (
        EPOCH + 1, EPOCH, {P0, P1}
    )
    assert decision.answer == (PID, EPOCH + 1) and ids.calls == 0
    assert decision.markers == Markers(PID, EPOCH + 1, commit, frozenset({P0, P1}))
    assert pending_completion(new) == decision.markers


@pytest.mark.parametrize("completed", [False, True], ids=["prepared", "completed"])
@pytest.mark.parametrize("commit", [True, False])
def test_a_retried_end_txn_with_the_same_result_is_answered_without_a_write(commit, completed):
    """The producer lost the answer: same result from its old epoch -> OK, the new epoch."""
    current = ok(end_txn(meta(S.ONGOING), PID, EPOCH, commit, NOW)).metadata
    if completed:
        current = complete(current, NOW + 1)
    decision = ok(end_txn(current, PID, EPOCH, commit, NOW + 2))
    assert decision == TxnDecision(None, ProducerIdAndEpoch(PID, EPOCH + 1))


@pytest.mark.parametrize("completed", [False, True], ids=["prepared", "completed"])
def test_a_retried_end_txn_with_the_opposite_result_is_refused(completed):
    """Abort after a commit: InvalidTxnState. Commit after an abort: TransactionAbortable
    (only a timeout abort leads a correct producer there)."""
    committed = ok(end_txn(meta(S.ONGOING), PID, EPOCH, True, NOW)).metadata
    aborted = ok(end_txn(meta(S.ONGOING), PID, EPOCH, False, NOW)).metadata
    if completed:
        committed, aborted = complete(committed, NOW + 1), complete(aborted, NOW + 1)
    refused(end_txn(committed, PID, EPOCH, False, NOW), InvalidTxnState)
    refused(end_txn(aborted, PID, EPOCH, True, NOW), TransactionAbortable)


@pytest.mark.parametrize("state", IDLE)
def test_an_abort_with_nothing_ongoing_bumps_the_epoch_and_completes_at_once(state):
    """Server-side defense: the unsure producer's abort fences its own epoch; no partition
    can hold a write of it, so CompleteAbort is written directly and there are no markers."""
    decision = ok(end_txn(meta(state), PID, EPOCH, False, NOW))
    new = decision.metadata
    assert (new.state, new.producer_epoch, new.last_producer_epoch) == (
        S.COMPLETE_ABORT, EPOCH + 1, EPOCH
    )
    assert decision.markers is None and decision.answer == (PID, EPOCH + 1)
    assert ok(end_txn(new, PID, EPOCH, False, NOW)).answer == (PID, EPOCH + 1)  # a retry


@pytest.mark.parametrize("state", IDLE)
def test_a_commit_with_nothing_ongoing_is_invalid_txn_state(state):
    """There is no transaction to commit."""
    refused(end_txn(meta(state), PID, EPOCH, True, NOW), InvalidTxnState)


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("state", PREPARE)
def test_end_txn_of_the_next_transaction_while_the_previous_completes_is_concurrent(state, commit):
    """The producer holds the new epoch and ends again before the markers are written."""
    current = meta(state, EPOCH + 1, last_producer_epoch=EPOCH)
    refused(end_txn(current, PID, EPOCH + 1, commit, NOW), ConcurrentTransactions)


@pytest.mark.parametrize(
    "current, producer_id, epoch, error",
    [(None, PID, EPOCH, InvalidProducerIdMapping),
     (meta(S.DEAD), PID, EPOCH, InvalidProducerIdMapping),
     (meta(S.ONGOING), PID + 1, EPOCH, InvalidProducerIdMapping),
     (meta(S.ONGOING), PID, EPOCH - 1, ProducerFenced),
     (meta(S.ONGOING), PID, EPOCH + 1, InvalidProducerEpoch),
     (meta(S.COMPLETE_COMMIT, last_producer_epoch=EPOCH - 1), PID, EPOCH - 2, ProducerFenced)],
    ids=["unknown", "dead", "other-id", "older", "newer", "older-than-the-retry"],
)  # fmt: skip
def test_end_txn_refuses_an_identity_that_is_neither_the_holder_nor_a_retry(
    current, producer_id, epoch, error
):
    """Mapping error for other ids, fenced below, invalid epoch above."""
    refused(end_txn(current, producer_id, epoch, True, NOW), error)


def test_a_delayed_end_txn_of_one_transaction_cannot_complete_the_next():
    """Committed at e, next transaction begun at e + 1: a late EndTxn at e is refused and
    writes nothing, in both results."""
    begun = ok(add_partitions(_after_commit(), PID, EPOCH + 1, [P0], NOW + 2)).metadata
    for commit in (True, False):
        refused(end_txn(begun, PID, EPOCH, commit, NOW + 3), ProducerFenced)
    assert ok(end_txn(begun, PID, EPOCH + 1, True, NOW + 3)).answer == (PID, EPOCH + 2)


def test_end_txn_at_the_last_epoch_moves_the_producer_to_a_new_id():
    """Markers at (old id, MAX_EPOCH), answer (new id, 0); complete moves the record; a
    retry from the old identity is answered the new one, before and after completion."""
    last = MAX_EPOCH - 1
    ids = Ids()
    decision = ok(end_txn(meta(S.ONGOING, last), PID, last, True, NOW, ids))
    assert decision.markers == Markers(PID, MAX_EPOCH, True, frozenset({P0, P1}))
    assert decision.answer == (1000, 0) and decision.metadata.next_producer_id == 1000
    assert ok(end_txn(decision.metadata, PID, last, True, NOW)).answer == (1000, 0)
    done = complete(decision.metadata, NOW + 1)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (1000, 0, PID)
    assert done.next_producer_id == -1 and ids.calls == 1
    assert ok(end_txn(done, PID, last, True, NOW + 2)).answer == (1000, 0)
    refused(end_txn(done, PID, last, False, NOW + 2), InvalidTxnState)
    assert ok(add_partitions(done, 1000, 0, [P0], NOW + 2)).metadata.state == S.ONGOING
    assert isinstance(verify_partition(done, PID, last, P0), TransactionAbortable)


def test_end_txn_at_the_last_epoch_without_an_allocator_says_to_pass_one():
    """The allocator is needed only then; missing, the call fails loudly."""
    with pytest.raises(ValueError, match="new_producer_id"):
        end_txn(meta(S.ONGOING, MAX_EPOCH - 1), PID, MAX_EPOCH - 1, True, NOW)


def test_an_abort_with_nothing_ongoing_at_the_last_epoch_moves_to_a_new_id():
    """No markers, so the new id is taken at once; the old identity's retry is answered."""
    decision = ok(end_txn(meta(S.EMPTY, MAX_EPOCH - 1), PID, MAX_EPOCH - 1, False, NOW, Ids()))
    new = decision.metadata
    assert decision.answer == (1000, 0) and new.state == S.COMPLETE_ABORT
    assert (new.previous_producer_id, new.last_producer_epoch) == (PID, MAX_EPOCH - 1)
    assert ok(end_txn(new, PID, MAX_EPOCH - 1, False, NOW)).answer == (1000, 0)


# -- completion --------------------------------------------------------------------------------


@pytest.mark.parametrize("state, done", [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                         (S.PREPARE_ABORT, S.COMPLETE_ABORT)])  # fmt: skip
def test_complete_moves_prepare_to_complete_and_clears_the_partitions(state, done):
    """Markers written: Complete*, no partitions, no start time, same identity."""
    current = meta(state, EPOCH + 1, last_producer_epoch=EPOCH)
    new = complete(current, NOW)
    assert (new.state, new.partitions, new.start_ms, new.last_update_ms) == (
        done, frozenset(), -1, NOW
    )
    assert new.producer_id_and_epoch == (PID, EPOCH + 1) and new.last_producer_epoch == EPOCH
    assert pending_completion(new) is None


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_complete_from_anything_but_prepare_is_invalid_txn_state(state):
    """Only a decided transaction has markers to complete."""
    with pytest.raises(InvalidTxnState):
        complete(meta(state), NOW)


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_only_a_prepared_transaction_is_pending_completion_after_a_failover(state):
    """A loaded Prepare* record gives its markers again; nothing else does."""
    assert pending_completion(meta(state)) is None
    assert pending_completion(meta(S.PREPARE_COMMIT)) == Markers(
        PID, EPOCH, True, frozenset({P0, P1})
    )


# -- timeouts ----------------------------------------------------------------------------------


def test_a_transaction_past_its_timeout_is_aborted_with_a_bumped_epoch():
    """start_ms + timeout_ms < now: PrepareAbort at epoch + 1 with abort markers; the
    producer's epoch is remembered (it was slow, not fenced). At the boundary: nothing."""
    current = meta(S.ONGOING)
    deadline = current.start_ms + TIMEOUT
    assert timed_out(current, deadline) is None
    decision = timed_out(current, deadline + 1)
    new = decision.metadata
    assert (new.state, new.producer_epoch, new.last_producer_epoch) == (
        S.PREPARE_ABORT, EPOCH + 1, EPOCH
    )
    assert decision.markers == Markers(PID, EPOCH + 1, False, frozenset({P0, P1}))
    assert decision.answer is None and decision.error is None


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT] + PREPARE)
def test_only_an_ongoing_transaction_times_out(state):
    """Prepare* completes by its markers; idle ids expire instead."""
    assert timed_out(meta(state, start_ms=0 if state in PREPARE else -1), NOW * 10) is None


@pytest.mark.parametrize("completed", [False, True], ids=["prepared", "completed"])
def test_after_a_timeout_abort_the_late_producer_is_told_to_abort_then_begins_again(completed):
    """Its writes, adds and commit: TransactionAbortable. Its abort: OK with the new epoch,
    with which it begins the next transaction."""
    current = timed_out(meta(S.ONGOING), NOW + TIMEOUT).metadata
    if completed:
        current = complete(current, NOW + TIMEOUT + 1)
    assert isinstance(verify_partition(current, PID, EPOCH, P0), TransactionAbortable)
    refused(add_partitions(current, PID, EPOCH, [P2], NOW), TransactionAbortable)
    refused(end_txn(current, PID, EPOCH, True, NOW), TransactionAbortable)
    abort = ok(end_txn(current, PID, EPOCH, False, NOW))
    assert abort == TxnDecision(None, ProducerIdAndEpoch(PID, EPOCH + 1))
    again = add_partitions(current, PID, EPOCH + 1, [P0], NOW)
    if completed:
        assert ok(again).metadata.state == S.ONGOING
    else:
        refused(again, ConcurrentTransactions)


def test_a_timeout_at_the_last_epoch_moves_the_late_producer_to_a_new_id():
    """The abort's markers take MAX_EPOCH; the producer's abort is answered the new id."""
    last = MAX_EPOCH - 1
    decision = timed_out(meta(S.ONGOING, last), NOW + TIMEOUT, Ids())
    assert decision.markers.producer_epoch == MAX_EPOCH
    assert ok(end_txn(decision.metadata, PID, last, False, NOW)).answer == (1000, 0)


# -- expiry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", IDLE)
def test_an_idle_id_unchanged_longer_than_the_expiration_becomes_dead(state):
    """last_update_ms + expiration < now: Dead (a tombstone); at the boundary: nothing."""
    current = meta(state)
    assert expired(current, current.last_update_ms + 1_000, 1_000) is None
    decision = expired(current, current.last_update_ms + 1_001, 1_000)
    assert decision.metadata.state == S.DEAD and decision.answer is None


@pytest.mark.parametrize("state", [S.ONGOING] + PREPARE)
def test_an_id_with_a_transaction_never_expires(state):
    """Ongoing times out first; Prepare* completes first."""
    assert expired(meta(state), NOW * 10, 1) is None


def test_a_dead_id_refuses_transactional_calls_and_init_starts_it_anew():
    """Dead is as unknown: mapping errors, and a new producer id on init."""
    dead = expired(meta(S.EMPTY), NOW * 10, 1).metadata
    refused(end_txn(dead, PID, EPOCH, False, NOW), InvalidProducerIdMapping)
    assert ok(init(dead)).answer == (1000, 0)


# -- admin -------------------------------------------------------------------------------------


def test_describe_gives_the_record_as_describe_transactions_shows_it():
    """Kafka's state name, sorted partitions, the record's producer id and epoch."""
    assert describe(meta(S.ONGOING, partitions=frozenset({P1, P2}))) == {
        "transactional_id": TID, "producer_id": PID, "producer_epoch": EPOCH,
        "state": "Ongoing", "timeout_ms": TIMEOUT, "partitions": [P2, P1],
        "start_ms": NOW - 1_000, "last_update_ms": NOW - 500,
    }  # fmt: skip


def test_list_transactions_filters_by_state_producer_id_and_duration():
    """Filters combine; a duration filter keeps only transactions running that long."""
    metas = [meta(S.ONGOING), meta(S.EMPTY, transactional_id="b", producer_id=7),
             meta(S.DEAD, transactional_id="c")]  # fmt: skip
    assert [e["transactional_id"] for e in list_transactions(metas, NOW)] == ["b", TID]
    assert list_transactions(metas, NOW, states=["Ongoing"]) == [
        {"transactional_id": TID, "producer_id": PID, "state": "Ongoing"}
    ]
    assert [e["producer_id"] for e in list_transactions(metas, NOW, producer_ids=[7])] == [7]
    assert len(list_transactions(metas, NOW, min_duration_ms=1_000)) == 1
    assert list_transactions(metas, NOW, min_duration_ms=1_001) == []


# -- properties over any sequence of calls -----------------------------------------------------

_OPS = st.lists(
    st.tuples(
        # adds and writes weigh more, so transactions often carry verified writes
        st.sampled_from(["init", "init_expected", "add", "add", "add", "verify", "verify",
                         "commit", "abort", "complete", "complete", "timeout", "stale_end",
                         "stale_write"]),
        st.sampled_from([P0, P1, P2]),
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, first_epoch=st.sampled_from([0, MAX_EPOCH - 3]))
def test_any_sequence_keeps_the_transitions_valid_and_never_lets_an_ended_epoch_write(
    ops, first_epoch
):
    """Whatever the calls and their order: every persisted move is in the table, a producer
    id's epoch never goes back, no producer is given MAX_EPOCH, markers carry an epoch above
    every epoch their transaction verified writes with, and an identity whose transaction
    ended never verifies a write again."""
    ids = Ids()
    current = meta(S.EMPTY, first_epoch)
    holder = current.producer_id_and_epoch
    highest = {PID: first_epoch}
    ended: set[tuple[int, int]] = set()
    verified: set[tuple[int, int]] = set()
    stale = [holder]
    now = NOW
    for op, partition in ops:
        now += 10_000
        if op == "init":
            decision = init(current, ids=ids, now=now)
        elif op == "init_expected":
            decision = init(current, expected=holder, ids=ids, now=now)
        elif op == "add":
            decision = add_partitions(current, *holder, [partition], now)
        elif op in ("commit", "abort"):
            decision = end_txn(current, *holder, op == "commit", now, ids)
        elif op == "stale_end":
            decision = end_txn(current, *stale[0], False, now, ids)
        elif op == "complete":
            if current.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                continue
            decision = TxnDecision(complete(current, now))
        elif op == "timeout":
            decision = timed_out(current, now + TIMEOUT, ids)
            if decision is None:
                continue
        else:
            who = holder if op == "verify" else stale[0]
            if verify_partition(current, *who, partition) is None:
                assert current.state == S.ONGOING and who == current.producer_id_and_epoch
                assert tuple(who) not in ended
                verified.add(tuple(who))
            continue
        new = decision.metadata
        if new is not None:
            assert is_valid_transition(current.state, new.state) or (
                current.state == S.EMPTY and new.state == S.COMPLETE_ABORT  # via PrepareAbort
            ) or (current.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                  and new.state == S.COMPLETE_ABORT)  # fmt: skip
            assert new.producer_epoch >= highest.get(new.producer_id, 0)
            highest[new.producer_id] = new.producer_epoch
            if decision.markers is not None:
                markers = decision.markers
                for pid, epoch in verified:
                    if pid == markers.producer_id:
                        assert markers.producer_epoch > epoch
                ended.update(v for v in verified if v[0] == markers.producer_id)
                ended.add(tuple(current.producer_id_and_epoch))
            current = new
        answer = decision.answer
        if decision.error is None and isinstance(answer, tuple):
            assert answer[1] < MAX_EPOCH
            if answer != holder:
                stale.insert(0, holder)
                holder = ProducerIdAndEpoch(*answer)


def test_dataclasses_are_frozen():
    """Decisions and records are values: a change is a new one."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta(S.EMPTY).producer_epoch = 9  # type: ignore[misc]
