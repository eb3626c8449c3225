"""The follower fetch loop survives a failing disk: it retries with backoff, reports the
replica as failed to the controller (which takes it out of the ISR), and catches up once
its appends work again. Runs the real loop over a real log, with a fake leader and
controller and no Ray calls."""

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
                       replica_epoch):  # fmt: skip
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
