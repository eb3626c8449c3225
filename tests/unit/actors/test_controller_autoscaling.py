"""Autoscaling on the controller, with the real controller parts over a real metadata log and
a fake Ray layer (``controller_fakes``): a topic refused for too few brokers asks Ray for
them, low load drains an ephemeral broker, which is then retired (recorded, its actors
stopped, the request lowered) and never rejoins; named disks are never given back."""

from __future__ import annotations

import asyncio

import pytest

from rafka.actors.autoscaling import Autoscaling
from rafka.errors import InvalidConfig, InvalidRecord, InvalidReplicationFactor
from tests.unit.actors.controller_fakes import ControllerProcess, Registry, node_of, settle

AUTO = [f"auto-{str(i) * 56}" for i in range(3)]
SETTINGS = {"partition.autoscaling.enable": True,
            "partition.autoscaling.max.replicas.per.broker": 2,
            "partition.autoscaling.scale.down.delay.ms": 0}  # fmt: skip


async def start(directory: str, disks: list[str], settings=SETTINGS):
    registry = Registry()
    process = ControllerProcess(directory, registry, [], settings)
    for i, disk in enumerate(disks):
        broker_id = await process.brokers.heartbeat(disk, None, None, node_of(i))
        registry.add_agent(broker_id[0], disk)
    await process.heartbeat_all()
    await settle(process)
    requests: list[int] = []
    stopped: list[str] = []
    scaler = Autoscaling(process.core, process.balancing, requests.append, stopped.extend,
                         controller_disk="ctrl")  # fmt: skip
    process.topics.on_too_few_brokers = scaler.want_for_topic
    return process, scaler, requests, stopped


def test_a_topic_refused_for_too_few_brokers_asks_ray_for_them(tmp_path):
    async def main():
        process, scaler, requests, _ = await start(str(tmp_path / "c"), AUTO[:1])
        with pytest.raises(InvalidReplicationFactor, match="asked Ray's autoscaler for 3"):
            await process.topics.create_topic("orders", 1, 3, None, False, None)
        await scaler.tick()
        assert requests == [3]
        assert scaler.describe()["wanted"] == 3
        process.store.close()

    asyncio.run(main())


def test_an_idle_ephemeral_broker_is_drained_retired_and_its_actors_stopped(tmp_path):
    async def main():
        process, scaler, requests, stopped = await start(str(tmp_path / "c"), AUTO)
        await scaler.tick()  # three brokers for no load: the emptiest is drained
        assert requests == [3]
        retiring = scaler.state.retiring
        assert retiring is not None and process.image.draining_brokers == {retiring}
        await scaler.tick()  # it holds nothing: retired
        assert requests == [3, 2]
        disk = process.image.retired_brokers[retiring]
        assert retiring not in process.image.brokers
        assert f"rafka-agent-{disk}" in stopped
        assert not process.core.liveness.is_live(retiring)
        with pytest.raises(InvalidConfig, match="retired"):
            await process.brokers.heartbeat(disk, retiring, None, node_of(9))
        await scaler.tick()  # one broker fewer still holds nothing: the next one goes
        assert scaler.state.retiring not in (None, retiring)
        process.store.close()

    asyncio.run(main())


def test_a_broker_on_a_named_disk_is_never_given_back(tmp_path):
    async def main():
        process, scaler, requests, stopped = await start(str(tmp_path / "c"), ["d0", "d1"])
        for _ in range(3):
            await scaler.tick()
        assert requests == [2] and not process.image.draining_brokers and not stopped
        process.store.close()

    asyncio.run(main())


def test_nothing_happens_with_autoscaling_off(tmp_path):
    async def main():
        process, scaler, requests, _ = await start(str(tmp_path / "c"), AUTO[:1], settings={})
        with pytest.raises(InvalidReplicationFactor) as refused:
            await process.topics.create_topic("orders", 1, 3, None, False, None)
        assert "autoscaler" not in str(refused.value)
        assert not scaler.enabled
        process.store.close()

    asyncio.run(main())


def test_a_restarted_controller_goes_on_retiring_the_broker_the_autoscaler_drained(tmp_path):
    async def main():
        directory = str(tmp_path / "c")
        process, scaler, _, _ = await start(directory, AUTO)
        await scaler.tick()
        retiring = scaler.state.retiring
        assert process.image.autoscaler_drains == {retiring}
        process.store.close()
        again, scaler, requests, stopped = await start(directory, [])
        await scaler.tick()
        assert retiring in again.image.retired_brokers and retiring not in again.image.brokers
        assert requests == [2] and stopped
        again.store.close()

    asyncio.run(main())


def test_a_broker_given_a_replica_before_it_was_retired_stays_and_ray_keeps_its_node(tmp_path):
    async def main():
        process, scaler, requests, stopped = await start(str(tmp_path / "c"), AUTO)
        await scaler.tick()
        retiring = scaler.state.retiring
        append = process.store.append

        def refuse_retire(records):  # a replica was placed on it between plan and record
            if any(r["type"] == "retire" for r in records):
                raise InvalidRecord("broker still holds replicas of ['t-0']: drain it")
            return append(records)

        process.store.append = refuse_retire
        await scaler.tick()
        assert retiring in process.image.brokers and scaler.state.retiring == retiring
        assert requests == [3] and not stopped  # the request was not lowered
        process.store.append = append
        await scaler.tick()
        assert retiring in process.image.retired_brokers and requests == [3, 2]
        process.store.close()

    asyncio.run(main())


def test_an_auto_created_topic_refused_answers_for_itself_and_not_for_the_others(tmp_path):
    # Kafka answers a metadata request per topic: INVALID_REPLICATION_FACTOR for the one it
    # could not create, the others as they are.
    async def main():
        settings = {"auto.create.topics.enable": True, "default.replication.factor": 3}
        process, _, _, _ = await start(str(tmp_path / "c"), AUTO[:1], settings=settings)
        await process.topics.create_topic("existing", 1, 1, None, False, None)
        answer = await process.topics.metadata(["existing", "new-topic"], True)
        assert answer["existing"]["name"] == "existing"
        errno, message = answer["new-topic"]
        assert errno == InvalidReplicationFactor.errno and "replication factor 3" in message
        process.store.close()

    asyncio.run(main())
