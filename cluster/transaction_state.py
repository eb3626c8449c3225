"""The transaction coordinator's decisions for one transactional id, as pure functions.

Kafka 4's transaction protocol with transaction version 2 (KIP-890 server-side defense): the
producer epoch is bumped at every transaction end, the markers carry the bumped epoch and
EndTxn answers the new (producer id, epoch), so each transaction is named by its own
(producer id, epoch) and a delayed produce or EndTxn of one can never land in or complete the
next. Kafka clients of transaction version 1 (EndTxn below v5: librdkafka, kafka-python, Java
before KIP-890) keep their epoch across transactions: their EndTxn is decided with
``bump_epoch=False``, as Kafka's coordinator decides it for them (``endTransactionWithTV1``):
Prepare* at the same epoch, markers at that epoch, and a retry told only by the state. Fences
and timeout aborts bump the epoch for them too. No I/O and no clock: ``now_ms`` is passed in,
and so is the producer-id allocator. EndTxn's decisions are in ``transaction_end``, the rest
of this state machine, built on the helpers here.

Each call takes the id's current ``TxnMetadata`` (None when the coordinator holds none) and
returns a ``TxnDecision``: the metadata to persist to ``__transaction_state`` (its record
codec is ``transaction_records``), then what to answer and which markers to write. The
coordinator persists before it answers and before it writes markers; a Prepare* record is the
commit point. Between deciding and persisting the coordinator must hold further calls for the
id (prepare, persist, apply): each decision is computed from the metadata it was given.

States (Kafka's names), what each does, where it moves:

    Empty              a producer id and epoch, no transaction  -> Ongoing, Empty, Dead,
                                                                   PrepareAbort (abort when
                                                                   unsure; completed at once)
    Ongoing            partitions added (by their leaders)      -> PrepareCommit, PrepareAbort,
                                                                   PrepareEpochFence, Ongoing
    PrepareCommit      decided (the commit point); markers due  -> CompleteCommit
    PrepareAbort       decided; abort markers due               -> CompleteAbort
    CompleteCommit     markers written                          -> Empty, Ongoing, Dead,
                                                                   PrepareAbort
    CompleteAbort      markers written                          -> as CompleteCommit
    PrepareEpochFence  a new producer fences an ongoing one:    -> PrepareAbort
                       passed through, never persisted
    Dead               expired; persisted as a tombstone        -> (none: a later
                                                                   InitProducerId starts anew)

Identities. ``producer_id_and_epoch`` is the identity the producer holds (or is told, once
the record is durable). A producer never holds ``MAX_EPOCH``: that epoch is left for the
coordinator's last bump of an id (a fence, or the markers of the id's last transaction), and
the transaction that would need it moves the producer to a new producer id instead
(``next_producer_id`` during Prepare*, ``previous_producer_id`` once complete).
``last_producer_epoch`` is the epoch the producer held before the coordinator's last bump
when that bump was on the producer's own behalf (its EndTxn, its re-init, a timeout abort);
-1 when the bump fenced it (another producer's InitProducerId). That is how a retried EndTxn,
and a slow producer whose transaction timed out, are told from a zombie.

Invariants: per producer id the epoch never goes back; the markers of a transaction carry an
epoch above every epoch its writes used (at least that epoch, for transaction version 1); a
write is verified only against an Ongoing transaction of exactly the writer's identity that
includes the partition.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterable

from rafka.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    ProducerFenced,
    RafkaError,
    TransactionAbortable,
)
from rafka.storage.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

from rafka.cluster.transaction_types import (  # noqa: F401 - the types are part of this API
    IDLE,
    MAX_EPOCH,
    PREPARING,
    WITH_PARTITIONS,
    VALID_PREVIOUS,
    Markers,
    ProducerIdAndEpoch,
    TxnDecision,
    TxnMetadata,
    TxnState,
    check_transition,
    is_valid_transition,
)
from rafka.cluster.transaction_admin import describe, list_transactions  # noqa: F401 - this API too

log = logging.getLogger(__name__)


_S = TxnState


def _refuse(error: RafkaError) -> TxnDecision:
    return TxnDecision(error=error)


def _move(current: TxnMetadata, to_state: TxnState, now_ms: int, **changes: Any) -> TxnMetadata:
    """The one transition function: checks the move, logs it, returns the new metadata."""
    check_transition(current, to_state)
    new = dataclasses.replace(current, state=to_state, last_update_ms=now_ms, **changes)
    log.debug(
        "transactional id %s: %s %s -> %s %s", current.transactional_id,
        current.state.value, tuple(current.producer_id_and_epoch), to_state.value,
        tuple(new.producer_id_and_epoch),
    )  # fmt: skip
    return new


def _markers(meta: TxnMetadata) -> Markers:
    return Markers(
        meta.producer_id, meta.producer_epoch, meta.state == _S.PREPARE_COMMIT, meta.partitions,
        meta.transaction_version,
    )


def _exhausted(epoch: int) -> bool:
    """Bumping ``epoch`` would reach MAX_EPOCH, which no producer may hold."""
    return epoch + 1 >= MAX_EPOCH


def _allocate(new_producer_id: Callable[[], int] | None, meta: TxnMetadata) -> int:
    if new_producer_id is None:
        raise ValueError(
            f"transactional id {meta.transactional_id!r} has used the epochs of producer id "
            f"{meta.producer_id}: pass new_producer_id so it can move to a new one"
        )
    return new_producer_id()


def _is_previous_identity(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """(producer_id, epoch) is what the producer held before the coordinator's last bump
    on its behalf. After a move to a new producer id (epoch 0) it names the old id."""
    if meta.last_producer_epoch == NO_PRODUCER_EPOCH or epoch != meta.last_producer_epoch:
        return False
    moved = meta.producer_epoch == 0 and meta.previous_producer_id != NO_PRODUCER_ID
    return producer_id == (meta.previous_producer_id if moved else meta.producer_id)


def _identity_error(meta: TxnMetadata, producer_id: int, epoch: int) -> RafkaError | None:
    """None if the caller is the producer that holds the id now; else why it is refused.
    The producer's previous identity gets TransactionAbortable: its transaction ended
    without it (a timeout abort) or it is a delayed request of its own; abort and begin
    again. Only an identity the id has moved past otherwise is fenced."""
    tid = meta.transactional_id
    holder_id, holder_epoch = meta.producer_id_and_epoch
    if producer_id == holder_id and epoch == holder_epoch < MAX_EPOCH:
        return None
    if _is_previous_identity(meta, producer_id, epoch):
        return TransactionAbortable(
            f"the transaction of producer {producer_id} epoch {epoch} (transactional id "
            f"{tid!r}) has already ended (aborted on timeout, or this request is late): "
            f"call abort_transaction(), then begin a new transaction"
        )
    if producer_id != holder_id:
        return InvalidProducerIdMapping(
            f"transactional id {tid!r} is held by producer id {holder_id}, not {producer_id}: "
            f"the id expired or another producer took it over; call init_transactions() again"
        )
    if epoch < holder_epoch:
        return ProducerFenced(
            f"producer {producer_id} epoch {epoch} was fenced: transactional id {tid!r} has "
            f"moved on to epoch {holder_epoch} (a newer producer took it over, or this "
            f"request is stale); close this producer"
        )
    return InvalidProducerEpoch(
        f"producer {producer_id} epoch {epoch} was never given out by the coordinator of "
        f"{tid!r} (it holds epoch {holder_epoch}): call init_transactions() again"
    )


def _unknown(current: TxnMetadata | None) -> RafkaError:
    which = f" {current.transactional_id!r}" if current is not None else ""
    return InvalidProducerIdMapping(
        f"the coordinator holds no producer id for the transactional id{which} (never "
        f"initialised, or expired): call init_transactions()"
    )


def _concurrent(meta: TxnMetadata) -> RafkaError:
    return ConcurrentTransactions(
        f"the previous transaction of {meta.transactional_id!r} is completing "
        f"({meta.state.value}): retry shortly"
    )


def _end(
    current: TxnMetadata, to_state: TxnState, now_ms: int,
    new_producer_id: Callable[[], int] | None, fence: bool = False,
) -> TxnDecision:  # fmt: skip
    """Move an Ongoing transaction to Prepare* with the epoch bumped; markers carry it.
    On the producer's behalf the old epoch is remembered and, if the producer could not
    hold the bumped epoch, it is told a new producer id; a fence forgets the old epoch."""
    bumped = current.producer_epoch + 1
    next_id = NO_PRODUCER_ID
    if not fence and _exhausted(current.producer_epoch):
        next_id = _allocate(new_producer_id, current)
    meta = _move(
        current, to_state, now_ms, producer_epoch=bumped, next_producer_id=next_id,
        last_producer_epoch=NO_PRODUCER_EPOCH if fence else current.producer_epoch,
        transaction_version=2,
    )  # fmt: skip
    return TxnDecision(meta, meta.producer_id_and_epoch, markers=_markers(meta))


# -- InitProducerId ---------------------------------------------------------------------------


def init_producer_id(
    current: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: Callable[[], int],
    max_timeout_ms: int,
    expected: tuple[int, int] | None = None,
) -> TxnDecision:
    """A producer (re)initialises ``transactional_id``; answers its (producer id, epoch).

    Unknown or Dead: a new producer id at epoch 0 (``expected`` is not checked: a producer
    whose id expired starts again, as in Kafka). Empty/Complete*: the epoch is bumped (a new
    producer id at the last epoch), which fences every older holder. Ongoing: the running
    transaction is aborted with a bumped epoch, answered ConcurrentTransactions; the retry
    gets a fresh epoch once the abort completes. ``expected`` (KIP-360) is the identity the
    producer holds; any other is ProducerFenced, except its previous identity, a retry of an
    init (or EndTxn) already done, which is answered the identity it was given."""
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return _refuse(InvalidTransactionTimeout(
            f"transaction_timeout_ms={timeout_ms} must be > 0 and at most the cluster's "
            f"transaction.max.timeout.ms={max_timeout_ms}: configure the producer with one "
            f"in that range"
        ))  # fmt: skip
    if current is None or current.state == _S.DEAD:
        meta = TxnMetadata(
            transactional_id, new_producer_id(), 0, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
            timeout_ms, _S.EMPTY, frozenset(), -1, now_ms,
        )  # fmt: skip
        log.info("transactional id %s: producer id %d", transactional_id, meta.producer_id)
        return TxnDecision(meta, meta.producer_id_and_epoch)
    own = retry = False
    if expected is not None:
        own = tuple(expected) == tuple(current.producer_id_and_epoch)
        retry = _is_previous_identity(current, *expected)
        if not own and not retry:
            return _refuse(ProducerFenced(
                f"producer {tuple(expected)} was fenced: transactional id "
                f"{transactional_id!r} is held by {tuple(current.producer_id_and_epoch)}; "
                f"close this producer"
            ))  # fmt: skip
    if current.state in PREPARING:
        return _refuse(_concurrent(current))
    if current.state == _S.ONGOING:
        if retry:  # a delayed re-init: the producer has since begun a transaction
            return _refuse(ProducerFenced(
                f"InitProducerId from {tuple(expected)} for {transactional_id!r} is older "
                f"than the transaction now Ongoing: it is stale; this producer must not use "
                f"that epoch any more"
            ))  # fmt: skip
        return _abort_for_init(current, now_ms, new_producer_id, own)
    if retry:
        if current.state == _S.EMPTY and current.timeout_ms == timeout_ms:
            return TxnDecision(None, current.producer_id_and_epoch)
        meta = _move(current, _S.EMPTY, now_ms, timeout_ms=timeout_ms)
        return TxnDecision(meta, meta.producer_id_and_epoch)
    remembered = current.producer_epoch if own else NO_PRODUCER_EPOCH
    if _exhausted(current.producer_epoch):
        meta = _move(
            current, _S.EMPTY, now_ms, producer_id=new_producer_id(), producer_epoch=0,
            previous_producer_id=current.producer_id, last_producer_epoch=remembered,
            timeout_ms=timeout_ms,
        )  # fmt: skip
    else:
        meta = _move(
            current, _S.EMPTY, now_ms, producer_epoch=current.producer_epoch + 1,
            last_producer_epoch=remembered, timeout_ms=timeout_ms,
        )  # fmt: skip
    return TxnDecision(meta, meta.producer_id_and_epoch)


def _abort_for_init(
    current: TxnMetadata, now_ms: int, new_producer_id: Callable[[], int], own: bool
) -> TxnDecision:
    """InitProducerId found a transaction Ongoing: abort it, answer ConcurrentTransactions.
    Another producer fences the holder (PrepareEpochFence, old epoch forgotten); the holder
    itself re-initialising is aborted on its behalf, so its retry is recognised."""
    if own:
        decision = _end(current, _S.PREPARE_ABORT, now_ms, new_producer_id)
    else:
        check_transition(current, _S.PREPARE_EPOCH_FENCE)
        fencing = dataclasses.replace(current, state=_S.PREPARE_EPOCH_FENCE)
        decision = _end(fencing, _S.PREPARE_ABORT, now_ms, None, fence=True)
        log.info(
            "transactional id %s: fencing producer %s; its transaction is aborted",
            current.transactional_id, tuple(current.producer_id_and_epoch),
        )  # fmt: skip
    answer = ConcurrentTransactions(
        f"transactional id {current.transactional_id!r} had a transaction in progress; it "
        f"is being aborted: retry init_transactions() shortly"
    )
    return dataclasses.replace(decision, answer=answer)


# -- AddPartitionsToTxn and the partition leader's verification --------------------------------


def add_partitions(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: Iterable[tuple[str, int]],
    now_ms: int,
) -> TxnDecision:
    """Add partitions to the producer's transaction, beginning it if none is Ongoing (its
    start time is then ``now_ms``). Partitions already in the Ongoing transaction: nothing
    to write, success. Refused while the previous transaction completes (retriable)."""
    if current is None or current.state == _S.DEAD:
        return _refuse(_unknown(current))
    error = _identity_error(current, producer_id, epoch)
    if error is not None:
        return _refuse(error)
    if current.state in PREPARING:
        return _refuse(_concurrent(current))
    added = frozenset((str(t), int(p)) for t, p in partitions)
    if current.state == _S.ONGOING:
        if added <= current.partitions:
            return TxnDecision()
        meta = _move(current, _S.ONGOING, now_ms, partitions=current.partitions | added)
        return TxnDecision(meta)
    if not added:
        return TxnDecision()
    meta = _move(current, _S.ONGOING, now_ms, partitions=added, start_ms=now_ms)
    log.debug("transactional id %s: transaction begins", current.transactional_id)
    return TxnDecision(meta)


def verify_partition(
    current: TxnMetadata | None, producer_id: int, epoch: int, partition: tuple[str, int]
) -> RafkaError | None:
    """The check (KIP-890) before a producer's first transactional write to a partition
    that the producer adds itself (the offsets partition a group coordinator writes; data
    partitions are added by their leaders with ``add_partitions``): None only if the
    transaction is Ongoing, of exactly this producer id and epoch, and includes the
    partition.

    A partition not in the transaction is TransactionAbortable, as in Kafka 4 (since 3.8;
    before, INVALID_TXN_STATE, which clients treat as fatal): the write is refused either
    way, and what is usually behind it, a write of an earlier transaction delayed past its
    end or a client that skipped AddPartitions, is repaired by aborting and beginning again
    without closing the producer."""
    if current is None or current.state == _S.DEAD:
        return _unknown(current)
    error = _identity_error(current, producer_id, epoch)
    if error is not None:
        return error
    if current.state in PREPARING:
        return _concurrent(current)
    partition = (str(partition[0]), int(partition[1]))
    if current.state == _S.ONGOING and partition in current.partitions:
        return None
    return TransactionAbortable(
        f"partition {partition[0]}-{partition[1]} is not in the transaction of producer "
        f"{producer_id} epoch {epoch} ({current.transactional_id!r}, "
        f"{current.state.value}): it must be added before the first write to it; abort the "
        f"transaction and begin again"
    )


# -- completion, timeouts, expiry, failover ----------------------------------------------------


def complete(current: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every marker of the Prepare* transaction is written: Complete*, partitions cleared,
    and the producer moved to the new producer id if the transaction named one. Raises
    InvalidTxnState from any other state."""
    to_state = _S.COMPLETE_COMMIT if current.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
    changes: dict[str, Any] = {}
    if current.next_producer_id != NO_PRODUCER_ID:
        # last_producer_epoch keeps the old id's epoch: a retried EndTxn from it is answered
        changes = dict(producer_id=current.next_producer_id, producer_epoch=0,
                       previous_producer_id=current.producer_id,
                       next_producer_id=NO_PRODUCER_ID)  # fmt: skip
    return _move(current, to_state, now_ms, partitions=frozenset(), start_ms=-1, **changes)


def timed_out(
    current: TxnMetadata, now_ms: int, new_producer_id: Callable[[], int] | None = None
) -> TxnDecision | None:
    """An Ongoing transaction older than its timeout (``start_ms + timeout_ms < now_ms``) is
    aborted with an epoch bump, on the producer's behalf: its old epoch is remembered, so
    its abort is answered OK and its other calls TransactionAbortable. None otherwise.
    ``new_producer_id`` as for ``end_txn``."""
    if current.state != _S.ONGOING or current.start_ms + current.timeout_ms >= now_ms:
        return None
    log.info(
        "transactional id %s: transaction of %s timed out after %d ms; aborting",
        current.transactional_id, tuple(current.producer_id_and_epoch), current.timeout_ms,
    )  # fmt: skip
    decision = _end(current, _S.PREPARE_ABORT, now_ms, new_producer_id)
    return dataclasses.replace(decision, answer=None)  # no caller waits for it


def expired(current: TxnMetadata, now_ms: int, expiration_ms: int) -> TxnDecision | None:
    """An id with no transaction and no change for longer than
    ``transactional.id.expiration.ms`` becomes Dead: persist its tombstone, then forget it.
    None otherwise."""
    if current.state not in IDLE or current.last_update_ms + expiration_ms >= now_ms:
        return None
    return TxnDecision(_move(current, _S.DEAD, now_ms, start_ms=-1))


def pending_completion(current: TxnMetadata) -> Markers | None:
    """For a coordinator that loaded ``current`` from the log: the markers of a decided
    transaction (Prepare*) to write again, then ``complete``; None otherwise."""
    if current.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        return _markers(current)
    return None
