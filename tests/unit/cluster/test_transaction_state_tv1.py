"""EndTxn of Kafka clients of transaction version 1 (``end_txn(..., bump_epoch=False)``):
the producer keeps its epoch across transactions, a retry is told by the state alone, and
fences and timeout aborts still bump, as in Kafka's ``endTransactionWithTV1``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.cluster.transaction_records import decode, encode_key, encode_value
from rafka.cluster.transaction_end import end_txn
from rafka.cluster.transaction_state import (
    MAX_EPOCH,
    Markers,
    ProducerIdAndEpoch,
    TxnDecision,
    add_partitions,
    complete,
    init_producer_id,
    is_valid_transition,
    pending_completion,
    timed_out,
    verify_partition,
)
from rafka.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
    ProducerFenced,
    TransactionAbortable,
)

from .test_transaction_state import (
    EPOCH,
    IDLE,
    MAX_TIMEOUT,
    NOW,
    P0,
    P1,
    P2,
    PID,
    PREPARE,
    TID,
    TIMEOUT,
    Ids,
    S,
    meta,
    ok,
    refused,
)

SAME = ProducerIdAndEpoch(PID, EPOCH)


def end_v1(current, commit: bool, identity=SAME, now=NOW, ids=None) -> TxnDecision:
    return end_txn(current, *identity, commit, now, ids or Ids(), bump_epoch=False)


def prepared(commit: bool, epoch: int = EPOCH):
    return ok(end_v1(meta(S.ONGOING, epoch), commit, (PID, epoch))).metadata


# -- Ongoing: Prepare* at the same epoch -------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_v1_prepares_at_the_same_epoch_and_answers_the_same_identity(commit):
    """Ongoing -> Prepare*: no bump, last_producer_epoch unchanged, markers at the epoch the
    writes used, answered the identity the producer keeps; no producer id is taken."""
    ids = Ids()
    current = meta(S.ONGOING, last_producer_epoch=EPOCH - 1)
    decision = ok(end_v1(current, commit, ids=ids))
    new = decision.metadata
    assert new.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert (new.producer_id, new.producer_epoch, new.last_producer_epoch) == (
        PID, EPOCH, EPOCH - 1
    )
    assert (new.next_producer_id, new.partitions) == (-1, {P0, P1})
    assert decision.answer == SAME and ids.calls == 0
    assert decision.markers == Markers(PID, EPOCH, commit, frozenset({P0, P1}), 1)
    assert pending_completion(new) == decision.markers  # written again after a failover


def test_the_prepare_record_keeps_the_version_so_a_failover_writes_the_same_markers():
    """The record carries transaction_version 1 (absent for 2: version-2 records are as
    before), so the coordinator that loads it writes markers the partitions accept."""
    new = prepared(True)
    assert new.transaction_version == 1
    loaded = decode(encode_key(TID), encode_value(new))[1]
    assert loaded == new and pending_completion(loaded).transaction_version == 1
    bumped = ok(end_txn(meta(S.ONGOING), *SAME, True, NOW)).metadata
    assert bumped.transaction_version == 2
    assert b"transaction_version" not in encode_value(bumped)


def test_end_txn_v1_at_the_last_epoch_a_producer_holds_needs_no_new_producer_id():
    """Without a bump the epoch cannot run out: MAX_EPOCH - 1 ends its transaction in place."""
    ids = Ids()
    decision = ok(end_v1(meta(S.ONGOING, MAX_EPOCH - 1), True, (PID, MAX_EPOCH - 1), ids=ids))
    assert decision.answer == (PID, MAX_EPOCH - 1) and ids.calls == 0
    assert decision.markers.producer_epoch == MAX_EPOCH - 1


# -- retries and the other result --------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_a_retried_end_txn_v1_while_prepared_is_concurrent_transactions(commit):
    """Same identity, same result, markers still being written: retriable, nothing written."""
    decision = refused(end_v1(prepared(commit), commit), ConcurrentTransactions)
    assert decision.error.retriable


@pytest.mark.parametrize("commit", [True, False])
def test_a_retried_end_txn_v1_once_complete_is_answered_without_a_write(commit):
    """Complete* of the same result: success, the same identity, nothing to persist."""
    done = complete(prepared(commit), NOW + 1)
    assert ok(end_v1(done, commit)) == TxnDecision(None, SAME)


@pytest.mark.parametrize("completed", [False, True], ids=["prepared", "completed"])
@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_v1_with_the_other_result_is_invalid_txn_state(commit, completed):
    """The result decided stands: the other one is InvalidTxnState, in Prepare* as in
    Complete* (Kafka's version-1 table)."""
    current = prepared(commit)
    if completed:
        current = complete(current, NOW + 1)
    refused(end_v1(current, not commit), InvalidTxnState)


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_v1_with_no_transaction_begun_is_invalid_txn_state(commit):
    """From Empty neither result is accepted, and an abort does not bump the epoch (the
    version-2 abort-when-unsure would leave the client on an epoch it does not know)."""
    refused(end_v1(meta(S.EMPTY), commit), InvalidTxnState)


# -- identities: as with version 2 -------------------------------------------------------------


@pytest.mark.parametrize(("identity", "error"), [
    ((PID + 1, EPOCH), InvalidProducerIdMapping),
    ((PID, EPOCH - 1), ProducerFenced),
    ((PID, EPOCH + 1), InvalidProducerEpoch),
])  # fmt: skip
@pytest.mark.parametrize("state", [S.ONGOING] + IDLE + PREPARE)
def test_end_txn_v1_refuses_an_identity_that_is_not_the_holders(state, identity, error):
    """Another producer id, an older epoch (fenced) or one never given out."""
    refused(end_v1(meta(state), True, identity), error)


@pytest.mark.parametrize("current", [None, meta(S.DEAD)], ids=["unknown", "dead"])
def test_end_txn_v1_of_an_unknown_id_is_invalid_producer_id_mapping(current):
    refused(end_v1(current, False), InvalidProducerIdMapping)


# -- the next transaction ----------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_the_next_transaction_begins_with_the_same_identity(commit):
    """After the markers, AddPartitionsToTxn from Complete* with the kept identity begins the
    next transaction; its writes verify and it ends the same way, still at the same epoch."""
    done = complete(prepared(commit), NOW + 1)
    begun = ok(add_partitions(done, *SAME, [P2], NOW + 2)).metadata
    assert (begun.state, begun.partitions, begun.start_ms) == (S.ONGOING, {P2}, NOW + 2)
    assert begun.producer_id_and_epoch == SAME
    assert verify_partition(begun, *SAME, P2) is None
    second = ok(end_v1(begun, True, now=NOW + 3))
    assert second.answer == SAME
    assert second.markers == Markers(PID, EPOCH, True, frozenset({P2}), 1)


def test_the_next_transaction_waits_while_the_markers_are_written():
    """AddPartitionsToTxn during Prepare* is ConcurrentTransactions, as with version 2."""
    refused(add_partitions(prepared(True), *SAME, [P2], NOW), ConcurrentTransactions)


# -- fences and timeouts still bump -----------------------------------------------------------


def test_a_timeout_abort_of_a_version_1_transaction_still_bumps_the_epoch():
    """The coordinator's abort moves the epoch on: the late producer's writes are refused,
    its abort is answered (with the new identity), its commit TransactionAbortable."""
    decision = timed_out(meta(S.ONGOING, transaction_version=1), NOW + TIMEOUT + 1_000)
    current = decision.metadata
    assert current.producer_epoch == EPOCH + 1
    assert decision.markers.transaction_version == 2  # above the epoch: version 2's rule
    done = complete(current, NOW + TIMEOUT + 2_000)
    assert isinstance(verify_partition(done, *SAME, P0), TransactionAbortable)
    refused(end_v1(done, True), TransactionAbortable)
    assert ok(end_v1(done, False)).answer == (PID, EPOCH + 1)


def test_init_producer_id_fences_a_version_1_transaction_with_a_bump():
    """Another producer's InitProducerId aborts the ongoing transaction at epoch + 1; the old
    producer's EndTxn is then fenced."""
    decision = init_producer_id(meta(S.ONGOING, transaction_version=1), TID, TIMEOUT, NOW,
                                Ids(), MAX_TIMEOUT)  # fmt: skip
    fenced = decision.metadata
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch) == (
        S.PREPARE_ABORT, EPOCH + 1, -1
    )
    assert decision.markers.producer_epoch == EPOCH + 1
    assert decision.markers.transaction_version == 2
    refused(end_v1(complete(fenced, NOW + 1), True), ProducerFenced)


# -- properties over any sequence of calls -----------------------------------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "verify", "commit", "abort", "commit_v2", "complete",
                         "complete", "timeout", "init_expected"]),
        st.sampled_from([P0, P1, P2]),
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, first_epoch=st.sampled_from([0, MAX_EPOCH - 3]))
def test_any_sequence_with_version_1_ends_keeps_transitions_and_epochs_valid(ops, first_epoch):
    """Mixing version-1 and version-2 ends, completions, timeouts and re-inits: every move is
    in the table, a producer id's epoch never goes back, no producer holds MAX_EPOCH, and
    markers never carry an epoch below one their transaction verified a write with."""
    ids = Ids()
    current = meta(S.EMPTY, first_epoch)
    holder = current.producer_id_and_epoch
    highest = {PID: first_epoch}
    verified: set[tuple[int, int]] = set()
    now = NOW
    for op, partition in ops:
        now += 10_000
        if op == "add":
            decision = add_partitions(current, *holder, [partition], now)
        elif op in ("commit", "abort", "commit_v2"):
            decision = end_txn(current, *holder, op != "abort", now, ids,
                               bump_epoch=op == "commit_v2")  # fmt: skip
        elif op == "init_expected":
            decision = init_producer_id(current, TID, TIMEOUT, now, ids, MAX_TIMEOUT, holder)
        elif op == "complete":
            if current.state not in PREPARE:
                continue
            decision = TxnDecision(complete(current, now))
        elif op == "timeout":
            decision = timed_out(current, now + TIMEOUT, ids)
            if decision is None:
                continue
        else:
            if verify_partition(current, *holder, partition) is None:
                assert current.state == S.ONGOING and holder == current.producer_id_and_epoch
                verified.add(tuple(holder))
            continue
        new = decision.metadata
        if new is not None:
            assert is_valid_transition(current.state, new.state) or (
                current.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and new.state == S.COMPLETE_ABORT  # version 2's abort when unsure
            )  # fmt: skip
            assert new.producer_epoch >= highest.get(new.producer_id, 0)
            highest[new.producer_id] = new.producer_epoch
            if decision.markers is not None:
                markers = decision.markers
                # version 2 is above every epoch its writes used; version 1 at least at it
                above = markers.transaction_version == 2
                assert all(markers.producer_epoch > e if above else markers.producer_epoch >= e
                           for p, e in verified if p == markers.producer_id)  # fmt: skip
                verified = {v for v in verified if v[0] != markers.producer_id}
            current = new
        answer = decision.answer
        if decision.error is None and isinstance(answer, tuple):
            assert answer[1] < MAX_EPOCH
            holder = ProducerIdAndEpoch(*answer)
