"""TransactionCoordinator: one actor per partition of ``__transaction_state``, serving the
transactional ids that hash to it (``rafka.cluster.transaction_records.shard_of``).

A thin shell over ``rafka.cluster.transaction_state``, which decides every call. Each id's
calls are serialized by a lock of their own: a decision is taken on the id's current
metadata, its record is written (acks=all, ``TransactionLog``), and only then is the caller
answered and the metadata replaced, so an answer never gets ahead of the log. A Prepare*
record is the commit point: once it is durable the markers are written to every partition of
the transaction (``TransactionMarkers``), and then the transaction is complete (its Complete*
record is written lazily: see ``_complete``). After a restart or a move the coordinator loads
its partition and finishes every transaction it finds prepared. With transaction version 2
the partitions' leaders add their partitions (``add_partitions``), and adds that wait at the
same time are decided and written together (``transaction_adds``).

Timers (Kafka's): every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``
transactions past their timeout are aborted with an epoch bump; every
``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle past
``transactional.id.expiration.ms`` are removed. Answers are tuples starting with
(errno, message), errno 0 on success, as every rafka actor answers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import ray

from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.transaction_adds import WaitingAdd, WaitingAdds, partitions_of, resolve
from rafka.actors.transaction_log import TransactionLog
from rafka.actors.transaction_markers import TransactionMarkers
from rafka.cluster import transaction_end
from rafka.cluster import transaction_state as txn
from rafka.cluster.settings import setting
from rafka.cluster.transaction_records import encode_key, encode_value
from rafka.cluster.transaction_state import TxnDecision, TxnMetadata, TxnState
from rafka.errors import (
    CoordinatorFenced,
    CoordinatorLoadInProgress,
    CoordinatorNotAvailable,
    RafkaError,
)

#: How often the timers look whether a cleanup interval has passed, s.
TICK_S = 0.5
#: Pause before a failed completion (markers) is tried again, s.
COMPLETION_RETRY_S = 0.5
#: How long a call that needs the previous transaction completed waits for it here before
#: it is answered ConcurrentTransactions (the client then retries), s.
COMPLETION_WAIT_S = 1.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _as_rafka_error(error: BaseException) -> RafkaError:
    """What a waiting add is answered when its decision failed: a RafkaError as it is, any
    other failure (a cancellation too) as a retriable CoordinatorNotAvailable."""
    if isinstance(error, RafkaError):
        return error
    return CoordinatorNotAvailable(
        f"the transaction coordinator could not decide ({error!r}); retry"
    )


class TransactionCoordinator:
    def __init__(self, namespace: str, shard: int, settings: dict[str, Any]) -> None:
        self.logger = actor_logger(__name__, "TransactionCoordinator", shard=shard)
        label_process_logs(self.logger.prefix)  # this process is this coordinator
        self.namespace = namespace
        self.shard = shard
        self.settings = dict(settings)
        commit_timeout_s = setting(self.settings, "offsets.commit.timeout.ms") / 1000
        self.log = TransactionLog(namespace, shard, commit_timeout_s, self.logger)
        self.markers = TransactionMarkers(namespace, self.log.controller_call, self.logger)
        self.max_timeout_ms = setting(self.settings, "transaction.max.timeout.ms")
        self.expiration_ms = setting(self.settings, "transactional.id.expiration.ms")
        self.transactions: dict[str, TxnMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completions: dict[str, asyncio.Task] = {}
        self._adds = WaitingAdds()  # adds waiting to be decided together
        # Completions applied but not yet written (see _complete), by transactional id.
        self._unpersisted: dict[str, TxnMetadata] = {}
        self._producer_ids: list[int] = []  # allocated by the controller, not yet handed out
        self._loaded: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._loaded is None:
            self._loaded = asyncio.Event()
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._run()), self.log.start()]

    async def ready(self) -> dict[str, Any]:
        """Returns once the shard's transactions are loaded."""
        self._start()
        await self._loaded.wait()
        return {"shard": self.shard, "transactions": len(self.transactions)}

    async def _run(self) -> None:
        while True:
            try:
                loaded = await self.log.load()
                break
            except Exception:  # not retriable by itself (a corrupt record?): log, try again
                self.logger.exception("loading its transactions failed")
                await asyncio.sleep(1.0)
        self.transactions = dict(loaded.transactions)
        for transactional_id, meta in self.transactions.items():
            markers = txn.pending_completion(meta)
            if markers is not None:  # decided before the move: finish it
                self._complete_soon(transactional_id, markers)
        self.logger.info("loaded %d transactional id(s)", len(self.transactions))
        self._loaded.set()
        abort_every = setting(
            self.settings, "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ) / 1000
        expire_every = setting(
            self.settings, "transaction.remove.expired.transaction.cleanup.interval.ms"
        ) / 1000
        last_abort = last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(min(TICK_S, abort_every))
            await self._persist_completions()
            now = time.monotonic()
            if now - last_abort >= abort_every:
                last_abort = now
                await self._for_each(lambda meta, now_ms: txn.timed_out(
                    meta, now_ms, self._take_producer_id), "abort after its timeout")
            if now - last_expiry >= expire_every:
                last_expiry = now
                await self._for_each(lambda meta, now_ms: txn.expired(
                    meta, now_ms, self.expiration_ms), "expire")

    async def _persist_completions(self) -> None:
        """Write the Complete* records no later decision has superseded (see ``_complete``),
        all at once (the log writes them together); one that fails stays for the next tick."""

        async def persist(transactional_id: str, meta: TxnMetadata) -> None:
            try:
                await self._decide(transactional_id, lambda current: (
                    TxnDecision(current) if current is meta else None))  # fmt: skip
            except RafkaError as e:
                self.logger.warning("%s: could not persist its completion: %s",
                                    transactional_id, e)  # fmt: skip
                return
            if self._unpersisted.get(transactional_id) is meta:
                self._unpersisted.pop(transactional_id)  # no longer current: nothing to write

        await asyncio.gather(*(persist(t, m) for t, m in list(self._unpersisted.items())))

    async def _for_each(self, decide: Callable, what: str) -> None:
        """Apply a timer's decision to every id it concerns (a failure is logged; the next
        round tries again)."""
        for transactional_id in list(self.transactions):
            meta = self.transactions.get(transactional_id)
            if meta is None or decide(meta, _now_ms()) is None:
                continue
            try:
                await self._ensure_producer_id()
                await self._decide(
                    transactional_id,
                    lambda current: decide(current, _now_ms()) if current else None,
                )
                self.logger.info("%s: %s", transactional_id, what)
            except RafkaError as e:
                self.logger.warning("%s: could not %s: %s", transactional_id, what, e)

    # -- deciding ------------------------------------------------------------------------------

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _decide(
        self, transactional_id: str, decide: Callable[[TxnMetadata | None], TxnDecision | None],
        persist: bool = True,
    ) -> Any:  # fmt: skip
        """Decide on the id's current metadata, persist what was decided, then answer (a
        refusal raises). Markers decided are written in the background. ``persist=False``
        (a completion only) applies the metadata now and leaves its record for later."""
        if self._loaded is None or not self._loaded.is_set():
            raise CoordinatorNotAvailable(
                f"transaction coordinator {self.shard} is still loading; retry"
            )
        async with self._lock(transactional_id):
            decision = decide(self.transactions.get(transactional_id))
            if decision is None:
                return None
            if decision.error is not None:
                raise decision.error
            meta = decision.metadata
            if meta is not None:
                if persist:
                    await self.log.write([(encode_key(transactional_id), encode_value(meta))])
                    self._unpersisted.pop(transactional_id, None)  # this record supersedes it
                else:
                    self._unpersisted[transactional_id] = meta
                if meta.state == TxnState.DEAD:
                    self.transactions.pop(transactional_id, None)
                else:
                    self.transactions[transactional_id] = meta
            if decision.markers is not None:
                self._complete_soon(transactional_id, decision.markers)
        if isinstance(decision.answer, RafkaError):
            raise decision.answer
        return decision.answer

    async def _ensure_producer_id(self) -> None:
        """Keep one producer id in hand: the decisions are synchronous and may need one."""
        if not self._producer_ids:
            producer_id, _ = await self.log.controller_call("allocate_producer_id")
            self._producer_ids.append(producer_id)

    def _take_producer_id(self) -> int:
        if not self._producer_ids:
            raise CoordinatorNotAvailable("no producer id in hand; retry")
        return self._producer_ids.pop()

    # -- completing a decided transaction ------------------------------------------------------

    def _complete_soon(self, transactional_id: str, markers: txn.Markers) -> None:
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            return  # the one under way completes the same decision
        task = asyncio.get_running_loop().create_task(self._complete(transactional_id, markers))
        self._completions[transactional_id] = task

    async def _complete(self, transactional_id: str, markers: txn.Markers) -> None:
        """Write the markers to every partition, then complete the transaction; retried
        until done (or a later decision has replaced this one).

        The Complete* record is written later (``_persist_completions``), unless a record of
        the id's next decision supersedes it first: the Prepare* record and the markers
        already imply it (a coordinator that loads Prepare* writes the markers again, which
        the partitions answer as written, and completes), and every record holds the id's
        whole metadata. So a producer that goes straight on to its next transaction waits
        for the markers, not for one more write, and costs one write fewer."""
        while True:
            try:
                await self.markers.write(markers, self.log.fencing.epoch or 0)

                def finish(current: TxnMetadata | None) -> TxnDecision | None:
                    if current is None or txn.pending_completion(current) != markers:
                        return None  # completed already, or replaced
                    return TxnDecision(txn.complete(current, _now_ms()))

                await self._decide(transactional_id, finish, persist=False)
                return
            except CoordinatorFenced:
                # A later incarnation owns the shard now and completes it.
                self.logger.warning("%s: fenced; leaving the completion to the coordinator "
                                    "that owns the shard now", transactional_id)  # fmt: skip
                return
            except Exception as e:  # noqa: BLE001 - retried until done or fenced
                self.logger.warning("%s: completing the %s failed (%r); retrying",
                                    transactional_id, "commit" if markers.commit else "abort",
                                    e)  # fmt: skip
                await asyncio.sleep(COMPLETION_RETRY_S)

    async def _completed(self, transactional_id: str) -> None:
        """Wait (up to COMPLETION_WAIT_S) for the id's previous transaction to complete:
        a producer's next transaction begins right after its commit is answered, while the
        markers are still being written, and would otherwise be answered
        ConcurrentTransactions and sleep before it retries."""
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            try:
                await asyncio.wait_for(asyncio.shield(running), COMPLETION_WAIT_S)
            except Exception:  # noqa: BLE001 - late or failed: answered ConcurrentTransactions
                pass

    # -- the protocol --------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> tuple:
        """(errno, message, producer id, epoch): InitProducerId."""
        try:
            await self._completed(transactional_id)
            await self._ensure_producer_id()
            answer = await self._decide(transactional_id, lambda current: txn.init_producer_id(
                current, transactional_id, timeout_ms, _now_ms(), self._take_producer_id,
                self.max_timeout_ms, tuple(expected) if expected is not None else None,
            ))  # fmt: skip
            return (0, "", answer[0], answer[1])
        except RafkaError as e:
            return (e.errno, str(e), -1, -1)

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list
    ) -> tuple:
        """(errno, message): AddPartitionsToTxn of (topic, partition) pairs, from the
        producer (its offsets partition) or from a partition's leader before the
        transaction's first write there. Answered once the partitions are in the log; adds
        waiting together are decided together (``transaction_adds``)."""
        mine = self._adds.join(transactional_id, (producer_id, epoch), partitions)
        try:
            await self._completed(transactional_id)
            await asyncio.sleep(0)  # let adds that arrived with this one queue up
            if not mine.done.done():
                await self._decide_adds(transactional_id, mine)
            await mine.done
            return (0, "")
        except RafkaError as e:
            return (e.errno, str(e))
        finally:
            self._adds.leave(transactional_id, mine)

    async def _decide_adds(self, transactional_id: str, mine: WaitingAdd) -> None:
        """Decide ``mine`` with every add of its identity waiting now, in one record."""
        taken: list[WaitingAdd] = []

        def decide(current: TxnMetadata | None) -> TxnDecision | None:
            if mine.done.done():
                return None  # an add that took the lock first decided this one too
            taken.extend(self._adds.take(transactional_id, mine.identity))
            return txn.add_partitions(current, *mine.identity, partitions_of(taken), _now_ms())

        try:
            await self._decide(transactional_id, decide)
        except BaseException as e:
            # Every other add taken is answered, whatever ended the decision (even a
            # cancellation): they wait for this call, and nothing else would answer them.
            error = _as_rafka_error(e)
            resolve([a for a in taken if a is not mine], error)
            if isinstance(e, Exception):
                raise error from e
            raise
        resolve(taken, None)

    async def verify_partition(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> tuple:
        """(errno, message): does this producer's transaction already hold the partition?
        Asked by a group coordinator before offsets are committed inside a transaction (the
        producer added the offsets partition itself; data partitions are added by their
        leaders, ``add_partitions``). While the shard loads the answer is
        CoordinatorLoadInProgress (retriable), never a verdict."""
        if self._loaded is None or not self._loaded.is_set():
            error = CoordinatorLoadInProgress(
                f"transaction coordinator {self.shard} is loading; retry"
            )
            return (error.errno, str(error))
        error = txn.verify_partition(self.transactions.get(transactional_id), producer_id,
                                     epoch, (topic, partition))  # fmt: skip
        return (0, "") if error is None else (error.errno, str(error))

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
        bump_epoch: bool = True,
    ) -> tuple:  # fmt: skip
        """(errno, message, producer id, epoch): EndTxn; answered once the Prepare* record is
        durable, with the identity the producer goes on with: the bumped epoch, or the same
        one with ``bump_epoch=False`` (a Kafka client of transaction version 1)."""
        try:
            await self._ensure_producer_id()
            answer = await self._decide(transactional_id, lambda current: transaction_end.end_txn(
                current, producer_id, epoch, commit, _now_ms(), self._take_producer_id,
                bump_epoch))  # fmt: skip
            return (0, "", answer[0], answer[1])
        except RafkaError as e:
            return (e.errno, str(e), -1, -1)

    # -- admin (KIP-664) -----------------------------------------------------------------------

    async def describe_transactions(self, transactional_ids: list[str]) -> list[dict]:
        await self.ready()
        return [txn.describe(self.transactions[t]) for t in transactional_ids
                if t in self.transactions]  # fmt: skip

    async def list_transactions(
        self, states: list[str] | None = None, producer_ids: list[int] | None = None,
        min_duration_ms: int = -1,
    ) -> list[dict]:  # fmt: skip
        await self.ready()
        return txn.list_transactions(self.transactions.values(), _now_ms(), states,
                                     producer_ids, min_duration_ms)  # fmt: skip
