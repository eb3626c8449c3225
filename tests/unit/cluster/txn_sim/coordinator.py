"""The transaction coordinator of the simulation's one ``__transaction_state`` shard.

A mirror of the glue of ``rafka.actors.transaction_coordinator.TransactionCoordinator``
(which needs Ray to run); every decision is the real ``rafka.cluster.transaction_state``
function, called with the arguments the actor passes, and every record is encoded and
decoded with the real ``rafka.cluster.transaction_records`` codec:

- ``_decide``: per transactional id, one decision at a time (the actor's per-id lock): decide
  on the id's current metadata, write the record (acks=all, ``cfg.write_ms``), and only then
  apply it, answer, and start writing the markers it calls for. A write can fail (faults on:
  ``cfg.write_failure``); half of the failed writes land anyway (an acks=all write that
  timed out). Either way the caller hears CoordinatorNotAvailable, nothing is applied, and
  the next write claims a new coordinator epoch first, as ``CoordinatorLog`` fences again.
- ``Completion``: the markers of a decided transaction to every partition of it (Kafka's
  WriteTxnMarkers, ``actors/transaction_markers.py``), resent after
  ``cfg.request_timeout_ms`` without an answer; a partition is done when the marker is
  written or refused with one of the actor's own ``_DONE_ERRORS``. Then the transaction is
  complete (``finish``, as the actor's): applied at once, its Complete* record written
  lazily by the next abort timer (the actor's ``_persist_completions``) unless a record of
  the id's next decision supersedes it first; a coordinator that loads the Prepare* record
  writes the markers again and completes. InitProducerId and AddPartitionsToTxn wait (up to
  the actor's COMPLETION_WAIT_S) for a completion under way.
- AddPartitionsToTxn (``on_add``) comes from the partitions' leaders, before a
  transaction's first batch in their partition (transaction version 2; the producers send
  none): the actor's ``add_partitions``. Adds waiting for the same id and producer identity
  when one of them is decided are decided with it, in one record (the actor's
  ``transaction_adds``), and each is answered once that record is written: a leader
  appends only a batch whose partition the coordinator holds durably, so every partition
  written gets its marker.
- Timers: aborts of timed-out transactions every ``cfg.abort_check_ms``, expiry of idle ids
  every ``cfg.expire_check_ms``.
- Failover: an incarnation dies and a new one (a higher coordinator epoch) loads the shard
  after ``cfg.load_ms``, then completes every transaction it finds in Prepare*. While it
  loads, calls are refused CoordinatorNotAvailable, and adds are answered as
  ``cfg.add_while_loading`` says. A write in flight at the death lands or not. A zombie
  (``cfg.zombie_share`` of the deaths) lives on for ``cfg.zombie_ms``: it keeps resending
  its markers, answers what still reaches it (requests sent before the failover) from what
  it holds, and every write it tries fails CoordinatorFenced, which ends its completions.
  Clients reach only the newest incarnation.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from rafka.actors.transaction_adds import partitions_of
from rafka.actors.transaction_coordinator import COMPLETION_WAIT_S
from rafka.actors.transaction_markers import _DONE_ERRORS
from rafka.cluster import transaction_end
from rafka.cluster import transaction_state as txn
from rafka.cluster.transaction_records import decode, encode_key, encode_value
from rafka.cluster.transaction_state import Markers, TxnDecision, TxnMetadata, TxnState
from rafka.errors import (
    CoordinatorFenced,
    CoordinatorNotAvailable,
    RafkaError,
    error_class,
)
from tests.unit.cluster.txn_sim.network import Endpoint

if TYPE_CHECKING:
    from tests.unit.cluster.txn_sim.runner import TxnSimulation

Done = Callable[[Any], None]  # gets the answer, or the RafkaError refusing the call
COMPLETION_WAIT_MS = int(COMPLETION_WAIT_S * 1000)


class TxnStateLog:
    """The shard's partition of ``__transaction_state``: every record that landed, in the
    order it landed, and whether its writer heard so. It outlives every incarnation."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.acked: list[bool] = []

    def append(self, transactional_id: str, meta: TxnMetadata, acked: bool) -> TxnMetadata | None:
        """Land ``meta`` (a tombstone when Dead); returns what a load decodes from it."""
        key = encode_key(transactional_id)
        value = None if meta.state == TxnState.DEAD else encode_value(meta)
        self.records.append((key, value))
        self.acked.append(acked)
        return decode(key, value)[1]

    def load(self) -> dict[str, TxnMetadata]:
        """The newest metadata of every id, as ``LoadedTransactions.replay`` builds it."""
        loaded: dict[str, TxnMetadata] = {}
        for key, value in self.records:
            transactional_id, meta = decode(key, value)
            if meta is None:
                loaded.pop(transactional_id, None)
            else:
                loaded[transactional_id] = meta
        return loaded


class WaitingAdd:
    """One add waiting for its decision (the actor's ``transaction_adds.WaitingAdd``):
    answered by whichever decision takes it, once."""

    __slots__ = ("identity", "partitions", "reply", "answered")

    def __init__(self, identity: tuple[int, int], partitions: list, reply: Done) -> None:
        self.identity = identity
        self.partitions = frozenset((str(t), int(p)) for t, p in partitions)
        self.reply = reply
        self.answered = False

    def answer(self, result: Any) -> None:
        if not self.answered:
            self.answered = True
            self.reply(result)


class Coordinator(Endpoint):
    """One incarnation of the coordinator (see the module docstring)."""

    def __init__(self, sim: "TxnSimulation", number: int) -> None:
        super().__init__()
        self.sim = sim
        self.cfg = sim.cfg
        self.number = number
        self.name = f"coordinator#{number}"
        self.epoch = sim.next_coordinator_epoch()
        self.loaded = False
        self.zombie = False
        self.transactions: dict[str, TxnMetadata] = {}
        self._queues: dict[str, deque] = {}
        self._writing: dict[str, tuple] = {}  # id -> (decision, done, label) being written
        # Completions applied but not written yet (the actor's ``_unpersisted``), by id.
        self._unpersisted: dict[str, TxnMetadata] = {}
        self._adds: dict[str, list[WaitingAdd]] = {}  # by id, in the order they arrived
        self.completions: dict[str, Completion] = {}
        self._marker_requests: dict[int, Completion] = {}

    def __repr__(self) -> str:
        return self.name

    @property
    def serving(self) -> bool:
        """Loaded, and still the shard's owner."""
        return self.loaded and self.up and not self.zombie

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.sim.scheduler.after(self.sim.uniform(*self.cfg.load_ms), self._load)

    def _load(self) -> None:
        if not self.up or self.zombie:
            return
        sim = self.sim
        self.transactions = sim.txn_log.load()
        sim.checker.on_load(self)
        self.loaded = True
        sim.note(f"{self} loaded {len(self.transactions)} id(s) at coordinator epoch "
                 f"{self.epoch}")  # fmt: skip
        for transactional_id, meta in sorted(self.transactions.items()):
            markers = txn.pending_completion(meta)
            if markers is not None:  # decided before the failover: finish it
                sim.stats["completions_after_load"] += 1
                self.complete_soon(transactional_id, markers)
        sim.scheduler.after(self.cfg.abort_check_ms, self._abort_tick)
        sim.scheduler.after(self.cfg.expire_check_ms, self._expire_tick)

    def fail(self, zombie_ms: int | None) -> None:
        """This incarnation dies (or, with ``zombie_ms``, lives on that long as a zombie: it
        resends its markers and answers what still reaches it from what it holds, and every
        write it tries fails)."""
        sim = self.sim
        for transactional_id, (decision, _, _) in sorted(self._writing.items()):
            if sim.rng.random() < 0.5:  # the write in flight lands after all
                sim.faults["state_write_landed_at_death"] += 1
                self._land(transactional_id, decision.metadata, acked=False)
        self._writing.clear()
        self._queues.clear()
        self._adds.clear()  # the calls waiting in the dead process are never answered
        if zombie_ms is None:
            self.up = False
            self.completions.clear()
            return
        self.zombie = True
        sim.scheduler.after(zombie_ms, self._die)

    def _die(self) -> None:
        self.up = False
        self.completions.clear()

    @property
    def idle(self) -> bool:
        """Nothing queued, written or completing, and no transaction under way."""
        return (self.serving and not self._writing and not self.completions
                and not any(self._queues.values())
                and all(m.state in txn.IDLE for m in self.transactions.values()))  # fmt: skip

    # -- deciding ------------------------------------------------------------------------------

    def _decide(self, transactional_id: str, decide: Callable, done: Done,
                label: str | None = None, persist: bool = True) -> None:  # fmt: skip
        """The actor's ``_decide``: queued behind the id's decision in progress. A zombie
        decides on what it holds, and a decision that needs a write fails CoordinatorFenced
        (its log refuses it). ``persist=False`` (a completion only): the metadata is
        applied at once and its record left for ``_persist_completions``."""
        if not self.loaded:
            done(CoordinatorNotAvailable(f"{self} is still loading; retry"))
            return
        self._queues.setdefault(transactional_id, deque()).append((decide, done, label,
                                                                   persist))  # fmt: skip
        if transactional_id not in self._writing:
            self._next(transactional_id)

    def _next(self, transactional_id: str) -> None:
        queue = self._queues.get(transactional_id)
        while queue and self.up:
            decide, done, label, persist = queue.popleft()
            try:
                decision = decide(self.transactions.get(transactional_id))
            except RafkaError as e:  # a decision refused by the transition check
                done(e)
                continue
            if decision is None:
                done(None)
                continue
            if decision.error is not None:
                done(decision.error)
                continue
            if decision.metadata is None:
                done(decision.answer)
                continue
            if not persist:
                self._unpersisted[transactional_id] = decision.metadata
                self._apply(transactional_id, decision.metadata)
                done(decision.answer)
                continue
            if self.zombie:
                done(CoordinatorFenced(f"{self} no longer owns the shard: its write fails"))
                continue
            self._writing[transactional_id] = (decision, done, label)
            self.sim.scheduler.after(self.sim.uniform(*self.cfg.write_ms), self._written,
                                     transactional_id, decision)  # fmt: skip
            return

    def _written(self, transactional_id: str, decision: TxnDecision) -> None:
        writing = self._writing.get(transactional_id)
        if not self.serving or writing is None or writing[0] is not decision:
            return  # this incarnation died meanwhile (``fail`` settled the write)
        del self._writing[transactional_id]
        _, done, label = writing
        sim = self.sim
        if sim.faulty and sim.rng.random() < self.cfg.write_failure:
            landed = sim.rng.random() < 0.5
            sim.faults["state_write_unacked" if landed else "state_write_failed"] += 1
            if landed:
                self._land(transactional_id, decision.metadata, acked=False)
            self.epoch = sim.next_coordinator_epoch()  # the next write fences again
            done(CoordinatorNotAvailable(f"{self} could not write {transactional_id}'s "
                                         "record; retry"))  # fmt: skip
        else:
            meta = decision.metadata
            self._land(transactional_id, meta, acked=True)
            self._unpersisted.pop(transactional_id, None)  # this record supersedes it
            self._apply(transactional_id, meta)
            if label is not None:
                sim.faults[label] += 1
                sim.note(f"{self}: {label.replace('_', ' ')} of {transactional_id}")
            if decision.markers is not None:
                self.complete_soon(transactional_id, decision.markers)
            done(decision.answer)
        self._next(transactional_id)

    def _apply(self, transactional_id: str, meta: TxnMetadata) -> None:
        if meta.state == TxnState.DEAD:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = meta
        self.sim.checker.on_applied(self, transactional_id, meta)

    def _land(self, transactional_id: str, meta: TxnMetadata, acked: bool) -> None:
        loaded = self.sim.txn_log.append(transactional_id, meta, acked)
        self.sim.checker.on_landed(transactional_id, meta, loaded, acked)

    # -- the protocol (answers are (errno, message, *answer), as the actor's) -------------------

    def _answer(self, caller: Endpoint, req: int, width: int) -> Done:
        def done(result: Any) -> None:
            if isinstance(result, RafkaError):
                answer = (result.errno, str(result), *([-1] * width))
            else:
                answer = (0, "", *(tuple(result) if width else ()))
            self.sim.network.reply(self, caller, "coordinator_answer", req, answer)

        return done

    def _after_completion(self, transactional_id: str, then: Callable[[], None]) -> None:
        """The actor's ``_completed``: ``then`` once the id's completion under way is over,
        or after COMPLETION_WAIT_MS."""
        running = self.completions.get(transactional_id)
        if running is None:
            then()
            return
        self.sim.stats["waited_for_completion"] += 1
        fired: list[bool] = []

        def go() -> None:
            if not fired:
                fired.append(True)
                then()

        running.waiters.append(go)
        self.sim.scheduler.after(COMPLETION_WAIT_MS, go)

    def on_init(self, producer: Endpoint, req: int, tid: str, timeout_ms: int) -> None:
        sim = self.sim
        self._after_completion(tid, lambda: self._decide(tid, lambda current: (
            txn.init_producer_id(current, tid, timeout_ms, sim.scheduler.now,
                                 sim.allocate_producer_id, self.cfg.max_timeout_ms, None)
        ), self._answer(producer, req, 2)))  # fmt: skip

    def on_add(self, leader: Endpoint, req: int, tid: str, producer_id: int, epoch: int,
               partitions: list) -> None:  # fmt: skip
        """A leader's AddPartitionsToTxn (the actor's ``add_partitions``): after the id's
        completion under way, decided with the adds of the same identity waiting then."""
        done = self._answer(leader, req, 0)
        if not self.loaded:
            self.sim.stats["adds_while_loading"] += 1
            if self.cfg.add_while_loading == "from_empty_map":
                done(txn.add_partitions(None, producer_id, epoch, [tuple(p) for p in partitions],
                                        self.sim.scheduler.now).error)  # fmt: skip
                return
        mine = WaitingAdd((producer_id, epoch), partitions, done)
        self._adds.setdefault(tid, []).append(mine)
        self._after_completion(tid, lambda: self._decide_adds(tid, mine))

    def _decide_adds(self, tid: str, mine: WaitingAdd) -> None:
        """The actor's ``_decide_adds``: once ``mine`` holds the id's lock, every add of its
        identity waiting then is decided in one decision, and answered with its outcome."""
        if mine.answered:
            return  # an earlier decision took it
        sim = self.sim
        taken: list[WaitingAdd] = []

        def decide(current: TxnMetadata | None) -> TxnDecision | None:
            if mine.answered:
                return None  # an add that held the lock first decided this one too
            taken.extend(self._take_adds(tid, mine.identity))
            if len(taken) > 1:
                sim.stats["adds_decided_together"] += len(taken)
            return txn.add_partitions(current, *mine.identity, partitions_of(taken),
                                      sim.scheduler.now)  # fmt: skip

        def done(result: Any) -> None:
            if taken:
                for add in taken:
                    add.answer(result)
            elif isinstance(result, RafkaError):  # refused before deciding (still loading)
                self._take_adds(tid, mine.identity, only=mine)
                mine.answer(result)

        self._decide(tid, decide, done)

    def _take_adds(self, tid: str, identity: tuple[int, int],
                   only: WaitingAdd | None = None) -> list[WaitingAdd]:  # fmt: skip
        """Remove and return the adds waiting for ``tid`` with ``identity`` (or ``only``)."""
        waiting = self._adds.get(tid, [])
        taken = [a for a in waiting if a.identity == identity and not a.answered
                 and (only is None or a is only)]  # fmt: skip
        rest = [a for a in waiting if a not in taken]
        if rest:
            self._adds[tid] = rest
        else:
            self._adds.pop(tid, None)
        return taken

    def on_end(self, producer: Endpoint, req: int, tid: str, producer_id: int, epoch: int,
               commit: bool) -> None:  # fmt: skip
        sim = self.sim
        self._decide(tid, lambda current: transaction_end.end_txn(
            current, producer_id, epoch, commit, sim.scheduler.now, sim.allocate_producer_id),
            self._answer(producer, req, 2))  # fmt: skip

    # -- completing a decided transaction ------------------------------------------------------

    def complete_soon(self, transactional_id: str, markers: Markers) -> None:
        running = self.completions.get(transactional_id)
        if running is not None:
            return  # the one under way completes the same decision
        completion = Completion(self, transactional_id, markers)
        self.completions[transactional_id] = completion
        completion.round()

    def on_marker_answer(self, req: int, errno: int, message: str) -> None:
        completion = self._marker_requests.pop(req, None)
        if completion is not None and self.completions.get(completion.tid) is completion:
            completion.on_answer(req, errno, message)

    # -- timers --------------------------------------------------------------------------------

    def _for_each(self, decide: Callable, label: str) -> None:
        """The actor's ``_for_each``: a timer's decision for every id it concerns."""
        now = self.sim.scheduler.now
        for transactional_id in list(self.transactions):
            meta = self.transactions.get(transactional_id)
            if meta is None or decide(meta, now) is None:
                continue
            self._decide(transactional_id,
                         lambda current: decide(current, now) if current else None,
                         lambda _: None, label)  # fmt: skip

    def _persist_completions(self) -> None:
        """The actor's: write each completion no later decision has superseded, all at once;
        one whose write fails stays for the next tick."""
        stats = self.sim.stats
        for transactional_id, meta in sorted(self._unpersisted.items()):

            def write(current: TxnMetadata | None, meta: TxnMetadata = meta) -> TxnDecision | None:
                if current is not meta:
                    return None  # replaced meanwhile
                stats["completion_records"] += 1
                return TxnDecision(current)

            def written(result: Any, transactional_id: str = transactional_id,
                        meta: TxnMetadata = meta) -> None:  # fmt: skip
                if isinstance(result, RafkaError):
                    return  # stays for the next tick
                if self._unpersisted.get(transactional_id) is meta:
                    self._unpersisted.pop(transactional_id)  # no longer current

            self._decide(transactional_id, write, written)

    def _abort_tick(self) -> None:
        if not self.serving:
            return
        self._persist_completions()  # first, as the actor's timer loop does
        alloc = self.sim.allocate_producer_id
        self._for_each(lambda meta, now: txn.timed_out(meta, now, alloc), "timeout_abort")
        self.sim.scheduler.after(self.cfg.abort_check_ms, self._abort_tick)

    def _expire_tick(self) -> None:
        if not self.serving:
            return
        expiration = self.cfg.expiration_ms
        self._for_each(lambda meta, now: txn.expired(meta, now, expiration), "expired_id")
        self.sim.scheduler.after(self.cfg.expire_check_ms, self._expire_tick)


class Completion:
    """The markers of one decided transaction, then its completion (its record written
    later: ``Coordinator._persist_completions``)."""

    def __init__(self, coordinator: Coordinator, transactional_id: str, markers: Markers) -> None:
        self.coordinator = coordinator
        self.sim = coordinator.sim
        self.tid = transactional_id
        self.markers = markers
        self.pending: set[tuple[str, int]] = set()
        self.outstanding: dict[tuple[str, int], int] = {}
        self.epoch = -1
        self.waiters: list[Callable[[], None]] = []  # calls waiting for it to be over

    def round(self) -> None:
        """Write every marker (again): the actor's ``markers.write(markers, epoch)``."""
        c = self.coordinator
        if not c.up or c.completions.get(self.tid) is not self:
            return
        self.pending = set(self.markers.partitions)
        self.epoch = c.epoch
        for tp in sorted(self.pending):
            self._send(tp)

    def _send(self, tp: tuple[str, int]) -> None:
        c, sim, m = self.coordinator, self.sim, self.markers
        if not c.up or c.completions.get(self.tid) is not self or tp not in self.pending:
            return
        req = sim.next_id()
        self.outstanding[tp] = req
        c._marker_requests[req] = self
        if c.zombie:
            sim.stats["zombie_markers_sent"] += 1
        partition = sim.partitions[tp[1]]
        if sim.network.send(c, partition, "write_marker", c, req, m.producer_id,
                            m.producer_epoch, m.commit, self.epoch):  # fmt: skip
            sim.scheduler.after(c.cfg.request_timeout_ms, self._timeout, tp, req)
        else:
            sim.scheduler.after(sim.uniform(*c.cfg.backoff_ms), self._send, tp)

    def _timeout(self, tp: tuple[str, int], req: int) -> None:
        if self.outstanding.get(tp) == req and tp in self.pending:
            self.sim.faults["marker_resend"] += 1
            self.coordinator._marker_requests.pop(req, None)
            self._send(tp)

    def on_answer(self, req: int, errno: int, message: str) -> None:
        tp = next((tp for tp, r in self.outstanding.items() if r == req), None)
        if tp is None or tp not in self.pending:
            return
        del self.outstanding[tp]
        error = error_class(errno)(message) if errno else None
        if error is None or isinstance(error, _DONE_ERRORS):
            if error is not None:
                self.sim.stats["marker_not_needed_" + type(error).__name__] += 1
            self.pending.discard(tp)
            if not self.pending:
                self._finish()
            return
        self.sim.stats["marker_retry_" + type(error).__name__] += 1
        self.sim.scheduler.after(self.sim.uniform(*self.coordinator.cfg.backoff_ms), self._send, tp)

    def _finish(self) -> None:
        markers, sim = self.markers, self.sim

        def finish(current: TxnMetadata | None) -> TxnDecision | None:
            if current is None or txn.pending_completion(current) != markers:
                return None  # completed already, or replaced
            return TxnDecision(txn.complete(current, sim.scheduler.now))

        self.coordinator._decide(self.tid, finish, self._finished, persist=False)

    def _finished(self, _: Any) -> None:
        """Completed: applied with nothing to write, so it cannot fail here (the actor's
        retry after COMPLETION_RETRY_S is for markers it gave up on, which the model resends
        until written). A zombie completes in what it holds; its record never lands."""
        c = self.coordinator
        if c.completions.get(self.tid) is not self:
            return
        del c.completions[self.tid]
        for waiter in self.waiters:
            waiter()
