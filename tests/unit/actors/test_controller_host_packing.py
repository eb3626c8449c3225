"""The controller's host packing: a hot replica's move to a host of its own is recorded, then
carried out by its agent (closed in the old host before the new one opens it), its
partition's replicas are told the new host, and a move the controller died before carrying
out is finished by the reconcile. The real controller parts over a real metadata log and the
fake Ray layer (``controller_fakes``), with agents that keep which host holds each replica."""

from __future__ import annotations

from rafka.actors.placement import agent_name
from rafka.cluster.hosting import slots_of
from tests.unit.actors.controller_fakes import FakeAgent, settle
from tests.unit.actors.test_controller_restarts import DISKS, cluster, create, run  # noqa: F401

SETTINGS = {"replicas.per.actor": 4, "partition.hot.bytes.per.sec": 1000}


class SlottedAgent(FakeAgent):
    """A fake agent that knows which host slot holds each of its replicas, and moves one the
    way the node agent does: out of its old host first, then into the new one."""

    def __init__(self, registry, broker_id: int, disk: str) -> None:
        super().__init__(registry, broker_id, disk)
        self.slots: dict[tuple[str, int], int] = {}
        self.moves: list[tuple[tuple[str, int], int, int]] = []  # (replica, from, to)

    async def ensure_replicas(self, states: list[dict]) -> list[dict]:
        for s in states:
            key = (s["topic_id"], s["partition"])
            old = self.slots.get(key, s["host"])
            if old != s["host"]:
                self.moves.append((key, old, s["host"]))
            self.slots[key] = s["host"]
        return await super().ensure_replicas(states)

    async def hosted(self) -> list[list]:
        return [key + [self.slots[(key[0], key[1])]] for key in await super().hosted()]


async def start(cluster):
    process = await cluster.start(SETTINGS)
    for broker_id, disk in enumerate(DISKS):
        cluster.registry.actors[agent_name(disk)] = SlottedAgent(cluster.registry, broker_id,
                                                                 disk)  # fmt: skip
    return process


def agents(cluster) -> list[SlottedAgent]:
    return [cluster.registry.actors[agent_name(d)] for d in DISKS]


def report_hot(process, partition: int, bytes_in: float) -> None:
    """Every broker reports: ``partition`` of "t" takes ``bytes_in`` bytes/s, the others
    nothing."""
    topic = process.image.topic("t")
    for b in process.image.brokers:
        rows = [[topic.topic_id, p.partition, 100, bytes_in if p.partition == partition else 0.0,
                 0.0] for p in topic.partitions.values() if b in p.replicas]  # fmt: skip
        process.balancing.report_load(b, {"disk_capacity": 10**9, "disk_used": 0,
                                          "replicas": rows})  # fmt: skip


def test_a_hot_replica_moves_to_a_host_of_its_own_and_its_partition_is_told(cluster):
    async def scenario():
        process = await start(cluster)
        described = await create(process, "t", partitions=4)
        topic_id = described["topic_id"]
        holders = process.image.topics[topic_id].partitions[1].replicas
        before = {b: process.image.hosts[(topic_id, 1, b)] for b in holders}
        report_hot(process, partition=1, bytes_in=5000.0)
        done = await process.host_packing.tick()
        await settle(process)
        assert sorted(r.broker_id for r in done) == sorted(holders)  # one per broker
        for agent in agents(cluster):
            if agent.broker_id in holders:
                new = process.image.hosts[(topic_id, 1, agent.broker_id)]
                assert new != before[agent.broker_id]
                assert agent.moves == [((topic_id, 1), before[agent.broker_id], new)]
                assert agent.slots[(topic_id, 1)] == new
            else:
                assert agent.moves == []
        p = process.image.topics[topic_id].partitions[1]
        hosts = slots_of(process.image, topic_id, 1, p.replicas)
        for key, replica in cluster.registry.replicas().items():
            if key[:2] == (topic_id, 1):
                assert replica.state["hosts"] == hosts  # followers find the leader's host
        assert process.host_packing.describe()["rehosts"] == len(holders)
        # Hot still, but alone now: nothing more moves.
        report_hot(process, partition=1, bytes_in=5000.0)
        assert await process.host_packing.tick() == []
        process.store.close()

    run(scenario())


def test_nothing_moves_with_one_replica_per_actor(cluster):
    async def scenario():
        process = await cluster.start({**SETTINGS, "replicas.per.actor": 1})
        await create(process, "t", partitions=2)
        report_hot(process, partition=0, bytes_in=5000.0)
        assert await process.host_packing.tick() == []
        process.store.close()

    run(scenario())


def test_a_move_recorded_by_a_controller_that_then_died_is_carried_out_by_the_reconcile(cluster):
    """The controller records the move and dies before the agent hears of it: the agents
    report the replica in its old host, and the next controller's reconcile moves it."""

    async def scenario():
        process = await start(cluster)
        described = await create(process, "t", partitions=4)
        topic_id = described["topic_id"]
        report_hot(process, partition=2, bytes_in=5000.0)
        process.ray.hold("ensure_replicas")
        process.run(process.host_packing.tick())
        while not process.ray.waiting.get("ensure_replicas"):
            await settle(process)
        assert all(a.moves == [] for a in agents(cluster))
        process = await cluster.restart()  # reconciles
        for agent in agents(cluster):
            for (t, partition), slot in agent.slots.items():
                assert slot == process.image.hosts[(t, partition, agent.broker_id)]
        # The first move was recorded before the death (the others were not decided on).
        assert sorted(len(a.moves) for a in agents(cluster)) == [0, 0, 0, 1]
        process.store.close()

    run(scenario())
