"""The group coordinator shards, as the controller starts, finds and stops them.

Consumer groups are served by ``GroupCoordinator`` actors, one per partition of the
compacted internal topic ``__consumer_offsets``; a group's shard is a hash of its id
(``rafka.cluster.offsets_records.coordinator_shard``), Kafka's FindCoordinator. The topic is
created on first use and each shard's actor is started (named, detached, restarted by Ray)
on first use.

Part of the Controller actor, on its event loop. Holds no state of its own: the shard count
is the topic's partition count in the metadata log, and a coordinator rebuilds its groups
from its partition of ``__consumer_offsets`` after any restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import ControllerCore
from rafka.actors.placement import coordinator_name
from rafka.actors.topic_admin import TopicAdmin
from rafka.cluster.offsets_records import coordinator_shard
from rafka.cluster.settings import offsets_topic_partitions, setting
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.errors import TopicAlreadyExists


class CoordinatorShards:
    """Where groups are served; see the Controller methods of the same names."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, topics: TopicAdmin):
        self.core = core
        self.calls = calls
        self.topics = topics

    async def group_coordinator(self, group_id: str) -> dict[str, Any]:
        shards = await self._offsets_topic()
        shard = coordinator_shard(group_id, shards)
        await self._coordinator(shard)
        return {"shard": shard, "name": coordinator_name(shard), "shards": shards}

    async def group_coordinators(self) -> list[str]:
        shards = await self._offsets_topic()
        await asyncio.gather(*(self._coordinator(k) for k in range(shards)))
        return [coordinator_name(k) for k in range(shards)]

    async def _offsets_topic(self) -> int:
        """The partition count of __consumer_offsets, creating the topic on first use with
        as many copies as ``offsets.topic.replication.factor`` and the live brokers allow."""
        core = self.core
        if CONSUMER_OFFSETS in core.image.topic_ids:
            return len(core.image.topic(CONSUMER_OFFSETS).partitions)
        partitions = offsets_topic_partitions(core.settings)
        wanted = setting(core.settings, "offsets.topic.replication.factor")
        copies = max(1, min(wanted, len(self.calls.live_brokers())))
        if copies < wanted:
            core.logger.warning(
                "%s gets %d copies, not offsets.topic.replication.factor=%d: only %d live "
                "broker(s)", CONSUMER_OFFSETS, copies, wanted, copies,
            )  # fmt: skip
        # Kafka's own settings for the offsets topic: compacted, 100 MiB segments.
        config = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}
        try:
            await self.topics.create_topic(
                CONSUMER_OFFSETS, partitions, copies, config, internal=True
            )
        except TopicAlreadyExists:  # a concurrent first use created it
            pass
        return len(core.image.topic(CONSUMER_OFFSETS).partitions)

    async def _coordinator(self, shard: int):
        from rafka.actors.group_coordinator import GroupCoordinator

        namespace = self.core.namespace
        handle = ray.remote(GroupCoordinator).options(
            name=coordinator_name(shard), namespace=namespace, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0, max_concurrency=1000,
            num_cpus=0,
        ).remote(namespace, shard, self.core.settings)  # fmt: skip
        await handle.ready.remote()
        return handle

    async def stop_coordinators(self) -> int:
        image = self.core.image
        if CONSUMER_OFFSETS not in image.topic_ids:
            return 0
        stopped = 0
        for shard in range(len(image.topic(CONSUMER_OFFSETS).partitions)):
            try:
                handle = ray.get_actor(coordinator_name(shard), namespace=self.core.namespace)
            except ValueError:
                continue
            ray.kill(handle, no_restart=True)
            stopped += 1
        return stopped
