"""The controller decides on current state, carries out what it recorded even across its own
death, and never contradicts itself: each scenario runs the real controller parts over a
real metadata log and a fake Ray layer (``controller_fakes``), with the interleaving fixed
by the test (a request held at an actor call, a fencing queued ahead on the lock, a process
dying right after an append)."""

from __future__ import annotations

import asyncio

import pytest

from rafka.actors.placement import replica_name
from rafka.cluster.metadata import NO_LEADER
from rafka.errors import (
    InvalidReplicaAssignment,
    NoReassignmentInProgress,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tests.unit.actors.controller_fakes import (
    ControllerProcess,
    differences,
    node_of,
    ProcessDied,
    Registry,
    settle,
)

DISKS = ["d0", "d1", "d2", "d3"]


class Cluster:
    """Four brokers (0..3) with agents, and the controller's lives over one directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.registry = Registry()
        self.appended: list[dict] = []
        self.process: ControllerProcess | None = None

    async def start(self, settings: dict | None = None, **kwargs) -> ControllerProcess:
        self.process = ControllerProcess(self.directory, self.registry, self.appended,
                                         settings, **kwargs)  # fmt: skip
        if not self.registry.actors:
            for i, disk in enumerate(DISKS):
                broker_id = await self.process.brokers.heartbeat(disk, None, None, node_of(i))
                self.registry.add_agent(broker_id[0], disk)
        await self.process.heartbeat_all()
        await settle(self.process)
        return self.process

    async def restart(self, **kwargs) -> ControllerProcess:
        if self.process.alive:
            await self.process.die()
        process = await self.start(**kwargs)
        await process.reconciler.reconcile()
        await settle(process)
        return process

    def replicas_of(self, topic_id: str) -> dict[tuple, object]:
        return {k: r for k, r in self.registry.replicas().items() if k[0] == topic_id}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(str(tmp_path / "controller"))
    yield c
    if c.process is not None and c.process.alive:
        c.process.store.close()


def run(coroutine):
    return asyncio.run(coroutine)


async def create(process: ControllerProcess, name: str, partitions: int = 1, rf: int = 3,
                 request_id: str | None = None) -> dict:  # fmt: skip
    described = await process.topics.create_topic(name, partitions, rf, None, False, request_id)
    await settle(process)
    return described


def assert_replicas_match_metadata(cluster: Cluster, process: ControllerProcess) -> None:
    """Every replica the metadata names runs and holds its partition's state (leader and
    epochs); no replica actor runs that the metadata does not name."""
    assert differences(cluster.registry, process.image) == []


# -- decisions on current state ---------------------------------------------------------------


def test_a_fencing_queued_ahead_of_the_leaders_isr_proposal_is_not_undone(cluster):
    """The leader's ISR proposal waits on the lock behind the fencing of that leader: it is
    decided on the fenced state (refused), so the leader epoch never goes back and no epoch
    is handed out twice."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", rf=3)
        topic_id, p0 = t["topic_id"], t["partitions"][0]
        leader = p0["leader"]
        await process.core.lock.acquire()  # hold the lock while both requests queue
        fence = process.run(process.brokers.fence(leader))
        await asyncio.sleep(0)
        shrink = process.run(process.changes.alter_isr(
            topic_id, 0, leader, p0["leader_epoch"], p0["partition_epoch"],
            [b for b in p0["isr"] if b != 2] or [leader], None,
        ))  # fmt: skip
        await asyncio.sleep(0)
        process.core.lock.release()
        await fence
        errno, _, _ = await shrink
        state = process.image.topics[topic_id].partitions[0]
        assert errno != 0
        assert state.leader != leader and state.leader_epoch == p0["leader_epoch"] + 1
        epochs = [(r["leader_epoch"], r["leader"]) for r in cluster.appended
                  if r["type"] == "partition" and r["topic_id"] == topic_id]  # fmt: skip
        assert len({e for e, _ in epochs}) == len(set(epochs))  # one leader per epoch
        process.store.close()

    run(main())


def test_a_check_in_queued_behind_the_deletion_of_its_topic_records_nothing(cluster):
    """A replica's check-in decided after its topic was deleted answers "not yours" and
    writes no record for the deleted topic: the controller restarts from its log."""

    async def main():
        process = await cluster.start()
        t = await create(process, "gone", rf=2)
        topic_id = t["topic_id"]
        broker = t["partitions"][0]["replicas"][1]
        await process.core.lock.acquire()
        delete = process.run(process.topics.delete_topic("gone"))
        await asyncio.sleep(0)
        check_in = process.run(process.changes.replica_started(
            topic_id, 0, broker, False, (0, 10), None))  # fmt: skip
        await asyncio.sleep(0)
        process.core.lock.release()
        await delete
        assert await check_in == (None, False, -1)
        after_delete = [i for i, r in enumerate(cluster.appended) if r["type"] == "delete"][-1]
        assert not [r for r in cluster.appended[after_delete + 1:]
                    if r.get("topic_id") == topic_id]  # fmt: skip
        process = await cluster.restart()  # the log replays
        assert "gone" not in process.image.topic_ids
        process.store.close()

    run(main())


# -- recorded, then carried out after a crash -------------------------------------------------


def test_an_election_recorded_but_never_pushed_reaches_the_replicas_after_a_restart(cluster):
    """The controller dies right after appending a preferred election: the restarted one
    pushes every state, so all replicas follow the new leader."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", rf=3)
        topic_id = t["topic_id"]
        preferred = t["partitions"][0]["replicas"][0]
        await process.brokers.fence(preferred)
        await settle(process)
        await process.brokers.heartbeat(f"d{preferred}", preferred, None, node_of(preferred))
        await settle(process)
        # Back in the ISR (its leader proposed it), then a preferred election that dies.
        p = process.image.topics[topic_id].partitions[0]
        await process.changes.alter_isr(topic_id, 0, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.isr + [preferred], None)
        await settle(process)
        process.store.die_after_append = True
        with pytest.raises(ProcessDied):
            await process.changes.elect_leaders("preferred", "orders", [0])
        recorded = process.image.topics[topic_id].partitions[0]
        assert recorded.leader == preferred
        assert all(r.state["leader"] != preferred
                   for r in cluster.replicas_of(topic_id).values())  # never told
        process = await cluster.restart()
        assert_replicas_match_metadata(cluster, process)
        process.store.close()

    run(main())


def test_a_push_lost_on_its_way_is_repaired_by_the_next_reconcile(cluster):
    async def main():
        process = await cluster.start()
        t = await create(process, "orders", rf=3)
        leader = t["partitions"][0]["leader"]
        await process.brokers.fence(leader)
        await process.ray.deliver(keep=lambda message: False)  # every push lost
        await process.brokers.heartbeat(f"d{leader}", leader, None, node_of(leader))
        await process.ray.deliver(keep=lambda message: False)
        done = await process.reconciler.reconcile()
        await settle(process)
        assert done.pushed == 3
        assert_replicas_match_metadata(cluster, process)
        process.store.close()

    run(main())


def test_a_topic_whose_creation_died_gets_its_replicas_and_its_retry_succeeds(cluster):
    """The controller dies while the agents create the new topic's actors: the restarted
    one creates the missing replicas, the client's retry (same request id) is answered with
    the topic, and another request for the same name still gets TopicAlreadyExists."""

    async def main():
        process = await cluster.start()
        process.ray.hold("ensure_replicas")
        creating = process.run(create(process, "orders", 2, 2, request_id="req-1"))
        while not process.ray.waiting.get("ensure_replicas"):
            await asyncio.sleep(0)
        await process.die()
        assert creating.cancelled()
        process = await cluster.restart()
        topic_id = process.image.topic_ids["orders"]
        assert_replicas_match_metadata(cluster, process)
        again = await create(process, "orders", 2, 2, request_id="req-1")
        assert again["topic_id"] == topic_id
        with pytest.raises(TopicAlreadyExists):
            await create(process, "orders", 2, 2, request_id="req-2")
        process.store.close()

    run(main())


def test_a_topic_whose_deletion_died_leaves_no_replicas_and_its_retry_succeeds(cluster):
    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 2, 3)
        process.ray.hold("delete_replicas")
        deleting = process.run(process.topics.delete_topic("orders", "req-9"))
        while not process.ray.waiting.get("delete_replicas"):
            await asyncio.sleep(0)
        await process.die()
        assert deleting.cancelled() and cluster.replicas_of(t["topic_id"])
        process = await cluster.restart()
        assert not cluster.replicas_of(t["topic_id"])
        await process.topics.delete_topic("orders", "req-9")  # the retry: no error
        with pytest.raises(UnknownTopicOrPartition):
            await process.topics.delete_topic("orders", "req-10")
        process.store.close()

    run(main())


def test_a_retried_partition_increase_is_answered_as_the_first(cluster):
    async def main():
        process = await cluster.start()
        await create(process, "orders", 1, 2)
        first = await process.topics.create_partitions("orders", 3, "grow-1")
        again = await process.topics.create_partitions("orders", 3, "grow-1")
        assert len(first["partitions"]) == len(again["partitions"]) == 3
        process.store.close()

    run(main())


def test_a_snapshot_that_dies_halfway_leaves_a_log_the_next_controller_opens(cluster):
    async def main():
        process = await cluster.start(snapshot_every=5)
        process.store.die_in_snapshot = True
        with pytest.raises(ProcessDied):
            for i in range(10):
                await create(process, f"t{i}", 1, 1)
        names = set(process.image.topic_ids)
        process = await cluster.restart(snapshot_every=5)
        assert set(process.image.topic_ids) == names
        process.store.close()

    run(main())


# -- fencing, locking, reassignment ----------------------------------------------------------


def test_a_broker_fenced_before_a_restart_is_fenced_after_it_and_its_return_elects(cluster):
    """Fencing is in the metadata log: the restarted controller does not count the silent
    broker live, and its first heartbeat brings its leaderless partitions back."""

    async def main():
        process = await cluster.start()
        t = await create(process, "solo", 1, 1)
        only = t["partitions"][0]["replicas"][0]
        cluster.registry.down.add(only)
        await process.brokers.fence(only)
        await settle(process)
        topic_id = t["topic_id"]
        assert process.image.topics[topic_id].partitions[0].leader == NO_LEADER
        process = await cluster.restart()
        assert not process.core.liveness.is_live(only)
        cluster.registry.down.discard(only)
        await process.brokers.heartbeat(f"d{only}", only, None, node_of(only))
        await settle(process)
        assert process.image.topics[topic_id].partitions[0].leader == only
        assert only not in process.image.fenced_brokers
        process.store.close()

    run(main())


def test_failover_does_not_wait_for_a_topic_creation_to_start_its_actors(cluster):
    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 3)
        process.ray.hold("ensure_replicas")
        creating = process.run(create(process, "slow", 1, 3))
        while not process.ray.waiting.get("ensure_replicas"):
            await asyncio.sleep(0)
        leader = t["partitions"][0]["leader"]
        await asyncio.wait_for(process.brokers.fence(leader), 1.0)  # not behind the lock
        assert process.image.topics[t["topic_id"]].partitions[0].leader != leader
        process.ray.release("ensure_replicas")
        await creating
        process.store.close()

    run(main())


def test_a_reassignment_whose_new_replica_failed_to_start_is_retried_and_can_be_cancelled(
    cluster,
):
    """The added replica's node cannot start actors: the reassignment stays under way (it
    does not refuse later ones forever), the reconcile starts the replica once it can, and
    cancelling puts the partition back and deletes the added replica."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 2)
        topic_id, original = t["topic_id"], t["partitions"][0]["replicas"]
        target = [b for b in range(4) if b not in original][:1] + original[:1]
        added = target[0]
        agent = cluster.registry.actors[f"rafka-agent-d{added}"]
        agent.refuse_creation = True
        await process.reassignments.reassign_partitions("orders", {0: target})
        await settle(process)
        assert (topic_id, 0, added) not in cluster.registry.replicas()
        await process.reassignments.reassign_partitions("orders", {0: target})  # same plan
        with pytest.raises(InvalidReplicaAssignment, match="cancel"):
            await process.reassignments.reassign_partitions("orders", {0: original[::-1]})
        agent.refuse_creation = False
        await process.reconciler.reconcile()
        await settle(process)
        assert (topic_id, 0, added) in cluster.registry.replicas()
        await process.reassignments.cancel_reassignment("orders", None)
        await settle(process)
        p = process.image.topics[topic_id].partitions[0]
        assert (p.replicas, p.adding, p.removing) == (original, [], [])
        assert (topic_id, 0, added) not in cluster.registry.replicas()
        with pytest.raises(NoReassignmentInProgress):
            await process.reassignments.cancel_reassignment("orders", [0])
        process.store.close()

    run(main())


def test_a_replica_moved_away_and_back_receives_the_pushes(cluster):
    """The controller's cached handle of a deleted replica is dropped: the replica created
    again under the same name gets the next states."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 2)
        topic_id, original = t["topic_id"], t["partitions"][0]["replicas"]
        other = [b for b in range(4) if b not in original][0]
        away = [original[0], other]
        await process.reassignments.reassign_partitions("orders", {0: away})
        await settle(process)  # the added replica runs (and so may join the ISR)
        p = process.image.topics[topic_id].partitions[0]
        await process.changes.alter_isr(topic_id, 0, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.isr + [other], None)
        await settle(process)
        assert (topic_id, 0, original[1]) not in cluster.registry.replicas()
        await process.reassignments.reassign_partitions("orders", {0: original})
        await settle(process)  # the replica on original[1] runs again, a new actor
        p = process.image.topics[topic_id].partitions[0]
        await process.changes.alter_isr(topic_id, 0, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.isr + [original[1]], None)
        await settle(process)
        assert_replicas_match_metadata(cluster, process)
        process.store.close()

    run(main())


# -- one controller at a time -----------------------------------------------------------------


def test_each_controller_start_records_a_newer_epoch_that_every_state_carries(cluster):
    async def main():
        process = await cluster.start()
        first = process.image.controller_epoch
        t = await create(process, "orders", 1, 2)
        process = await cluster.restart()
        assert process.image.controller_epoch == first + 1
        for replica in cluster.replicas_of(t["topic_id"]).values():
            assert replica.state["controller_epoch"] == first + 1
        process.store.close()

    run(main())


def test_a_replica_ignores_a_state_from_an_older_controller(cluster):
    """Even one with a newer leader epoch: another controller has taken over since."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 2)
        replica = next(iter(cluster.replicas_of(t["topic_id"]).values()))
        held = dict(replica.state)
        await replica.update_state({**held, "controller_epoch": held["controller_epoch"] - 1,
                                    "leader_epoch": held["leader_epoch"] + 5})  # fmt: skip
        assert replica.state == held
        process.store.close()

    run(main())


def test_settings_are_kept_in_the_metadata_log_and_a_start_with_new_ones_overrides_them(
    cluster,
):
    async def main():
        process = await cluster.start({"broker.session.timeout.ms": 4000})
        process = await cluster.restart()
        assert process.core.settings == {"broker.session.timeout.ms": 4000}
        process = await cluster.restart(settings={"broker.session.timeout.ms": 6000,
                                                  "num.partitions": 3})  # fmt: skip
        assert process.core.settings == {"broker.session.timeout.ms": 6000, "num.partitions": 3}
        process.store.close()

    run(main())


def test_a_replica_actor_of_a_deleted_topic_is_deleted_by_the_reconcile(cluster):
    async def main():
        process = await cluster.start()
        t = await create(process, "old", 1, 1)
        states = [{**r.state} for r in cluster.replicas_of(t["topic_id"]).values()]
        await process.topics.delete_topic("old")
        broker = states[0]["broker_id"]
        await cluster.registry.actors[f"rafka-agent-d{broker}"].ensure_replicas(states)  # late
        name = replica_name(t["topic_id"], 0, broker)
        assert name in cluster.registry.actors
        done = await process.reconciler.reconcile()
        assert done.deleted == 1 and name not in cluster.registry.actors
        process.store.close()

    run(main())


# -- creation and deletion of one replica never cross ------------------------------------------


def test_a_replica_moved_away_and_straight_back_is_not_deleted_by_the_late_removal(cluster):
    """The deletion of the replica the first move removed is still on its way when the
    move back starts it again: the two never cross at the agent, so the replica the
    metadata names as adding runs."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 2)
        topic_id, original = t["topic_id"], t["partitions"][0]["replicas"]
        other = [b for b in range(4) if b not in original][0]
        await process.reassignments.reassign_partitions("orders", {0: [original[0], other]})
        await settle(process)
        p = process.image.topics[topic_id].partitions[0]
        process.ray.hold("delete_replicas")
        await process.changes.alter_isr(topic_id, 0, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.isr + [other], None)
        while not process.ray.waiting.get("delete_replicas"):
            await asyncio.sleep(0)
        await process.reassignments.reassign_partitions("orders", {0: original})  # back
        await settle(process)
        process.ray.release("delete_replicas")
        for _ in range(10):
            await settle(process)
        assert (topic_id, 0, original[1]) in cluster.registry.replicas()
        process.store.close()

    run(main())


def test_a_topic_deleted_while_its_replicas_are_being_created_leaves_no_actor(cluster):
    """The deletion waits for the creation of the same replicas, then deletes them; a
    topic created again under the same name meanwhile keeps its own."""

    async def main():
        process = await cluster.start()
        process.ray.hold("ensure_replicas")
        first = process.run(create(process, "orders", 1, 4))
        while not process.ray.waiting.get("ensure_replicas"):
            await asyncio.sleep(0)
        old_id = process.image.topic_ids["orders"]
        deleting = process.run(process.topics.delete_topic("orders"))
        for _ in range(5):
            await asyncio.sleep(0)
        process.ray.release("ensure_replicas")
        await first
        await deleting
        again = await create(process, "orders", 1, 4)
        await settle(process)
        running = {k[0] for k in cluster.registry.replicas()}
        assert old_id not in running and again["topic_id"] in running
        process.store.close()

    run(main())


def test_one_agent_failing_during_a_creation_fails_neither_the_request_nor_the_others(cluster):
    """The topic is created (its records are durable); the replicas on the working brokers
    run and are recorded where they run, so they can be elected; the reconcile starts the
    failed broker's replica once its agent works."""

    async def main():
        process = await cluster.start()
        agent = cluster.registry.actors["rafka-agent-d1"]
        agent.refuse_creation = True
        t = await create(process, "orders", 1, 4)
        running = {k[2] for k in cluster.replicas_of(t["topic_id"])}
        assert running == {0, 2, 3}
        agent.refuse_creation = False
        await process.reconciler.reconcile()
        assert {k[2] for k in cluster.replicas_of(t["topic_id"])} == {0, 1, 2, 3}
        process.store.close()

    run(main())


def test_an_unclean_election_follows_the_config_in_force_when_it_is_decided(cluster):
    """Enabling unclean election elects a leaderless partition's live replica, unless a
    change disabling it again was recorded first: the follow-up reads the current config."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 1, 3)
        topic_id = t["topic_id"]
        p = process.image.topics[topic_id].partitions[0]
        leader = p.leader
        await process.changes.alter_isr(topic_id, 0, leader, p.leader_epoch,
                                        p.partition_epoch, [leader], None)
        cluster.registry.down.add(leader)
        await process.brokers.fence(leader)
        await settle(process)
        process.ray.hold("update_state")  # the enabling request waits in its config push
        enabling = process.run(process.topics.alter_topic_config(
            "orders", {"unclean.leader.election.enable": True}))  # fmt: skip
        while not process.ray.waiting.get("update_state"):
            await asyncio.sleep(0)
        await process.core.lock.acquire()
        disabling = process.run(process.topics.alter_topic_config(
            "orders", {"unclean.leader.election.enable": False}))  # fmt: skip
        await asyncio.sleep(0)
        process.ray.release("update_state")
        for _ in range(10):
            await asyncio.sleep(0)
        process.core.lock.release()
        await enabling
        await disabling
        assert process.image.topics[topic_id].partitions[0].leader == NO_LEADER
        process.store.close()

    run(main())


def test_an_election_for_a_topic_deleted_meanwhile_answers_instead_of_failing(cluster):
    async def main():
        process = await cluster.start()
        await create(process, "orders", 2, 3)
        await process.core.lock.acquire()
        deleting = process.run(process.topics.delete_topic("orders"))
        await asyncio.sleep(0)
        electing = process.run(process.changes.elect_leaders("preferred", "orders", None))
        await asyncio.sleep(0)
        process.core.lock.release()
        await deleting
        results = await electing
        assert [r["errno"] for r in results] == [UnknownTopicOrPartition.errno] * 2
        process.store.close()

    run(main())


def test_a_retried_creation_whose_topic_was_deleted_and_created_again_is_not_answered_as_its_own(
    cluster,
):
    async def main():
        process = await cluster.start()
        await create(process, "orders", 1, 2, request_id="first")
        await process.topics.delete_topic("orders")
        await create(process, "orders", 2, 2, request_id="second")
        with pytest.raises(TopicAlreadyExists, match="deleted and created again"):
            await create(process, "orders", 1, 2, request_id="first")
        process.store.close()

    run(main())


def test_replicas_of_topics_the_metadata_never_knew_are_kept(cluster):
    """A controller opened on an empty (wrong) metadata directory does not wipe the replicas
    it finds: only a deleted topic's or a moved replica's are strays; a check-in of an
    unknown topic is asked again, not told to delete itself."""

    async def main():
        process = await cluster.start()
        await cluster.registry.actors["rafka-agent-d1"].ensure_replicas([{
            "topic_id": "other-cluster", "partition": 0, "broker_id": 1, "topic": "old",
            "replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0, "config": {},
        }])  # fmt: skip
        done = await process.reconciler.reconcile()
        assert done.deleted == 0 and replica_name("other-cluster", 0, 1) in cluster.registry.actors
        answer = await process.changes.replica_started("other-cluster", 0, 1, True, (0, 0), None)
        assert answer == (None, True, -1)
        process.store.close()

    run(main())


def test_a_topic_whose_creation_died_before_any_actor_ran_gets_leaders_once_they_run(cluster):
    """The restarted controller hears the brokers before their new replicas run (they are
    not electable then); once the brokers' agents have started them, every partition is
    led."""

    async def main():
        process = await cluster.start()
        process.ray.hold("ensure_replicas")
        process.run(create(process, "orders", 3, 2, request_id="req-1"))
        while not process.ray.waiting.get("ensure_replicas"):
            await asyncio.sleep(0)
        await process.die()
        process = await cluster.start()  # heartbeats first, as brokers are quick
        await process.reconciler.reconcile()
        await settle(process)
        topic = process.image.topic("orders")
        assert all(p.leader != NO_LEADER for p in topic.partitions.values())
        assert_replicas_match_metadata(cluster, process)
        process.store.close()

    run(main())


def test_replicas_a_dead_controller_had_started_keep_the_leaders_their_creation_elected(cluster):
    """The controller dies while the agents create a new topic's replicas, and the agents
    finish creating them (the calls were sent). The next controller finds them running but
    never recorded where they run: it records them rather than depose their leaders for
    never having started; every partition keeps the leader and epoch of its creation."""

    async def main():
        process = await cluster.start()
        process.ray.hold("ensure_replicas")
        process.run(create(process, "orders", 3, 2, request_id="req-1"))
        while not process.ray.waiting.get("ensure_replicas"):
            await asyncio.sleep(0)
        created = {p.partition: (p.leader, p.leader_epoch)
                   for p in process.image.topic("orders").partitions.values()}  # fmt: skip
        await process.die()
        await process.ray.carry_out_held("ensure_replicas")
        process = await cluster.start()  # heartbeats first, as brokers are quick
        await process.reconciler.reconcile()
        await settle(process)
        topic = process.image.topic("orders")
        assert {p.partition: (p.leader, p.leader_epoch)
                for p in topic.partitions.values()} == created  # fmt: skip
        assert_replicas_match_metadata(cluster, process)
        process.store.close()

    run(main())


def test_the_reconcile_at_a_start_moves_no_leader_of_a_broker_not_heard_yet(cluster):
    """Before the brokers' first heartbeats nobody is electable, and no led partition loses
    its leader for that."""

    async def main():
        process = await cluster.start()
        await create(process, "orders", 3, 2)
        await process.die()
        before = len(cluster.appended)
        process = ControllerProcess(cluster.directory, cluster.registry, cluster.appended)
        cluster.process = process
        await process.reconciler.reconcile()
        assert not [r for r in cluster.appended[before:] if r["type"] == "partition"]
        process.store.close()

    run(main())


def test_the_first_heartbeat_after_a_restart_takes_no_leadership_from_brokers_not_heard_yet(
    cluster,
):
    """A restarted controller hears the brokers one by one: the first one heard elects only
    where no leader is, never over a leader whose broker has not spoken yet (moving it would
    truncate its unreplicated tail and stall its producers for nothing)."""

    async def main():
        process = await cluster.start()
        t = await create(process, "orders", 4, 3)
        leaders = {p["partition"]: p["leader"] for p in t["partitions"]}
        assert len(set(leaders.values())) > 1
        await process.die()
        before = len(cluster.appended)
        process = ControllerProcess(cluster.directory, cluster.registry, cluster.appended)
        cluster.process = process
        first = min(leaders.values())
        await process.brokers.heartbeat(f"d{first}", first, None, node_of(first))
        await settle(process)
        assert not [r for r in cluster.appended[before:] if r["type"] == "partition"]
        process.store.close()

    run(main())


def test_replicas_started_beside_one_that_failed_are_recorded_and_may_lead(cluster):
    """One replica of a broker fails to start: the broker's other new replicas are recorded
    where they run, so they may join the ISR and lead."""

    async def main():
        process = await cluster.start()
        agent = cluster.registry.actors["rafka-agent-d1"]
        agent.fail_partitions = {1}
        t = await create(process, "orders", 4, 4)
        topic_id = t["topic_id"]
        for partition in (0, 2, 3):
            assert 1 in process.core.electable(topic_id, partition)
        assert 1 not in process.core.electable(topic_id, 1)
        agent.fail_partitions = set()
        await process.reconciler.reconcile()
        assert 1 in process.core.electable(topic_id, 1)
        process.store.close()

    run(main())


def test_a_partition_led_by_a_replica_that_never_started_gets_another_leader(cluster):
    """The leader's broker speaks but its replica actor cannot be started: the leadership
    moves to an in-sync replica that runs, instead of leaving the partition offline."""

    async def main():
        process = await cluster.start()
        cluster.registry.actors["rafka-agent-d1"].refuse_creation = True
        t = await create(process, "orders", 4, 3)
        led_by_1 = [p["partition"] for p in t["partitions"] if p["replicas"][0] == 1]
        assert led_by_1
        await process.reconciler.reconcile()
        for partition in led_by_1:
            p = process.image.topics[t["topic_id"]].partitions[partition]
            assert p.leader not in (1, NO_LEADER)
            assert (t["topic_id"], partition, p.leader) in cluster.registry.replicas()
        process.store.close()

    run(main())
