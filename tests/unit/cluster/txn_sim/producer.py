"""Transactional producers, after ``rafka.clients.producer_transactions`` (which blocks a
thread per call, so it is mirrored here as events) with the real client state machine
``rafka.clients.transaction_manager.TransactionState`` deciding what each answer makes of
the producer.

A producer inits its transactional id, then runs transactions: each sends its batches to its
partitions in parallel, one at a time per partition (acks=all), and once every write is
answered commits (``commit_share``) or aborts. It asks the coordinator nothing before a
partition's first batch (transaction version 2, ``TransactionalMixin._in_transaction``):
the partition's leader adds the partition to the transaction before appending that batch. A
transaction that sent a batch is ``started``, so it ends with EndTxn; one that sent nothing
ends without asking the coordinator. Calls and batches are resent after
``request_timeout_ms`` without an answer (a batch with its sequence unchanged) and after
retriable errors, until ``max_block_ms`` (a call: RequestTimedOut, after which only the same
call is made again) or ``delivery_timeout_ms`` (a batch: failed, the transaction abortable).
The answer of an earlier attempt is ignored once the call was resent. A failed batch of an
epoch that already ended does not touch the transaction (``_write_failed``). Offsets sent to
a transaction (the one partition the producer adds itself) are left out.

A slot is one transactional id. A ``fresh`` slot has one producer for the whole run: it may
stall, never dies and is never replaced, so nothing may fence it. A shared slot's producer
may die (its messages in flight still arrive) and be followed by a new one after
``cfg.respawn_ms``, or be replaced while it runs: the old one, a zombie, goes on until an
answer fences it.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Callable

from rafka.clients.transaction_manager import TransactionState, TxnClientState
from rafka.errors import (
    BrokerNotAvailable,
    ProducerFenced,
    RafkaError,
    RequestTimedOut,
    error_class,
)
from rafka.storage import record_batch as rb
from tests.unit.cluster.txn_sim.network import Endpoint

if TYPE_CHECKING:
    from tests.unit.cluster.txn_sim.runner import TxnSimulation

_S = TxnClientState
VALUE = struct.Struct(">Q")  # a record's value: its id, unique in the run


class Slot:
    """A transactional id and the producers that used it, oldest first."""

    def __init__(self, transactional_id: str, fresh: bool) -> None:
        self.transactional_id = transactional_id
        self.fresh = fresh
        self.producers: list[Producer] = []

    def __repr__(self) -> str:
        return self.transactional_id

    @property
    def current(self) -> "Producer | None":
        return self.producers[-1] if self.producers else None


class _Call:
    """A coordinator call under way: ``req`` is its attempt in flight (None between)."""

    __slots__ = ("method", "args", "on_ok", "on_error", "started", "req")

    def __init__(self, method: str, args: tuple, on_ok: Callable, on_error: Callable,
                 started: int) -> None:  # fmt: skip
        self.method, self.args, self.on_ok, self.on_error = method, args, on_ok, on_error
        self.started = started
        self.req: int | None = None


class _Send:
    """A batch under way to partition ``p``, resent unchanged until answered or failed."""

    __slots__ = ("p", "batch", "rids", "epoch", "started", "req")

    def __init__(self, p: int, batch: bytes, rids: tuple[int, ...], epoch: int,
                 started: int) -> None:  # fmt: skip
        self.p, self.batch, self.rids, self.epoch, self.started = p, batch, rids, epoch, started
        self.req: int | None = None

    def __repr__(self) -> str:
        return f"batch{list(self.rids)} to p{self.p}"


class Producer(Endpoint):
    """One producer of a slot's transactional id (see the module docstring)."""

    def __init__(self, sim: "TxnSimulation", slot: Slot, number: int) -> None:
        super().__init__()
        self.sim = sim
        self.cfg = sim.cfg
        self.slot = slot
        self.tid = slot.transactional_id
        self.fresh = slot.fresh
        self.name = f"{self.tid}#{number}"
        self.txn = TransactionState(self.tid, self.cfg.transaction_timeout_ms)
        self.stopping = False  # healing: no new transaction
        self.call: _Call | None = None
        self.sends: dict[int, _Send] = {}
        self.plan: list[tuple[int, tuple[int, ...]]] = []  # (partition, record ids) to send
        self.sequences: dict[int, int] = {}
        self.key: tuple[int, int] | None = None  # (producer id, epoch) of the transaction
        self._step_due = False

    def __repr__(self) -> str:
        return self.name

    @property
    def idle(self) -> bool:
        """Done for good (dead, fenced) or, while healing, between transactions."""
        if not self.up or self.txn.state is _S.FATAL:
            return True
        return (self.stopping and self.txn.state is _S.READY and self.call is None
                and not self.sends)  # fmt: skip

    def start(self) -> None:
        self._later(0, self._step)

    def die(self) -> None:
        self.up = False

    # -- pacing --------------------------------------------------------------------------------

    def _later(self, delay: int, action: Callable, *args: Any) -> None:
        """Run ``action`` after ``delay`` ms of this producer's time (a stall delays it)."""
        self.sim.scheduler.after(delay, self._run, action, args)

    def _run(self, action: Callable, args: tuple) -> None:
        if not self.up:
            return
        now = self.sim.scheduler.now
        if self.stalled_until > now:
            self.sim.scheduler.at(self.stalled_until, self._run, action, args)
            return
        action(*args)

    def _schedule_step(self, delay: int = 0) -> None:
        if not self._step_due:
            self._step_due = True
            self._later(delay, self._due_step)

    def _due_step(self) -> None:
        self._step_due = False
        self._step()

    # -- what to do next -----------------------------------------------------------------------

    def _step(self) -> None:
        """The next batch of every partition with none in flight, while the transaction
        runs; otherwise the next call, once nothing is waiting for an answer."""
        if not self.up or self.call is not None:
            return
        txn, sim = self.txn, self.sim
        state = txn.state
        if state is _S.IN_TRANSACTION and self.plan:
            self._next_writes()
        if self.sends:
            return
        if state is _S.FATAL:
            return
        if state is _S.UNINITIALIZED:
            self._call("init", (self.tid, self.cfg.transaction_timeout_ms), self._initialised,
                       self._init_failed)  # fmt: skip
        elif state is _S.READY:
            if not self.stopping:
                self._begin()
        elif state is _S.IN_TRANSACTION:  # every write answered
            if sim.rng.random() < self.cfg.commit_share:
                txn.check_can_commit()
                txn.move(_S.COMMITTING)
                self._end(True)
            else:
                self._abort()
        elif state is _S.COMMITTING:
            self._end(True)  # only the commit may be made again
        elif state in (_S.ABORTABLE, _S.ABORTING):
            self._abort()

    def _initialised(self, answer: list) -> None:
        self._take_identity(*answer)
        self.txn.move(_S.READY)
        self._schedule_step(self.sim.uniform(*self.cfg.think_ms))

    def _init_failed(self, error: RafkaError) -> None:
        if not isinstance(error, RequestTimedOut):
            self._failed(error)
        self._schedule_step(self.sim.uniform(*self.cfg.backoff_ms))  # init again

    def _take_identity(self, producer_id: int, epoch: int) -> None:
        self.txn.producer_id, self.txn.epoch = producer_id, epoch
        self.sequences.clear()  # every partition starts the new epoch at sequence 0

    def _begin(self) -> None:
        txn, sim, cfg = self.txn, self.sim, self.cfg
        txn.check_can_begin()
        txn.clear_partitions()
        txn.move(_S.IN_TRANSACTION)
        self.key = (txn.producer_id, txn.epoch)
        chosen = sim.rng.sample(range(len(sim.partitions)),
                                sim.uniform(1, len(sim.partitions)))  # fmt: skip
        if cfg.empty_share and sim.rng.random() < cfg.empty_share:
            chosen = []
            sim.stats["empty_transactions"] += 1
        self.plan = []
        for p in chosen:
            for _ in range(sim.uniform(*cfg.batches)):
                rids = tuple(sim.next_rid() for _ in range(sim.uniform(*cfg.records)))
                self.plan.append((p, rids))
        sim.stats["transactions_begun"] += 1
        sim.note(f"{self} begins {self.key} over {sorted(chosen)}")
        self._step()

    def _next_writes(self) -> None:
        """The first planned batch of each partition with none in flight, each queued as
        ``TransactionalMixin._in_transaction`` does: the partition is only noted (its leader
        adds it at the coordinator), and the transaction counts as started, so it ends with
        EndTxn even if every write fails. The partitions' first batches go out together, so
        their leaders' adds reach the coordinator together."""
        txn, busy, due = self.txn, set(self.sends), []
        for item in self.plan:
            if item[0] not in busy:
                busy.add(item[0])
                due.append(item)
        for item in due:
            self.plan.remove(item)
        for p, rids in due:
            txn.check_can_send()
            txn.sent_to(self.cfg.topic, p)
            self._produce(p, rids)

    def _end(self, commit: bool) -> None:
        if not self.txn.started:  # nothing was sent: ended here, as the client does
            self.txn.clear_partitions()
            self.txn.move(_S.READY)
            self._schedule_step(self.sim.uniform(*self.cfg.think_ms))
            return
        self._call("end", (self.tid, *self.key, commit), lambda answer: self._ended(commit, answer),
                   lambda error: self._end_failed(commit, error))  # fmt: skip

    def _ended(self, commit: bool, answer: list) -> None:
        self.sim.checker.on_end_answered(self, self.key, commit)
        self._take_identity(*answer)
        self.txn.clear_partitions()
        self.txn.move(_S.READY)
        self._schedule_step(self.sim.uniform(*self.cfg.think_ms))

    def _end_failed(self, commit: bool, error: RafkaError) -> None:
        if not isinstance(error, RequestTimedOut):  # outcome unknown: the same call again
            self._failed(error)
        self._schedule_step(self.sim.uniform(*self.cfg.backoff_ms))

    def _abort(self) -> None:
        txn = self.txn
        txn.check_can_abort()
        if txn.state is not _S.ABORTING:
            txn.move(_S.ABORTING)
            self.plan = []  # the records not sent yet are dropped
        self._end(False)

    def _failed(self, error: RafkaError) -> None:
        self.txn.failed(error)
        if self.txn.state is _S.FATAL:
            self.sim.stats["producers_fenced"] += 1
            self.sim.note(f"{self} is fenced for good: {type(error).__name__}")
            self.sim.checker.on_fatal(self, error)

    # -- coordinator calls ---------------------------------------------------------------------

    def _call(self, method: str, args: tuple, on_ok: Callable, on_error: Callable) -> None:
        self.call = _Call(method, args, on_ok, on_error, self.sim.scheduler.now)
        self._send_call()

    def _send_call(self) -> None:
        call, sim = self.call, self.sim
        if call is None or not self.up:
            return
        call.req = sim.next_id()
        if sim.network.send(self, sim.coordinator_now(), call.method, self, call.req, *call.args):
            self._later(self.cfg.request_timeout_ms, self._call_timeout, call.req)
        else:
            self._call_refused(call, BrokerNotAvailable("no transaction coordinator is running"))

    def _call_timeout(self, req: int) -> None:
        call = self.call
        if call is not None and call.req == req:
            self.sim.faults["resend_call"] += 1
            self._call_refused(call, None)

    def on_coordinator_answer(self, req: int, answer: tuple) -> None:
        call = self.call
        if call is None or call.req != req:
            self.sim.stats["stale_answers"] += 1
            return
        errno, message, *rest = answer
        if errno == 0:
            self.call = None
            call.on_ok(rest)
            return
        self._call_refused(call, error_class(errno)(message))

    def _call_refused(self, call: _Call, error: RafkaError | None) -> None:
        """``error`` None: no answer in time. Retriable: again (after a pause) until
        ``max_block_ms``, then RequestTimedOut."""
        sim = self.sim
        call.req = None
        if error is not None:
            self._saw(error)
        if error is not None and not error.retriable:
            self.call = None
            call.on_error(error)
            return
        if sim.scheduler.now - call.started >= self.cfg.max_block_ms:
            self.call = None
            sim.faults["call_timed_out"] += 1
            call.on_error(RequestTimedOut(f"{call.method} did not succeed within max_block_ms"))
            return
        self._later(sim.uniform(*self.cfg.backoff_ms) if error is not None else 0,
                    self._send_call)  # fmt: skip

    def _saw(self, error: RafkaError) -> None:
        if isinstance(error, ProducerFenced):
            self.sim.stats["fenced_answers"] += 1
            self.sim.checker.on_fenced_answer(self, error)

    # -- batches -------------------------------------------------------------------------------

    def _produce(self, p: int, rids: tuple[int, ...]) -> None:
        sim, txn = self.sim, self.txn
        sequence = self.sequences.get(p, 0)
        self.sequences[p] = sequence + len(rids)
        batch = rb.encode_batch(
            [VALUE.pack(r) for r in rids], None, sim.base_ms + sim.scheduler.now,
            producer_id=txn.producer_id, producer_epoch=txn.epoch, base_sequence=sequence,
            is_transactional=True,
        )  # fmt: skip
        send = _Send(p, batch, rids, txn.epoch, sim.scheduler.now)
        self.sends[p] = send
        sim.checker.on_send(self, self.key, p, rids)
        self._send_batch(send)

    def _send_batch(self, send: _Send) -> None:
        sim = self.sim
        if not self.up or self.sends.get(send.p) is not send:
            return
        send.req = sim.next_id()
        partition = sim.partitions[send.p]
        if sim.network.send(self, partition, "produce", self, send.req, send.batch, self.tid):
            self._later(self.cfg.request_timeout_ms, self._batch_timeout, send, send.req)
        else:
            self._batch_refused(send, BrokerNotAvailable(f"{partition} is down"))

    def _batch_timeout(self, send: _Send, req: int) -> None:
        if self.sends.get(send.p) is send and send.req == req:
            self.sim.faults["resend_batch"] += 1
            self._batch_refused(send, None)

    def on_produce_answer(self, req: int, errno: int, message: str, offset: int) -> None:
        send = next((s for s in self.sends.values() if s.req == req), None)
        if send is None:
            self.sim.stats["stale_answers"] += 1
            return
        if errno == 0:
            del self.sends[send.p]
            self.sim.checker.on_produce_answered(self, send.p, offset, send.rids)
            self._step()
            return
        self._batch_refused(send, error_class(errno)(message))

    def _batch_refused(self, send: _Send, error: RafkaError | None) -> None:
        sim = self.sim
        send.req = None
        if error is not None:
            self._saw(error)
        out_of_time = sim.scheduler.now - send.started >= self.cfg.delivery_timeout_ms
        if (error is None or error.retriable) and not out_of_time:
            self._later(sim.uniform(*self.cfg.backoff_ms) if error is not None else 0,
                        self._send_batch, send)  # fmt: skip
            return
        del self.sends[send.p]
        sim.stats["batches_failed"] += 1
        self._write_failed(send, error or RequestTimedOut("delivery_timeout_ms passed"))
        self._step()

    def _write_failed(self, send: _Send, error: RafkaError) -> None:
        """``TransactionalMixin._write_failed``: the transaction must abort, unless the
        batch belongs to an epoch already ended."""
        if send.epoch in (self.txn.epoch, rb.NO_PRODUCER_EPOCH):
            self._failed(error)
