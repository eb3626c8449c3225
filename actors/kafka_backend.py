"""The Kafka listener's way into rafka: async calls on the controller, the leaders'
replicas and the coordinators, with rafka's typed errors.

The handlers (``rafka.wire.handlers_*``) see only this class, so they are tested without Ray
against a fake of it. Leaders are cached per topic and forgotten on the errors that mean the
cache is stale; a request for a partition whose leader is on another node is sent there
directly (a Kafka broker would answer NOT_LEADER_OR_FOLLOWER; rafka can reach every leader,
so a client with stale metadata still gets served).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rafka.actors import host_channels
from rafka.actors.handles import Gateway, _translate, as_array
from rafka.actors.replica_handle import leader_host
from rafka.errors import (
    BrokerNotAvailable,
    LeaderNotAvailable,
    NotLeaderOrFollower,
    RafkaError,
    UnknownTopicOrPartition,
    error_class,
)

#: Errors after which a topic's cached leaders are dropped.
STALE_LEADER_ERRORS = (NotLeaderOrFollower, LeaderNotAvailable, UnknownTopicOrPartition,
                       BrokerNotAvailable)  # fmt: skip
CONTROLLER_TIMEOUT_S = 30.0
CONTROLLER_RETRY_S = 0.2


def _submit(replica, method: str, args: tuple, client_id: str | None = None,
            request_no: int = -1) -> tuple[Awaitable[Any], Callable[[], None]]:
    """``method`` of ``replica`` submitted now (``HostChannels.call_replica``): its answer to
    await, and a function that stops it."""
    pending, channel = host_channels.shared().call_replica(replica, method, args, client_id,
                                                           request_no)  # fmt: skip
    if channel is not None:
        return asyncio.wrap_future(pending), lambda: channel.cancel(pending)
    return pending, lambda: ray.cancel(pending)


class KafkaBackend:
    """One per listener actor; used from its event loop only."""

    def __init__(self, namespace: str) -> None:
        self.gateway = Gateway(namespace)
        # topic -> (topic id, [(leader, leader epoch, host slot) per partition])
        self._leaders: dict[str, tuple[str, list[tuple[int, int, int]]]] = {}
        self._loading: dict[str, asyncio.Future] = {}  # topic -> its read in flight
        # (client id at a leader, topic, partition) -> how many times its produce numbering
        # started over (a failed call may have taken a number the leader never saw).
        self._numberings: dict[tuple[str, str, int], int] = {}

    # -- controller ----------------------------------------------------------------------------

    async def controller(self, method: str, *args, timeout_s: float = CONTROLLER_TIMEOUT_S):
        """A controller call's answer; retried while the controller restarts."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                handle = self.gateway.controller()
                ref = getattr(handle, method).remote(*args)
                return await asyncio.wait_for(ref, max(0.01, deadline - loop.time()))
            except RayActorError as e:
                self.gateway.reset()
                if loop.time() + CONTROLLER_RETRY_S >= deadline:
                    raise _translate(e, "the rafka controller") from None
                await asyncio.sleep(CONTROLLER_RETRY_S)
            except asyncio.TimeoutError:
                raise _translate(GetTimeoutError(), "the rafka controller") from None
            except RayTaskError as e:
                raise _translate(e, "the rafka controller") from None

    async def kafka_metadata(self, names: list[str] | None, allow_auto_create: bool,
                             protocol: str) -> dict[str, Any]:  # fmt: skip
        answer = await self.controller("kafka_metadata", names, allow_auto_create, protocol)
        for name, described in answer["topics"].items():
            self._remember(name, described)
        return answer

    def _remember(self, name: str, described) -> None:
        if isinstance(described, dict):
            self._leaders[name] = (
                described["topic_id"],
                [(p["leader"], p["leader_epoch"], leader_host(p))
                 for p in described["partitions"]],
            )  # fmt: skip
        else:
            self._leaders.pop(name, None)

    async def topic_id(self, topic: str) -> str:
        return (await self._topic(topic))[0]

    async def _topic(self, topic: str) -> tuple[str, list]:
        """``topic``'s (topic id, partitions), from the cache or read from the controller;
        requests that find it missing at once share one read (a fetch whose partitions each
        ask for a newer leader epoch, a burst after a leader change)."""
        cached = self._leaders.get(topic)
        if cached is not None:
            return cached
        loading = self._loading.get(topic)
        if loading is None:
            loading = self._loading[topic] = asyncio.ensure_future(self._load(topic))
            loading.add_done_callback(lambda done: self._loaded(topic, done))
        return await asyncio.shield(loading)

    def _loaded(self, topic: str, done: asyncio.Future) -> None:
        if self._loading.get(topic) is done:
            del self._loading[topic]
        if not done.cancelled():
            done.exception()  # retrieved here: every waiter may have gone (a cancelled poll)

    async def _load(self, topic: str) -> tuple[str, list]:
        described = (await self.controller("metadata", [topic], False))[topic]
        self._remember(topic, described)
        if not isinstance(described, dict):
            errno, message = described
            raise error_class(errno)(message)
        return self._leaders[topic]

    async def _partition(self, topic: str, partition: int) -> tuple[str, tuple[int, int, int]]:
        """(topic id, (leader, leader epoch, host slot)) of ``topic``-``partition``, cached."""
        topic_id, partitions = await self._topic(topic)
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartition(
                f"topic {topic} has {len(partitions)} partitions; partition {partition} "
                "does not exist"
            )
        return topic_id, partitions[partition]

    async def _leader_replica(self, topic: str, partition: int):
        topic_id, (leader, _, host) = await self._partition(topic, partition)
        if leader < 0:
            self._leaders.pop(topic, None)
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader right now; retry")
        try:
            return self.gateway.replica(topic_id, partition, leader, host), leader
        except RafkaError:
            self._leaders.pop(topic, None)
            raise

    async def partition_count(self, topic: str, covering: int = 0) -> int:
        """How many partitions ``topic`` has as this listener knows it, re-read from the
        controller when the partition index ``covering`` lies beyond that (partitions were
        added since). UnknownTopicOrPartition when the topic does not exist."""
        count = len((await self._topic(topic))[1])
        if covering >= count:
            self.forget(topic)
            count = len((await self._topic(topic))[1])
        return count

    async def leader_epoch(self, topic: str, partition: int, newer_than: int | None = None) -> int:
        """``topic``-``partition``'s leader epoch as this listener knows it, re-read from the
        controller first when a client names a newer one (the cache may lag an election)."""
        epoch = (await self._partition(topic, partition))[1][1]
        if newer_than is not None and newer_than > epoch:
            self.forget(topic)
            epoch = (await self._partition(topic, partition))[1][1]
        return epoch

    def forget(self, topic: str) -> None:
        """Drop ``topic``'s cached leaders (an answer said they moved)."""
        self._leaders.pop(topic, None)

    async def _replica_call(self, topic: str, partition: int, method: str, *args):
        replica, _ = await self._leader_replica(topic, partition)
        answer, cancel = _submit(replica, method, args)
        try:
            return await answer
        except asyncio.CancelledError:
            # A long poll nobody waits for any more (another partition of the fetch had
            # records first) ends now rather than at max_wait_ms.
            cancel()
            raise
        except Exception as e:
            self.forget(topic)
            raise _translate(e, f"the leader of {topic}-{partition}") from None

    # -- partitions ----------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, batches: bytes, acks: int,
                      timeout_ms: int, client_key: str, number_of,
                      transactional_id: str | None, submitted=None) -> tuple:  # fmt: skip
        """The leader's produce answer: (errno, message, log start, [(errno, message,
        base offset, log append time) per batch]). ``number_of(client_id)`` numbers this
        request among the client's requests to that leader (kept in order there), and
        ``submitted()`` is called once the call is sent."""
        replica, leader = await self._leader_replica(topic, partition)
        at_leader = f"{client_key}@{leader}"
        numbering = (at_leader, topic, partition)
        started_over = self._numberings.get(numbering, 0)
        client_id = f"{at_leader}#{started_over}" if started_over else at_leader
        request_no = number_of(client_id)
        try:
            answer, _ = _submit(replica, "produce", (
                as_array(batches), acks, timeout_ms, client_id, request_no, transactional_id,
            ), client_id, request_no)  # fmt: skip
            if submitted is not None:
                submitted()
            answer = await answer
        except Exception as e:
            self.forget(topic)
            if not isinstance(e, RafkaError) or isinstance(e, BrokerNotAvailable):
                # The call may have ended before the leader took its number (a connection
                # that broke): later requests under this id would wait for it there.
                self._numberings[numbering] = max(self._numberings.get(numbering, 0),
                                                  started_over + 1)  # fmt: skip
            if isinstance(e, (RayTaskError, RayActorError)):
                raise _translate(e, f"the leader of {topic}-{partition}") from None
            raise
        if answer[0] in _STALE_ERRNOS:
            self.forget(topic)
        return answer

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
                    min_bytes: int, max_wait_ms: int, committed: bool) -> tuple:  # fmt: skip
        method = "fetch_committed" if committed else "fetch"
        answer = await self._replica_call(topic, partition, method, offset, max_bytes,
                                          min_bytes, max_wait_ms)  # fmt: skip
        if answer[0] in _STALE_ERRNOS:
            self.forget(topic)
        return answer

    async def list_offset(self, topic: str, partition: int, timestamp: int,
                          committed: bool) -> tuple:  # fmt: skip
        answer = await self._replica_call(topic, partition, "list_offset", timestamp, committed)
        if answer[0] in _STALE_ERRNOS:
            self.forget(topic)
        return answer

    async def describe_replica(self, topic: str, partition: int) -> dict[str, Any]:
        return await self._replica_call(topic, partition, "describe")

    # -- coordinators --------------------------------------------------------------------------

    async def group(self, group_id: str, method: str, *args):
        """Call ``method`` on the coordinator shard of ``group_id``."""
        name = (await self.controller("group_coordinator", group_id))["name"]
        return await self._named_call(name, "group coordinator", method, *args)

    async def groups(self, method: str, *args) -> list:
        """Call ``method`` on every group coordinator shard."""
        names = await self.controller("group_coordinators")
        return await asyncio.gather(*(self._named_call(n, "group coordinator", method, *args)
                                      for n in names))  # fmt: skip

    async def transaction(self, transactional_id: str, method: str, *args):
        """Call ``method`` on the transaction coordinator shard of ``transactional_id``."""
        name = (await self.controller("transaction_coordinator", transactional_id))["name"]
        return await self._named_call(name, "transaction coordinator", method, *args)

    async def _named_call(self, name: str, what: str, method: str, *args):
        handle = self.gateway._named(name, what)
        try:
            return await getattr(handle, method).remote(*args)
        except (RayTaskError, RayActorError) as e:
            raise _translate(e, f"{what} {name}") from None


_STALE_ERRNOS = frozenset(cls.errno for cls in STALE_LEADER_ERRORS)
