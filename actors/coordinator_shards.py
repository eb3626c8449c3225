"""The coordinator shards, as the controller starts, finds and stops them.

Consumer groups are served by ``GroupCoordinator`` actors, one per partition of the
compacted internal topic ``__consumer_offsets``; transactional ids by
``TransactionCoordinator`` actors, one per partition of ``__transaction_state``. An id's
shard is a hash of it (``rafka.cluster.offsets_records.coordinator_shard``), Kafka's
FindCoordinator. Each topic is created on first use and each shard's actor is started
(named, detached, restarted by Ray) on first use.

Part of the Controller actor, on its event loop. Holds no state of its own: the shard counts
are the topics' partition counts in the metadata log, and a coordinator rebuilds its state
from its partition after any restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import ControllerCore
from rafka.actors.placement import coordinator_name, transaction_coordinator_name
from rafka.actors.topic_admin import TopicAdmin
from rafka.cluster.offsets_records import coordinator_shard
from rafka.cluster.settings import offsets_topic_partitions, setting, transaction_topic_partitions
from rafka.cluster.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
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

    async def transaction_coordinator(self, transactional_id: str) -> dict[str, Any]:
        shards = await self._transaction_topic()
        shard = coordinator_shard(transactional_id, shards)
        await self._transaction_coordinator(shard)
        return {"shard": shard, "name": transaction_coordinator_name(shard), "shards": shards}

    async def transaction_coordinators(self) -> list[str]:
        shards = await self._transaction_topic()
        await asyncio.gather(*(self._transaction_coordinator(k) for k in range(shards)))
        return [transaction_coordinator_name(k) for k in range(shards)]

    async def _offsets_topic(self) -> int:
        """The partition count of __consumer_offsets, created on first use (Kafka's own
        settings for it: compacted, 100 MiB segments)."""
        return await self._internal_topic(
            CONSUMER_OFFSETS, offsets_topic_partitions(self.core.settings),
            "offsets.topic.replication.factor", {},
        )  # fmt: skip

    async def _transaction_topic(self) -> int:
        """The partition count of __transaction_state, created on first use; as Kafka's,
        compacted with 100 MiB segments and ``transaction.state.log.min.isr``."""
        min_isr = setting(self.core.settings, "transaction.state.log.min.isr")
        return await self._internal_topic(
            TRANSACTION_STATE, transaction_topic_partitions(self.core.settings),
            "transaction.state.log.replication.factor", {"min.insync.replicas": min_isr},
        )  # fmt: skip

    async def _internal_topic(
        self, name: str, partitions: int, replication_setting: str, config: dict[str, Any]
    ) -> int:
        """The partition count of internal topic ``name``, creating it on first use with as
        many copies as ``replication_setting`` and the live brokers allow (and a min ISR no
        larger than the copies)."""
        core = self.core
        if name in core.image.topic_ids:
            return len(core.image.topic(name).partitions)
        wanted = setting(core.settings, replication_setting)
        copies = max(1, min(wanted, len(self.calls.placeable_brokers())))
        if copies < wanted:
            core.logger.warning(
                "%s gets %d copies, not %s=%d: only %d live broker(s)", name, copies,
                replication_setting, wanted, copies,
            )  # fmt: skip
        config = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024, **config}
        if "min.insync.replicas" in config:
            config["min.insync.replicas"] = min(config["min.insync.replicas"], copies)
        try:
            await self.topics.create_topic(name, partitions, copies, config, internal=True)
        except TopicAlreadyExists:  # a concurrent first use created it
            pass
        return len(core.image.topic(name).partitions)

    async def _coordinator(self, shard: int):
        from rafka.actors.group_coordinator import GroupCoordinator

        return await self._start(GroupCoordinator, coordinator_name(shard), shard)

    async def _transaction_coordinator(self, shard: int):
        from rafka.actors.transaction_coordinator import TransactionCoordinator

        return await self._start(TransactionCoordinator, transaction_coordinator_name(shard),
                                 shard)  # fmt: skip

    async def _start(self, actor_class: type, name: str, shard: int):
        """The coordinator actor ``name`` of ``shard`` (named, detached, restarted by Ray),
        started if it does not run, once it has loaded its state."""
        namespace = self.core.namespace
        handle = ray.remote(actor_class).options(
            name=name, namespace=namespace, get_if_exists=True, lifetime="detached",
            max_restarts=-1, max_task_retries=0, max_concurrency=1000, num_cpus=0,
        ).remote(namespace, shard, self.core.settings)  # fmt: skip
        await handle.ready.remote()
        return handle

    async def stop_coordinators(self) -> int:
        """Stop every coordinator actor (groups and transactions); returns how many."""
        image = self.core.image
        stopped = 0
        for topic, name_of in ((CONSUMER_OFFSETS, coordinator_name),
                               (TRANSACTION_STATE, transaction_coordinator_name)):  # fmt: skip
            if topic not in image.topic_ids:
                continue
            for shard in range(len(image.topic(topic).partitions)):
                try:
                    handle = ray.get_actor(name_of(shard), namespace=self.core.namespace)
                except ValueError:
                    continue
                ray.kill(handle, no_restart=True)
                stopped += 1
        return stopped
