"""A partition's leader: a real ``rafka.storage.log.Log`` in a directory of its own, and the
real ``rafka.actors.replica_transactions.TransactionHandler`` making the leader's
transactional decisions on it: ``write_marker`` (a marker must be above the producer's epoch
in this log; an equal one with nothing open is a retry already written) and
``check_transactional`` (transaction version 2: before a transactional batch opens a
transaction here, the leader adds the partition to it at the coordinator,
``TransactionVerifier.add_partition``).

The handler is the actor's own code, run outside Ray on a stand-in for ``PartitionReplica``
(``ReplicaShell``: one replica, so the high watermark is the log end and nothing waits for
followers). Its coroutines are driven by hand: ``write_marker`` never suspends here, and the
add ``check_transactional`` awaits is an ``Ask`` that suspends the coroutine while the
question goes to the coordinator as an AddPartitionsToTxn over the simulated network, until
the coordinator's answer comes back (given once the add is in ``__transaction_state``) or
``cfg.request_timeout_ms`` passes (CoordinatorNotAvailable, as a call that failed; the add
may still be decided and written). Between the check and the append other events run, as
they interleave at that ``await`` in the actor. The produce path around it mirrors
``ProduceHandler.produce``: check, then ``Log.append_as_leader`` (duplicates answered with
the first write's offsets).

A restart closes the log (cleanly, or abandoned as a crash that keeps the page cache) and
opens it again from its files: producer state from its snapshot plus a replay. Requests to
the old process are lost, and so are the adds it waited for.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from rafka.actors.replica_transactions import TransactionHandler
from rafka.errors import CoordinatorNotAvailable, RafkaError, error_class
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig
from rafka.storage.log import Log
from tests.unit.cluster.txn_sim.network import Endpoint

if TYPE_CHECKING:
    from tests.unit.cluster.txn_sim.runner import TxnSimulation


class Ask:
    """What ``check_transactional`` awaits: a call to the coordinator, ``method`` with
    ``args``. The driver gets it from ``coroutine.send`` and sends the answer back in."""

    def __init__(self, method: str, *args: Any) -> None:
        self.method = method
        self.args = args

    def __await__(self):
        answer = yield self
        return answer


class AskingVerifier:
    """Stands for ``TransactionVerifier``: its ``add_partition`` is the coordinator's
    ``add_partitions`` of that one partition, answered by the driver. It has no ``verify``:
    a leader of a data partition asks only to add."""

    def add_partition(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
                      partition: int) -> Ask:  # fmt: skip
        return Ask("add", transactional_id, producer_id, epoch, [[topic, partition]])


class _Leader:
    leader_epoch = 0
    isr = (0,)
    log_end_offset = -1  # below the log's: every append moves the high watermark

    def enough_in_sync(self, min_isr: int) -> bool:
        return True

    def on_local_append(self, log_end_offset: int) -> int:
        return log_end_offset  # one replica: the high watermark follows the log end


class _Appended:
    """The actor's "appended" condition: nobody waits on it here."""

    async def __aenter__(self) -> "_Appended":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def notify_all(self) -> None:
        pass


class ReplicaShell:
    """What ``TransactionHandler`` reads of ``PartitionReplica``."""

    namespace = None
    controller = SimpleNamespace(call=None)
    def __init__(self, topic: str, partition: int, log: Log) -> None:
        from rafka.actors.replica_produce import ProduceHandler

        self.topic = topic
        self.partition = partition
        self.log = log
        self.log_changed = False
        self._leader = _Leader()
        self.logger = logging.getLogger("rafka.txn_sim")
        # The real one: a marker's append moves the offsets through it (it never waits here,
        # the high watermark being the log end).
        self.produce_handler = ProduceHandler(self)

    def loop_ready(self) -> _Appended:
        return _Appended()

    def require_leader(self) -> _Leader:
        return self._leader

    def set_high_watermark(self, offset: int) -> None:
        self.log.update_high_watermark(offset)


def run_to_end(coroutine) -> Any:
    """Run a coroutine that must not suspend; its result."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the leader's handler suspended where the model never waits")


class Partition(Endpoint):
    """Partition ``index`` of the topic, led by one replica (see the module docstring)."""

    def __init__(self, sim: "TxnSimulation", index: int, directory: str, config: LogConfig) -> None:
        super().__init__()
        self.sim = sim
        self.cfg = sim.cfg
        self.index = index
        self.name = f"p{index}"
        self.directory = directory
        self.config = config
        self._asks: dict[int, tuple] = {}  # ask id -> (coroutine, produce context)
        self.log: Log | None = None
        self.handler: TransactionHandler

    def __repr__(self) -> str:
        return self.name

    def open(self) -> None:
        sim = self.sim
        self.log = Log(self.directory, self.config, clock=lambda: sim.base_ms + sim.scheduler.now)
        self.log.update_high_watermark(self.log.log_end_offset)
        self.handler = TransactionHandler(ReplicaShell(self.cfg.topic, self.index, self.log))
        self.handler.verifier = AskingVerifier()

    def close(self) -> None:
        if self.up and self.log is not None:
            self.log.close()

    # -- produce -------------------------------------------------------------------------------

    def on_produce(self, producer: Endpoint, req: int, batch: bytes, tid: str) -> None:
        """``ProduceHandler.produce`` for one transactional batch, acks=all."""
        coroutine = self.handler.check_transactional([batch], tid)
        self._advance(coroutine, (producer, req, batch), None)

    def _advance(self, coroutine, context: tuple, answer: RafkaError | None) -> None:
        try:
            ask = coroutine.send(answer)
        except StopIteration as done:
            self._append(context, done.value)
            return
        sim = self.sim
        ask_id = sim.next_id()
        self._asks[ask_id] = (coroutine, context)
        sim.stats["leader_adds"] += 1
        sim.scheduler.after(self.cfg.request_timeout_ms, self._ask_timeout, ask_id)
        if not sim.network.send(self, sim.coordinator_now(), ask.method, self, ask_id,
                                *ask.args):  # fmt: skip
            self._resume(ask_id, CoordinatorNotAvailable(
                "the transaction coordinator could not be asked (none is running); retry"))

    def _ask_timeout(self, ask_id: int) -> None:
        if ask_id in self._asks:
            self.sim.faults["leader_add_unanswered"] += 1
            self._resume(ask_id, CoordinatorNotAvailable(
                "the transaction coordinator did not answer; retry"))

    def _resume(self, ask_id: int, answer: RafkaError | None) -> None:
        coroutine, context = self._asks.pop(ask_id)
        self._advance(coroutine, context, answer)

    def on_coordinator_answer(self, ask_id: int, answer: tuple) -> None:
        """The coordinator's (errno, message) to an add: what ``add_partition`` returns."""
        if ask_id not in self._asks:
            self.sim.stats["stale_answers"] += 1
            return
        errno, message = answer
        if errno:
            self.sim.stats["leader_add_refused_" + error_class(errno).__name__] += 1
        self._resume(ask_id, error_class(errno)(message) if errno else None)

    def _append(self, context: tuple, refused: RafkaError | None) -> None:
        producer, req, batch = context
        sim = self.sim
        if refused is None:
            opens = self._opens_transaction(batch)
            try:
                info = self.log.append_as_leader(batch, 0)
            except RafkaError as e:
                refused = e
            else:
                self.log.update_high_watermark(self.log.log_end_offset)
                if info.duplicate:
                    sim.stats["duplicate_batches"] += 1
                else:
                    sim.checker.on_append(self.index, info.first_offset, batch, opens)
                sim.network.reply(self, producer, "produce_answer", req, 0, "", info.first_offset)
                return
        sim.stats["produce_refused_" + type(refused).__name__] += 1
        sim.network.reply(self, producer, "produce_answer", req, refused.errno, str(refused), -1)

    def _opens_transaction(self, batch: bytes) -> bool:
        """Whether ``batch`` opens its transaction in this log: what makes
        ``check_transactional`` add the partition first (no transaction of the batch's
        producer id and epoch open here)."""
        header = rb.read_header(batch)
        entry = self.log.producer_state.producers.get(header.producer_id)
        return not (entry is not None and entry.current_txn_first_offset is not None
                    and entry.epoch == header.producer_epoch)  # fmt: skip

    # -- markers -------------------------------------------------------------------------------

    def on_write_marker(self, coordinator: Endpoint, req: int, producer_id: int,
                        producer_epoch: int, commit: bool,
                        coordinator_epoch: int) -> None:  # fmt: skip
        sim = self.sim
        if coordinator is not sim.coordinator or not coordinator.serving:
            sim.faults["zombie_marker_arrived"] += 1
        errno, message, offset = run_to_end(self.handler.write_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, 30_000))  # fmt: skip
        if errno == 0 and offset >= 0:
            sim.stats["markers_written"] += 1
            sim.checker.on_marker(self.index, offset, producer_id, producer_epoch, commit)
        elif errno == 0:
            sim.stats["marker_retry_answered_done"] += 1
        else:
            sim.stats["marker_refused_" + error_class(errno).__name__] += 1
        sim.network.reply(self, coordinator, "marker_answer", req, errno, message)

    # -- restarts ------------------------------------------------------------------------------

    def restart(self, clean: bool) -> None:
        """The leader's process stops (closing its log, or abandoning it as a crash) and
        starts again after ``cfg.partition_downtime_ms``."""
        sim = self.sim
        self.up = False
        for coroutine, _ in self._asks.values():
            coroutine.close()
        self._asks.clear()
        if clean:
            self.log.close()
        else:
            self.log.abandon()
        sim.scheduler.after(sim.uniform(*self.cfg.partition_downtime_ms), self._reopen)

    def _reopen(self) -> None:
        self.process += 1
        self.open()
        self.up = True
        self.sim.checker.on_reopen(self.index)
