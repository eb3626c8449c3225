"""The controller's side of hosting: which host clients are told a replica lives in, what
a host's death does to the partitions it led, and a late report of that death. The real
controller parts over a real metadata log and the fake Ray layer (``controller_fakes``)."""

from __future__ import annotations

from rafka.cluster.hosting import NO_HOST
from tests.unit.actors.controller_fakes import settle
from tests.unit.actors.test_controller_restarts import cluster, create, run  # noqa: F401


def test_a_restarted_controller_names_every_running_replicas_host_at_once(cluster):
    """Clients keep reaching replicas through a controller restart: its metadata names
    their hosts before its first reconcile has heard from any agent."""

    async def scenario():
        process = await cluster.start()
        await create(process, "t", partitions=3)
        described = process.topics.describe(process.image.topic("t"))
        before = [p["hosts"] for p in described["partitions"]]
        assert all(NO_HOST not in hosts for hosts in before)
        await process.die()
        process = await cluster.start()  # no reconcile yet
        answer = await process.topics.metadata(["t"], False)
        assert [p["hosts"] for p in answer["t"]["partitions"]] == before
        assert not any(p["starting"] for p in answer["t"]["partitions"])

    run(scenario())


def test_a_host_death_moves_the_leadership_of_every_partition_it_led(cluster):
    async def scenario():
        process = await cluster.start()
        described = await create(process, "t", partitions=4)
        topic_id = described["topic_id"]
        led = [p for p in described["partitions"] if p["leader"] == 0]
        assert led
        keys = [[topic_id, p["partition"], -1] for p in led]
        assert await process.changes.replicas_failed(0, keys, "its host actor died") == len(led)
        await settle(process)
        after = {p.partition: p for p in process.image.topics[topic_id].partitions.values()}
        for p in led:
            moved = after[p["partition"]]
            assert moved.leader not in (0, -1) and 0 not in moved.isr
            assert moved.leader_epoch == p["leader_epoch"] + 1

    run(scenario())


def test_a_late_report_of_a_host_death_after_its_replicas_checked_in_again_is_ignored(cluster):
    """The report names the life that died; the replica restarted since (a newer replica
    epoch is recorded), so the report changes nothing."""

    async def scenario():
        process = await cluster.start()
        described = await create(process, "t", partitions=1)
        topic_id = described["topic_id"]
        p = process.image.topics[topic_id].partitions[0]
        broker = p.leader
        old_life = process.image.replica_epochs.get((topic_id, 0), {}).get(broker, 0)
        answer = await process.changes.replica_started(topic_id, 0, broker, True, None,
                                                       f"node-{broker}")  # fmt: skip
        assert answer[1] and answer[2] > old_life
        before = process.image.topics[topic_id].partitions[0]
        changed = await process.changes.replicas_failed(
            broker, [[topic_id, 0, old_life]], "its host actor died"
        )
        assert changed == 0
        assert process.image.topics[topic_id].partitions[0] == before

    run(scenario())
