"""A host actor's hosting, outside Ray: the replicas it holds, the members file it reopens them
from after a restart, and calls routed to the replica they name."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from rafka.actors.replica_host import ReplicaHost, members_path, read_members
from rafka.errors import NotLeaderOrFollower
from rafka.storage import record_batch as rb


def state(partition: int, topic_id: str = "tid") -> dict:
    """A replica that leads alone (no follower loop, no controller call)."""
    return {
        "topic": "orders", "topic_id": topic_id, "partition": partition, "broker_id": 1,
        "replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0, "partition_epoch": 0,
        "config": {}, "replica_epoch": 1, "hosts": [0],
    }  # fmt: skip


class QuietLink:
    """A controller that never answers (a restarted replica keeps waiting to check in)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def call(self, method: str, *args, timeout_s: float = 10.0):
        self.calls.append((method, *args))
        await asyncio.sleep(3600)


def _batch(value: bytes) -> np.ndarray:
    return np.frombuffer(rb.encode_batch([value], timestamps=1), dtype=np.uint8)


def test_a_host_holds_many_replicas_and_routes_each_call_to_the_one_it_names(tmp_path):
    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        described = await host.add_replicas([state(p) for p in range(3)])
        assert [d["partition"] for d in described] == [0, 1, 2]
        assert all(d["role"] == "leader" for d in described)
        answer = await host.produce("tid", 1, _batch(b"one"), 1, 1000)
        assert answer[0] == 0
        _, _, hw, *_ = await host.fetch("tid", 1, 0, 1 << 20, 1, 0)
        _, _, hw0, *_ = await host.fetch("tid", 0, 0, 1 << 20, 1, 0)
        assert (hw, hw0) == (1, 0)
        with pytest.raises(NotLeaderOrFollower):
            await host.fetch("tid", 7, 0, 1 << 20, 1, 0)
        await host.close_all()

    asyncio.run(run())


def test_adding_a_replica_already_held_leaves_it_as_it_is(tmp_path):
    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([state(0)])
        held = host.replicas[("tid", 0)]
        await host.add_replicas([state(0), state(1)])
        assert host.replicas[("tid", 0)] is held
        assert await host.count() == 2
        await host.close_all()

    asyncio.run(run())


def test_a_restarted_host_reopens_every_replica_and_each_waits_to_check_in(tmp_path):
    """A replica named in the members file ran before: whatever its files say, it neither
    leads nor follows until the controller answers its check-in."""

    async def first_life():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=4)
        await host.add_replicas([state(p) for p in range(3)])
        await host.produce("tid", 2, _batch(b"kept"), 1, 1000)
        await host.close_all()

    asyncio.run(first_life())
    assert len(read_members(members_path(str(tmp_path), 4))) == 3

    async def second_life():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=4)
        assert sorted(host.replicas) == [("tid", 0), ("tid", 1), ("tid", 2)]
        links = {}
        for key, replica in host.replicas.items():
            replica.controller = links[key] = QuietLink()
        await host.ready()
        await asyncio.sleep(0.05)
        assert all(not r.checked_in and r.leader is None for r in host.replicas.values())
        assert all(link.calls[0][0] == "replica_started" for link in links.values())
        assert host.replicas[("tid", 2)].log.log_end_offset == 1
        await host.close_all()

    asyncio.run(second_life())


def test_a_removed_replica_leaves_the_members_file_and_its_files_are_deleted(tmp_path):
    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([state(0), state(1)])
        directory = host.replicas[("tid", 1)].directory
        assert await host.remove("tid", 1, delete_files=True)
        assert not os.path.exists(directory)
        assert [s["partition"] for s in read_members(members_path(str(tmp_path), 0))] == [0]
        assert not await host.remove("tid", 1, delete_files=True)
        await host.close_all()

    asyncio.run(run())


def test_batched_state_pushes_reach_each_replica_held(tmp_path):
    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([state(0), state(1)])
        newer = [{**state(p), "leader_epoch": 1, "partition_epoch": 1} for p in (0, 1, 9)]
        assert await host.update_states(newer) == 2
        assert [host.replicas[("tid", p)].state["leader_epoch"] for p in (0, 1)] == [1, 1]
        await host.close_all()

    asyncio.run(run())


def follower_state(partition: int) -> dict:
    """A replica of broker 1 following broker 2's (which this test never runs)."""
    return {**state(partition), "replicas": [2, 1], "isr": [2, 1], "leader": 2,
            "hosts": [0, 0]}  # fmt: skip


def test_a_batch_of_follower_fetches_is_answered_when_one_has_records(tmp_path):
    """Three followers wait on one leader host; a write to one partition answers the whole
    batch at once: that fetch with the records, the others empty, none after its wait."""
    import time

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=2, slot=0)
        leaders = [{**state(p), "broker_id": 2, "replicas": [2, 1], "isr": [2, 1],
                    "leader": 2} for p in range(3)]  # fmt: skip
        await host.add_replicas(leaders)
        fetch = [("tid", p, 1, 0, 0, -1, 1 << 20, 5000, 1) for p in range(3)]
        began = time.monotonic()
        answering = asyncio.get_running_loop().create_task(host.replicate_many(fetch))
        await asyncio.sleep(0.2)
        assert not answering.done()  # long-polling: nothing to send yet
        await host.produce("tid", 1, _batch(b"new"), 1, 1000)
        answers = await asyncio.wait_for(answering, 2)
        assert time.monotonic() - began < 2
        assert [a[0] for a in answers] == [0, 0, 0]
        assert [len(a[7]) > 0 for a in answers] == [False, True, False]
        missing = await host.replicate_many([("tid", 9, 1, 0, 0, -1, 1 << 20, 5000, 1)])
        assert missing[0][0] == NotLeaderOrFollower.errno
        await host.close_all()

    asyncio.run(run())


def test_follower_fetches_of_one_moment_go_to_a_leader_host_in_one_call(tmp_path):
    from rafka.actors.fetch_batcher import FetchBatcher
    from rafka.actors.replica_handle import ReplicaHandle

    class Leader:
        """A leader host whose replicate_many answers each fetch with its partition."""

        def __init__(self) -> None:
            self.calls: list[list] = []
            self.replicate_many = self

        def remote(self, requests):
            self.calls.append(requests)
            future = asyncio.get_running_loop().create_future()
            future.set_result([("answer", r[1]) for r in requests])
            return future

    async def run():
        leader, batcher = Leader(), FetchBatcher()
        answers = await asyncio.gather(*(
            batcher.replicate(ReplicaHandle(leader, "tid", p), 1, 0, 0, -1, 1, 500, 1)
            for p in range(5)
        ))  # fmt: skip
        assert answers == [("answer", p) for p in range(5)]
        assert len(leader.calls) == 1 and len(leader.calls[0]) == 5
        await batcher.replicate(ReplicaHandle(leader, "tid", 0), 1, 0, 0, -1, 1, 500, 1)
        assert len(leader.calls) == 2

    asyncio.run(run())


def test_a_replica_the_controller_knows_ran_before_checks_in_even_with_no_files(tmp_path):
    """Re-created after its host and files were lost (``must_check_in``): an empty
    directory must not make it a new replica that leads at once with an empty log."""

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([])  # timers up
        replica = host._open({**state(0), "must_check_in": True}, restarted=False)
        replica.controller = QuietLink()
        replica.loop_ready()
        await asyncio.sleep(0.05)
        assert not replica.checked_in and replica.leader is None
        assert replica.controller.calls[0][0] == "replica_started"
        await host.close_all()

    asyncio.run(run())


def test_one_failing_partition_in_a_fetch_batch_answers_its_error_and_not_the_others(tmp_path):
    from rafka.errors import KafkaStorageError

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=2, slot=0)
        leaders = [{**state(p), "broker_id": 2, "replicas": [2, 1], "isr": [2, 1],
                    "leader": 2} for p in range(2)]  # fmt: skip
        await host.add_replicas(leaders)
        await host.produce("tid", 1, _batch(b"x"), 1, 1000)

        async def broken(*args, **kwargs):
            raise IndexError("a corrupt index")

        host.replicas[("tid", 0)].replicate = broken
        fetch = [("tid", p, 1, 0, 0, -1, 1 << 20, 500, 1) for p in range(2)]
        answers = await host.replicate_many(fetch)
        assert answers[0][0] == KafkaStorageError.errno
        assert answers[1][0] == 0 and len(answers[1][7]) > 0
        await host.close_all()

    asyncio.run(run())


def test_batches_end_their_long_polls_without_breaking_the_next_ones(tmp_path):
    """The fetches a batch stops waiting for are not cancelled: round after round, each
    batch still waits, and still wakes on the next append."""
    import time

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=2, slot=0)
        leaders = [{**state(p), "broker_id": 2, "replicas": [2, 1], "isr": [2, 1],
                    "leader": 2} for p in range(3)]  # fmt: skip
        await host.add_replicas(leaders)
        ends = [0, 0, 0]
        for round_ in range(4):
            fetch = [("tid", p, 1, 0, ends[p], -1, 1 << 20, 5000, 1) for p in range(3)]
            answering = asyncio.get_running_loop().create_task(host.replicate_many(fetch))
            await asyncio.sleep(0.05)
            assert not answering.done()
            began = time.monotonic()
            await host.produce("tid", round_ % 3, _batch(b"r%d" % round_), 1, 1000)
            answers = await asyncio.wait_for(answering, 2)
            assert time.monotonic() - began < 1
            assert all(a[0] == 0 for a in answers)
            ends[round_ % 3] += 1
        await host.close_all()

    asyncio.run(run())


def test_a_load_report_counts_each_replicas_size_bytes_appended_and_bytes_to_consumers(tmp_path):
    """One call answers for every replica of the host: its log size, what was appended to
    it and what consumers fetched from it, counted since the replica opened."""

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([state(0), state(1)])
        batch = _batch(b"x" * 100)
        assert (await host.produce("tid", 0, batch, 1, 1000))[0] == 0
        await host.fetch("tid", 0, 0, 1 << 20, 1, 0)
        await host.fetch("tid", 0, 0, 1 << 20, 1, 0)
        report = await host.load_report()
        rows = {row[1]: row for row in report["replicas"]}
        _, _, size, appended, to_consumers, since = rows[0]
        assert (size, appended, to_consumers) == (len(batch), len(batch), 2 * len(batch))
        assert since <= report["at_ms"]
        assert rows[1][2:5] == [0, 0, 0]
        await host.close_all()

    asyncio.run(run())
