"""A running replica asked to confirm a newer recorded replica epoch checks in again (the
record came from a dead life's late check-in), and ignores the request otherwise. Runs the
replica class outside Ray with a fake controller link."""

from __future__ import annotations

import asyncio

from rafka.actors.partition_replica import PartitionReplica


def state() -> dict:
    return {
        "topic": "orders", "topic_id": "tid", "partition": 0, "broker_id": 1,
        "replicas": [0, 1], "isr": [0, 1], "leader": 0, "leader_epoch": 3, "partition_epoch": 4,
        "config": {}, "replica_epoch": 5,
    }  # fmt: skip


class FakeLink:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[tuple] = []

    async def call(self, method: str, *args, timeout_s: float = 10.0):
        self.calls.append((method, *args))
        return self.answer


def test_a_replica_behind_the_recorded_epoch_checks_in_again_cleanly(tmp_path):
    """It reports a clean start (this life lost nothing) and takes the epoch answered."""
    replica = PartitionReplica(str(tmp_path), state())
    link = replica.controller = FakeLink(({**state(), "partition_epoch": 5}, True, 9))

    async def run():
        await replica.confirm_replica_epoch(7)
        replica.follower.stop()

    asyncio.run(run())
    assert replica.replica_epoch == 9
    method, topic_id, partition, broker, clean, *_ = link.calls[0]
    assert (method, topic_id, partition, broker, clean) == ("replica_started", "tid", 0, 1, True)
    asyncio.run(replica.close())


def test_a_replica_at_or_past_the_recorded_epoch_does_nothing(tmp_path):
    """A request about an epoch it already holds (or passed) is stale itself."""
    replica = PartitionReplica(str(tmp_path), state())
    link = replica.controller = FakeLink(None)
    asyncio.run(replica.confirm_replica_epoch(5))
    assert link.calls == [] and replica.replica_epoch == 5
    asyncio.run(replica.close())
