"""OffsetsLog over a real partition log, through a fake leader replica and no Ray: loads fence
earlier incarnations of the coordinator, so their late writes are refused, and writes are
retried without being duplicated."""

from __future__ import annotations

import asyncio
import logging

import msgpack
import numpy as np
import pytest

from rafka.actors.offsets_log import RECORDS_PER_BATCH, OffsetsLog
from rafka.actors.replica_produce import split_batches
from rafka.cluster.coordinator_fencing import MAX_PRODUCER_EPOCH, coordinator_producer_id
from rafka.cluster.offsets_records import EPOCH_MARKER, offset_key, offset_value
from rafka.errors import (
    CoordinatorEpochExhausted,
    CoordinatorFenced,
    CoordinatorNotAvailable,
    NotLeaderOrFollower,
    RafkaError,
)
from rafka.storage import record_batch as rb
from rafka.storage.compaction import compact
from rafka.storage.config import LogConfig
from rafka.storage.log import Log, now_ms

SHARD = 3
EARLIEST = -2
LATEST = -1


class _Method:
    """A Ray actor method handle: ``remote(...)`` submits the call at once (calls run in the
    order they were submitted) and returns something to await for the answer."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args):
        self.last = asyncio.ensure_future(self.fn(*args))
        return self.last


class FakeReplica:
    """The leader replica of a one-replica partition (its high watermark is its log end),
    answering ``produce``, ``fetch`` and ``list_offset`` as PartitionReplica does. A test may
    hold the next produce call back before it touches the log, make calls fail without
    appending, or lose the answer of a call that appended."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.produce = _Method(self._produce)
        self.fetch = _Method(self._fetch)
        self.list_offset = _Method(self._list_offset)
        self.gate: asyncio.Event | None = None  # holds the next produce call while unset
        self.held = asyncio.Event()  # set once a produce call waits at the gate
        self.failing = 0  # produce calls to refuse (NotLeaderOrFollower) without appending
        self.answers_to_lose = 0  # produce calls that append, then answer NotLeaderOrFollower
        self.produce_calls = 0
        self.before_next_produce = None  # awaited once, by the next produce call, first

    @property
    def last_produce(self) -> asyncio.Future:
        return self.produce.last

    def hold_next_produce(self) -> asyncio.Event:
        self.gate = asyncio.Event()
        self.held = asyncio.Event()
        return self.gate

    async def _produce(self, batches, acks, timeout_ms, client_id, request_no):
        self.produce_calls += 1
        if self.before_next_produce is not None:
            hook, self.before_next_produce = self.before_next_produce, None
            await hook()
        if self.gate is not None:
            gate, self.gate = self.gate, None
            self.held.set()
            await gate.wait()
        if self.failing:
            self.failing -= 1
            return (NotLeaderOrFollower.errno, "leader moved", -1, [])
        results = []
        for batch in split_batches(batches):
            try:
                info = self.log.append_as_leader(batch, leader_epoch=0)
            except RafkaError as e:
                results.append((e.errno, str(e), -1, -1))
                continue
            results.append((0, "", info.first_offset, -1))
        self.log.update_high_watermark(self.log.log_end_offset)
        if self.answers_to_lose:
            self.answers_to_lose -= 1
            return (NotLeaderOrFollower.errno, "the answer was lost", -1, [])
        return (0, "", self.log.log_start_offset, results)

    async def _fetch(self, offset, max_bytes, min_bytes, max_wait_ms):
        try:
            data = self.log.read(offset, max_bytes, self.log.high_watermark).records
        except RafkaError as e:
            return (e.errno, str(e), -1, -1, -1, np.zeros(0, dtype=np.uint8))
        log = self.log
        return (0, "", log.high_watermark, log.log_start_offset, log.log_end_offset,
                np.frombuffer(bytes(data), dtype=np.uint8))  # fmt: skip

    async def _list_offset(self, timestamp):
        if timestamp == EARLIEST:
            return (0, "", self.log.log_start_offset, -1)
        assert timestamp == LATEST
        return (0, "", self.log.high_watermark, -1)


@pytest.fixture
def replica(tmp_path, monkeypatch):
    config = LogConfig.from_dict({"cleanup.policy": "compact"})
    log = Log(str(tmp_path / f"__consumer_offsets-{SHARD}"), config)
    fake = FakeReplica(log)

    async def leader_replica(self):
        return fake

    monkeypatch.setattr(OffsetsLog, "_leader_replica", leader_replica)
    yield fake
    log.abandon()


def _incarnation(commit_timeout_s: float = 5.0) -> OffsetsLog:
    """One life of shard SHARD's coordinator, its writer started on the running loop."""
    offsets = OffsetsLog("test", SHARD, commit_timeout_s, logging.getLogger("offsets-log-test"))
    offsets.writer_task = offsets.start()
    return offsets


def _commit(offset: int, partition: int = 0):
    return [(offset_key("g", "t", partition), offset_value(offset, 0, "", 1000))]


def _committed(loaded, partition: int = 0) -> int | None:
    committed = loaded.offsets.get("g", {}).get(("t", partition))
    return None if committed is None else committed.offset


def _stop(*incarnations: OffsetsLog) -> None:
    for offsets in incarnations:
        offsets.writer_task.cancel()


def test_a_write_of_an_earlier_incarnation_that_lands_after_a_reload_is_refused(replica):
    """A write the previous incarnation sent before dying, applied after the next one loaded,
    is refused by the replica, and the load after that sees the new incarnation's state."""

    async def scenario():
        a = _incarnation()
        await a.load()
        await a.write(_commit(1))
        gate = replica.hold_next_produce()
        late = asyncio.ensure_future(a.write(_commit(99)))  # sent just before A dies
        await replica.held.wait()

        b = _incarnation()  # Ray restarted the coordinator
        assert _committed(await b.load()) == 1
        await b.write(_commit(5))

        gate.set()  # A's write reaches the log only now
        with pytest.raises(CoordinatorFenced):
            await late
        c = _incarnation()
        assert _committed(await c.load()) == 5
        _stop(a, b, c)

    asyncio.run(scenario())
    values = [v for _, _, v, _ in _records(replica.log)]
    assert offset_value(99, 0, "", 1000) not in values
    assert _epochs_and_sequences(replica.log) == [
        (0, 0, "marker"), (0, 1, "data"),  # A
        (1, 0, "marker"), (1, 1, "data"),  # B
        (2, 0, "marker"),  # C
    ]  # fmt: skip


def test_a_retried_write_whose_answer_was_lost_is_written_once(replica):
    """Batches resent after a lost answer are answered as duplicates, not written twice,
    also when a write spans several batches."""
    records = [r for p in range(RECORDS_PER_BATCH + 500) for r in _commit(p, partition=p)]

    async def scenario():
        a = _incarnation()
        await a.load()
        replica.answers_to_lose = 1
        await a.write(_commit(7))  # appended, answer lost, resent
        calls = replica.produce_calls
        replica.before_next_produce = _lose_answers(replica, 1, after_calls=1)
        await a.write(records)  # the second batch's answer is lost
        assert replica.produce_calls == calls + 3
        loaded = await _incarnation().load()
        assert _committed(loaded) == 0
        assert _committed(loaded, RECORDS_PER_BATCH + 499) == RECORDS_PER_BATCH + 499
        _stop(a)

    asyncio.run(scenario())
    keys = [k for _, k, _, _ in _records(replica.log) if msgpack.unpackb(k)[0] != EPOCH_MARKER]
    assert len(keys) == len(set(keys)) + 1  # the commit to partition 0 twice, nothing else
    assert [(e, s) for e, s, kind in _epochs_and_sequences(replica.log) if kind == "data"] == [
        (0, 1), (0, 2), (0, 2 + RECORDS_PER_BATCH),
    ]  # fmt: skip


def test_after_a_failed_write_the_next_write_fences_again(replica):
    """A write that failed for good (here: appended, but every answer lost) leaves the
    replica's sequence unknown, so the next write first claims the next epoch with a marker
    at sequence 0, then goes on at sequence 1; a reload sees both writes."""

    async def scenario():
        a = _incarnation(commit_timeout_s=0.2)
        await a.load()
        replica.answers_to_lose = 10**6
        with pytest.raises(CoordinatorNotAvailable):
            await a.write(_commit(1))
        replica.answers_to_lose = 0
        await a.write(_commit(2, partition=1))
        assert a.fencing.epoch == 1
        loaded = await _incarnation().load()
        assert (_committed(loaded), _committed(loaded, 1)) == (1, 2)
        _stop(a)

    asyncio.run(scenario())
    assert _epochs_and_sequences(replica.log) == [
        (0, 0, "marker"), (0, 1, "data"),  # the failed write landed
        (1, 0, "marker"), (1, 1, "data"),
        (2, 0, "marker"),
    ]  # fmt: skip


def test_a_refence_that_loses_its_epoch_to_a_newer_incarnation_fences_the_writer(replica):
    """An incarnation fencing again after a failed write claims its epoch + 1; when a newer
    incarnation's load took that epoch first, the replica answers the marker as a duplicate
    of the newer one's, the token tells them apart, and the older one stops writing."""

    async def scenario():
        a = _incarnation(commit_timeout_s=0.2)
        await a.load()
        replica.failing = 10**6
        with pytest.raises(CoordinatorNotAvailable):
            await a.write(_commit(1))
        replica.failing = 0
        b = _incarnation()
        await b.load()
        assert b.fencing.epoch == 1
        with pytest.raises(CoordinatorFenced):
            await a.write(_commit(99))  # re-fence at epoch 1: B's marker
        calls = replica.produce_calls
        with pytest.raises(CoordinatorFenced):
            await a.write(_commit(98))
        assert replica.produce_calls == calls  # a fenced incarnation does not try
        await b.write(_commit(5))
        assert _committed(await _incarnation().load()) == 5
        _stop(a, b)

    asyncio.run(scenario())
    assert [v for _, _, v, _ in _records(replica.log)].count(offset_value(99, 0, "", 1000)) == 0


def test_a_load_whose_marker_loses_the_race_claims_a_higher_epoch(replica):
    """An older incarnation's re-fence marker that lands between a load's first read and its
    marker takes the epoch the load chose; the load sees the marker is not its own, claims
    the next epoch, and the older incarnation's writes are refused from then on."""

    async def scenario():
        a = _incarnation(commit_timeout_s=0.2)
        await a.load()
        replica.failing = 10**6
        with pytest.raises(CoordinatorNotAvailable):
            await a.write(_commit(1))
        replica.failing = 0
        gate = replica.hold_next_produce()
        a_write = asyncio.ensure_future(a.write(_commit(2)))  # A's re-fence marker, held
        await replica.held.wait()
        held_call = replica.last_produce

        async def let_a_marker_land_first():
            gate.set()
            await held_call

        replica.before_next_produce = let_a_marker_land_first  # B's marker comes next
        b = _incarnation()
        loaded = await b.load()
        assert b.fencing.epoch == 2
        try:
            await a_write
            a_wrote = True
        except CoordinatorFenced:
            a_wrote = False
        assert _committed(loaded) == (2 if a_wrote else None)
        with pytest.raises(CoordinatorFenced):
            await a.write(_commit(99))
        await b.write(_commit(5))
        assert _committed(await _incarnation().load()) == 5
        _stop(a, b)

    asyncio.run(scenario())
    markers = [(e, s) for e, s, kind in _epochs_and_sequences(replica.log) if kind == "marker"]
    assert markers == [(0, 0), (1, 0), (2, 0), (3, 0)]  # A, A again, B, the last load


def test_a_load_refuses_an_epoch_past_the_int16_limit(replica):
    """A shard whose writes already carry epoch 32767 cannot claim a higher one: the load
    fails with a typed error that says why."""
    replica.log.append_as_leader(
        rb.encode_batch([offset_value(1, 0, "", 1000)], [offset_key("g", "t", 0)], 1000,
                        producer_id=coordinator_producer_id(SHARD),
                        producer_epoch=MAX_PRODUCER_EPOCH, base_sequence=0),
        leader_epoch=0,
    )  # fmt: skip
    replica.log.update_high_watermark(replica.log.log_end_offset)

    async def scenario():
        a = _incarnation()
        with pytest.raises(CoordinatorEpochExhausted, match="16-bit"):
            await a.load()
        with pytest.raises(RafkaError):
            await a.write(_commit(2))
        _stop(a)

    asyncio.run(scenario())


def test_after_compaction_a_load_still_claims_above_every_epoch(tmp_path, monkeypatch):
    """Compaction keeps only the newest epoch marker (one key per shard) and drops
    superseded batches of older epochs; the newest marker carries the highest epoch, so the
    next load still claims above it and still fences the incarnation before."""
    config = LogConfig.from_dict({"cleanup.policy": "compact", "segment.bytes": 1024})
    log = Log(str(tmp_path / f"__consumer_offsets-{SHARD}"), config)
    fake = FakeReplica(log)

    async def leader_replica(self):
        return fake

    monkeypatch.setattr(OffsetsLog, "_leader_replica", leader_replica)

    async def scenario():
        lives = []
        for life in range(3):
            offsets = _incarnation()
            lives.append(offsets)
            await offsets.load()
            for i in range(20):
                await offsets.write(_commit(100 * life + i))
        log.roll()
        result = compact(log, now_ms() + 1000, force=True)
        assert result.records_out < result.records_in
        assert [kind for _, _, kind in _epochs_and_sequences(log)].count("marker") == 1
        newest = _incarnation()
        lives.append(newest)
        assert _committed(await newest.load()) == 219
        assert newest.fencing.epoch == 3
        with pytest.raises(CoordinatorFenced):
            await lives[2].write(_commit(999))
        _stop(*lives)

    try:
        asyncio.run(scenario())
    finally:
        log.abandon()


def _lose_answers(replica, count: int, after_calls: int):
    """A before_next_produce hook: once ``after_calls`` more produce calls have been
    answered, lose the answers of the next ``count``."""

    async def hook():
        if after_calls <= 0:
            replica.answers_to_lose = count
        else:
            replica.before_next_produce = _lose_answers(replica, count, after_calls - 1)

    return hook


def _epochs_and_sequences(log: Log) -> list[tuple[int, int, str]]:
    """(epoch, base sequence, marker or data) of every batch, in log order."""
    out = []
    data = log.read(log.log_start_offset, 1 << 20).records
    for pos, header in rb.iter_batches(data):
        keys = rb.decode_records(data, pos).keys
        kind = "marker" if keys and msgpack.unpackb(keys[0])[0] == EPOCH_MARKER else "data"
        out.append((header.producer_epoch, header.base_sequence, kind))
    return out


def _records(log: Log):
    """(offset, key, value, batch header) of every record, in log order."""
    out = []
    data = log.read(log.log_start_offset, 1 << 20).records
    for pos, header in rb.iter_batches(data):
        records = rb.decode_records(data, pos)
        keys = records.keys or [None] * len(records)
        for o, k, v in zip(records.offsets, keys, records.values):
            out.append((o, k, v, header))
    return out
