"""EndTxn's decisions: the end of a transaction, in both transaction versions.

Part of the state machine of ``transaction_state`` (its module docstring has the states,
identities and invariants), kept apart for size; it uses that module's helpers. Transaction
version 2 bumps the producer epoch at the end and the markers carry the bumped epoch; version
1 (Kafka clients sending EndTxn below v5) ends at the producer's own epoch, as Kafka's
``endTransactionWithTV1`` does.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from rafka.cluster.transaction_state import (
    PREPARING,
    TxnDecision,
    TxnMetadata,
    TxnState,
    _allocate,
    _concurrent,
    _end,
    _exhausted,
    _identity_error,
    _is_previous_identity,
    _markers,
    _move,
    _refuse,
    _unknown,
    check_transition,
)
from rafka.storage.record_batch import NO_PRODUCER_ID
from rafka.errors import (
    InvalidTxnState,
    ProducerFenced,
    TransactionAbortable,
)

log = logging.getLogger("rafka.cluster.transaction_state")

_S = TxnState


def end_txn(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
    new_producer_id: Callable[[], int] | None = None,
    bump_epoch: bool = True,
) -> TxnDecision:
    """End the producer's transaction; answers the producer's new (producer id, epoch).
    ``bump_epoch=False`` is transaction version 1: see ``_end_keeping_epoch``; what follows
    is the default, transaction version 2.

    Ongoing: Prepare* with the epoch bumped; that record is the commit point, the markers
    carry the bumped epoch. ``new_producer_id`` is called only when the producer could not
    hold the bumped epoch (then the answer is a new producer id at epoch 0); pass it always.
    A retry from the producer's previous identity while Prepare*/Complete* of the same result
    is answered the current identity, nothing written; an abort after a commit is
    InvalidTxnState, a commit after an abort (the coordinator's timeout abort) is
    TransactionAbortable. An abort with nothing Ongoing (the producer is unsure what it
    wrote) bumps the epoch and is written as CompleteAbort at once: no partition can hold a
    write of that epoch, so there are no markers to write. A commit with nothing Ongoing is
    InvalidTxnState."""
    if current is None or current.state == _S.DEAD:
        return _refuse(_unknown(current))
    tid = current.transactional_id
    if _is_previous_identity(current, producer_id, epoch):
        return _retried_end(current, producer_id, epoch, commit)
    error = _identity_error(current, producer_id, epoch)
    if error is not None:
        return _refuse(error)
    if not bump_epoch:
        return _end_keeping_epoch(current, commit, now_ms)
    if current.state == _S.ONGOING:
        to_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        decision = _end(current, to_state, now_ms, new_producer_id)
        log.debug("transactional id %s: %s decided", tid, "commit" if commit else "abort")
        return decision
    if current.state in PREPARING:
        return _refuse(_concurrent(current))
    if commit:
        return _refuse(InvalidTxnState(
            f"transactional id {tid!r} has no transaction in progress ({current.state.value}) "
            f"to commit: nothing was added to one; begin a transaction and send before "
            f"committing"
        ))  # fmt: skip
    # Abort with nothing Ongoing: pass through PrepareAbort, persist CompleteAbort.
    check_transition(current, _S.PREPARE_ABORT)
    aborting = dataclasses.replace(current, state=_S.PREPARE_ABORT)
    if _exhausted(current.producer_epoch):
        changes = dict(producer_id=_allocate(new_producer_id, current), producer_epoch=0,
                       previous_producer_id=current.producer_id)  # fmt: skip
    else:
        changes = dict(producer_epoch=current.producer_epoch + 1)
    meta = _move(
        aborting, _S.COMPLETE_ABORT, now_ms, last_producer_epoch=current.producer_epoch,
        start_ms=-1, **changes,
    )  # fmt: skip
    return TxnDecision(meta, meta.producer_id_and_epoch)


def _end_keeping_epoch(current: TxnMetadata, commit: bool, now_ms: int) -> TxnDecision:
    """EndTxn of transaction version 1 from the producer that holds the id (Kafka's
    ``endTransactionWithTV1``). The producer keeps its epoch, so a retry has the same identity
    as the call it repeats and only the state tells them apart:

        Ongoing                 -> Prepare* at the same epoch (last_producer_epoch kept);
                                   markers carry it; answered the same identity
        Prepare* of the result  -> ConcurrentTransactions (retriable: it is completing)
        Complete* of the result -> the same identity, nothing written (a retry)
        anything else           -> InvalidTxnState (the other result was decided, or, from
                                   Empty, there is no transaction: no abort-when-unsure)
    """
    prepare, done = (
        (_S.PREPARE_COMMIT, _S.COMPLETE_COMMIT) if commit
        else (_S.PREPARE_ABORT, _S.COMPLETE_ABORT)
    )  # fmt: skip
    if current.state == _S.ONGOING:
        meta = _move(current, prepare, now_ms, next_producer_id=NO_PRODUCER_ID,
                     transaction_version=1)  # its markers go at the producer's own epoch
        log.debug("transactional id %s: %s decided, epoch kept", current.transactional_id,
                  "commit" if commit else "abort")  # fmt: skip
        return TxnDecision(meta, meta.producer_id_and_epoch, markers=_markers(meta))
    if current.state == done:
        return TxnDecision(None, current.producer_id_and_epoch)
    if current.state == prepare:
        return _refuse(_concurrent(current))
    what = "commit" if commit else "abort"
    return _refuse(InvalidTxnState(
        f"transactional id {current.transactional_id!r} cannot {what}: its transaction is "
        f"{current.state.value} (the other result was decided, or none was begun); begin a "
        f"transaction and send before ending it"
    ))  # fmt: skip


def _retried_end(current: TxnMetadata, producer_id: int, epoch: int, commit: bool) -> TxnDecision:
    tid = current.transactional_id
    committed = current.state in (_S.PREPARE_COMMIT, _S.COMPLETE_COMMIT)
    aborted = current.state in (_S.PREPARE_ABORT, _S.COMPLETE_ABORT)
    if (committed and commit) or (aborted and not commit):
        return TxnDecision(None, current.producer_id_and_epoch)
    if committed:
        return _refuse(InvalidTxnState(
            f"the transaction of producer {producer_id} epoch {epoch} ({tid!r}) was committed; "
            f"it cannot be aborted: only the commit may be retried"
        ))  # fmt: skip
    if aborted:
        return _refuse(TransactionAbortable(
            f"the transaction of producer {producer_id} epoch {epoch} ({tid!r}) was aborted "
            f"(it ran past transaction_timeout_ms={current.timeout_ms}, or was aborted "
            f"before): it cannot commit; call abort_transaction(), then begin again"
        ))  # fmt: skip
    return _refuse(ProducerFenced(
        f"EndTxn from producer {producer_id} epoch {epoch} ({tid!r}) is for a transaction "
        f"that ended before the one now {current.state.value}: it is stale; this producer "
        f"must not use that epoch any more"
    ))  # fmt: skip
