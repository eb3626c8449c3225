"""The clients of the transaction chaos run (txn_chaos_run.py): transactional producers that
keep every transaction's outcome and history, and read_committed readers that keep every
record they poll, as the checker (txn_checker.py) wants them.

A producer thread runs transactions back to back with one transactional id: 2 to 4 records
to partitions drawn from both topics, each value unique (``p<producer>-t<transaction>-
r<record>``). Most are committed; some (drawn from the seed, see ``ENDINGS``) are flushed
and then aborted, or flushed and abandoned (the producer closed without ending it, as a
client that crashed: its successor's ``init_transactions`` aborts it). A commit that times
out is tried again up to ``COMMIT_TRIES`` times, or (half of them) not at all: the producer
is then replaced, as a client that crashed after sending the commit. Each transaction ends
as Jepsen's operations do:

- ``ok``: ``commit_transaction()`` returned;
- ``fail``: it definitely did not commit: it was aborted or abandoned, a send or ``begin``
  raised (EndTxn(commit) was never sent; the transaction is then aborted), or the commit was
  refused (abortable, fenced, invalid state) with no earlier attempt of it timing out;
- ``info``: the commit's outcome is unknown: it timed out (``RequestTimedOut``) on every
  attempt, or an attempt after a timed-out one failed otherwise (an EndTxn that timed out
  may have been written, so a later refusal proves nothing).

A producer that is fenced, broken, or left with an unknown commit is closed and replaced by
a new one of the same id (``init_transactions`` completes or aborts what the old one left).
Every error is kept with its transaction.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import traceback
from typing import Any

from rafka import TopicPartition, errors

#: Attempts of ``commit_transaction()`` that time out before the outcome is left unknown
#: (for the half of the transactions that retry at all).
COMMIT_TRIES = 3
#: How transactions end, with their weights: committed, flushed then aborted, flushed then
#: abandoned with their producer.
ENDINGS = {"commit": 0.8, "abort": 0.14, "abandon": 0.06}
#: Attempts of ``abort_transaction()`` before the producer is replaced instead.
ABORT_TRIES = 3
#: Transactional producers' settings: a transaction left open is aborted after 10 s; a
#: coordinator call gives up after 8 s (a coordinator restarting takes 2 to 7 s, and one on
#: a dead node until Ray declares the node dead, about 15 s), a write after 15 s.
PRODUCER_CONFIG = {
    "acks": "all", "linger_ms": 5, "request_timeout_ms": 5000, "delivery_timeout_ms": 15000,
    "max_block_ms": 8000, "transaction_timeout_ms": 10000,
}  # fmt: skip


class TxnProducer(threading.Thread):
    """Runs transactions back to back with one transactional id until told to stop, and
    keeps each one's outcome and history (see the module's docstring)."""

    def __init__(self, cluster, n: int, seed: int, partitions: list[tuple[str, int]],
                 rate: float, started: float) -> None:  # fmt: skip
        super().__init__(name=f"txn-producer-{n}", daemon=True)
        self.cluster = cluster
        self.n = n
        self.transactional_id = f"txn-chaos-{n}"
        self.rng = random.Random(seed * 1000 + n)
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.started = started
        self.txns: list[dict[str, Any]] = []
        self.producer = None
        self.incarnations = 0
        self.init_errors: collections.Counter = collections.Counter()
        self.fenced_on_init = 0
        self.stop = threading.Event()
        self.error: str | None = None

    def now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def run(self) -> None:
        number = 0
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                if self.producer is None and not self._fresh():
                    break
                writes = [[*self.rng.choice(self.partitions), f"p{self.n}-t{number}-r{i}"]
                          for i in range(self.rng.randint(2, 4))]  # fmt: skip
                ending = self.rng.choices(list(ENDINGS), weights=list(ENDINGS.values()))[0]
                tries = COMMIT_TRIES if self.rng.random() < 0.5 else 1
                txn = {"producer": self.n, "number": number, "status": "pending",
                       "writes": writes, "ending": ending, "commit_tries": tries,
                       "incarnation": self.incarnations, "began_s": self.now(),
                       "errors": []}  # fmt: skip
                self.txns.append(txn)
                self._one(txn)
                txn["ended_s"] = self.now()
                number += 1
                self.stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
        except Exception as e:  # a bug of the run itself: reported, and the run fails
            self.error = "".join(traceback.format_exception(e))
        finally:
            self._replace()

    def _fresh(self) -> bool:
        """A new producer of the id, initialized (retried until it is, or the run stops)."""
        while not self.stop.is_set():
            producer = self.cluster.producer(transactional_id=self.transactional_id,
                                             **PRODUCER_CONFIG)  # fmt: skip
            try:
                producer.init_transactions()
                self.producer = producer
                self.incarnations += 1
                return True
            except Exception as e:  # noqa: BLE001 - a fault under way: a new one, again
                self.init_errors[type(e).__name__] += 1
                if isinstance(e, errors.ProducerFenced):
                    self.fenced_on_init += 1
                _close(producer)
                self.stop.wait(0.5)
        return False

    def _replace(self) -> None:
        if self.producer is not None:
            _close(self.producer)
            self.producer = None

    def _note(self, txn: dict[str, Any], step: str, error: BaseException) -> None:
        txn["errors"].append([self.now(), step, type(error).__name__, str(error)[:300]])

    def _one(self, txn: dict[str, Any]) -> None:
        producer = self.producer
        try:
            producer.begin_transaction()
            for topic, partition, value in txn["writes"]:
                producer.send(topic, value=value.encode(), key=value.encode(),
                              partition=partition)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - EndTxn(commit) never sent: not committed
            self._note(txn, "send", e)
            txn["status"] = "fail"
            self._abort(txn)
            return
        if txn["ending"] != "commit":  # the records go in, then the transaction never commits
            txn["status"] = "fail"
            try:
                producer.flush(30)
            except Exception as e:  # noqa: BLE001 - failed writes: aborted all the same
                self._note(txn, "flush", e)
            if txn["ending"] == "abort":
                self._abort(txn)
            else:
                self._replace()
            return
        timed_out = 0
        for attempt in range(txn["commit_tries"]):
            txn["commit_attempts"] = attempt + 1
            try:
                producer.commit_transaction()
                txn["status"] = "ok"
                txn["committed_s"] = self.now()
                return
            except errors.RequestTimedOut as e:  # outcome unknown: only commit may follow
                self._note(txn, "commit", e)
                timed_out += 1
            except Exception as e:  # noqa: BLE001
                self._note(txn, "commit", e)
                # Refused: definite only if no earlier EndTxn of it may have been written.
                txn["status"] = "info" if timed_out else "fail"
                if txn["status"] == "fail" and isinstance(e, errors.TransactionAbortable):
                    self._abort(txn)
                else:
                    self._replace()
                return
        txn["status"] = "info"
        self._replace()

    def _abort(self, txn: dict[str, Any]) -> None:
        """Abort the current transaction; a producer that cannot is replaced (its successor's
        init_transactions aborts what it left open)."""
        for _ in range(ABORT_TRIES):
            try:
                self.producer.abort_transaction()
                return
            except errors.RequestTimedOut as e:
                self._note(txn, "abort", e)
            except Exception as e:  # noqa: BLE001 - fatal (fenced) or not abortable
                self._note(txn, "abort", e)
                break
        self._replace()


def _close(producer) -> None:
    try:
        producer.close(5)
    except Exception:  # noqa: BLE001 - closing a broken producer: nothing more to do
        pass


# -- the readers -------------------------------------------------------------------------------


class Reader(threading.Thread):
    """A read_committed consumer of every partition from the start, polling until told to
    stop; a poll that raises replaces the consumer (a new reader name)."""

    def __init__(self, cluster, n: int, partitions: list[tuple[str, int]], started: float):
        super().__init__(name=f"txn-reader-{n}", daemon=True)
        self.cluster = cluster
        self.n = n
        self.partitions = [TopicPartition(t, p) for t, p in partitions]
        self.started = started
        self.polls: dict[str, list[list]] = {}
        self.latest: list[list] = []  # the records of the consumer polling now
        self.errors: list[list] = []
        self.stop = threading.Event()

    def polled(self) -> int:
        """Records the consumer polling now has returned."""
        return len(self.latest)

    def run(self) -> None:
        incarnation = 0
        while not self.stop.is_set():
            name = f"r{self.n}.{incarnation}"
            records = self.polls[name] = self.latest = []
            consumer = None
            try:
                consumer = self.cluster.consumer(
                    isolation_level="read_committed", auto_offset_reset="earliest",
                    fetch_max_wait_ms=200, request_timeout_ms=5000,
                )  # fmt: skip
                consumer.assign(self.partitions)
                while not self.stop.is_set():
                    for r in consumer.poll(timeout_ms=200):
                        records.append([round(time.monotonic() - self.started, 3), r.topic,
                                        r.partition, r.offset, r.value.decode()])
            except Exception as e:  # noqa: BLE001 - a fault under way: a new reader
                self.errors.append([round(time.monotonic() - self.started, 2), name,
                                    type(e).__name__, str(e)[:300]])
                incarnation += 1
                self.stop.wait(0.5)
            finally:
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:  # noqa: BLE001
                        pass
