"""The transactional producer's sends and ends, against a fake leader and a scripted
coordinator (no Ray): a record is part of the transaction that was open when it was queued,
never the next one, and a send that failed leaves the transaction abortable instead of
making its commit fatal."""

from __future__ import annotations

import threading

import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import RequestTimedOut, TransactionAbortable

from .fake_leader import FakeGateway


class TxnGateway(FakeGateway):
    """A FakeGateway with a transaction coordinator that grants one producer id and bumps
    its epoch at every EndTxn; ``coordinator_calls`` records (method, args) in order."""

    def __init__(self, tmp_path, partitions: int = 2) -> None:
        super().__init__(tmp_path, partitions=partitions)
        self.coordinator_calls: list[tuple] = []
        self.epoch = 0

    def transaction_coordinator(self, transactional_id: str):
        return "coordinator"

    def send(self, handle, method: str, *args):
        with self._changed:
            self.coordinator_calls.append((method, args))
            self.events.append(("coordinator", method))
            self._changed.notify_all()
        if method == "init_producer_id":
            return (0, "", 4000, self.epoch)
        if method == "end_txn":
            self.epoch += 1
            return (0, "", 4000, self.epoch)
        raise AssertionError(f"unexpected coordinator call {method}")

    @staticmethod
    def get(answer, timeout_s=None, what=""):
        return answer


@pytest.fixture
def gateway(tmp_path):
    g = TxnGateway(tmp_path)
    yield g
    g.shut()


def make(gateway, **settings) -> Producer:
    settings = {"transactional_id": "etl", "acks": "all", "linger_ms": 0,
                "retry_backoff_ms": 1, **settings}  # fmt: skip
    producer = Producer(gateway, MetadataCache(gateway), **settings)
    producer.init_transactions()
    return producer


class PausingLock:
    """Wraps the producer's queue lock: the first time ``thread_name`` takes it, it first
    signals ``reached`` and waits for ``release`` (a send between its checks and its append)."""

    def __init__(self, lock, thread_name: str) -> None:
        self.lock, self.thread_name = lock, thread_name
        self.reached, self.release = threading.Event(), threading.Event()
        self.paused = False

    def __enter__(self):
        if threading.current_thread().name == self.thread_name and not self.paused:
            self.paused = True
            self.reached.set()
            assert self.release.wait(10)
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_a_record_queued_while_another_thread_commits_belongs_to_that_transaction(gateway):
    """A commit waits for a send under way: the record goes out with the transaction's
    epoch, before its EndTxn, never into a transaction nobody began."""
    producer = make(gateway)
    producer.begin_transaction()
    pausing = producer._lock = PausingLock(producer._lock, "late-sender")
    sender = threading.Thread(target=lambda: producer.send("t", value=b"late", partition=0),
                              name="late-sender")  # fmt: skip
    sender.start()
    assert pausing.reached.wait(10)
    committer = threading.Thread(target=producer.commit_transaction)
    committer.start()
    committer.join(0.5)  # a commit that does not wait for the send ends meanwhile
    pausing.release.set()
    sender.join(10)
    committer.join(10)
    producer.flush(10)
    (request,) = [r for r in gateway.requests if b"late" in r.values]
    assert request.batches[0].epoch == 0, "the record was sent in the transaction after"
    order = [e for e in gateway.events if e[0] != "answered"]
    assert order.index(("request", request)) < order.index(("coordinator", "end_txn"))
    producer.close(10)


def test_a_send_that_fails_makes_the_transaction_abortable_not_its_commit_fatal(gateway):
    """As Kafka's producer: an error from send() leaves the transaction to abort. Nothing of
    it reached a leader, so the abort ends it without asking the coordinator."""
    producer = make(gateway)
    producer.begin_transaction()

    def full(*args, **kwargs):
        raise RequestTimedOut("the buffer stayed full for max_block_ms (injected)")

    real_append, producer._accumulator.append = producer._accumulator.append, full
    with pytest.raises(RequestTimedOut):
        producer.send("t", value=b"lost", partition=0)
    producer._accumulator.append = real_append
    with pytest.raises(TransactionAbortable):
        producer.commit_transaction()
    producer.abort_transaction()
    assert [m for m, _ in gateway.coordinator_calls] == ["init_producer_id"]
    producer.begin_transaction()  # the producer goes on
    producer.send("t", value=b"next", partition=1)
    producer.commit_transaction()
    assert [m for m, _ in gateway.coordinator_calls] == ["init_producer_id", "end_txn"]
    producer.close(10)
