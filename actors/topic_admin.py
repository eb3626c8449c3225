"""Topic administration on the controller: create, grow, configure, delete, describe.

Each request is decided by ``rafka.cluster.controller`` (plain Python) and appended to the
metadata log under the controller's lock before any replica actor is created, told or
deleted; placement uses the brokers that are live and have a node agent. ``metadata`` is
what clients refresh their leaders from, and creates a topic on first use when
``auto.create.topics.enable`` is on.

Part of the Controller actor, on its event loop. A crash after the append and before the
replicas were created or deleted leaves the metadata ahead of the actors: ``reconcile`` (run
when the services start) creates missing replicas, and a replica of a deleted topic finds
itself unassigned when it next checks in (after a restart) and deletes itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import (
    ControllerCore,
    min_insync_replicas,
    unclean_election_enabled,
)
from rafka.actors.partition_changes import PartitionChanges
from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.metadata import NO_LEADER, TopicState
from rafka.cluster.topics import is_internal
from rafka.errors import TopicAlreadyExists, UnknownTopicOrPartition
from rafka.storage.config import LogConfig


class TopicAdmin:
    """The topic requests of the Controller's API; see its methods of the same names."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, changes: PartitionChanges):
        self.core = core
        self.calls = calls
        self.changes = changes

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict | None,
        internal: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        core, calls = self.core, self.calls
        async with core.lock:
            topic_id, records = decide.create_topic(
                core.image, name, partitions, replication_factor, config, calls.live_brokers(),
                internal,
            )  # fmt: skip
            core.store.append(records)
            topic = core.image.topics[topic_id]
            await calls.ensure(calls.states_by_broker(topic, topic.partitions.values()))
            self.changes.refresh_health_gauges()
            return self.describe(topic)

    async def create_partitions(self, name: str, total: int) -> dict[str, Any]:
        core, calls = self.core, self.calls
        async with core.lock:
            records = decide.create_partitions(core.image, name, total, calls.live_brokers())
            core.store.append(records)
            topic = core.image.topic(name)
            new = [topic.partitions[r["partition"]] for r in records]
            await calls.ensure(calls.states_by_broker(topic, new))
            self.changes.refresh_health_gauges()
            return self.describe(topic)

    async def alter_topic_config(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        core = self.core
        async with core.lock:
            core.store.append(decide.alter_config(core.image, name, changes))
            topic = core.image.topic(name)
            config = topic.config
        pushes = []
        for p in topic.partitions.values():
            for b in p.replicas:
                if core.liveness.is_live(b):  # the others read it when they check in
                    try:
                        pushes.append(self.calls.replica(topic, p, b).update_state.remote(
                            {"config": config}
                        ))  # fmt: skip
                    except ValueError:
                        pass
        if pushes:
            await asyncio.wait([asyncio.ensure_future(r) for r in pushes], timeout=10)
        if unclean_election_enabled(topic):  # leaderless partitions may take any live replica
            await self.changes.change(
                lambda t, q: elections.elect_if_leaderless(
                    q, core.electable(t.topic_id, q.partition), True, min_insync_replicas(t)
                ),
                only=[(topic, q) for q in topic.partitions.values()],
            )  # fmt: skip
        return self.describe(topic)

    async def delete_topic(self, name: str) -> None:
        core, calls = self.core, self.calls
        async with core.lock:
            topic_id, records = decide.delete_topic(core.image, name)
            topic = core.image.topics[topic_id]
            core.store.append(records)
        self.changes.refresh_health_gauges()
        by_broker = calls.states_by_broker(topic, topic.partitions.values())
        live = set(calls.live_brokers())
        await asyncio.gather(
            *(calls.call_agent(b, "delete_replicas", s) for b, s in by_broker.items() if b in live)
        )

    def list_topics(self, include_internal: bool) -> list[str]:
        return sorted(
            t.name for t in self.core.image.topics.values() if include_internal or not t.internal
        )

    def describe_topics(self, names: list[str] | None) -> list[dict[str, Any]]:
        image = self.core.image
        if names is None:
            names = sorted(image.topic_ids)
        return [self.describe(image.topic(n)) for n in names]

    def describe(self, topic: TopicState) -> dict[str, Any]:
        """A topic's configuration and partitions, as admin clients and metadata show it."""
        is_live = self.core.liveness.is_live
        return {
            "name": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
            "config": LogConfig.from_dict(topic.config).to_dict(), "overrides": topic.config,
            "partitions": [
                {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                 "partition_epoch": p.partition_epoch, "replicas": p.replicas, "isr": p.isr,
                 "adding": p.adding, "removing": p.removing,
                 "offline": p.leader == NO_LEADER or not is_live(p.leader)}
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
            ],
        }  # fmt: skip

    async def metadata(self, names: list[str], allow_auto_create: bool) -> dict[str, Any]:
        settings = self.core.settings
        out: dict[str, Any] = {}
        for name in names:
            image = self.core.image
            if name not in image.topic_ids and allow_auto_create and not is_internal(name):
                if settings.get("auto.create.topics.enable", False):
                    try:
                        await self.create_topic(
                            name, int(settings.get("num.partitions", 1)),
                            int(settings.get("default.replication.factor", 1)), None,
                        )  # fmt: skip
                    except TopicAlreadyExists:
                        pass
            try:
                out[name] = self.describe(self.core.image.topic(name))
            except UnknownTopicOrPartition as e:
                out[name] = (e.errno, str(e))
        return out
