"""The checker: the truth the invariants are judged against, and the invariants.

The truth:
- a transaction is named by the (producer id, epoch) its writes used. Its outcome is the
  state of the last Prepare* record of ``__transaction_state`` whose (producer id, epoch) is
  (that id, epoch + 1): the commit point. None while no such record landed;
- every batch a leader appended (not a duplicate it answered with earlier offsets), every
  marker it wrote, every answer a producer accepted;
- what the coordinator holds durably: every (producer id, epoch, partition) an Ongoing
  record of ``__transaction_state`` that landed names.

Checked after every event, for every partition the event changed (appended to, marked,
restarted; every partition when an outcome changes), by a read_committed reader that starts
afresh: from the log start to the last stable offset (LSO), through ``Log.read_committed``
in fetches of ``fetch_bytes`` and one ``ReadCommittedFilter`` across them, as the consumer
reads. A partition no event changed reads the same, so it is not read again.

- ``read``: below the LSO, the batches returned are exactly the appended batches of
  committed transactions, in offset order: no batch of an aborted transaction (G1a,
  ``aborted_read``) or of one never committed (``uncommitted_read``), and none of a
  committed one missing (``lost_write``; ``torn_transaction`` when other batches of that
  transaction are read, here or in another partition). Hence a committed transaction is
  seen in a partition up to its LSO only, its batches below it, all of them once its marker
  is below it; once its markers are below the LSOs of all its partitions, it is read whole;
- ``own_marker``: each batch returned is followed, in its partition, by the COMMIT marker of
  its own transaction (producer id, epoch + 1);
- ``stable_reads``: what a read returns begins with what the previous read of the partition
  returned (nothing readable disappears or changes below the LSO);
- ``exactly_once``: no record is appended twice, nor returned twice; the offset a producer
  was told is where its batch is;
- ``offsets``: log start <= LSO <= high watermark <= log end; the LSO never goes back;
- ``epoch``: per producer id, the epoch never goes back in a partition's producer state
  (while the log remembers the producer: an idle one is forgotten at a segment roll after
  ``producer.id.expiration.ms``), in the records the coordinator heard land, nor in what a
  new incarnation loads;
- ``added``: a leader opens a transaction in its partition (appends a batch of a producer
  id and epoch with none open there) only if a landed Ongoing record of that producer id
  and epoch names the partition, and only before that transaction's marker is written
  there: the coordinator knows every partition a transaction wrote, so its markers reach
  them all, and a late write of a transaction that has ended, its epoch bumped, is refused
  even where the leader has forgotten the producer (either would leave a transaction open
  that no marker ends);
- ``marker``: a marker's type is the outcome of its transaction;
- ``end_answer``: a producer told its commit succeeded has a committed transaction, for
  good; one told its abort succeeded, none committed;
- ``codec``: a record reads back as written;
- ``fresh_fenced``: a producer whose transactional id no other producer uses is never
  answered ProducerFenced and never becomes fenced for good.

Across partitions nothing stronger holds at one instant: a transaction whose markers are
all written may still be held back in one partition by an earlier open transaction there
(its LSO), and seen in another. So after healing (no faults, every producer done, the
coordinator idle), ``final_check``: no transaction is open in any partition (``hanging``),
the LSO is the log end, so every committed transaction is read whole in every partition it
wrote and every record a producer was told was committed is read exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from rafka.cluster.transaction_state import TxnMetadata, TxnState
from rafka.errors import RafkaError
from rafka.storage import record_batch as rb
from rafka.storage.read_committed import ReadCommittedFilter
from tests.unit.cluster.txn_sim.config import InvariantViolation
from tests.unit.cluster.txn_sim.producer import VALUE

if TYPE_CHECKING:
    from tests.unit.cluster.txn_sim.coordinator import Coordinator
    from tests.unit.cluster.txn_sim.producer import Producer
    from tests.unit.cluster.txn_sim.runner import TxnSimulation

Key = tuple[int, int]  # a transaction: (producer id, epoch of its writes)


class Fact(NamedTuple):
    """An appended batch."""

    offset: int
    key: Key
    rids: tuple[int, ...]


def _rids(data, position: int) -> tuple[int, ...]:
    return tuple(VALUE.unpack(v)[0] for v in rb.decode_records(data, position, verify=False).values)


class Checker:
    """See the module docstring."""

    def __init__(self, sim: "TxnSimulation") -> None:
        self.sim = sim
        n = len(sim.partitions)
        self.outcomes: dict[Key, bool] = {}
        self.told: dict[Key, bool] = {}
        self.appended: list[list[Fact]] = [[] for _ in range(n)]
        self.at_offset: list[dict[int, Fact]] = [{} for _ in range(n)]
        self.commit_markers: list[dict[Key, int]] = [{} for _ in range(n)]
        self.marked: list[set[Key]] = [set() for _ in range(n)]  # transactions ended there
        self.written: dict[int, tuple[int, int]] = {}  # record id -> (partition, offset)
        self.sent: dict[int, tuple[str, Key, int]] = {}  # record id -> (producer, key, p)
        self.answered: set[int] = set()  # record ids whose batch a producer saw acknowledged
        self.visible: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(n)]
        self.lso = [0] * n
        self.partition_epochs: list[dict[int, int]] = [{} for _ in range(n)]
        self.coordinator_epochs: dict[int, int] = {}
        self.held: set[tuple[int, int, int]] = set()  # (producer id, epoch, partition)
        self.dirty: set[int] = set()
        self._decoded: list[dict[tuple[int, int], tuple[int, ...]]] = [{} for _ in range(n)]

    # -- the coordinator -----------------------------------------------------------------------

    def on_landed(self, tid: str, meta: TxnMetadata, loaded: TxnMetadata | None,
                  acked: bool) -> None:  # fmt: skip
        """A record of ``__transaction_state`` landed (``acked``: its writer heard so)."""
        if loaded != (None if meta.state == TxnState.DEAD else meta):
            raise InvariantViolation("codec", f"{tid}'s record {meta} reads back as {loaded}")
        if meta.state == TxnState.ONGOING:
            self.held.update((meta.producer_id, meta.producer_epoch, p)
                             for _, p in meta.partitions)  # fmt: skip
        if acked:
            self._epoch_forward(meta, f"the coordinator wrote {tid}'s record")
            if meta.next_producer_id >= 0 or (meta.state == TxnState.EMPTY
                                             and meta.producer_epoch == 0
                                             and meta.previous_producer_id >= 0):  # fmt: skip
                self.sim.stats["moves_to_new_producer_id"] += 1
        if meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        key = (meta.producer_id, meta.producer_epoch - 1)
        commit = meta.state == TxnState.PREPARE_COMMIT
        before = self.outcomes.get(key)
        if before is not None and before != commit:
            self.sim.stats["outcome_rewritten"] += 1
            self.sim.note(f"the outcome of {key} is rewritten: {'commit' if commit else 'abort'}")
            if key in self.told:
                raise InvariantViolation("end_answer", f"{tid}'s transaction {key} was "
                                         f"answered {'commit' if self.told[key] else 'abort'}; "
                                         f"a later record decides {meta.state.value}")  # fmt: skip
            self.dirty.update(range(len(self.appended)))
        self.outcomes[key] = commit
        self.sim.stats["decided_commit" if commit else "decided_abort"] += 1

    def on_applied(self, coordinator: "Coordinator", tid: str, meta: TxnMetadata) -> None:
        # An acked record was checked as it landed; a completion is applied before its
        # record lands (if ever), and a zombie applies what it alone holds: nothing to judge.
        pass

    def on_load(self, coordinator: "Coordinator") -> None:
        for tid, meta in sorted(coordinator.transactions.items()):
            self._epoch_forward(meta, f"{coordinator} loaded {tid}")

    def _epoch_forward(self, meta: TxnMetadata, what: str) -> None:
        pid = meta.producer_id
        last = self.coordinator_epochs.get(pid, -1)
        if meta.producer_epoch < last:
            raise InvariantViolation("epoch", f"{what} with producer {pid} at epoch "
                                              f"{meta.producer_epoch}, after epoch {last}")
        self.coordinator_epochs[pid] = meta.producer_epoch

    # -- the partitions ------------------------------------------------------------------------

    def on_append(self, p: int, offset: int, batch: bytes, opens: bool) -> None:
        """A leader appended ``batch`` at ``offset``; ``opens``: no transaction of its
        producer id and epoch was open in the partition before."""
        header = rb.read_header(batch)
        fact = Fact(offset, (header.producer_id, header.producer_epoch), _rids(batch, 0))
        if opens:
            if (*fact.key, p) not in self.held:
                raise InvariantViolation("added", f"p{p} opened a transaction of {fact.key} "
                                                  f"at {offset}, but no record of the "
                                                  f"coordinator holds p{p} in it")  # fmt: skip
            if fact.key in self.marked[p]:
                raise InvariantViolation("added", f"p{p} opened a transaction of {fact.key} "
                                                  f"at {offset}, after its marker was "
                                                  f"written there")  # fmt: skip
            self.sim.stats["transactions_opened"] += 1
        for rid in fact.rids:
            if rid in self.written:
                raise InvariantViolation("exactly_once", f"record {rid} appended at p{p} "
                                                         f"offset {offset}, and already at "
                                                         f"{self.written[rid]}")  # fmt: skip
            self.written[rid] = (p, offset)
        self.appended[p].append(fact)
        self.at_offset[p][offset] = fact
        self.dirty.add(p)

    def on_marker(self, p: int, offset: int, producer_id: int, epoch: int, commit: bool) -> None:
        key = (producer_id, epoch - 1)
        outcome = self.outcomes.get(key)
        if outcome is not commit:
            raise InvariantViolation("marker", f"p{p} wrote a {'COMMIT' if commit else 'ABORT'} "
                                               f"marker at {offset} for {key}, whose outcome is "
                                               f"{_outcome(outcome)}")  # fmt: skip
        self.marked[p].add(key)
        if commit:
            self.commit_markers[p].setdefault(key, offset)
        self.dirty.add(p)

    def on_reopen(self, p: int) -> None:
        self.dirty.add(p)

    # -- the producers -------------------------------------------------------------------------

    def on_send(self, producer: "Producer", key: Key, p: int, rids: tuple[int, ...]) -> None:
        for rid in rids:
            self.sent[rid] = (producer.name, key, p)

    def on_produce_answered(self, producer: "Producer", p: int, offset: int,
                            rids: tuple[int, ...]) -> None:  # fmt: skip
        fact = self.at_offset[p].get(offset)
        if fact is None or fact.rids != rids:
            raise InvariantViolation("exactly_once", f"{producer} was told records {list(rids)} "
                                                     f"are at p{p} offset {offset}, which holds "
                                                     f"{fact}")  # fmt: skip
        self.answered.update(rids)

    def on_end_answered(self, producer: "Producer", key: Key, commit: bool) -> None:
        outcome = self.outcomes.get(key)
        if (commit and outcome is not True) or (not commit and outcome is True):
            raise InvariantViolation("end_answer", f"{producer} was told its "
                                                   f"{'commit' if commit else 'abort'} of {key} "
                                                   f"succeeded; its outcome is "
                                                   f"{_outcome(outcome)}")  # fmt: skip
        self.told[key] = commit
        self.sim.stats["answered_commit" if commit else "answered_abort"] += 1

    def on_fenced_answer(self, producer: "Producer", error: RafkaError) -> None:
        if producer.fresh:
            raise InvariantViolation("fresh_fenced", f"{producer}, the only producer of its "
                                     f"transactional id, was answered "
                                     f"{type(error).__name__}: {error}")  # fmt: skip

    def on_fatal(self, producer: "Producer", error: RafkaError) -> None:
        if producer.fresh:
            raise InvariantViolation("fresh_fenced", f"{producer}, the only producer of its "
                                     f"transactional id, is fenced for good by "
                                     f"{type(error).__name__}: {error}")  # fmt: skip

    # -- reading -------------------------------------------------------------------------------

    def check_dirty(self) -> None:
        for p in sorted(self.dirty):
            if self.sim.partitions[p].up:
                self.check_partition(p)
                self.dirty.discard(p)

    def check_partition(self, p: int) -> None:
        log = self.sim.partitions[p].log
        lso, hw, leo, start = (log.last_stable_offset, log.high_watermark, log.log_end_offset,
                               log.log_start_offset)  # fmt: skip
        if not start <= lso <= hw <= leo:
            raise InvariantViolation("offsets", f"p{p}: log start {start}, LSO {lso}, high "
                                                f"watermark {hw}, log end {leo}")  # fmt: skip
        if lso < self.lso[p]:
            raise InvariantViolation("offsets", f"p{p}: the LSO went back from {self.lso[p]} to "
                                                f"{lso}")  # fmt: skip
        epochs = self.partition_epochs[p]
        producers = log.producer_state.producers
        for pid in [pid for pid in epochs if pid not in producers]:
            del epochs[pid]  # expired (producer.id.expiration.ms): the log forgot it
            self.sim.stats["partition_forgot_producer"] += 1
        for pid, entry in producers.items():
            if entry.epoch < epochs.get(pid, -1):
                raise InvariantViolation("epoch", f"p{p}: producer {pid} is at epoch "
                                                  f"{entry.epoch} after {epochs[pid]}")
            epochs[pid] = entry.epoch
        visible = self.read(p)
        self._judge(p, lso, visible)
        before = self.visible[p]
        if visible[: len(before)] != before:
            raise InvariantViolation("stable_reads", f"p{p}: a read to LSO {lso} returns "
                                                     f"{_show(visible)}; the one before "
                                                     f"returned {_show(before)}")  # fmt: skip
        self.visible[p] = visible
        self.lso[p] = lso
        self.sim.stats["reads"] += 1

    def read(self, p: int) -> list[tuple[int, tuple[int, ...]]]:
        """(offset, record ids) of every batch a read_committed reader gets from the log
        start to the LSO (see the module docstring)."""
        log = self.sim.partitions[p].log
        decoded = self._decoded[p]
        fetch_bytes = self.sim.fetch_bytes
        txn_filter = ReadCommittedFilter()
        position, out = log.log_start_offset, []
        lso = log.last_stable_offset
        while position < lso:
            result, aborted = log.read_committed(position, fetch_bytes)
            data = result.records
            if not len(data):
                break
            txn_filter.add_aborted(aborted)
            for at, header in txn_filter.select(data):
                if header.base_offset >= lso:
                    raise InvariantViolation("read", f"p{p}: a read_committed fetch returned "
                                                     f"the batch at {header.base_offset}, at or "
                                                     f"past the LSO {lso}")  # fmt: skip
                if header.base_offset < position:
                    continue
                cache_key = (header.base_offset, header.crc)
                rids = decoded.get(cache_key)
                if rids is None:
                    rids = decoded[cache_key] = _rids(data, at)
                out.append((header.base_offset, rids))
            position = rb.next_offset(data)
        return out

    def _judge(self, p: int, lso: int, visible: list) -> None:
        expected = [(f.offset, f.rids) for f in self.appended[p]
                    if f.offset < lso and self.outcomes.get(f.key) is True]  # fmt: skip
        if visible != expected:
            self._explain(p, lso, visible, expected)
        seen: set[int] = set()
        markers = self.commit_markers[p]
        for offset, rids in visible:
            key = self.at_offset[p][offset].key
            if markers.get(key, -1) <= offset:
                raise InvariantViolation("own_marker", f"p{p}: the batch at {offset} of {key} is "
                                                       f"read, but no COMMIT marker of {key} "
                                                       f"follows it")  # fmt: skip
            if seen.intersection(rids):
                raise InvariantViolation("exactly_once", f"p{p}: records "
                                                         f"{sorted(seen.intersection(rids))} "
                                                         f"are read twice")  # fmt: skip
            seen.update(rids)

    def _explain(self, p: int, lso: int, visible: list, expected: list) -> None:
        extra = [v for v in visible if v not in expected]
        if extra:
            offset, rids = extra[0]
            fact = self.at_offset[p].get(offset)
            outcome = None if fact is None else self.outcomes.get(fact.key)
            name = "aborted_read" if outcome is False else "uncommitted_read"
            raise InvariantViolation(name, f"p{p}: read_committed to LSO {lso} returns "
                                           f"records {list(rids)} at {offset}, of "
                                           f"{fact.key if fact else '?'} whose outcome is "
                                           f"{_outcome(outcome)} (written by "
                                           f"{self.sent.get(rids[0], ('?',))[0]})")  # fmt: skip
        missing = [e for e in expected if e not in visible]
        if missing:
            offset, rids = missing[0]
            fact = self.at_offset[p][offset]
            seen = [f"p{q}" for q, batches in enumerate(self.visible) for o, _ in batches
                    if q != p and self.at_offset[q][o].key == fact.key]  # fmt: skip
            seen += [f"p{p}" for o, _ in visible if self.at_offset[p][o].key == fact.key]
            name = "torn_transaction" if seen else "lost_write"
            also = f"; it is read in {sorted(set(seen))}" if seen else ""
            raise InvariantViolation(name, f"p{p}: records {list(rids)} at {offset} of "
                                           f"committed {fact.key} are below the LSO {lso} but "
                                           f"read_committed does not return them{also}")
        raise InvariantViolation("read", f"p{p}: read_committed returns {_show(visible)}, "
                                         f"expected {_show(expected)} (order)")

    # -- after healing -------------------------------------------------------------------------

    def final_check(self) -> None:
        """No transaction open anywhere; every committed record read exactly once."""
        sim = self.sim
        read: set[int] = set()
        for p, partition in enumerate(sim.partitions):
            log = partition.log
            open_txns = log.producer_state.ongoing_transactions()
            if open_txns:
                raise InvariantViolation("hanging", f"p{p}: transactions still open after "
                                                    f"healing (producer id: first offset) "
                                                    f"{open_txns}")  # fmt: skip
            self.check_partition(p)
            if self.lso[p] != log.log_end_offset:
                raise InvariantViolation("offsets", f"p{p}: LSO {self.lso[p]} below the log end "
                                                    f"{log.log_end_offset} with nothing open")
            for _, rids in self.visible[p]:
                read.update(rids)
        for rid, (producer, key, p) in sorted(self.sent.items()):
            if self.told.get(key) is True and rid in self.answered and rid not in read:
                raise InvariantViolation("lost_write", f"record {rid} of {key} by {producer} "
                                                       f"(p{p}) was acknowledged and its "
                                                       f"commit answered, but it is never "
                                                       f"read")  # fmt: skip


def _outcome(outcome: bool | None) -> str:
    return {True: "commit", False: "abort", None: "undecided"}[outcome]


def _show(batches: list) -> str:
    shown = [f"{offset}:{list(rids)}" for offset, rids in batches[-6:]]
    return ("... " if len(batches) > 6 else "") + "[" + ", ".join(shown) + "]"
