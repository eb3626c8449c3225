"""Follower fetches of one host's replicas, sent to each leader host together.

Every follower replica runs its own fetch loop (``replica_follower``), but a host holding a
hundred followers of partitions led in the same host would make a hundred calls per
round, and an idle replica would cost a Ray call per long poll. As Kafka's replica fetcher
sends one fetch per source broker for all the partitions it follows there, the requests
the follower loops of one host make in the same moment (one turn of the event loop) to one
leader host go as one ``replicate_many`` call; each loop gets its own answer back.

The leader host answers a batch as soon as one of its fetches has something (records, a
divergence, an error) or the longest wait is over; the others are answered with what they
have then (see ``ReplicaHost.replicate_many``). A loop that sends again while a batch is out
is not held back: its request goes in the next batch at once.

Batches go over the leader host's direct channel when there is one (``host_channels``),
else as actor calls. Run on the host's event loop; nothing is persisted.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from rafka.actors import host_channels
from rafka.actors.replica_handle import ReplicaHandle


def replicate_many(host, requests: list[tuple]) -> Awaitable[list[tuple]]:
    """``host.replicate_many(requests)``, submitted now: over the host's direct channel when
    there is one, else as an actor call."""
    channel = host_channels.shared().channel(host)
    if channel is not None:
        return asyncio.wrap_future(channel.call("replicate_many", requests))
    return host.replicate_many.remote(requests)


class FetchBatcher:
    """Batches ``replicate`` calls per leader host."""

    def __init__(self) -> None:
        # leader host handle -> requests waiting to be sent: (topic id, partition, args), future
        self._queued: dict[Any, list[tuple[tuple, asyncio.Future]]] = {}
        self.batches_sent = 0

    async def replicate(self, leader: ReplicaHandle, *args: Any) -> tuple:
        """The answer of ``leader``'s replica to a follower fetch with ``args`` (see
        ``PartitionReplica.replicate``); raises what the call to its host raised."""
        future = asyncio.get_running_loop().create_future()
        queue = self._queued.get(leader.host)
        if queue is None:
            queue = self._queued[leader.host] = []
            loop = asyncio.get_running_loop()
            # Two turns: loops woken by the same answer all get to ask again first.
            loop.call_soon(loop.call_soon, self._send, leader.host)
        queue.append(((leader.topic_id, leader.partition, *args), future))
        return await future

    def replicate_now(self, leader: ReplicaHandle, *args: Any) -> Awaitable[tuple]:
        """The answer of ``leader``'s replica to a fetch with ``args``, the call submitted
        now, alone: for a fetch that must leave before what its caller does next (a
        follower's prefetch overlaps the append that follows it)."""
        ref = replicate_many(leader.host, [(leader.topic_id, leader.partition, *args)])

        async def answer() -> tuple:
            return (await ref)[0]

        return answer()

    def _send(self, host) -> None:
        batch = self._queued.pop(host, [])
        live = [(request, future) for request, future in batch if not future.done()]
        if live:
            self.batches_sent += 1
            asyncio.get_running_loop().create_task(self._call(host, live))

    @staticmethod
    async def _call(host, batch: list[tuple[tuple, asyncio.Future]]) -> None:
        try:
            answers = await replicate_many(host, [request for request, _ in batch])
        except Exception as e:  # the host died or restarts: every fetch in it failed
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        for (_, future), answer in zip(batch, answers):
            if not future.done():  # its loop stopped waiting (stopped, or timed out)
                future.set_result(answer)
