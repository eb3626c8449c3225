"""A replica takes states only from the newest controller it has heard from: once a new
controller took over (a higher controller epoch), a state from the old one is ignored, even
one with a newer leader epoch, and so is an old controller's check-in answer. Runs the
replica class outside Ray."""

from __future__ import annotations

import asyncio

from rafka.actors.partition_replica import PartitionReplica


def state(**changes) -> dict:
    return {
        "topic": "orders", "topic_id": "tid", "partition": 0, "broker_id": 1,
        "replicas": [0, 1], "isr": [0, 1], "leader": 0, "leader_epoch": 3, "partition_epoch": 4,
        "config": {}, "replica_epoch": 5, "controller_epoch": 7, **changes,
    }  # fmt: skip


def test_a_state_from_an_older_controller_is_ignored_even_with_a_newer_leader_epoch(tmp_path):
    replica = PartitionReplica(str(tmp_path), state())

    async def run():
        await replica.update_state(state(controller_epoch=6, leader=1, leader_epoch=9,
                                         partition_epoch=10))  # fmt: skip
        assert replica.leader is None and replica.state["leader_epoch"] == 3
        await replica.update_state({"config": {"retention.ms": 1}, "controller_epoch": 6})
        assert replica.state["config"] == {}
        await replica.update_state(state(controller_epoch=8, leader=1, leader_epoch=4,
                                         partition_epoch=5))  # fmt: skip
        assert replica.leader is not None and replica.state["controller_epoch"] == 8
        replica.follower.stop()
        await replica.close()

    asyncio.run(run())


def test_a_restarted_replica_takes_no_check_in_answer_from_an_older_controller(tmp_path):
    """The answer of the old controller is dropped and the check-in asked again."""
    PartitionReplica(str(tmp_path), state()).log.close()  # leaves its state on disk
    replica = PartitionReplica(str(tmp_path), state())
    answers = [(state(controller_epoch=6, leader=1, leader_epoch=9), True, 11),
               (state(controller_epoch=8, leader=0, leader_epoch=4), True, 12)]  # fmt: skip

    class Link:
        async def call(self, method, *args, timeout_s=10.0):
            return answers.pop(0)

    replica.controller = Link()

    async def run():
        await replica.check_in.run()
        assert replica.replica_epoch == 12 and replica.state["leader_epoch"] == 4
        replica.follower.stop()
        await replica.close()

    asyncio.run(run())
