"""The Kafka listener's metadata cache: one controller read per topic however many requests
want it at once."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from rafka.actors import host_channels
from rafka.actors.channel_client import ChannelClosed
from rafka.actors.kafka_backend import KafkaBackend


class _CountingBackend(KafkaBackend):
    """A KafkaBackend whose controller answers after a pause and counts the reads."""

    def __init__(self) -> None:
        super().__init__("test")
        self.reads = 0

    async def controller(self, method: str, *args, timeout_s: float = 30.0):
        assert method == "metadata"
        self.reads += 1
        await asyncio.sleep(0.01)
        (topic,) = args[0]
        return {topic: {"topic_id": "id", "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 3, "replicas": [1], "isr": [1]}
            for p in range(8)]}}  # fmt: skip


def test_concurrent_requests_for_a_topic_not_cached_read_it_once():
    """Partitions of one fetch asking for a newer leader epoch (each dropping the cache) or a
    burst of requests after a leader change cost one controller read, not one each."""

    async def run():
        backend = _CountingBackend()
        epochs = await asyncio.gather(*(backend.leader_epoch("t", p, newer_than=9)
                                        for p in range(8)))  # fmt: skip
        return backend.reads, epochs

    reads, epochs = asyncio.run(run())
    assert epochs == [3] * 8
    assert reads <= 2  # the first load, and at most one re-read for the newer epoch


# -- calls to the leader: direct channel or actor call ------------------------------------------


class _Channel:
    """A direct channel whose produce calls fail as a broken connection does (``broken``)
    or answer, recording (method, args)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.broken = False

    def call(self, method, *args):
        self.calls.append((method, args))
        future = concurrent.futures.Future()
        if self.broken:
            future.set_exception(ChannelClosed("the connection ended; retry"))
        else:
            future.set_result((0, "", 0, [(0, "", 0, -1)]))
        return future

    def cancel(self, future) -> None:
        pass


class _Channels(host_channels.HostChannels):
    """This process's channels, with ``channel`` always up (or always down: None)."""

    def __init__(self, channel) -> None:
        super().__init__()
        self._channel = channel

    def channel(self, host):
        return self._channel

    def for_request(self, host, session, request_no):
        return self._channel


class _ActorMethod:
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args):
        self.calls.append((self.name, args))
        future = concurrent.futures.Future()
        future.set_result((0, "", 7, -1))
        return asyncio.wrap_future(future)


class _Replica:
    topic_id, partition, host = "id", 0, object()

    def __init__(self) -> None:
        self.actor_calls: list[tuple] = []

    def __getattr__(self, method):
        return _ActorMethod(self.actor_calls, method)


class _LeaderBackend(KafkaBackend):
    def __init__(self, replica) -> None:
        super().__init__("test")
        self.replica = replica

    async def _leader_replica(self, topic, partition):
        return self.replica, 1


def test_calls_channels_do_not_serve_go_as_actor_calls_when_a_channel_is_up(monkeypatch):
    channel, replica = _Channel(), _Replica()
    monkeypatch.setattr(host_channels, "shared", lambda: _Channels(channel))
    answer = asyncio.run(_LeaderBackend(replica).list_offset("t", 0, -1, False))
    assert answer == (0, "", 7, -1)
    assert [name for name, _ in replica.actor_calls] == ["list_offset"] and not channel.calls


def test_a_produce_lost_with_its_connection_starts_the_numbering_over(monkeypatch):
    """The lost request's number never reached the leader: later requests under the same id
    would wait for it there until their timeout."""
    channel, numbers = _Channel(), {}
    monkeypatch.setattr(host_channels, "shared", lambda: _Channels(channel))

    def number_of(client_id: str) -> int:
        numbers[client_id] = numbers.get(client_id, -1) + 1
        return numbers[client_id]

    async def run():
        backend = _LeaderBackend(_Replica())
        produce = lambda: backend.produce("t", 0, b"x", 1, 1000, "k/1", number_of, None)  # noqa: E731
        await produce()
        channel.broken = True
        with pytest.raises(ChannelClosed):
            await produce()
        channel.broken = False
        await produce()

    asyncio.run(run())
    sent = [(args[5], args[6]) for _, args in channel.calls]  # (client id, request number)
    assert sent == [("k/1@1", 0), ("k/1@1", 1), ("k/1@1#1", 0)]


def test_controller_calls_are_retried_while_the_controller_restarts():
    from ray.exceptions import RayActorError

    class _Restarting:
        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, method):
            outer = self

            class _Method:
                def remote(self, *args):
                    outer.calls += 1
                    future = concurrent.futures.Future()
                    if outer.calls == 1:
                        future.set_exception(RayActorError())
                    else:
                        future.set_result({"method": method})
                    return asyncio.wrap_future(future)

            return _Method()

    backend = KafkaBackend("test")
    controller = _Restarting()
    backend.gateway.controller = lambda: controller
    answer = asyncio.run(backend.controller("metadata", timeout_s=5))
    assert answer == {"method": "metadata"} and controller.calls == 2
