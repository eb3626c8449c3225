"""The transactional producer's own state: where it is in the transaction protocol, and what
an error makes of it. Plain Python; ``producer_transactions`` makes the calls.

States (Kafka's ``TransactionManager``):

    UNINITIALIZED --init--> READY --begin--> IN_TRANSACTION --commit--> COMMITTING --> READY
                                                  |  \\--abort--> ABORTING --> READY
                                                  \\--a write failed--> ABORTABLE --abort-->
    any --ProducerFenced, InvalidProducerIdMapping, an unknown error--> FATAL (close it)

- A commit whose EndTxn got no clear answer stays COMMITTING: only the commit may be retried
  (it is answered as the commit it repeats). The same holds for an abort.
- ABORTABLE: a write of the transaction failed (or the coordinator aborted it on timeout);
  nothing more may be sent or committed, only ``abort_transaction()`` is allowed.
- FATAL: the producer is fenced or broken; every call raises the error that made it so.
"""

from __future__ import annotations

import enum

from rafka.errors import (
    IllegalState,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTxnState,
    ProducerFenced,
    RafkaError,
    TransactionAbortable,
)


class TxnClientState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE = "abortable"
    FATAL = "fatal"


_S = TxnClientState
#: The states each state may be entered from.
_ENTERED_FROM: dict[TxnClientState, frozenset[TxnClientState]] = {
    _S.READY: frozenset({_S.UNINITIALIZED, _S.COMMITTING, _S.ABORTING}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING: frozenset({_S.IN_TRANSACTION, _S.COMMITTING}),
    _S.ABORTING: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE, _S.ABORTING}),
    _S.ABORTABLE: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE, _S.COMMITTING}),
    _S.FATAL: frozenset(TxnClientState),
    _S.UNINITIALIZED: frozenset(),
}

#: Errors that fence the producer for good.
FATAL_ERRORS = (ProducerFenced, InvalidProducerIdMapping, InvalidTxnState)


class TransactionState:
    """The producer's transaction state, its identity (producer id, epoch) and the
    partitions of the current transaction."""

    def __init__(self, transactional_id: str, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.state = _S.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        # The partitions the current transaction sent records to (their leaders add them
        # at the coordinator) and the offsets partitions it added itself.
        self.partitions: set[tuple[str, int]] = set()
        self.offsets_partitions: set[tuple[str, int]] = set()
        # Whether anything of the current transaction may have reached the coordinator: a
        # transaction that sent nothing ends without asking it (as Kafka's).
        self.started = False
        self.error: RafkaError | None = None  # why ABORTABLE or FATAL

    def sent_to(self, topic: str, partition: int) -> None:
        """A record or batch of the current transaction was queued for ``(topic,
        partition)``: its leader will add the partition, so EndTxn must be sent."""
        self.started = True
        self.partitions.add((topic, partition))

    def clear_partitions(self) -> None:
        """A transaction ended or begins: it holds no partition yet."""
        self.partitions.clear()
        self.offsets_partitions.clear()
        self.started = False

    def move(self, to: TxnClientState) -> None:
        if self.state not in _ENTERED_FROM[to]:
            raise IllegalState(
                f"transactional producer {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {to.value}"
            )
        self.state = to

    # -- what a call may do --------------------------------------------------------------------

    def check_can_begin(self) -> None:
        self._check_not_fatal()
        if self.state is _S.UNINITIALIZED:
            raise IllegalState("call init_transactions() once before begin_transaction()")
        if self.state is not _S.READY:
            raise IllegalState(
                f"begin_transaction() while {self.state.value}: end the current transaction "
                "(commit_transaction() or abort_transaction()) first"
            )

    def check_can_send(self) -> None:
        self._check_not_fatal()
        if self.state is _S.ABORTABLE:
            raise TransactionAbortable(
                f"the transaction cannot go on ({self.error}); call abort_transaction(), then "
                "begin_transaction() again"
            )
        if self.state is _S.UNINITIALIZED:
            raise IllegalState("call init_transactions() once, then begin_transaction()")
        if self.state is not _S.IN_TRANSACTION:
            raise IllegalState(
                f"a transactional producer sends only inside a transaction (it is "
                f"{self.state.value}): call begin_transaction() first"
            )

    def check_can_commit(self) -> None:
        self._check_not_fatal()
        if self.state is _S.ABORTABLE:
            raise TransactionAbortable(
                f"the transaction cannot commit ({self.error}); call abort_transaction()"
            )
        if self.state is _S.ABORTING:
            raise IllegalState("an abort is under way: only abort_transaction() may be retried")
        if self.state not in (_S.IN_TRANSACTION, _S.COMMITTING):
            raise IllegalState(
                f"commit_transaction() while {self.state.value}: there is no transaction; "
                "call begin_transaction() first"
            )

    def check_can_abort(self) -> None:
        self._check_not_fatal()
        if self.state is _S.COMMITTING:
            raise IllegalState("a commit is under way: only commit_transaction() may be retried")
        if self.state not in (_S.IN_TRANSACTION, _S.ABORTABLE, _S.ABORTING):
            raise IllegalState(
                f"abort_transaction() while {self.state.value}: there is no transaction"
            )

    def _check_not_fatal(self) -> None:
        if self.state is _S.FATAL:
            raise type(self.error)(
                f"this transactional producer cannot be used any more ({self.error}); close "
                "it and create a new one"
            )

    # -- what an error does --------------------------------------------------------------------

    def failed(self, error: BaseException) -> None:
        """A call of the transaction, or one of its writes, failed for good with ``error``:
        the producer becomes FATAL (fenced) or the transaction ABORTABLE."""
        if self.state is _S.FATAL:
            return
        if isinstance(error, FATAL_ERRORS):
            self.error = error
            self.state = _S.FATAL
        elif self.state in (_S.IN_TRANSACTION, _S.ABORTABLE, _S.COMMITTING):
            self.error = _as_abortable(error)
            self.state = _S.ABORTABLE


def _as_abortable(error: BaseException) -> RafkaError:
    if isinstance(error, TransactionAbortable):
        return error
    if isinstance(error, InvalidProducerEpoch):
        return TransactionAbortable(
            f"the coordinator ended the transaction before its writes were done (it timed "
            f"out, transaction_timeout_ms?): {error}"
        )
    wrapped = TransactionAbortable(f"a write of the transaction failed: {error}")
    wrapped.__cause__ = error
    return wrapped
