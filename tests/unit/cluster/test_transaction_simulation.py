"""rafka's transactions (Kafka 4, transaction version 2: the epoch bumped at every end,
markers above the producer's epoch, and each partition's leader adding its partition to the
transaction before the transaction's first write there, KIP-890) keep their invariants
through hundreds of seeded, simulated runs of coordinator failovers (and zombie
coordinators), lost, late and resent messages, failed and unacknowledged state writes,
timeout aborts, producers that stall, die or are replaced, and partition leaders that
restart or crash. The model, what it leaves out and the invariants are in
``tests/unit/cluster/txn_sim/`` (the package, ``checker`` for the invariants); replay one
seed with ``txn_sim.replay(N, verbose=True)``.

What the runs showed:

A. A coordinator still loading its shard that answers a partition leader from the empty
   map it holds refuses a live transaction as an unknown id (InvalidProducerIdMapping),
   which the client takes as fatal: a failover fences a producer alone on its
   transactional id. (Found with the leader's verification of KIP-890 part 1; the leader's
   add of part 2 asks the same coordinator at the same moment.) The coordinator must refuse
   with a retriable error while it loads (the leader refuses the write with
   NotEnoughReplicas and the client sends it again), as ``TransactionCoordinator._decide``
   does (CoordinatorNotAvailable) and the model does by default;
   ``add_while_loading="from_empty_map"`` replays the other answer:
   ``test_adds_decided_on_the_empty_map_of_a_loading_coordinator_fence``.
B. (fixed, the client) ``TransactionalMixin._end`` (clients/producer_transactions.py) made
   the EndTxn call even when the transaction added no partition; the coordinator answers a
   commit of nothing InvalidTxnState, which ``TransactionState.failed`` makes fatal, so
   committing an empty transaction (``with producer.transaction(): pass``, a stream's empty
   micro-batch) fenced the producer for good. Now, as Kafka's client, a transaction that
   sent nothing ends without asking the coordinator:
   ``test_an_empty_commit_leaves_the_producer_alone_on_its_id_going`` (the simulation) and
   ``test_the_client_commits_an_empty_transaction_and_goes_on`` (the client itself).

What the protocol relies on (each shown by a test that breaks it): one caller's calls to the
coordinator arrive in the order they were made, as Ray runs them; a retried
InitProducerId that overtook the producer's later calls would fence its own transaction
(``test_a_retried_init_producer_id_that_overtakes_later_calls_fences_its_producer``). Every
other kind of request may overtake its channel
(``test_resends_that_overtake_earlier_requests_keep_every_invariant``). The marker rule
(above the producer's epoch) is what keeps a late copy of a marker out of the next
transaction once resends may overtake; the coordinator's add, made only to the transaction
of exactly the writer's producer id and epoch, what keeps a late write of an ended
transaction out of the next one; and the add's record, written before the leader appends,
what brings every partition written its marker: the checker catches each of them broken.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from rafka.actors.replica_transactions import TransactionHandler
from rafka.clients.producer_transactions import TransactionalMixin
from rafka.cluster import transaction_end, transaction_state
from rafka.errors import RafkaError
from rafka.storage import record_batch as rb
from rafka.storage.read_committed import ReadCommittedFilter
from tests.unit.cluster import txn_sim
from tests.unit.cluster.txn_sim import run_seed

SEEDS = 400
BLOCK = 100
EVENTS = 400
#: Every kind of request may overtake an earlier one on its channel, but InitProducerId.
OVERTAKING = frozenset({"add", "end", "produce", "write_marker"})
#: What each sweep block must have gone through.
SEEN = ("failover", "zombie_coordinator", "zombie_marker_arrived", "completions_after_load",
        "state_write_failed", "state_write_unacked", "timeout_abort", "producer_death",
        "producer_replaced", "producer_stall", "partition_restart", "partition_crash",
        "delayed_message", "lost_request", "lost_answer", "resend_batch", "resend_call",
        "marker_resend", "duplicate_batches", "producers_fenced", "leader_add_unanswered",
        "leader_add_refused_TransactionAbortable", "leader_add_refused_ProducerFenced",
        "leader_add_refused_ConcurrentTransactions", "adds_while_loading",
        "adds_decided_together", "marker_retry_answered_done", "partition_forgot_producer",
        "answered_commit", "answered_abort", "decided_commit", "decided_abort")  # fmt: skip


def _sweep(seeds: range, directory, **config) -> Counter:
    """Every seed keeps every invariant; prints what the runs injected (per fault kind) and
    what they did, and returns both in one Counter."""
    faults: Counter = Counter()
    outcomes: Counter = Counter()
    started = time.perf_counter()
    for seed in seeds:
        sim, failure = run_seed(seed, str(directory), **{"events": EVENTS, **config})
        assert failure is None, failure
        faults.update(sim.faults)
        outcomes.update(sim.stats)
        outcomes["events"] += sim.event
    took = time.perf_counter() - started
    print(f"\nseeds {seeds.start}-{seeds.stop - 1} {config or ''} in {took:.1f} s\n"
          f"  injected: {dict(sorted(faults.items()))}\n"
          f"  outcomes: {dict(sorted(outcomes.items()))}")
    return faults + outcomes


def _first_failure(seeds: range, directory, **config) -> tuple[int, str] | None:
    """The first seed that fails, with its report."""
    for seed in seeds:
        _, failure = run_seed(seed, str(directory), **{"events": EVENTS, **config})
        if failure is not None:
            return seed, failure
    return None


def _invariant(failure: str) -> str:
    return re.search(r"invariant (\w+)", failure.splitlines()[0]).group(1)


def _names_seed_event_invariant(seed: int, failure: str) -> None:
    first = failure.splitlines()[0]
    assert first.startswith(f"seed {seed}:") and re.search(r"; event \d+ at \d+ ms: ", first)
    assert "invariant " in first and "    the event: #" in failure
    assert f"txn_sim.replay({seed}" in failure and "last " in failure


@pytest.mark.parametrize(
    "first", range(0, SEEDS, BLOCK), ids=lambda first: f"seeds_{first}_{first + BLOCK - 1}"
)
def test_every_seed_keeps_the_invariants(first, tmp_path):
    """Each seed of the block keeps every invariant after every event and after healing,
    and the block goes through every kind of fault and outcome."""
    totals = _sweep(range(first, first + BLOCK), tmp_path)
    missing = [seen for seen in SEEN if not totals[seen]]
    assert not missing, f"the block never saw {missing}"


def test_producers_that_reach_the_last_epoch_move_to_new_producer_ids(tmp_path):
    """With MAX_EPOCH at 3, transactions end by moving their producer to a new producer id
    (and inits by taking one) under the same faults, keeping every invariant."""
    totals = _sweep(range(60), tmp_path, max_epoch=3)
    assert totals["moves_to_new_producer_id"] > 50
    assert transaction_state.MAX_EPOCH == (1 << 15) - 1  # put back after the runs


def test_resends_that_overtake_earlier_requests_keep_every_invariant(tmp_path):
    """Batches, the leaders' AddPartitionsToTxn, EndTxn and markers may overtake earlier
    requests of their channel (Kafka's resends over a new connection): every invariant
    holds."""
    totals = _sweep(range(60), tmp_path, reorder=OVERTAKING)
    assert totals["marker_resend"] and totals["resend_batch"]


def test_a_retried_init_producer_id_that_overtakes_later_calls_fences_its_producer(tmp_path):
    """What the protocol assumes of the transport: an InitProducerId retried after a timeout
    and delivered after the producer's later calls aborts its running transaction with a
    fence, and the producer alone on its id is answered ProducerFenced. Ray runs one caller's
    calls in order, so rafka never sees it."""
    found = _first_failure(range(100), tmp_path, reorder=OVERTAKING | {"init"})
    assert found is not None, "no seed in 100 showed the overtaking InitProducerId"
    seed, failure = found
    assert _invariant(failure) == "fresh_fenced" and "ProducerFenced" in failure
    _names_seed_event_invariant(seed, failure)
    print(failure.splitlines()[0])


def test_adds_decided_on_the_empty_map_of_a_loading_coordinator_fence(tmp_path):
    """Bug A: a leader's add decided during a coordinator's load, on the empty map it holds,
    refuses a live transaction as an unknown id, and the producer alone on its id becomes
    fatal (InvalidProducerIdMapping)."""
    found = _first_failure(range(100), tmp_path, add_while_loading="from_empty_map")
    assert found is not None, "no seed in 100 added a partition during a load"
    seed, failure = found
    assert _invariant(failure) == "fresh_fenced" and "InvalidProducerIdMapping" in failure
    _names_seed_event_invariant(seed, failure)
    print(failure.splitlines()[0])


def test_an_empty_commit_leaves_the_producer_alone_on_its_id_going(tmp_path):
    """A tenth of the transactions send nothing before they end: in each of the first 50
    seeds every invariant holds, and the producer alone on its id keeps going."""
    found = _first_failure(range(50), tmp_path, empty_share=0.1)
    assert found is None, found[1] if found else ""


class _CoordinatorGateway:
    """The client's gateway with the real coordinator decisions behind it (one id, every
    decision applied at once, markers taken as written). ``leader_adds`` stands for the
    partition's leader, which adds the partition before the transaction's first batch."""

    def __init__(self) -> None:
        self.meta = None
        self.ids = iter(range(100, 200))

    def leader_adds(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        decision = transaction_state.add_partitions(self.meta, producer_id, epoch,
                                                    [(topic, partition)], 0)  # fmt: skip
        assert decision.error is None, decision.error
        self.meta = decision.metadata or self.meta

    def transaction_coordinator(self, transactional_id: str) -> str:
        return "coordinator"

    def send(self, coordinator: str, method: str, *args) -> tuple:
        return method, args

    def get(self, call: tuple, timeout: float, what: str) -> tuple:
        method, args = call
        take = lambda: next(self.ids)  # noqa: E731
        if method == "init_producer_id":
            decision = transaction_state.init_producer_id(
                self.meta, args[0], args[1], 0, take, 900_000, args[2])  # fmt: skip
        elif method == "add_partitions":
            decision = transaction_state.add_partitions(self.meta, args[1], args[2], args[3], 0)
        else:
            decision = transaction_end.end_txn(self.meta, *args[1:4], 0, take)
        if decision.error is not None:
            return (decision.error.errno, str(decision.error), -1, -1)
        if decision.metadata is not None:
            self.meta = decision.metadata
            if decision.markers is not None:
                self.meta = transaction_state.complete(self.meta, 0)
        return (0, "", *(decision.answer or ()))


class _TransactionalClient(TransactionalMixin):
    """The producer's transactional calls, with nothing to flush and no sender thread."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(transactional_id="etl", transaction_timeout_ms=60_000,
                                      max_block_ms=1_000)  # fmt: skip
        self._gateway = _CoordinatorGateway()
        self._sender = SimpleNamespace(restart_epochs=lambda *_: None,
                                       fail_unsent=lambda *_: None, on_failed_batch=None,
                                       is_current_thread=lambda: False)  # fmt: skip
        self._init_transactional()

    def flush(self, timeout: float | None = None) -> None:
        pass

    def queue_one(self, topic: str, partition: int) -> None:
        """What ``send()`` does for the transaction, with nothing to queue."""
        self._in_transaction(topic, partition, lambda: None)

    def send_one(self, topic: str, partition: int) -> None:
        """``queue_one``, and what the partition's leader does with the batch before
        appending it."""
        self.queue_one(topic, partition)
        self._gateway.leader_adds(self.producer_id, self.producer_epoch, topic, partition)


def test_the_client_fake_runs_a_transaction():
    """The fake gateway answers as the coordinator: a transaction over one partition, added
    by its leader, commits and the producer goes on with the bumped epoch; the producer
    itself asked the coordinator nothing before the commit."""
    client = _TransactionalClient()
    client.init_transactions()
    client.begin_transaction()
    before = client._gateway.meta
    client.queue_one("orders", 0)
    assert client._gateway.meta is before  # send() asks the coordinator nothing
    client._gateway.leader_adds(client.producer_id, client.producer_epoch, "orders", 0)
    client.commit_transaction()
    assert (client.producer_id, client.producer_epoch) == (100, 1)
    client.begin_transaction()
    client.send_one("orders", 1)
    client.abort_transaction()
    assert client.producer_epoch == 2


def test_the_client_commits_an_empty_transaction_and_goes_on():
    """A transaction with nothing sent commits, and the producer may begin the next one (as
    Kafka's client, which then makes no EndTxn call); an empty abort too."""
    client = _TransactionalClient()
    client.init_transactions()
    client.begin_transaction()
    client.commit_transaction()
    client.begin_transaction()
    client.abort_transaction()
    client.begin_transaction()
    client.send_one("orders", 0)
    client.commit_transaction()
    assert (client.producer_id, client.producer_epoch) == (100, 1)


def test_a_seed_replays_identically(tmp_path):
    """The same seed gives the same trace, event for event; another seed does not."""

    def trace(seed: int) -> tuple[list[str], dict]:
        sim, failure = run_seed(seed, str(tmp_path), record=True, events=EVENTS)
        assert failure is None, failure
        return sim.trace, sim.summary()

    first, again, other = trace(7), trace(7), trace(8)
    assert first == again
    assert len(first[0]) > EVENTS
    assert first[0] != other[0]


def test_the_printed_replay_reproduces_the_failure(tmp_path):
    """The ``txn_sim.replay(...)`` call a failure prints runs the same failure again."""
    seed, failure = _first_failure(range(100), tmp_path, add_while_loading="from_empty_map")
    call = next(line for line in failure.splitlines() if line.startswith("replay: "))
    call = call.split("replay: ", 1)[1].replace("verbose=True", "verbose=False")
    with pytest.raises(AssertionError) as again:
        eval(call, {"txn_sim": txn_sim})  # noqa: S307 - the simulation's own output
    assert str(again.value).splitlines()[0] == failure.splitlines()[0]


# -- the checker catches a broken implementation ---------------------------------------------


def _caught(seed: int, failure: str, expected: set[str]) -> None:
    assert _invariant(failure) in expected, failure
    _names_seed_event_invariant(seed, failure)
    print(failure.splitlines()[0])


def test_the_checker_catches_a_marker_rule_that_accepts_the_producers_epoch(monkeypatch,
                                                                           tmp_path):  # fmt: skip
    """A leader that writes a marker at the producer's epoch (not only above it) lets a late
    copy of one transaction's marker end the next transaction of that producer, which writes
    with that epoch: some seed among the first 300, with markers that may overtake, reads a
    committed transaction short or an aborted one."""
    right = TransactionHandler.write_marker

    async def at_the_epoch_too(self, producer_id, producer_epoch, commit, coordinator_epoch,
                               timeout_ms):  # fmt: skip
        r = self.replica
        entry = r.log.producer_state.producers.get(producer_id)
        if entry is None or producer_epoch != entry.epoch:
            return await right(self, producer_id, producer_epoch, commit, coordinator_epoch,
                               timeout_ms)  # fmt: skip
        marker = rb.encode_control_batch(
            rb.ControlType.COMMIT if commit else rb.ControlType.ABORT, producer_id=producer_id,
            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch, timestamp=0,
        )  # fmt: skip
        try:
            info = r.log.append_as_leader(marker, 0, allow_control=True)
        except RafkaError as e:
            return (e.errno, str(e), -1)
        r.set_high_watermark(r.log.log_end_offset)
        return (0, "", info.first_offset)

    monkeypatch.setattr(TransactionHandler, "write_marker", at_the_epoch_too)
    found = _first_failure(range(300), tmp_path, reorder=frozenset({"write_marker"}),
                           delay=0.1, loss=0.05)  # fmt: skip
    assert found is not None, "no seed in 300 caught the marker rule at the producer's epoch"
    _caught(*found, {"lost_write", "aborted_read", "uncommitted_read", "own_marker",
                     "stable_reads", "hanging"})  # fmt: skip


def test_the_checker_catches_an_add_that_takes_an_ended_transactions_epoch(monkeypatch,
                                                                         tmp_path):  # fmt: skip
    """A coordinator that adds a partition for an earlier epoch of the producer id as if it
    were the current one lets a late write of an ended transaction (a resend, a zombie's
    batch) open a transaction at its old epoch in a partition that never saw the producer's
    newer one, which the next transaction's marker ends with that transaction's outcome (or
    begin the producer's next transaction before it asked, fencing its own retried EndTxn).
    Some seed among the first 100 opens a transaction the coordinator does not hold, reads
    such a write, or fences the producer alone on its id."""
    right = transaction_state.add_partitions

    def any_epoch(current, producer_id, epoch, partitions, now_ms):
        if current is not None and current.producer_id == producer_id:
            epoch = current.producer_epoch
        return right(current, producer_id, epoch, partitions, now_ms)

    monkeypatch.setattr(transaction_state, "add_partitions", any_epoch)
    found = _first_failure(range(100), tmp_path)
    assert found is not None, "no seed in 100 caught an add for an ended transaction's epoch"
    _caught(*found, {"added", "aborted_read", "uncommitted_read", "lost_write", "hanging",
                     "fresh_fenced"})  # fmt: skip


def test_the_checker_catches_an_add_that_is_not_written(monkeypatch, tmp_path):
    """A coordinator that answers an add to a transaction already Ongoing without writing
    the partition into it lets the leader open a transaction that no marker will reach:
    some seed among the first 100 appends to a partition the coordinator does not hold, and
    would leave the transaction open there (hanging, or ended by a later transaction's
    marker)."""
    right = transaction_state.add_partitions

    def first_partitions_only(current, producer_id, epoch, partitions, now_ms):
        decision = right(current, producer_id, epoch, partitions, now_ms)
        if (decision.error is None and current is not None
                and current.state == transaction_state.TxnState.ONGOING):  # fmt: skip
            return transaction_state.TxnDecision()  # answered, nothing written
        return decision

    monkeypatch.setattr(transaction_state, "add_partitions", first_partitions_only)
    found = _first_failure(range(100), tmp_path)
    assert found is not None, "no seed in 100 caught an add that is not written"
    _caught(*found, {"added", "hanging", "torn_transaction", "lost_write", "aborted_read",
                     "uncommitted_read"})  # fmt: skip


def test_the_checker_catches_a_reader_that_keeps_aborted_batches(monkeypatch, tmp_path):
    """A read_committed filter that returns every data batch (the aborted list ignored) is
    an aborted read in some seed among the first 20."""
    monkeypatch.setattr(ReadCommittedFilter, "accept",
                        lambda self, header, control_type=None: not header.is_control)
    found = _first_failure(range(20), tmp_path)
    assert found is not None, "no seed in 20 read an aborted batch"
    _caught(*found, {"aborted_read"})
