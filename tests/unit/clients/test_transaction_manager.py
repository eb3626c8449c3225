"""The transactional producer's own states: which call each allows, and what an error makes
of the producer (fenced for good, or the transaction abortable)."""

from __future__ import annotations

import pytest

from rafka.clients.transaction_manager import TransactionState, TxnClientState
from rafka.errors import (
    IllegalState,
    InvalidProducerEpoch,
    NotEnoughReplicas,
    ProducerFenced,
    TransactionAbortable,
)

S = TxnClientState


def in_transaction() -> TransactionState:
    txn = TransactionState("etl", 60_000)
    txn.move(S.READY)
    txn.move(S.IN_TRANSACTION)
    return txn


def test_nothing_is_sent_or_begun_before_init_transactions():
    txn = TransactionState("etl", 60_000)
    with pytest.raises(IllegalState, match="init_transactions"):
        txn.check_can_send()
    with pytest.raises(IllegalState, match="init_transactions"):
        txn.check_can_begin()


def test_records_are_sent_only_inside_a_transaction():
    txn = TransactionState("etl", 60_000)
    txn.move(S.READY)
    with pytest.raises(IllegalState, match="begin_transaction"):
        txn.check_can_send()
    txn.move(S.IN_TRANSACTION)
    txn.check_can_send()


def test_a_failed_write_makes_the_transaction_abortable_and_only_abort_is_allowed():
    txn = in_transaction()
    txn.failed(NotEnoughReplicas("too few in-sync replicas"))
    assert txn.state is S.ABORTABLE
    with pytest.raises(TransactionAbortable, match="abort_transaction"):
        txn.check_can_send()
    with pytest.raises(TransactionAbortable):
        txn.check_can_commit()
    txn.check_can_abort()
    txn.move(S.ABORTING)
    txn.move(S.READY)
    txn.check_can_begin()


def test_an_epoch_refused_mid_transaction_is_abortable_not_fatal():
    txn = in_transaction()
    txn.failed(InvalidProducerEpoch("epoch 3 is older than 4"))
    assert txn.state is S.ABORTABLE
    assert isinstance(txn.error, TransactionAbortable)


def test_a_fenced_producer_is_fenced_for_every_call_after():
    txn = in_transaction()
    txn.failed(ProducerFenced("a newer producer took the id"))
    assert txn.state is S.FATAL
    for check in (txn.check_can_send, txn.check_can_begin, txn.check_can_commit,
                  txn.check_can_abort):  # fmt: skip
        with pytest.raises(ProducerFenced, match="close it"):
            check()


def test_after_a_commit_whose_outcome_is_unknown_only_the_commit_may_be_retried():
    txn = in_transaction()
    txn.move(S.COMMITTING)
    txn.check_can_commit()
    with pytest.raises(IllegalState, match="commit_transaction"):
        txn.check_can_abort()
    with pytest.raises(IllegalState):
        txn.check_can_begin()


def test_after_an_abort_whose_outcome_is_unknown_only_the_abort_may_be_retried():
    txn = in_transaction()
    txn.move(S.ABORTING)
    txn.check_can_abort()
    with pytest.raises(IllegalState, match="abort_transaction"):
        txn.check_can_commit()


def test_states_move_only_along_the_protocol():
    txn = TransactionState("etl", 60_000)
    with pytest.raises(IllegalState):
        txn.move(S.IN_TRANSACTION)
    txn.move(S.READY)
    with pytest.raises(IllegalState):
        txn.move(S.COMMITTING)


def test_offsets_sent_with_something_that_is_not_group_metadata_are_refused_before_any_call():
    from types import SimpleNamespace

    from rafka.clients.producer_transactions import TransactionalMixin

    class Client(TransactionalMixin):
        def __init__(self) -> None:
            self.config = SimpleNamespace(transactional_id="etl", transaction_timeout_ms=60_000,
                                          max_block_ms=1_000)  # fmt: skip
            self._gateway = None  # any call to the cluster would fail on it
            self._sender = SimpleNamespace(on_failed_batch=None)
            self._init_transactional()

    client = Client()
    for bad in (None, 42, ""):
        with pytest.raises(TypeError, match="group_metadata"):
            client.send_offsets_to_transaction({("t", 0): 5}, bad)
    assert client._txn.state is S.UNINITIALIZED
