"""Workloads for the crash-consistency checker: deterministic runs of the storage engine that
cover every operation that writes files, driven through ``Driver`` so the ledger knows what
each crash point must and may keep.

Each workload is a function of a Driver and a seeded Random; ``WORKLOADS`` names them with
the topic config they run under.
"""

from __future__ import annotations

import os
import random
from typing import Callable

from rafka.storage import Log, LogConfig, files
from rafka.storage import record_batch as rb
from rafka.storage.compaction import compact
from rafka.storage.retention import delete_expired_segments

from ..support import FakeClock, read_all
from .images import image_of, materialize
from .ledger import Ledger
from .recorder import Recorder, Replayer

PARTITION = "topic-0"


def held(log: Log) -> dict:
    """offset -> (key, value, timestamp) of every record the log serves."""
    return {o: (k, v, t) for o, k, v, t in read_all(log)}


class Driver:
    """Runs storage operations on a log under ``root`` and tells the ledger what each did."""

    def __init__(self, root: str, config: dict, recorder: Recorder, ledger: Ledger) -> None:
        self.root = root
        self.directory = os.path.join(root, PARTITION)
        self.config = config
        self.recorder = recorder
        self.ledger = ledger
        self.clock = FakeClock()
        self.epoch = 0
        self.log = self._open()

    @property
    def point(self) -> int:
        return len(self.recorder.operations)

    def _open(self) -> Log:
        return Log(self.directory, LogConfig.from_dict(self.config), self.clock)

    # -- writes --------------------------------------------------------------------------------

    def append(
        self, values, keys=None, producer: tuple[int, int, int] | None = None, late_ms: int = 0,
        transactional: bool = False,
    ) -> None:  # fmt: skip
        """One batch; ``producer`` is (id, epoch, base sequence) for an idempotent or
        ``transactional`` batch; ``late_ms`` makes its timestamp that much older than the
        clock (timestamps need not increase, so a segment's largest may sit anywhere in it)."""
        ts = self.clock.now - late_ms
        pid, pepoch, seq = producer or (rb.NO_PRODUCER_ID, rb.NO_PRODUCER_EPOCH, rb.NO_SEQUENCE)
        data = rb.encode_batch(values, keys, ts, producer_id=pid, producer_epoch=pepoch,
                               base_sequence=seq, is_transactional=transactional)  # fmt: skip
        self._append(data, values, keys, ts)

    def end_transaction(self, pid: int, epoch: int, kind: rb.ControlType) -> None:
        """The coordinator's marker ending producer ``pid``'s transaction (at ``epoch``)."""
        data = rb.encode_control_batch(kind, producer_id=pid, producer_epoch=epoch,
                                       coordinator_epoch=0, timestamp=self.clock.now)  # fmt: skip
        records = rb.decode_records(data)
        self._append(data, records.values, records.keys, self.clock.now, allow_control=True)

    def _append(self, data: bytes, values, keys, ts: int, allow_control: bool = False) -> None:
        start = self.point
        info = self.log.append_as_leader(data, leader_epoch=self.epoch,
                                         allow_control=allow_control)  # fmt: skip
        if not info.duplicate:
            keys = keys or [None] * len(values)
            self.ledger.appended(start, {
                info.first_offset + i: (keys[i], values[i], ts) for i in range(len(values))
            })  # fmt: skip
        if self.log.unflushed_messages == 0:  # flush.messages made the append flush
            self.ledger.flushed(self.point)
        self.clock.advance(7)

    def append_random(self, rng: random.Random, keys: int = 0) -> None:
        count = rng.randint(1, 6)
        values = [rng.randbytes(rng.randint(0, 90)) for _ in range(count)]
        late_ms = rng.choice([0, 0, 0, 40, 400, -3000])  # -3000: a clock running ahead
        if keys:
            # Some keys are never written again, so compacted segments keep records all
            # through them, not only near the end of the log.
            key_list = [b"k%d" % rng.randrange(keys) if rng.random() < 0.6
                        else b"u%d" % rng.randrange(10**9) for _ in range(count)]  # fmt: skip
            if rng.random() < 0.1:
                values[-1] = None  # a tombstone
            self.append(values, key_list, late_ms=late_ms)
        else:
            self.append(values, late_ms=late_ms)

    def follower_append(self, leader: Log, start: int) -> None:
        """Copy the leader's batches from ``start`` (this log's end) as a follower does."""
        data = leader.read(start, 1 << 20).records
        if not len(data):
            return
        begin = self.point
        self.log.append_as_follower(data)
        self.ledger.appended(begin, {o: c for o, c in held(self.log).items()
                                     if o not in self.ledger.current})  # fmt: skip

    # -- durability ----------------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.ledger.flushed(self.point)

    def roll(self) -> None:
        """A roll flushes the sealed segment, which holds every record so far."""
        self.log.roll()
        self.ledger.flushed(self.point)

    def close_and_reopen(self) -> None:
        self.log.close()
        self.ledger.flushed(self.point)
        self.log = self._open()

    def restart_from_crash(self, point: int, variant: str) -> None:
        """The node crashed at ``point`` (an image ``variant``, see images.py) and restarts
        from what its disk kept: the live directory becomes that image, recorded as a
        restore, and the log reopens, so the checker crashes the recovery itself too."""
        self.log.abandon()
        replayer = Replayer(self.recorder.operations)
        while replayer.done < point:
            replayer.step()
        image = image_of(replayer.model, "restart", point, variant)
        materialize(image, self.root)
        self.recorder.operations.append(("restore", image))
        restart = self.point
        self.log = self._open()
        self.ledger.restarted(point, restart, held(self.log))

    def after_first(self, start: int, kind: str, suffix: str) -> int:
        """The point just after the first ``kind`` operation from ``start`` on a path ending
        with ``suffix`` (the end when there is none)."""
        for i in range(start, self.point):
            op = self.recorder.operations[i]
            if op[0] == kind and op[-1][-1].endswith(suffix):
                return i + 1
        return self.point

    def kill_and_reopen(self) -> None:
        """The process dies (nothing lost: the page cache survives) and restarts."""
        self.log.abandon()
        self.log = self._open()
        self.ledger.removing(self.point, held(self.log))

    def commit(self) -> None:
        """The high watermark reaches the log end (checkpointed, as the owner does)."""
        self.log.update_high_watermark(self.log.log_end_offset)
        self.log.checkpoint_high_watermark()

    def new_leader_epoch(self) -> None:
        self.epoch += 1

    # -- removals ------------------------------------------------------------------------------

    def _removal(self, operation: Callable[[], object], truncation: bool = False) -> None:
        """Every removal returns only once it is durable (each ends with a synced state
        file or flush), so what it removed may not come back after it returns."""
        start = self.point
        operation()
        self.ledger.removing(start, held(self.log), durable_at=self.point, truncation=truncation)
        self.ledger.log_start_moved(self.point, self.log.log_start_offset)

    def truncate_to(self, offset: int) -> None:
        self._removal(lambda: self.log.truncate_to(offset), truncation=True)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._removal(lambda: self.log.truncate_fully_and_start_at(offset), truncation=True)

    def delete_records(self, before: int) -> None:
        self._removal(lambda: self.log.delete_records(before))

    def retention(self) -> None:
        self._removal(lambda: delete_expired_segments(self.log, self.clock.now))

    def compact(self) -> None:
        self._removal(lambda: compact(self.log, self.clock.now, force=True))


# -- the workloads ------------------------------------------------------------------------------


def appends_rolls_and_flushes(d: Driver, rng: random.Random) -> None:
    """Appends across several rolls, flushed now and then; a clean close and reopen; more."""
    for i in range(36):
        d.append_random(rng)
        if rng.random() < 0.2:
            d.flush()
    d.close_and_reopen()
    for i in range(10):
        d.append_random(rng)
    d.flush()
    d.append_random(rng)


def every_append_flushed(d: Driver, rng: random.Random) -> None:
    """flush.messages=1: every acknowledged record is durable, across rolls."""
    for i in range(30):
        d.append_random(rng)


def truncation(d: Driver, rng: random.Random) -> None:
    """A follower diverging: truncation inside and across segments, new epochs, a full
    truncation to a later start (producer snapshots of the old log must not survive it),
    and a kill and restart between."""
    for i in range(20):
        d.append_random(rng)
        if i % 3 == 0:
            d.append([b"p-%d" % i], producer=(5, 0, i // 3))
    d.flush()
    d.truncate_to(d.log.segments[-1].base_offset - 3 if len(d.log.segments) > 1 else 5)
    d.new_leader_epoch()
    for i in range(8):
        d.append_random(rng)
    d.flush()
    d.truncate_to(d.log.log_end_offset - 2)
    d.kill_and_reopen()
    d.append_random(rng)
    d.truncate_fully_and_start_at(d.log.log_end_offset + 40)
    for i in range(8):
        d.append_random(rng)
        if i == 4:  # the same producer, starting over on the new leader's log
            d.append([b"p-again"], producer=(5, 0, 0))
    d.flush()


def log_start_and_retention(d: Driver, rng: random.Random) -> None:
    """delete_records into a segment, then time and size retention."""
    for i in range(30):
        d.append_random(rng)
        d.clock.advance(1000)
    d.flush()
    d.commit()
    d.delete_records(d.log.segments[1].base_offset + 2)
    d.clock.advance(60_000)
    d.retention()
    for i in range(10):
        d.append_random(rng)
    d.flush()
    d.commit()
    d.retention()
    for i in range(6):  # not flushed: delete_records past records a power loss may take
        d.append_random(rng)
    d.commit()
    d.delete_records(d.log.log_end_offset - 2)
    d.append_random(rng)
    d.close_and_reopen()


def compaction(d: Driver, rng: random.Random) -> None:
    """Keyed appends with tombstones, two compaction passes (cleaned output, swap, rename),
    appends between and a clean close."""
    for i in range(30):
        d.append_random(rng, keys=6)
    d.roll()
    d.commit()
    d.compact()
    for i in range(20):
        d.append_random(rng, keys=6)
    d.roll()
    d.commit()
    d.clock.advance(2 * 86_400_000)  # tombstones past delete.retention.ms
    d.compact()
    d.append_random(rng, keys=6)
    d.flush()
    d.close_and_reopen()


def idempotent_producers(d: Driver, rng: random.Random) -> None:
    """Idempotent batches of three producers, retries answered from producer state,
    snapshots at every roll and at close, and a restart after a kill."""
    sequences = {1: 0, 2: 0, 3: 0}
    for i in range(30):
        pid = rng.choice(list(sequences))
        count = rng.randint(1, 4)
        d.append([b"p%d-%d" % (pid, sequences[pid] + j) for j in range(count)],
                 producer=(pid, 0, sequences[pid]))  # fmt: skip
        if rng.random() < 0.2:  # the same batch again: a retry whose answer was lost
            d.append([b"p%d-%d" % (pid, sequences[pid] + j) for j in range(count)],
                     producer=(pid, 0, sequences[pid]))  # fmt: skip
        sequences[pid] += count
        if rng.random() < 0.15:
            d.flush()
    d.kill_and_reopen()
    for pid in sequences:
        d.append([b"p%d-%d" % (pid, sequences[pid])], producer=(pid, 0, sequences[pid]))
        sequences[pid] += 1
    d.close_and_reopen()


def compaction_of_small_segments(d: Driver, rng: random.Random) -> None:
    """Compaction groups of several small segments, the last of which loses every record
    (its keys are all written again later), so a group's output ends before its inputs do."""
    for round_ in range(2):
        for i in range(4):
            d.append([b"keep-%d-%d" % (round_, i)], [b"keep-%d-%d" % (round_, i)])
        d.roll()
        for i in range(4):
            d.append([b"old-%d" % i], [b"again-%d" % i])
        d.roll()
    for i in range(6):
        d.append([b"new-%d" % i + b"x" * 120], [b"again-%d" % (i % 4)])
    d.roll()
    d.commit()
    d.compact()
    d.append([b"last"], [b"last"])
    d.flush()


def follower_of_a_compacted_leader(d: Driver, rng: random.Random) -> None:
    """A follower copying a compacted leader's batches (gaps between them) under the delete
    policy, so recovery must accept the gaps it was told about."""
    leader_dir = d.directory + "-leader"
    leader = Log(leader_dir, LogConfig.from_dict({**d.config, "cleanup.policy": "compact"}),
                 d.clock)  # fmt: skip
    for i in range(30):
        values = [rng.randbytes(20) for _ in range(rng.randint(1, 3))]
        leader.append_as_leader(rb.encode_batch(values, [b"k%d" % rng.randrange(5)
                                                          for _ in values], d.clock.now),
                                leader_epoch=0)  # fmt: skip
    leader.roll()
    leader.update_high_watermark(leader.log_end_offset)
    compact(leader, d.clock.now, force=True)
    d.follower_append(leader, 0)
    d.flush()
    leader.close()


def restarts_that_crash_during_recovery(d: Driver, rng: random.Random) -> None:
    """Crashes part way through retention, truncation and compaction, each followed by a
    restart whose recovery (index rebuilds, swap completion, tail cuts) the checker crashes
    at every point too."""
    for i in range(30):
        d.append_random(rng, keys=5)
        d.clock.advance(1000)
    d.flush()
    d.commit()
    d.clock.advance(60_000)
    start = d.point
    d.retention()
    # Killed just after retention unlinked a segment's offset index: the restart rebuilds
    # it, and the checker kills that rebuild part way.
    d.restart_from_crash(d.after_first(start, "unlink", ".index"), "kill")
    for i in range(6):
        d.append_random(rng, keys=5)
    d.roll()
    d.commit()
    start = d.point
    d.compact()
    d.restart_from_crash(start + 2 * (d.point - start) // 3, "power-meta-0")
    for i in range(6):
        d.append_random(rng, keys=5)
    start = d.point
    d.truncate_to(d.log.log_end_offset - 4)
    d.restart_from_crash(start + (d.point - start) // 2, "power-torn-0")
    d.append_random(rng, keys=5)
    d.flush()
    # An offset index that no longer matches its log (bit rot): the next open rebuilds it,
    # and the checker crashes that rebuild part way.
    d.log.close()
    d.ledger.flushed(d.point)
    first = d.log.segments[0]
    files.create_file(first.offset_index.path, b"\xff" * 16, sync=True)
    d.log = d._open()
    d.append_random(rng, keys=5)
    d.flush()


class Transactions:
    """Producers that write transactions through a Driver, keeping each one's epoch and next
    sequence; every end bumps the epoch, as Kafka 4's coordinator does."""

    def __init__(self, driver: Driver, producers: list[int]) -> None:
        self.d = driver
        self.epochs = {p: 0 for p in producers}
        self.sequences = {p: 0 for p in producers}

    def write(self, rng: random.Random, pid: int, keys: int = 0) -> None:
        count = rng.randint(1, 4)
        values = [b"t%d-%d-%d" % (pid, self.epochs[pid], self.sequences[pid] + i)
                  for i in range(count)]  # fmt: skip
        key_list = [b"k%d" % rng.randrange(keys) for _ in values] if keys else None
        self.d.append(values, key_list, producer=(pid, self.epochs[pid], self.sequences[pid]),
                      transactional=True)  # fmt: skip
        self.sequences[pid] += count

    def end(self, pid: int, kind: rb.ControlType) -> None:
        self.epochs[pid] += 1
        self.sequences[pid] = 0
        self.d.end_transaction(pid, self.epochs[pid], kind)

    def step(self, rng: random.Random, keys: int = 0) -> None:
        """A transactional write (half the time), an end (commit or abort, sometimes of a
        producer that wrote nothing), or a plain append."""
        pid = rng.choice(list(self.epochs))
        r = rng.random()
        if r < 0.5:
            self.write(rng, pid, keys)
        elif r < 0.8:
            self.end(pid, rng.choice([rb.ControlType.ABORT, rb.ControlType.COMMIT]))
        else:
            self.d.append_random(rng, keys=keys)


def transactions(d: Driver, rng: random.Random) -> None:
    """Interleaved transactions of three producers (commits, aborts, aborts with nothing
    written, markers across rolls) with plain appends; a kill and restart with transactions
    open; a truncation that removes markers; a clean close and reopen; a restart from a
    power loss whose recovery the checker crashes too."""
    producers = Transactions(d, [1, 2, 3])
    for _ in range(40):
        producers.step(rng)
        if rng.random() < 0.15:
            d.flush()
    d.kill_and_reopen()
    for _ in range(12):
        producers.step(rng)
    d.flush()
    d.truncate_to(d.log.log_end_offset - 9)
    # The truncation rewound the producers: new ones go on from here.
    producers = Transactions(d, [4, 5])
    for _ in range(10):
        producers.step(rng)
    d.close_and_reopen()
    start = d.point
    for _ in range(10):
        producers.step(rng)
    d.flush()
    d.restart_from_crash(start + (d.point - start) // 2, "power")
    producers = Transactions(d, [6, 7])
    for _ in range(6):
        producers.step(rng)
    d.flush()


def compacted_transactions(d: Driver, rng: random.Random) -> None:
    """Keyed transactions, some aborted, under compaction: passes that drop aborted batches
    and move transaction-index entries into cleaned segments, then more transactions and a
    clean close."""
    producers = Transactions(d, [1, 2])
    for _ in range(36):
        producers.step(rng, keys=5)
    for pid in (1, 2):
        producers.end(pid, rb.ControlType.ABORT)
    d.roll()
    d.commit()
    d.compact()
    for _ in range(20):
        producers.step(rng, keys=5)
    d.roll()
    d.commit()
    d.compact()
    producers.write(rng, 1, keys=5)
    d.flush()
    d.close_and_reopen()


def _config(**overrides) -> dict:
    base = {"segment.bytes": 1400, "index.interval.bytes": 120}
    return {**base, **overrides}


# name -> (workload, topic config, whether offsets must be contiguous)
WORKLOADS: dict[str, tuple[Callable[[Driver, random.Random], None], dict, bool]] = {
    "appends_rolls_and_flushes": (appends_rolls_and_flushes, _config(), True),
    "every_append_flushed": (every_append_flushed, _config(**{"flush.messages": 1}), True),
    "truncation": (truncation, _config(), False),
    "log_start_and_retention": (
        log_start_and_retention,
        _config(**{"retention.ms": 20_000, "retention.bytes": 2500}),
        True,
    ),
    "compaction": (
        compaction,
        _config(**{"cleanup.policy": "compact", "delete.retention.ms": 86_400_000}),
        False,
    ),
    "idempotent_producers": (idempotent_producers, _config(), True),
    "follower_of_a_compacted_leader": (follower_of_a_compacted_leader, _config(), False),
    "compaction_of_small_segments": (
        compaction_of_small_segments,
        _config(**{"cleanup.policy": "compact", "segment.bytes": 600}),
        False,
    ),
    "transactions": (transactions, _config(), True),
    "compacted_transactions": (
        compacted_transactions,
        _config(**{"cleanup.policy": "compact", "delete.retention.ms": 86_400_000}),
        False,
    ),
    "restarts_that_crash_during_recovery": (
        restarts_that_crash_during_recovery,
        _config(**{"retention.ms": 20_000, "cleanup.policy": "compact,delete",
                   "delete.retention.ms": 86_400_000}),
        False,
    ),
}
