"""TransactionAdmin: the transaction half of ``Admin`` (Kafka's Admin transaction calls of
KIP-664, and kafka-transactions.sh): list and describe transactions at their coordinators,
describe the producers a partition's leader holds, find hanging transactions, abort one.

Where each call goes. Listing asks every transaction coordinator shard at once; describing
asks the coordinator of each id; producers are asked from each partition's leader
(``describe_producers`` of the replica), every request sent before any answer is awaited.

Hanging transactions (Kafka's FindHangingTransactionsCommand). A transaction is open in a
partition from its first batch there until a marker ends it, and meanwhile holds the
partition's last stable offset, so read_committed consumers wait. It hangs when no
coordinator will ever write that marker: its producer's transactional id is gone, or the
id's coordinator record does not hold the partition for that producer id. Only transactions
whose producer has written nothing for longer than ``max_transaction_timeout_ms`` are
considered (a live one ends, or is aborted by its coordinator, within its timeout, which is
at most ``transaction.max.timeout.ms``). A partition the coordinator holds in a Prepare*
state is not hanging either: its marker is due, and aborting it by hand could undo a commit.

Aborting (Kafka's abortTransaction, WriteTxnMarkers from an admin). Kafka's admin writes the
ABORT marker with the producer epoch it is given, and its broker takes such a marker when the
epoch is at or above the producer's there (the rule of transaction versions 0 and 1). rafka's
leaders take a marker only above it (the transaction version 2 rule, see
``rafka.actors.replica_transactions``): one at the epoch is a marker written already. So the
admin writes epoch + 1, the very marker a version-2 coordinator writes when it aborts: it
ends the open transaction and fences that producer's late writes of the old epoch in this
partition. Should the coordinator's own marker for it come later, it carries the same epoch,
is refused as written already, and the coordinator takes it as done; the producer's next
transaction writes with that epoch from sequence 0, which the partition accepts.

Before it writes, the abort checks with the leader that the producer has a transaction open
there at exactly the epoch given, so an abort never bumps the epoch of a producer with no
open transaction. The check and the write are two calls, yet nothing can slip between them:
whatever ends that transaction meanwhile is a marker above its epoch, after which the leader
appends no marker of the admin's epoch (it refuses it, or answers it as one written already
without appending it: either way the abort raises), so it ends that transaction or nothing.

Arguments are checked before anything is sent (TypeError or ValueError saying what was
wrong). Holds no state of its own: as thread-safe as ``_gateway`` and ``_metadata``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

from rafka.cluster.transaction_types import MAX_EPOCH, WITH_PARTITIONS, TxnState
from rafka.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    TransactionalIdNotFound,
    TransactionCoordinatorFenced,
    UnknownTopicOrPartition,
    error_class,
)
from rafka.types import (
    HangingTransaction,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

#: How long one round of answers (from coordinators or partition leaders) may take.
TIMEOUT_S = 30.0
#: How long a leader may wait for an abort marker to reach its in-sync replicas (acks=all).
MARKER_TIMEOUT_MS = 30_000
#: Kafka's ``transaction.max.timeout.ms`` default: no live transaction runs longer.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: The state names ``list_transactions`` filters on (Kafka's).
STATES = tuple(s.value for s in TxnState)
#: The states whose record holds partitions, each of which gets its marker in time.
_HOLDING = frozenset(s.value for s in WITH_PARTITIONS)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# -- argument checks (no I/O) -----------------------------------------------------------------


def _int(value: Any, what: str, least: int) -> int:
    """``value`` as an int >= ``least``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{what} must be {least} or more, got {value}")
    return value


def _topic(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a topic name must be a non-empty string, got {name!r}")
    return name


def _list(value: Any, what: str, check: Callable[[Any], Any]) -> list:
    """``value``, a list of ``what`` (possibly empty), each checked, without repeats."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list, got {value!r} (wrap a single one in a list)")
    return list(dict.fromkeys(check(v) for v in value))


def _state(name: Any) -> str:
    if name not in STATES:
        raise ValueError(f"{name!r} is not a transaction state: give one of {', '.join(STATES)}")
    return name


def _transactional_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"a transactional id must be a non-empty string, got {value!r}")
    return value


# -- decisions (no I/O) -----------------------------------------------------------------------


def description_of(raw: dict[str, Any]) -> TransactionDescription:
    """A coordinator's ``describe_transactions`` entry as a TransactionDescription."""
    return TransactionDescription(
        raw["transactional_id"], raw["producer_id"], raw["producer_epoch"], raw["state"],
        raw["timeout_ms"], sorted(TopicPartition(t, p) for t, p in raw["partitions"]),
        raw["start_ms"], raw["last_update_ms"],
    )  # fmt: skip


def open_transactions(
    producers: Mapping[TopicPartition, list[ProducerState]], now_ms: int,
    max_transaction_timeout_ms: int,
) -> list[tuple[TopicPartition, ProducerState]]:  # fmt: skip
    """The candidates of a hanging-transaction search: each producer with a transaction open
    in a partition whose last write there is more than ``max_transaction_timeout_ms`` old
    (Kafka measures from the last timestamp too), by partition and producer id."""
    return [
        (tp, state)
        for tp in sorted(producers)
        for state in sorted(producers[tp])
        if state.current_transaction_start_offset >= 0
        and now_ms - state.last_timestamp > max_transaction_timeout_ms
    ]


def hanging(
    candidates: list[tuple[TopicPartition, ProducerState]],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
) -> list[HangingTransaction]:
    """Those of ``candidates`` no coordinator will end: their producer id has no
    transactional id (``transactional_ids``: producer id -> id, from listing by producer
    id), or the id's description (None: not found) is of another producer id or does not
    hold the partition in a state that will write its marker (Ongoing or Prepare*)."""
    out = []
    for tp, state in candidates:
        transactional_id = transactional_ids.get(state.producer_id)
        described = None if transactional_id is None else descriptions.get(transactional_id)
        if (
            described is not None and described.producer_id == state.producer_id
            and described.state in _HOLDING and tp in described.partitions
        ):  # fmt: skip
            continue
        out.append(HangingTransaction(
            tp.topic, tp.partition, state.producer_id, state.producer_epoch,
            state.coordinator_epoch, state.current_transaction_start_offset,
            state.last_timestamp,
        ))  # fmt: skip
    return out


class TransactionAdmin:
    """The transaction calls of ``Admin``, a mixin using its ``_gateway`` and ``_metadata``
    (and its ``describe_topic``/``describe_topics`` for the scope of a search)."""

    _gateway: Any
    _metadata: Any
    describe_topic: Callable[..., Any]
    describe_topics: Callable[..., list]
    #: Wall-clock ms; a test puts a fake clock on the instance.
    _clock_ms: Callable[[], int] = staticmethod(_wall_clock_ms)

    # -- coordinators --------------------------------------------------------------------------

    def list_transactions(
        self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
        min_duration_ms: int = -1,
    ) -> list[TransactionListing]:  # fmt: skip
        """Every transactional id of every coordinator shard (all asked at once), sorted by
        id, keeping those whose state is in ``states`` (Kafka's names, see ``STATES``),
        whose producer id is in ``producer_ids`` (None: any) and whose transaction has run
        for at least ``min_duration_ms`` (-1: any, with or without one running)."""
        wanted_states = None if states is None else _list(states, "states", _state)
        wanted_ids = None if producer_ids is None else _list(
            producer_ids, "producer_ids", lambda p: _int(p, "a producer id", 0))
        min_duration_ms = _int(min_duration_ms, "min_duration_ms", -1)
        refs = [self._gateway.send(c, "list_transactions", wanted_states, wanted_ids,
                                   min_duration_ms)
                for c in self._gateway.transaction_coordinators()]  # fmt: skip
        answers = self._gateway.get(refs, TIMEOUT_S, what="a transaction coordinator")
        return sorted(
            TransactionListing(t["transactional_id"], t["producer_id"], t["state"])
            for shard in answers for t in shard
        )  # fmt: skip

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """The coordinator's record of each id (asked of each id's coordinator at once), in
        the order given. Raises TransactionalIdNotFound naming the ids no coordinator has
        (never used, or expired after ``transactional.id.expiration.ms`` idle)."""
        ids = _list(transactional_ids, "transactional_ids", _transactional_id)
        found = self._txn_describe(ids)
        missing = [t for t in ids if found[t] is None]
        if missing:
            raise TransactionalIdNotFound(
                f"no transaction coordinator has transactional id(s) "
                f"{', '.join(map(repr, missing))}: never used, or expired after "
                "transactional.id.expiration.ms idle; `rafka transactions list` shows those "
                "that exist"
            )
        return {t: found[t] for t in ids}

    def _txn_describe(self, ids: list[str]) -> dict[str, TransactionDescription | None]:
        """Each id's description, None for one its coordinator does not have."""
        refs = [self._gateway.send(self._gateway.transaction_coordinator(t),
                                   "describe_transactions", [t]) for t in ids]  # fmt: skip
        answers = self._gateway.get(refs, TIMEOUT_S, what="a transaction coordinator")
        return {t: description_of(a[0]) if a else None for t, a in zip(ids, answers)}

    # -- partition leaders ---------------------------------------------------------------------

    def describe_producers(
        self, topic: str, partitions: Iterable[int] | None = None
    ) -> dict[int, list[ProducerState]]:
        """{partition: the producers its leader holds, by producer id} for ``partitions``
        of ``topic`` (None: all), every leader asked at once. Raises
        UnknownTopicOrPartition for a topic or partition that does not exist, and a
        leader's error (NotLeaderOrFollower, LeaderNotAvailable: retriable) naming the
        partition."""
        topic = _topic(topic)
        wanted = None if partitions is None else _list(
            partitions, "partitions", lambda p: _int(p, "a partition", 0))
        metas = self._txn_topics([topic])
        numbers = range(len(metas[topic])) if wanted is None else wanted
        states = self._txn_producers([TopicPartition(topic, p) for p in numbers], metas)
        return {tp.partition: found for tp, found in states.items()}

    def _txn_topics(self, names: Iterable[str]) -> dict[str, Any]:
        """{name: TopicMetadata} fresh from the controller (never creating a topic);
        UnknownTopicOrPartition for a name that does not exist."""
        names = sorted(set(names))
        counts = self._metadata.partition_counts(names, refresh=True) if names else {}
        for name in names:
            if name not in counts:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return {n: self._metadata.cached(n) or self._metadata.topic(n) for n in names}

    def _txn_leader(self, metas: dict[str, Any], tp: TopicPartition) -> Any:
        meta = metas[tp.topic]
        if tp.partition >= len(meta):
            raise UnknownTopicOrPartition(
                f"topic {tp.topic!r} has no partition {tp.partition}: it has {len(meta)}"
            )
        return self._metadata.replica(meta, tp.partition)

    def _txn_producers(
        self, partitions: list[TopicPartition], metas: dict[str, Any] | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """Each partition's producers from its leader, in one round."""
        if metas is None:
            metas = self._txn_topics(tp.topic for tp in partitions)
        leaders = [self._txn_leader(metas, tp) for tp in partitions]  # all known, then ask
        refs = [self._gateway.send(leader, "describe_producers") for leader in leaders]
        answers = self._gateway.get(refs, TIMEOUT_S, what="a partition leader") if refs else []
        out = {}
        for tp, (errno, message, rows) in zip(partitions, answers):
            if errno:
                raise error_class(errno)(
                    f"describing the producers of {tp.topic}-{tp.partition}: {message}"
                )
            out[tp] = [ProducerState(*row) for row in rows]
        return out

    # -- hanging transactions ------------------------------------------------------------------

    def find_hanging_transactions(
        self, topic: str | None = None, broker_id: int | None = None,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    ) -> list[HangingTransaction]:  # fmt: skip
        """Open transactions no coordinator will end (see the module docstring), in the
        partitions of ``topic`` (None: every topic but the internal ones), of those only
        the partitions with a replica on ``broker_id`` when given; a producer counts only
        once it has written nothing there for more than ``max_transaction_timeout_ms``.
        Sorted by partition and producer id; each can be ended with ``abort_transaction``."""
        if topic is not None:
            topic = _topic(topic)
        if broker_id is not None:
            broker_id = _int(broker_id, "broker_id", 0)
        max_ms = _int(max_transaction_timeout_ms, "max_transaction_timeout_ms", 0)
        described = ([self.describe_topic(topic)] if topic is not None
                     else [d for d in self.describe_topics(None) if not d.internal])  # fmt: skip
        scope = [TopicPartition(d.name, p.partition) for d in described for p in d.partitions
                 if broker_id is None or broker_id in p.replicas]  # fmt: skip
        if not scope:
            return []
        candidates = open_transactions(self._txn_producers(scope), self._clock_ms(), max_ms)
        if not candidates:
            return []
        producer_ids = sorted({state.producer_id for _, state in candidates})
        ids = {t.producer_id: t.transactional_id
               for t in self.list_transactions(producer_ids=producer_ids)}  # fmt: skip
        descriptions = self._txn_describe(sorted(set(ids.values()))) if ids else {}
        return hanging(candidates, ids, descriptions)

    def abort_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:  # fmt: skip
        """End the transaction ``producer_id`` has open in ``topic``-``partition`` with an
        ABORT marker written by its leader (acks=all): its records there become aborted and
        the last stable offset moves past them. Give the producer epoch and coordinator
        epoch ``describe_producers`` (or ``find_hanging_transactions``) reports; the marker
        carries ``producer_epoch + 1`` (see the module docstring) and ``coordinator_epoch``
        (a larger one than reported would fence the coordinator's own later markers for
        this producer here). For a hanging transaction only: aborting a live one in one of
        its partitions loses its records there even if its producer then commits.

        Raises, changing nothing: InvalidTxnState when the producer has no transaction open
        there (or it ended meanwhile), InvalidProducerEpoch when its epoch there is not
        ``producer_epoch`` (or the transaction ended meanwhile), TransactionCoordinatorFenced
        when its markers carried a larger coordinator epoch, UnknownTopicOrPartition, or the
        leader's error."""
        tp = TopicPartition(_topic(topic), _int(partition, "partition", 0))
        producer_id = _int(producer_id, "producer_id", 0)
        producer_epoch = _int(producer_epoch, "producer_epoch", 0)
        if producer_epoch >= MAX_EPOCH:
            raise ValueError(f"producer_epoch {producer_epoch} is above the epochs producers "
                             f"get (at most {MAX_EPOCH - 1})")  # fmt: skip
        coordinator_epoch = _int(coordinator_epoch, "coordinator_epoch", -1)
        metas = self._txn_topics([tp.topic])
        leader = self._txn_leader(metas, tp)
        found = {s.producer_id: s for s in self._txn_producers([tp], metas)[tp]}
        state = found.get(producer_id)
        where = f"{tp.topic}-{tp.partition}"
        if state is None or state.current_transaction_start_offset < 0:
            raise InvalidTxnState(
                f"producer {producer_id} has no open transaction in {where}: nothing to "
                f"abort; `rafka transactions describe-producers --topic {tp.topic}` lists "
                "the open ones"
            )
        if state.producer_epoch != producer_epoch:
            raise InvalidProducerEpoch(
                f"producer {producer_id} has epoch {state.producer_epoch} in {where}, not "
                f"{producer_epoch}: give the epoch describe-producers reports"
            )
        if coordinator_epoch < state.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"coordinator epoch {coordinator_epoch} is below {state.coordinator_epoch}, "
                f"the one producer {producer_id}'s markers in {where} carried: give the "
                "coordinator epoch describe-producers reports"
            )
        ref = self._gateway.send(leader, "write_marker", producer_id, producer_epoch + 1, False,
                                 coordinator_epoch, MARKER_TIMEOUT_MS)  # fmt: skip
        errno, message, offset = self._gateway.get(
            ref, MARKER_TIMEOUT_MS / 1000 + TIMEOUT_S, what=f"the leader of {where}"
        )
        if errno:
            raise error_class(errno)(
                f"aborting the transaction of producer {producer_id} (epoch {producer_epoch}) "
                f"in {where} was refused: {message}"
            )
        if offset < 0:  # a marker of that epoch was in already: nothing was appended
            raise InvalidTxnState(
                f"the transaction of producer {producer_id} in {where} ended before the "
                "abort marker was written (its coordinator's marker came first); nothing "
                "was written"
            )
