"""``replication.throttled.rate`` in the follower fetch loop: a replica being added by a move
waits out its byte budget between fetches and asks for at most a burst, a batch larger than
the budget is still taken (its debt paid by waiting), and an in-sync follower, or one that
caught up with the leader, never waits. The real loop over a real log, a fake leader that
answers whole batches up to the size asked, and a fake clock: no Ray, no real waiting."""

from __future__ import annotations

import asyncio

import numpy as np

from rafka.actors.follower_throttle import FollowerThrottle
from rafka.actors.replica_follower import ReplicaFollower
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig
from rafka.storage.log import Log
from tests.unit.actors.test_replica_follower import EPOCH, LEADER, FakeReplica, _at

FOLLOWER = 2
KIB = 1024
RATE = 8 * KIB


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class BatchLeader:
    """A leader whose log is ``count`` batches of ``value_size`` bytes each; it answers a
    follower fetch with whole batches from the offset asked, up to ``max_bytes`` (at least
    one), and a high watermark at its log end. Records the sizes asked for."""

    def __init__(self, count: int, value_size: int) -> None:
        self.batches = [
            _at(rb.encode_batch([bytes([i % 251]) * value_size], timestamps=1000,
                                partition_leader_epoch=EPOCH), i)
            for i in range(count)
        ]  # fmt: skip
        self.asked: list[int] = []

    @property
    def replicate(self):
        leader = self

        class Method:
            @staticmethod
            def remote(follower, leader_epoch, fetch_offset, last_epoch, max_bytes, wait_ms,
                       replica_epoch, log_end_offset=None):  # fmt: skip
                async def answer():
                    await asyncio.sleep(0)
                    leader.asked.append(max_bytes)
                    out = bytearray()
                    for batch in leader.batches[fetch_offset:]:
                        if out and len(out) + len(batch) > max_bytes:
                            break
                        out += batch
                    end = len(leader.batches)
                    return (0, "", end, 0, end, -1, -1, np.frombuffer(bytes(out), np.uint8))
                return answer()

        return Method

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.batches)


def follow(tmp_path, leader: BatchLeader, state: dict, settings: dict,
           more: BatchLeader | None = None):  # fmt: skip
    """Run the follower loop of broker FOLLOWER's replica until it holds the leader's log
    (then, given ``more``, until it also holds ``more``'s longer log, served by the same
    leader); returns (throttle, clock)."""
    log = Log(str(tmp_path / "t-0"), LogConfig())
    replica = FakeReplica(log)
    replica.broker_id = FOLLOWER
    replica.state = {"leader": LEADER, "leader_epoch": EPOCH, "hosts": [0, 0], **state}
    replica.settings = settings
    clock = FakeClock()
    follower = ReplicaFollower(replica)
    follower.throttle = FollowerThrottle(clock=clock, sleep=clock.sleep)
    follower._handles[LEADER] = (0, leader)

    async def run() -> None:
        follower.start_if_needed()
        for target in (leader, more):
            if target is None:
                continue
            leader.batches[:] = target.batches
            for _ in range(5000):
                await asyncio.sleep(0)
                if log.log_end_offset == len(target.batches):
                    break
        follower.stop()

    asyncio.run(run())
    final = more or leader
    assert log.log_end_offset == len(final.batches)
    log.close()
    return follower.throttle, clock


ADDING = {"replicas": [LEADER, FOLLOWER], "isr": [LEADER], "adding": [FOLLOWER],
          "removing": [], "throttled_moves": [1, 1]}  # fmt: skip
IN_SYNC = {"replicas": [LEADER, FOLLOWER], "isr": [LEADER, FOLLOWER], "adding": [],
           "removing": []}  # fmt: skip


def test_an_adding_replica_waits_out_its_budget_and_asks_for_one_burst_at_most(tmp_path):
    """Copying 64 KiB at 8 KiB/s: every fetch asks for at most one burst, the loop waits
    between fetches, and the waits add up to the copy's length at the rate, less a burst."""
    leader = BatchLeader(64, 1000)
    throttle, clock = follow(tmp_path, leader, ADDING,
                             {"replication.throttled.rate": RATE})  # fmt: skip
    assert max(leader.asked) <= RATE
    assert throttle.waited_s > 0 and clock.sleeps
    assert throttle.waited_s >= (leader.size - 2 * RATE) / RATE
    assert throttle.throttled_bytes == leader.size
    assert throttle.describe()["rate"] == RATE


def test_the_share_divides_the_rate(tmp_path):
    """Told that four moves copy into its broker, the replica takes a quarter of the rate:
    the waits are four times as long."""
    leader = BatchLeader(32, 1000)
    throttle, _ = follow(tmp_path, leader, {**ADDING, "throttled_moves": [4, 1]},
                         {"replication.throttled.rate": RATE})  # fmt: skip
    assert throttle.describe()["rate"] == RATE // 4
    assert max(leader.asked) <= RATE // 4
    assert throttle.waited_s >= (leader.size - 2 * (RATE // 4)) / (RATE // 4)


def test_a_batch_larger_than_the_budget_is_taken_and_its_debt_paid(tmp_path):
    """Batches of 20 KiB at 8 KiB/s: each fetch asks for 8 KiB and gets a whole batch; the
    copy completes, each debt paid by about 2.5 s of waiting."""
    leader = BatchLeader(6, 20 * KIB)
    throttle, _ = follow(tmp_path, leader, ADDING, {"replication.throttled.rate": RATE})
    assert max(leader.asked) <= RATE
    assert throttle.waited_s >= (leader.size - 2 * 20 * KIB) / RATE


def test_an_in_sync_follower_never_waits(tmp_path):
    """The same copy for a follower in the ISR (not being added): no wait, full-size asks."""
    leader = BatchLeader(64, 1000)
    throttle, clock = follow(tmp_path, leader, IN_SYNC, {"replication.throttled.rate": RATE})
    assert throttle.waited_s == 0 and clock.sleeps == []
    assert set(leader.asked) == {1 << 20}
    assert throttle.throttled_bytes == 0


def test_rate_zero_means_the_move_copies_unthrottled(tmp_path):
    """With the setting at 0 an adding replica asks for full fetches and never waits."""
    leader = BatchLeader(64, 1000)
    throttle, clock = follow(tmp_path, leader, ADDING, {"replication.throttled.rate": 0})
    assert throttle.waited_s == 0 and clock.sleeps == []
    assert set(leader.asked) == {1 << 20}


def test_a_replica_that_caught_up_with_the_leader_is_no_longer_held_back(tmp_path):
    """Once the adding replica reached the leader's high watermark (the leader may take it
    into the ISR before the new state reaches the replica), what the leader writes next is
    fetched at full size and without waiting."""
    first = BatchLeader(16, 1000)
    first_size = first.size
    grown = BatchLeader(64, 1000)
    throttle, clock = follow(tmp_path, first, ADDING, {"replication.throttled.rate": RATE},
                             more=grown)  # fmt: skip
    assert clock.sleeps and throttle.throttled_bytes == first_size
    assert throttle.waited_s <= first_size / RATE  # nothing of the rest was waited for
    assert first.asked[-1] == 1 << 20  # after catching up: full fetches
