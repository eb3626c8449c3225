"""Controller: the one actor that owns the cluster's metadata.

A thin shell: requests are decided by ``rafka.cluster.controller`` (plain Python), the records
it returns are made durable by ``MetadataLog`` before anything else happens, and only then are
node agents told to create or delete replica actors. Killed and restarted, the actor rebuilds
everything from its metadata log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import ray

from rafka.actors.placement import agent_name, disk_dir, replica_name
from rafka.cluster import controller as decide
from rafka.cluster.metadata import PartitionState, TopicState
from rafka.cluster.metadata_log import MetadataLog
from rafka.cluster.topics import is_internal
from rafka.errors import BrokerNotAvailable, TopicAlreadyExists, UnknownTopicOrPartition
from rafka.storage.config import LogConfig

CONTROLLER_DIR = "controller"

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, data_root: str, disk: str, namespace: str, settings: dict[str, Any]):
        self.namespace = namespace
        self.disk = disk
        self.settings = dict(settings)
        self.store = MetadataLog(os.path.join(disk_dir(data_root, disk), CONTROLLER_DIR))
        self._lock = asyncio.Lock()  # one metadata change at a time, in log order
        self._agents: dict[int, Any] = {}
        self._producer_ids: range = range(0)

    @property
    def image(self):
        return self.store.image

    async def ping(self) -> dict[str, Any]:
        return {"disk": self.disk, "metadata_offset": self.image.offset, "pid": os.getpid()}

    # -- brokers -------------------------------------------------------------------------------

    async def register_broker(self, disk: str, broker_id: int | None) -> int:
        async with self._lock:
            broker_id, records = decide.register_broker(self.image, disk, broker_id)
            self.store.append(records)
            self._agents.pop(broker_id, None)
            return broker_id

    def _agent(self, broker_id: int):
        handle = self._agents.get(broker_id)
        if handle is None:
            broker = self.image.brokers.get(broker_id)
            if broker is None:
                raise BrokerNotAvailable(f"broker {broker_id} is not registered")
            try:
                handle = ray.get_actor(agent_name(broker.disk), namespace=self.namespace)
            except ValueError:
                raise BrokerNotAvailable(
                    f"broker {broker_id} (disk {broker.disk!r}) has no running node agent; "
                    "start the node with its disk, then run `rafka up`"
                ) from None
            self._agents[broker_id] = handle
        return handle

    async def _call_agent(self, broker_id: int, method: str, *args, patience_s: float = 30.0):
        """Call a node agent, waiting out a restart (Ray brings an agent back when its disk's
        node returns) for up to ``patience_s``."""
        deadline = time.monotonic() + patience_s
        delay = 0.1
        while True:
            try:
                return await getattr(self._agent(broker_id), method).remote(*args)
            except ray.exceptions.RayActorError:
                self._agents.pop(broker_id, None)
                if time.monotonic() + delay > deadline:
                    raise BrokerNotAvailable(
                        f"the node agent of broker {broker_id} did not answer for "
                        f"{patience_s:.0f} s; is its disk's node up?"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _live_brokers(self) -> list[int]:
        live = []
        for broker_id in sorted(self.image.brokers):
            try:
                self._agent(broker_id)
                live.append(broker_id)
            except BrokerNotAvailable:
                pass
        return live

    # -- replicas ------------------------------------------------------------------------------

    def _replica_state(self, topic: TopicState, p: PartitionState, broker_id: int) -> dict:
        return {
            "topic": topic.name, "topic_id": topic.topic_id, "partition": p.partition,
            "broker_id": broker_id, "replicas": p.replicas, "isr": p.isr, "leader": p.leader,
            "leader_epoch": p.leader_epoch, "config": topic.config,
        }  # fmt: skip

    def _states_by_broker(self, topic: TopicState, partitions) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for p in partitions:
            for broker_id in p.replicas:
                out.setdefault(broker_id, []).append(self._replica_state(topic, p, broker_id))
        return out

    async def _ensure(self, by_broker: dict[int, list[dict]]) -> None:
        await asyncio.gather(
            *(self._call_agent(b, "ensure_replicas", s) for b, s in by_broker.items())
        )

    async def reconcile(self) -> int:
        """Make sure every replica the metadata names has its actor; returns how many."""
        by_broker: dict[int, list[dict]] = {}
        for topic in list(self.image.topics.values()):
            for b, states in self._states_by_broker(topic, topic.partitions.values()).items():
                by_broker.setdefault(b, []).extend(states)
        live = set(self._live_brokers())
        await self._ensure({b: s for b, s in by_broker.items() if b in live})
        return sum(len(s) for b, s in by_broker.items() if b in live)

    # -- topics --------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict | None,
        internal: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        async with self._lock:
            topic_id, records = decide.create_topic(
                self.image, name, partitions, replication_factor, config, self._live_brokers(),
                internal,
            )  # fmt: skip
            self.store.append(records)
            topic = self.image.topics[topic_id]
            await self._ensure(self._states_by_broker(topic, topic.partitions.values()))
            return self._describe(topic)

    async def create_partitions(self, name: str, total: int) -> dict[str, Any]:
        async with self._lock:
            records = decide.create_partitions(self.image, name, total, self._live_brokers())
            self.store.append(records)
            topic = self.image.topic(name)
            new = [topic.partitions[r["partition"]] for r in records]
            await self._ensure(self._states_by_broker(topic, new))
            return self._describe(topic)

    async def alter_topic_config(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            self.store.append(decide.alter_config(self.image, name, changes))
            topic = self.image.topic(name)
            config = topic.config
        await asyncio.gather(
            *(
                self._replica(topic, p, b).update_state.remote({"config": config})
                for p in topic.partitions.values()
                for b in p.replicas
            )
        )
        return self._describe(topic)

    async def delete_topic(self, name: str) -> None:
        async with self._lock:
            topic_id, records = decide.delete_topic(self.image, name)
            topic = self.image.topics[topic_id]
            self.store.append(records)
        by_broker = self._states_by_broker(topic, topic.partitions.values())
        live = set(self._live_brokers())
        await asyncio.gather(
            *(self._call_agent(b, "delete_replicas", s) for b, s in by_broker.items() if b in live)
        )

    def _replica(self, topic: TopicState, p: PartitionState, broker_id: int):
        return ray.get_actor(
            replica_name(topic.topic_id, p.partition, broker_id), namespace=self.namespace
        )

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(
            t.name for t in self.image.topics.values() if include_internal or not t.internal
        )

    async def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        if names is None:
            names = sorted(self.image.topic_ids)
        return [self._describe(self.image.topic(n)) for n in names]

    def _describe(self, topic: TopicState) -> dict[str, Any]:
        return {
            "name": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
            "config": LogConfig.from_dict(topic.config).to_dict(), "overrides": topic.config,
            "partitions": [
                {"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                 "replicas": p.replicas, "isr": p.isr}
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
            ],
        }  # fmt: skip

    async def metadata(self, names: list[str], allow_auto_create: bool = True) -> dict[str, Any]:
        """Leaders for ``names``: {name: description}, or {name: (errno, message)} for a topic
        that does not exist (created first when ``auto.create.topics.enable`` is on)."""
        out: dict[str, Any] = {}
        for name in names:
            if name not in self.image.topic_ids and allow_auto_create and not is_internal(name):
                if self.settings.get("auto.create.topics.enable", False):
                    try:
                        await self.create_topic(
                            name, int(self.settings.get("num.partitions", 1)),
                            int(self.settings.get("default.replication.factor", 1)), None,
                        )  # fmt: skip
                    except TopicAlreadyExists:
                        pass
            try:
                out[name] = self._describe(self.image.topic(name))
            except UnknownTopicOrPartition as e:
                out[name] = (e.errno, str(e))
        return out

    # -- producers -----------------------------------------------------------------------------

    async def allocate_producer_id(self) -> tuple[int, int]:
        """A producer id never handed out before (and epoch 0), for an idempotent producer."""
        async with self._lock:
            if not self._producer_ids:
                self._producer_ids, records = decide.allocate_producer_ids(self.image)
                self.store.append(records)
            producer_id = self._producer_ids[0]
            self._producer_ids = self._producer_ids[1:]
            return producer_id, 0

    # -- status and shutdown -------------------------------------------------------------------

    async def describe_cluster(self) -> dict[str, Any]:
        brokers = []
        for broker_id, broker in sorted(self.image.brokers.items()):
            try:
                status = await asyncio.wait_for(self._agent(broker_id).status.remote(), 10)
                alive = True
            except (BrokerNotAvailable, ray.exceptions.RayActorError, asyncio.TimeoutError):
                status, alive = {}, False
            brokers.append({"broker_id": broker_id, "disk": broker.disk, "alive": alive, **status})
        return {
            "controller_disk": self.disk, "metadata_offset": self.image.offset,
            "brokers": brokers, "topics": len(self.image.topics),
            "partitions": sum(len(t.partitions) for t in self.image.topics.values()),
        }  # fmt: skip

    async def stop_replicas(self) -> int:
        """Close every replica cleanly and stop its actor (``rafka down``)."""
        by_broker: dict[int, list[dict]] = {}
        for topic in self.image.topics.values():
            for b, states in self._states_by_broker(topic, topic.partitions.values()).items():
                by_broker.setdefault(b, []).extend(states)
        live = set(self._live_brokers())
        stopped = await asyncio.gather(
            *(self._call_agent(b, "stop_replicas", s) for b, s in by_broker.items() if b in live),
            return_exceptions=True,
        )
        for outcome in stopped:
            if isinstance(outcome, BaseException):  # that disk's replicas recover on start
                log.warning("could not stop the replicas of a disk cleanly: %r", outcome)
        self.store.close()
        return sum(n for n in stopped if isinstance(n, int))
