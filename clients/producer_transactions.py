"""The transactional producer's calls (Kafka's transactional API), mixed into ``Producer``.

``init_transactions`` gets the producer id and epoch of the transactional id from its
transaction coordinator, which fences every older producer of that id and aborts what it
left open. Each transaction writes with that identity; the leader of each partition it
writes to adds the partition to the transaction at the coordinator before appending its
first batch (Kafka 4's transaction version 2), so ``send()`` never waits for the
coordinator. Only the offsets partition of ``send_offsets_to_transaction`` is added by the
producer itself. EndTxn ends the transaction once every write is done: the coordinator
answers with the epoch bumped, and every partition goes on from sequence 0 under it. The
coordinator's calls block the calling thread for at most ``max_block_ms`` (retriable
answers are retried within it), as Kafka's do. The state and what an error makes of it:
``transaction_manager``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

from rafka.clients.transaction_manager import TransactionState, TxnClientState
from rafka.storage import record_batch as rb
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.errors import (
    BrokerNotAvailable,
    IllegalState,
    RafkaError,
    RequestTimedOut,
    TransactionAbortable,
    error_class,
)
from rafka.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

_S = TxnClientState
_T = TypeVar("_T")
#: First pause before a retriable coordinator answer is retried, s (doubled up to 1 s).
RETRY_BACKOFF_S = 0.02


class TransactionalMixin:
    """Part of ``Producer`` (its fields: ``config``, ``_gateway``, ``_sender``, ``flush``)."""

    _txn: TransactionState | None

    def _init_transactional(self) -> None:
        config = self.config
        self._txn = None
        if config.transactional_id is None:
            return
        self._txn = TransactionState(config.transactional_id, config.transaction_timeout_ms)
        self._txn_lock = threading.Lock()
        self._coordinator = None
        self._sender.on_failed_batch = self._write_failed

    def _write_failed(self, batch, error: BaseException) -> None:
        """A batch failed for good (sender thread): its transaction must abort, unless the
        batch belongs to an epoch already ended (a write that raced the end, refused)."""
        txn = self._txn
        if batch.producer_epoch in (txn.epoch, rb.NO_PRODUCER_EPOCH):
            txn.failed(error)

    def _transactional(self) -> TransactionState:
        if self._txn is None:
            raise IllegalState(
                "this producer has no transactional_id: create it with "
                "cluster.producer(transactional_id=...) to use transactions"
            )
        return self._txn

    # -- the protocol --------------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Take over the transactional id (once, before the first transaction): every older
        producer of the id is fenced, and a transaction it left open is aborted first."""
        txn = self._transactional()
        with self._txn_lock:
            if txn.state is not _S.UNINITIALIZED:
                raise IllegalState("init_transactions() is called once per producer")
            try:
                producer_id, epoch = self._call_coordinator(
                    "init_producer_id", txn.transactional_id, txn.timeout_ms, None
                )
            except RafkaError as e:
                if not isinstance(e, RequestTimedOut):
                    txn.failed(e)
                raise
            self._take_identity(producer_id, epoch)
            txn.move(_S.READY)

    def begin_transaction(self) -> None:
        txn = self._transactional()
        with self._txn_lock:
            txn.check_can_begin()
            txn.clear_partitions()
            txn.move(_S.IN_TRANSACTION)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Wait until every record of the transaction is written, then commit it. Raises
        TransactionAbortable when a write failed (abort, then begin again), a fatal error
        when the producer was fenced (close it), RequestTimedOut when the commit's outcome
        is unknown (only ``commit_transaction()`` may be called again)."""
        txn = self._transactional()
        with self._txn_lock:
            txn.check_can_commit()
            if txn.state is _S.IN_TRANSACTION:
                txn.move(_S.COMMITTING)  # no send gets in from here (Kafka's beginCommit)
            self.flush(timeout)  # again when retried: a timed-out flush left some out
            txn.check_can_commit()  # a write may have failed meanwhile
            self._end(commit=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records not sent yet, wait for the ones in flight, and abort: none of
        the transaction's records is ever read by a read_committed consumer."""
        txn = self._transactional()
        with self._txn_lock:
            txn.check_can_abort()
            if txn.state is not _S.ABORTING:
                txn.move(_S.ABORTING)
                self._sender.fail_unsent(TransactionAbortable(
                    "the transaction was aborted before this record was sent"
                ))  # fmt: skip
                self.flush(timeout)
            self._end(commit=False)

    def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit a consumer's ``offsets`` (the next record to read, per partition) as part
        of the current transaction: they become the group's committed offsets if and only
        if the transaction commits (consume-transform-produce, exactly once).
        ``group_metadata`` is ``consumer.group_metadata()`` (KIP-447: a consumer fenced by
        a newer generation has its offsets refused and the transaction must abort); a bare
        group id commits as no member, which only a group without members accepts."""
        txn = self._transactional()
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        if not isinstance(group_metadata, ConsumerGroupMetadata) or not group_metadata.group_id:
            raise TypeError(
                f"group_metadata must be consumer.group_metadata() (or a group id), got "
                f"{group_metadata!r}"
            )
        wanted = {}
        for tp, value in dict(offsets).items():
            tp = TopicPartition(*tp)
            if isinstance(value, int) and not isinstance(value, bool):
                value = OffsetAndMetadata(value)
            if not isinstance(value, OffsetAndMetadata) or value.offset < 0:
                raise TypeError(
                    f"the offset of {tp} must be an OffsetAndMetadata or an int >= 0, got "
                    f"{value!r}"
                )
            wanted[(tp.topic, tp.partition)] = (value.offset, value.leader_epoch,
                                                value.metadata)  # fmt: skip
        group_id = group_metadata.group_id
        shard = self._gateway.call_controller("group_coordinator", group_id)["shard"]
        self._add_offsets_partition(shard)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        backoff = RETRY_BACKOFF_S
        with self._txn_lock:
            txn.check_can_send()
            while True:
                try:
                    coordinator = self._gateway.group_coordinator(group_id)
                    error = self._gateway.get(
                        self._gateway.send(
                            coordinator, "commit_offsets_in_transaction",
                            txn.transactional_id, txn.producer_id, txn.epoch, group_id,
                            group_metadata.member_id, group_metadata.group_instance_id,
                            group_metadata.generation_id, wanted,
                        ),
                        max(0.001, deadline - time.monotonic()), "the group coordinator",
                    )  # fmt: skip
                except RafkaError as e:
                    error = e
                if error is None:
                    return
                # A coordinator loading or moving, a verification not made yet: again.
                if not error.retriable or time.monotonic() + backoff > deadline:
                    break
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            txn.failed(error)
            raise error

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """``with producer.transaction():`` begins a transaction, commits it on a clean exit
        and aborts it when the block raises (unless the producer was fenced)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self._txn.state in (_S.IN_TRANSACTION, _S.ABORTABLE, _S.ABORTING):
                self.abort_transaction()
            raise
        self.commit_transaction()

    # -- inside ------------------------------------------------------------------------------

    def _in_transaction(self, topic: str, partition: int, queue: Callable[[], _T]) -> _T:
        """Queue a record or batch of the current transaction with ``queue()``. The check
        that a transaction is open, the queueing and the note that it sent to ``(topic,
        partition)`` are one step that commit and abort wait for, so whatever is queued
        belongs to the transaction that was open when it was checked, and is flushed before
        its EndTxn (Kafka notes the partition after the append, under the same guard). A
        ``queue()`` that fails leaves the transaction abortable, as Kafka's producer does.
        Nothing is asked of the coordinator: each partition's leader adds its partition to
        the transaction before appending the first batch (transaction version 2)."""
        txn = self._txn
        # A send from a callback runs on the sender thread, which a commit holding the lock
        # waits for: it must not wait for the commit in turn.
        if not self._txn_lock.acquire(blocking=not self._sender.is_current_thread()):
            raise IllegalState(
                "a send from a callback while the transaction is committing or aborting: it "
                "would belong to no transaction; send it after the commit returns"
            )
        try:
            txn.check_can_send()
            try:
                queued = queue()
            except RafkaError as e:
                txn.failed(e)
                raise
            txn.sent_to(topic, partition)
            return queued
        finally:
            self._txn_lock.release()

    def _add_offsets_partition(self, shard: int) -> None:
        """Add the group's ``__consumer_offsets`` partition to the transaction at the
        coordinator (AddOffsetsToTxn), before offsets are committed inside it: the group
        coordinator, not a partition leader, takes those writes, and checks the add."""
        txn = self._txn
        tp = (CONSUMER_OFFSETS, shard)
        with self._txn_lock:
            txn.check_can_send()
            if tp in txn.offsets_partitions:
                return
            txn.started = True
            try:
                self._call_coordinator("add_partitions", txn.transactional_id, txn.producer_id,
                                       txn.epoch, [list(tp)])  # fmt: skip
            except RafkaError as e:
                txn.failed(e)
                raise
            txn.offsets_partitions.add(tp)

    def _end(self, commit: bool) -> None:
        """EndTxn; the producer goes on with the epoch it answers. A transaction that never
        asked the coordinator to add anything ends here (the coordinator holds nothing of
        it, and answers a commit of nothing InvalidTxnState). Lock held."""
        txn = self._txn
        if not txn.started:
            txn.clear_partitions()
            txn.move(_S.READY)
            return
        try:
            producer_id, epoch = self._call_coordinator(
                "end_txn", txn.transactional_id, txn.producer_id, txn.epoch, commit
            )
        except RequestTimedOut:
            raise  # outcome unknown: the same call may be made again
        except RafkaError as e:
            txn.failed(e)
            raise
        self._take_identity(producer_id, epoch)
        txn.clear_partitions()
        txn.move(_S.READY)

    def _take_identity(self, producer_id: int, epoch: int) -> None:
        self._sender.restart_epochs(producer_id, epoch)
        self.producer_id, self.producer_epoch = producer_id, epoch
        self._txn.producer_id, self._txn.epoch = producer_id, epoch

    def _call_coordinator(self, method: str, *args) -> list:
        """``method`` of the id's coordinator; its answer after (errno, message). Retriable
        answers (the coordinator moving or loading, the previous transaction completing)
        are retried until ``max_block_ms``, then RequestTimedOut."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = self._gateway.transaction_coordinator(
                        self._txn.transactional_id
                    )
                remaining = max(0.001, deadline - time.monotonic())
                errno, message, *answer = self._gateway.get(
                    self._gateway.send(self._coordinator, method, *args), remaining,
                    "the transaction coordinator",
                )
                if not errno:
                    return answer
                error = error_class(errno)(message)
            except (RafkaError, BrokerNotAvailable) as e:
                error = e
                self._coordinator = None
            if not getattr(error, "retriable", False) or isinstance(error, RequestTimedOut):
                raise error
            if time.monotonic() + backoff > deadline:
                raise RequestTimedOut(
                    f"{method} for transactional id {self._txn.transactional_id!r} did not "
                    f"succeed within max_block_ms={self.config.max_block_ms}: {error}"
                )
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
