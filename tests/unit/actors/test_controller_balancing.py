"""The balancer on the controller, with the real controller parts over a real metadata log
and a fake Ray layer (``controller_fakes``): a drain is recorded and survives a controller
restart, its moves take the broker out of every replica set it is in, a broker that joins
gets replicas in node_add mode, and mode off moves nothing by itself."""

from __future__ import annotations

import asyncio

import pytest

from rafka.actors.controller_core import now_ms
from rafka.errors import InvalidReplicaAssignment
from tests.unit.actors.controller_fakes import (
    ControllerProcess,
    Registry,
    node_of,
    settle,
)

DISKS = ["d0", "d1", "d2"]


async def start(directory: str, registry: Registry, settings: dict | None = None,
                disks=DISKS) -> ControllerProcess:  # fmt: skip
    process = ControllerProcess(directory, registry, [], settings)
    for i, disk in enumerate(disks):
        if not any(a.disk == disk for a in registry.actors.values()):
            broker_id = await process.brokers.heartbeat(disk, None, None, node_of(i))
            registry.add_agent(broker_id[0], disk)
    await process.heartbeat_all()
    await settle(process)
    return process


async def with_topic(process: ControllerProcess, partitions: int = 6, rf: int = 2) -> str:
    await process.topics.create_topic("orders", partitions, rf, None, False, None)
    await settle(process)
    return process.image.topic("orders").topic_id


def moving_off(process: ControllerProcess, broker: int) -> list[int]:
    """Partitions of "orders" whose reassignment removes ``broker``."""
    topic = process.image.topic("orders")
    return [p.partition for p in topic.partitions.values() if broker in p.removing]


def test_a_drain_is_recorded_moves_replicas_off_and_survives_a_restart(tmp_path):
    async def main():
        registry = Registry()
        directory = str(tmp_path / "controller")
        process = await start(directory, registry)
        await with_topic(process)
        held = [p.partition for p in process.image.topic("orders").partitions.values()
                if 1 in p.replicas]  # fmt: skip
        status = await process.balancing.drain_broker(1, True)
        assert status["draining"] == [1]
        started = moving_off(process, 1)
        assert started and set(started) <= set(held)
        assert len(started) <= 2  # the throttle: moves per broker
        process.store.close()
        again = await start(directory, registry)
        assert again.image.draining_brokers == {1}
        await again.balancing.drain_broker(1, False)
        assert again.image.draining_brokers == set()
        again.store.close()

    asyncio.run(main())


def test_the_last_broker_not_draining_cannot_be_drained(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry(), disks=["d0", "d1"])
        await process.balancing.drain_broker(0, True)
        with pytest.raises(InvalidReplicaAssignment, match="last broker not draining"):
            await process.balancing.drain_broker(1, True)
        with pytest.raises(InvalidReplicaAssignment, match="not registered"):
            await process.balancing.drain_broker(7, True)
        process.store.close()

    asyncio.run(main())


@pytest.mark.parametrize("mode, moves", [("node_add", True), ("off", False)])
def test_a_broker_that_joins_gets_replicas_in_node_add_mode_only(tmp_path, mode, moves):
    async def main():
        registry = Registry()
        process = await start(str(tmp_path / "c"), registry,
                              {"partition.autobalancing.mode": mode})  # fmt: skip
        await with_topic(process)
        await process.balancing.tick()  # the brokers it starts with are not joining
        assert not any(p.adding for p in process.image.topic("orders").partitions.values())
        joined = (await process.brokers.heartbeat("d3", None, None, node_of(3)))[0]
        registry.add_agent(joined, "d3")
        await process.heartbeat_all()
        await process.balancing.tick()
        adding = [p for p in process.image.topic("orders").partitions.values()
                  if joined in p.adding]  # fmt: skip
        assert bool(adding) is moves
        process.store.close()

    asyncio.run(main())


def test_a_move_to_a_broker_lost_meanwhile_is_cancelled(tmp_path):
    async def main():
        registry = Registry()
        process = await start(str(tmp_path / "c"), registry,
                              {"partition.autobalancing.node.availability.timeout.sec": 1})
        await with_topic(process)
        await process.balancing.tick()
        joined = (await process.brokers.heartbeat("d3", None, None, node_of(3)))[0]
        registry.add_agent(joined, "d3")
        await process.heartbeat_all()
        await process.balancing.tick()
        topic = process.image.topic("orders")
        assert any(joined in p.adding for p in topic.partitions.values())
        process.core.liveness.fence(joined)  # lost before the copies caught up
        process.balancing._dead_since[joined] = now_ms() - 5_000
        await process.balancing.tick()
        topic = process.image.topic("orders")
        assert not any(joined in p.adding for p in topic.partitions.values())
        process.store.close()

    asyncio.run(main())


def test_a_draining_leader_hands_over_before_its_partition_moves(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry())
        await with_topic(process, partitions=3, rf=2)
        led = [p.partition for p in process.image.topic("orders").partitions.values()
               if p.leader == 1]  # fmt: skip
        assert led
        await process.balancing.drain_broker(1, True)
        await settle(process)
        topic = process.image.topic("orders")
        assert all(topic.partitions[n].leader not in (1, -1) for n in led), topic.partitions
        process.store.close()

    asyncio.run(main())


def test_a_topic_created_while_a_broker_drains_gets_no_replica_on_it(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry())
        await process.balancing.drain_broker(2, True)
        await process.topics.create_topic("later", 6, 2, None, False, None)
        await process.topics.create_partitions("later", 9)
        replicas = [p.replicas for p in process.image.topic("later").partitions.values()]
        assert replicas and not any(2 in r for r in replicas), replicas
        process.store.close()

    asyncio.run(main())


def test_the_status_says_how_long_each_move_has_been_in_flight(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry())
        await with_topic(process)
        await process.balancing.drain_broker(1, True)
        first = process.balancing.describe()["in_flight"]
        assert first and all(m["for_ms"] >= 0 for m in first)
        await asyncio.sleep(0.05)
        later = {(m["topic"], m["partition"]): m["for_ms"]
                 for m in process.balancing.describe()["in_flight"]}  # fmt: skip
        assert all(later[(m["topic"], m["partition"])] >= m["for_ms"] + 40 for m in first
                   if (m["topic"], m["partition"]) in later)  # fmt: skip
        process.store.close()

    asyncio.run(main())
