"""The types of the transaction coordinator's decisions: a transactional id's states and
the moves between them, its metadata (one ``__transaction_state`` record), the markers a
decision calls for, and the decision itself. The decisions are in ``transaction_state``."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

from rafka.errors import InvalidTxnState, RafkaError
from rafka.storage.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

__all__ = [
    "IDLE", "MAX_EPOCH", "Markers", "PREPARING", "WITH_PARTITIONS", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "ProducerIdAndEpoch",
    "TxnDecision", "TxnMetadata", "TxnState", "VALID_PREVIOUS", "check_transition",
    "is_valid_transition",
]

# Java's Short.MAX_VALUE, the largest epoch a batch header holds. Producers get at most one
# less, so the coordinator can always bump once more to fence or to end an id's last
# transaction.
MAX_EPOCH = (1 << 15) - 1


class TxnState(enum.Enum):
    """A transactional id's state; the value is Kafka's name (DescribeTransactions)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"


_S = TxnState
#: States deciding an end (partitions held, markers due or being fenced).
PREPARING = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE})
#: States with no transaction under way.
IDLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
#: States that hold the transaction's partitions.
WITH_PARTITIONS = frozenset({_S.ONGOING}) | PREPARING

VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: IDLE,
    _S.ONGOING: IDLE | {_S.ONGOING},
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # Empty/Complete*: the server-side defense's abort of a producer unsure of its state.
    _S.PREPARE_ABORT: IDLE | {_S.ONGOING, _S.PREPARE_EPOCH_FENCE},
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
    _S.DEAD: IDLE,
}


def is_valid_transition(from_state: TxnState, to_state: TxnState) -> bool:
    """Whether ``to_state`` may follow ``from_state`` (``VALID_PREVIOUS``)."""
    return from_state in VALID_PREVIOUS[to_state]


def check_transition(meta: "TxnMetadata", to_state: TxnState) -> None:
    """Raise InvalidTxnState unless ``meta`` may move to ``to_state``."""
    if not is_valid_transition(meta.state, to_state):
        raise InvalidTxnState(
            f"transactional id {meta.transactional_id!r} cannot move from "
            f"{meta.state.value} to {to_state.value}; the coordinator's state is out of step "
            f"with this call: find the coordinator again and retry"
        )


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's record in ``__transaction_state`` (see the module docstring
    for the identities). Partitions are held only while a transaction is Ongoing or
    Prepare*; ``next_producer_id`` only during Prepare*."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    previous_producer_id: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int
    next_producer_id: int = NO_PRODUCER_ID  # set when the ending transaction uses MAX_EPOCH
    # 2: the transaction's end bumped the epoch (its markers are above every epoch its
    # writes used); 1: a Kafka client of transaction version 1 ended it at its own epoch
    transaction_version: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "partitions", frozenset((str(t), int(p)) for t, p in self.partitions)
        )
        if self.producer_id < 0 or not 0 <= self.producer_epoch <= MAX_EPOCH:
            raise ValueError(f"invalid producer id/epoch in {self}")
        if self.partitions and self.state not in WITH_PARTITIONS:
            raise ValueError(f"a {self.state.value} transaction holds no partitions: {self}")
        if self.next_producer_id != NO_PRODUCER_ID and self.state not in PREPARING:
            raise ValueError(f"only a Prepare* record names a next producer id: {self}")

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        """The identity the producer holds now (or is told once this record is durable)."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return ProducerIdAndEpoch(self.next_producer_id, 0)
        return ProducerIdAndEpoch(self.producer_id, self.producer_epoch)


@dataclass(frozen=True)
class Markers:
    """The markers to write, once the Prepare* record is durable, to every partition."""

    producer_id: int
    producer_epoch: int  # the bumped epoch: above every epoch the transaction's writes used
    commit: bool
    partitions: frozenset[tuple[str, int]]
    # 1: the producer's own epoch (transaction version 1), which a partition accepts for a
    # transaction open there at that epoch; 2: a bumped one, accepted only above it
    transaction_version: int = 2


@dataclass(frozen=True)
class TxnDecision:
    """What a call decided. ``error`` set: refuse the caller with it; nothing is persisted.
    Otherwise persist ``metadata`` if set (a DEAD one as a tombstone), then answer
    ``answer`` (None: plain success), and write ``markers`` if set, calling ``complete``
    once all are written. One answer is a RafkaError: the fence of an ongoing transaction
    by InitProducerId is persisted and then answered ConcurrentTransactions, as Kafka
    does, so the new producer retries once the abort has completed."""

    metadata: TxnMetadata | None = None
    answer: Any = None
    error: RafkaError | None = None
    markers: Markers | None = None

    def __post_init__(self) -> None:
        if self.error is not None and (
            self.metadata is not None or self.answer is not None or self.markers is not None
        ):
            raise ValueError("a refusal persists nothing")
        if self.markers is not None and self.metadata is None:
            raise ValueError("markers follow a persisted Prepare* record")
