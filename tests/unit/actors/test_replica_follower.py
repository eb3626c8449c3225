"""The follower fetch loop survives a failing disk: it retries with backoff, reports the
replica as failed to the controller (which takes it out of the ISR), and catches up once
its appends work again. Behind a busy leader it sends its next fetch before appending the
last answer, and never reports records it has not written. Runs the real loop over a real
log, with a fake leader and controller and no Ray calls."""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Any

import numpy as np

from rafka.actors.replica_follower import ReplicaFollower
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig
from rafka.storage.log import Log
from rafka.storage.record_columns import decode_records

LEADER = 1
EPOCH = 3


class FakeLeader:
    """A leader that holds ``batches`` (encoded at offsets 0..) and answers ``replicate``."""

    def __init__(self, count: int) -> None:
        self.data = b"".join(
            _at(rb.encode_batch([b"v%d" % i], timestamps=1000, partition_leader_epoch=EPOCH), i)
            for i in range(count)
        )
        self.count = count

    @property
    def replicate(self):
        leader = self

        class Method:
            @staticmethod
            def remote(follower, leader_epoch, fetch_offset, last_epoch, max_bytes, wait_ms,
                       replica_epoch, log_end_offset=None):  # fmt: skip
                async def answer():
                    await asyncio.sleep(0)
                    records = leader.slice_from(fetch_offset)
                    return (0, "", leader.count, 0, leader.count, -1, -1, records)
                return answer()

        return Method

    def slice_from(self, offset: int) -> np.ndarray:
        view = memoryview(self.data)
        pos = 0
        while pos < len(view):
            header = rb.read_header(view, pos)
            if header.base_offset >= offset:
                return np.frombuffer(self.data[pos:], dtype=np.uint8)
            pos += header.size
        return np.zeros(0, dtype=np.uint8)


def _at(batch: bytes, offset: int) -> bytes:
    buf = bytearray(batch)
    rb.set_base_offset(buf, offset)
    return bytes(buf)


class FakeController:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    async def call(self, method: str, *args: Any, timeout_s: float = 10.0) -> Any:
        self.calls.append((method, args))
        return None


class FakeReplica:
    """What the follower loop uses of a PartitionReplica."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.closed = False
        self.checked_in = True
        self.leader = None
        self.topic, self.topic_id, self.partition, self.broker_id = "t", "tid", 0, 2
        self.namespace = None
        self.fetches = None  # alone: straight to the leader's handle
        self.replica_epoch = 7
        self.state = {"leader": LEADER, "leader_epoch": EPOCH, "replicas": [LEADER, 2],
                      "hosts": [0, 0]}
        self.settings: dict[str, Any] = {}
        self.logger = logging.getLogger("test.follower")
        self.controller = FakeController()
        self.log_changed = False

    def adopt(self, state) -> None:
        pass

    def set_high_watermark(self, offset: int) -> bool:
        if offset > self.log.high_watermark:
            self.log.update_high_watermark(offset)
            return True
        return False


def test_a_follower_whose_appends_fail_reports_itself_and_catches_up_when_they_work(tmp_path):
    """Two appends fail with a full disk; the loop goes on, tells the controller once, and
    then replicates every record."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    leader = FakeLeader(5)
    real_append = log.append_as_follower
    failures = [OSError(errno.ENOSPC, "No space left on device")] * 2

    def failing_append(records):
        if failures:
            raise failures.pop()
        return real_append(records)

    log.append_as_follower = failing_append
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, leader)

    async def run() -> None:
        follower.start_if_needed()
        for _ in range(400):
            await asyncio.sleep(0.01)
            if log.log_end_offset == 5:
                break
        follower.stop()

    asyncio.run(run())
    assert log.log_end_offset == 5
    reports = [args for method, args in replica.controller.calls if method == "replica_failed"]
    assert len(reports) == 1
    assert reports[0][:4] == ("tid", 0, 2, 7)
    log.close()


def test_a_fetch_loop_replaced_while_its_fetch_is_answered_stops_without_writing(tmp_path):
    """The replica's role changes (a pushed state restarts the loop) just as the old loop's
    fetch is answered: asyncio's wait_for may then hand the old loop the answer instead of
    its cancellation. The old loop must not write it nor go on fetching beside the new one,
    or both append the same records and the replica fails."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    leader = FakeLeader(5)
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, leader)
    replaced = []
    real = FakeLeader.replicate.fget(leader).remote

    class Replacing:
        @staticmethod
        def remote(*args):
            async def answer():
                result = await real(*args)
                if not replaced:  # the loop is replaced while this answer is on its way
                    replaced.append(follower._task)
                    follower.stop()
                    follower.start_if_needed()
                return result
            return answer()

    class Leader:
        replicate = Replacing

    follower._handles[LEADER] = (0, Leader())

    old_loop_ended = []

    async def run() -> None:
        follower.start_if_needed()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if log.log_end_offset == 5 and replaced and replaced[0].done():
                break
        old_loop_ended.append(bool(replaced) and replaced[0].done())
        follower.stop()

    asyncio.run(run())
    assert log.log_end_offset == 5
    assert old_loop_ended == [True]  # one loop at a time
    assert not [c for c in replica.controller.calls if c[0] == "replica_failed"]
    log.close()


# -- fetches sent before the append (prefetch) -----------------------------------------------


#: Fetches of at most 100 bytes: two of these batches fill an answer, so the follower is
#: behind by a chunk whenever the leader holds more.
SMALL_FETCHES = {"replica.fetch.max.bytes": 100}


class ChunkedLeader(FakeLeader):
    """A leader that answers at most ``per_fetch`` batches a fetch (so a follower is behind
    after each answer) and records every fetch: (fetch offset, reported log end, the
    follower's real log end when the fetch arrived, epoch). ``hold``: fetch offsets whose
    answer waits for ``release`` (set when one arrives: ``held``)."""

    def __init__(self, count: int, per_fetch: int, log: Log, epoch: int = EPOCH) -> None:
        super().__init__(count)
        self.per_fetch = per_fetch
        self.follower_log = log
        self.epoch = epoch
        self.fetches: list[tuple[int, int, int, int]] = []
        self.hold: set[int] = set()
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    @property
    def replicate(self):
        leader = self

        class Method:
            @staticmethod
            def remote(follower, leader_epoch, fetch_offset, last_epoch, max_bytes, wait_ms,
                       replica_epoch, log_end_offset=None):  # fmt: skip
                leader.fetches.append((fetch_offset, log_end_offset,
                                       leader.follower_log.log_end_offset, leader_epoch))

                async def answer():
                    await asyncio.sleep(0)
                    if fetch_offset in leader.hold:
                        leader.held.set()
                        await leader.release.wait()
                    records = leader.chunk_from(fetch_offset)
                    return (0, "", leader.count, 0, leader.count, -1, -1, records)
                return answer()

        return Method

    def chunk_from(self, offset: int) -> np.ndarray:
        records = self.slice_from(offset)
        view, pos, taken = memoryview(records), 0, 0
        while pos < len(view) and taken < self.per_fetch:
            pos += rb.read_header(view, pos).size
            taken += 1
        return records[:pos]


def _follow_until(follower: ReplicaFollower, done, steps: int = 400) -> None:
    async def run() -> None:
        follower.start_if_needed()
        for _ in range(steps):
            await asyncio.sleep(0.01)
            if done():
                break
        follower.stop()
        await asyncio.sleep(0)

    asyncio.run(run())


def _values(log: Log) -> list[bytes]:
    """Every value in ``log``, in offset order."""
    data = log.read(0, 1 << 20).records
    return [v for pos, _ in rb.iter_batches(data) for v in decode_records(data, pos).values]


def test_a_follower_behind_the_leader_fetches_before_appending_and_reports_only_what_it_wrote(
    tmp_path,
):
    """Ten batches, two an answer: each fetch but the first starts at the end of the answer
    before it, in order, and goes out before that answer is written (its reported log end
    is behind where it reads); no fetch reports more than the follower had written."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.settings = SMALL_FETCHES
    leader = ChunkedLeader(10, per_fetch=2, log=log)
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, leader)
    _follow_until(follower, lambda: log.log_end_offset == 10 and len(leader.fetches) > 5)
    assert log.log_end_offset == 10
    assert _values(log) == [b"v%d" % i for i in range(10)]
    offsets = [f[0] for f in leader.fetches]
    assert offsets[:6] == [0, 2, 4, 6, 8, 10]  # in order, each from the previous answer's end
    prefetched = [f for f in leader.fetches[:5] if f[1] < f[0]]
    assert len(prefetched) == 4  # every fetch while the leader held more
    assert all(reported <= written for _, reported, written, _ in leader.fetches)
    log.close()


def test_an_append_failing_under_a_prefetch_drops_it_and_fetches_again_from_the_log_end(
    tmp_path,
):
    """The append of the second answer fails while the fetch after it is out: that fetch's
    answer (which starts where nothing was written) is never applied, the loop fetches
    again from its real log end, and the log ends whole, without a gap or a duplicate."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.settings = SMALL_FETCHES
    leader = ChunkedLeader(8, per_fetch=2, log=log)
    real_append = log.append_as_follower
    appends = []

    def failing_second_append(records):
        appends.append(1)
        if len(appends) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_append(records)

    log.append_as_follower = failing_second_append
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, leader)
    _follow_until(follower, lambda: log.log_end_offset == 8)
    assert _values(log) == [b"v%d" % i for i in range(8)]
    offsets = [f[0] for f in leader.fetches]
    assert offsets[:3] == [0, 2, 4]  # the fetch from 4 went out before the failed append
    assert offsets[3] == 2  # then again from the real log end
    assert all(reported <= written for _, reported, written, _ in leader.fetches)
    log.close()


def test_a_prefetch_to_a_leader_that_lost_its_epoch_is_dropped_and_the_new_one_is_asked(
    tmp_path,
):
    """A new leader epoch arrives while a prefetched fetch waits at the old leader: its
    answer is not written; the loop asks the new leader from the log end it really has."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.settings = SMALL_FETCHES
    old = ChunkedLeader(6, per_fetch=2, log=log)
    old.hold = {2}  # the prefetch from offset 2 waits
    new = ChunkedLeader(6, per_fetch=2, log=log, epoch=EPOCH + 1)
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, old)
    follower._handles[3] = (0, new)

    async def run() -> None:
        follower.start_if_needed()
        await asyncio.wait_for(old.held.wait(), 5)
        # The controller moves the leadership: the loop restarts under the new state.
        replica.state = {"leader": 3, "leader_epoch": EPOCH + 1, "replicas": [LEADER, 2, 3],
                         "hosts": [0, 0, 0]}  # fmt: skip
        follower.stop()
        follower.start_if_needed()
        old.release.set()  # the old leader answers now: too late
        for _ in range(400):
            await asyncio.sleep(0.01)
            if log.log_end_offset == 6:
                break
        follower.stop()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert _values(log) == [b"v%d" % i for i in range(6)]
    assert new.fetches[0][0] == 2 and new.fetches[0][3] == EPOCH + 1  # from its real log end
    assert all(reported <= written for _, reported, written, _ in old.fetches + new.fetches)
    log.close()


class BatchingHost:
    """A leader host behind the real FetchBatcher (every replica of a ReplicaHost fetches
    through one): answers ``replicate_many`` from ``leader`` and records, per fetch, (fetch
    offset, reported log end, the follower's real log end when the call was submitted)."""

    def __init__(self, leader: ChunkedLeader, log: Log) -> None:
        self.leader, self.log, self.seen = leader, log, []

    @property
    def replicate_many(self):
        host = self

        class Method:
            @staticmethod
            def remote(requests):
                answers = []
                for _, _, *args in requests:
                    fetch_offset, log_end = args[2], args[7]
                    host.seen.append((fetch_offset, log_end, host.log.log_end_offset))
                    records = host.leader.chunk_from(fetch_offset)
                    answers.append((0, "", host.leader.count, 0, host.leader.count, -1, -1,
                                    records))  # fmt: skip

                async def answer():
                    await asyncio.sleep(0)
                    return answers
                return answer()

        return Method


def test_through_the_fetch_batcher_a_prefetch_leaves_before_the_append(tmp_path):
    """The batcher sends what the loops of one moment ask for a turn or two later; a
    prefetch must not wait for that, or it leaves after the append it was to overlap and
    only reports an older log end."""
    from rafka.actors.fetch_batcher import FetchBatcher
    from rafka.actors.replica_handle import ReplicaHandle

    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.settings = SMALL_FETCHES
    replica.fetches = FetchBatcher()
    host = BatchingHost(ChunkedLeader(10, per_fetch=2, log=log), log)
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, ReplicaHandle(host, "tid", 0))
    _follow_until(follower, lambda: log.log_end_offset == 10 and len(host.seen) > 5)
    assert _values(log) == [b"v%d" % i for i in range(10)]
    prefetched = [s for s in host.seen if s[1] < s[0]]
    assert len(prefetched) == 4
    assert all(real < fetch for fetch, _, real in prefetched), host.seen  # before the append
    assert all(reported <= real for _, reported, real in host.seen)
    log.close()


class TornLeader(ChunkedLeader):
    """Answers the first fetch once with its last batch cut short."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.torn = False

    def chunk_from(self, offset: int) -> np.ndarray:
        records = super().chunk_from(offset)
        if offset == 0 and not self.torn:
            self.torn = True
            return records[:-7]
        return records


def test_a_torn_answer_is_a_failed_write_and_the_loop_goes_on(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.settings = SMALL_FETCHES
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, TornLeader(8, per_fetch=2, log=log))
    _follow_until(follower, lambda: log.log_end_offset == 8, steps=300)
    assert _values(log) == [b"v%d" % i for i in range(8)]
    log.close()


def test_a_follower_behind_by_less_than_a_chunk_appends_first_and_reports_at_once(tmp_path):
    """Answers far below the fetch size (a trickle of records): every fetch goes out after
    the append before it and reports everything the follower wrote, so the high watermark
    never waits a fetch longer for it."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)  # the default 1 MiB fetches
    leader = ChunkedLeader(10, per_fetch=2, log=log)
    follower = ReplicaFollower(replica)
    follower._handles[LEADER] = (0, leader)
    _follow_until(follower, lambda: log.log_end_offset == 10 and len(leader.fetches) > 5)
    assert _values(log) == [b"v%d" % i for i in range(10)]
    assert all(reported == fetch_offset for fetch_offset, reported, _, _ in leader.fetches)
    log.close()
