"""Topic administration on the controller: create, grow, configure, delete, describe.

Each request is decided by ``rafka.cluster.controller`` (plain Python) and appended to the
metadata log under the controller's lock; replica actors are created, told or deleted after
the lock is released (creating actors takes seconds, and failover must not wait behind it).
Placement uses the brokers that are live and have a node agent. ``metadata`` is what
clients refresh their leaders from, and creates a topic on first use when
``auto.create.topics.enable`` is on.

Retries are safe: create, grow and delete carry the client's request id, recorded with the
change, and a retry of a request already carried out (its first answer lost when the
controller died) is answered as it was, after starting any replica actor still missing.

Part of the Controller actor, on its event loop. A crash after the append and before the
replicas were created or deleted leaves the metadata ahead of the actors: the reconcile
(``rafka.actors.reconcile``, at start and periodically) creates missing replicas and deletes
stray ones.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import (
    ControllerCore,
    min_insync_replicas,
    unclean_election_enabled,
)
from rafka.actors.partition_changes import PartitionChanges
from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.hosting import check_fits
from rafka.cluster.metadata import NO_LEADER, TopicState
from rafka.cluster.settings import setting
from rafka.cluster.topics import is_internal
from rafka.errors import (
    InvalidReplicationFactor,
    RafkaError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from rafka.storage.config import LogConfig


class TopicAdmin:
    """The topic requests of the Controller's API; see its methods of the same names."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, changes: PartitionChanges):
        self.core = core
        self.calls = calls
        self.changes = changes
        # Told of a creation refused for too few brokers (the autoscaler asks Ray for them);
        # True when more brokers are on their way.
        self.on_too_few_brokers: Callable[[int, str], bool] = lambda brokers, topic: False

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict | None,
        internal: bool = False, request_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        core, calls = self.core, self.calls
        async with core.lock:
            topic = self._done_before(request_id, name)
            if topic is None:
                live = calls.placeable_brokers()
                try:
                    topic_id, records = decide.create_topic(
                        core.image, name, partitions, replication_factor, config, live,
                        internal,
                    )  # fmt: skip
                except InvalidReplicationFactor as e:
                    if replication_factor > len(live) and self.on_too_few_brokers(
                            replication_factor, name):
                        raise InvalidReplicationFactor(
                            f"{e}; rafka has asked Ray's autoscaler for {replication_factor} "
                            "disk nodes: retry once they have joined (rafka balancer status)"
                        ) from None
                    raise
                self._check_fits(records, f"topic {name!r}")
                core.store.append(records + _request(request_id, "create_topic", topic_id))
                topic = core.image.topics[topic_id]
        self._start_replicas_soon(topic, topic.partitions.values())
        return self.describe(self._current(topic))

    async def create_partitions(
        self, name: str, total: int, request_id: str | None = None
    ) -> dict[str, Any]:
        core, calls = self.core, self.calls
        async with core.lock:
            topic = self._done_before(request_id, name)
            if topic is None:
                records = decide.create_partitions(core.image, name, total,
                                                   calls.placeable_brokers())
                self._check_fits(records, f"growing topic {name!r} to {total} partitions")
                topic = core.image.topic(name)
                core.store.append(
                    records + _request(request_id, "create_partitions", topic.topic_id)
                )
                new = [topic.partitions[r["partition"]] for r in records]
            else:
                new = list(topic.partitions.values())
        self._start_replicas_soon(topic, new)
        return self.describe(self._current(topic))

    async def alter_topic_config(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        core = self.core
        async with core.lock:
            core.store.append(decide.alter_config(core.image, name, changes))
            topic = core.image.topic(name)
        await self.calls.push_config(topic)
        # With unclean election on, leaderless partitions may take any live replica; decided
        # on the config in force then (another change may have turned it off since).
        await self.changes.change(
            lambda t, q: elections.elect_if_leaderless(
                q, self.changes.electable_or_starting(t.topic_id, q), True,
                min_insync_replicas(t),
            ) if unclean_election_enabled(t) else None,
            only=[(topic, q) for q in topic.partitions.values()],
        )  # fmt: skip
        return self.describe(self._current(topic))

    async def delete_topic(self, name: str, request_id: str | None = None) -> None:
        core, calls = self.core, self.calls
        async with core.lock:
            if request_id is not None and request_id in core.image.requests:
                return  # a retry: done before (the reconcile removes what was left)
            topic_id, records = decide.delete_topic(core.image, name)
            topic = core.image.topics[topic_id]
            core.store.append(records + _request(request_id, "delete_topic", topic_id))
        self.changes.refresh_health_gauges()
        by_broker = calls.states_by_broker(topic, topic.partitions.values())
        live = set(calls.live_brokers())
        await asyncio.gather(
            *(calls.delete_replicas(b, s) for b, s in by_broker.items() if b in live)
        )

    def _check_fits(self, records: list[dict[str, Any]], what: str) -> None:
        """PolicyViolation when the replicas these records create would not fit in the
        memory their brokers' nodes have (see ``rafka.cluster.hosting.check_fits``)."""
        new_by_broker: dict[int, int] = {}
        for r in records:
            if r["type"] == "partition":
                for b in r["replicas"]:
                    new_by_broker[b] = new_by_broker.get(b, 0) + 1
        pending: dict[int, int] = {}
        for _, _, b in self.calls.awaiting_start:
            pending[b] = pending.get(b, 0) + 1
        check_fits(self.core.image, new_by_broker,
                   setting(self.core.settings, "replicas.per.actor"),
                   self.core.memory_available, what, pending)  # fmt: skip

    def _done_before(self, request_id: str | None, name: str) -> TopicState | None:
        """The topic a retried request (same ``request_id``) created or grew before; None
        for a request not seen. UnknownTopicOrPartition when that topic was deleted since,
        TopicAlreadyExists when another topic of the name was created since. Under the
        lock."""
        image = self.core.image
        if request_id is None or request_id not in image.requests:
            return None
        _, topic_id = image.requests[request_id]
        topic = image.topic(name)  # UnknownTopicOrPartition: deleted since
        if topic_id is not None and topic.topic_id != topic_id:
            raise TopicAlreadyExists(
                f"topic {name!r} was deleted and created again since this request created "
                "it; describe it to see the topic that exists now"
            )
        return topic

    def _start_replicas_soon(self, topic: TopicState, partitions) -> None:
        """Place the replicas of ``partitions`` in hosts now (recorded, so the answer and
        the metadata name their hosts) and start them in the background: a request is
        answered once its records are durable, as Kafka's CreateTopics is. Until a replica
        runs, calls to it fail with a retriable error, and describe lists it as starting."""
        partitions = list(partitions)
        self.calls.place(self.calls.states_by_broker(topic, partitions))
        keys = {(topic.topic_id, p.partition, b) for p in partitions for b in p.replicas}
        self.calls.awaiting_start |= keys
        self.core.spawn(self._start_replicas(topic, partitions, keys))

    async def _start_replicas(self, topic: TopicState, partitions, keys=frozenset()) -> None:
        """Create the replica actors of ``partitions`` on live brokers (those that exist
        already are found, not created twice); the others start when their broker returns.
        A broker whose agent fails does not fail the request (the change is recorded, as
        Kafka's CreateTopics succeeds once its records are): the reconcile retries it."""
        calls = self.calls
        partitions = list(partitions)
        live = set(calls.live_brokers())
        by_broker = calls.states_by_broker(topic, partitions)
        try:
            await calls.ensure({b: s for b, s in by_broker.items() if b in live}, new=True)
        finally:
            calls.awaiting_start -= keys
        # An election decided while the actors were starting may have found no replica it
        # could elect yet (a retry after a controller restart, say): elect now they run.
        await self.changes.elect_where_leaderless(only=[(topic, p) for p in partitions])
        self.changes.refresh_health_gauges()

    def _current(self, topic: TopicState) -> TopicState:
        """``topic`` as the image has it now (it may have changed, or been deleted, since)."""
        return self.core.image.topics.get(topic.topic_id, topic)

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
                 "offline": p.leader == NO_LEADER or not is_live(p.leader),
                 "hosts": self.calls.running_hosts(topic.topic_id, p),
                 "starting": self.calls.starting_replicas(topic.topic_id, p)}
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
                    except RafkaError as e:  # this topic's answer, as Kafka gives it
                        out[name] = (e.errno, str(e))
                        continue
            try:
                out[name] = self.describe(self.core.image.topic(name))
            except UnknownTopicOrPartition as e:
                out[name] = (e.errno, str(e))
        return out


def _request(request_id: str | None, kind: str, topic_id: str) -> list[dict[str, Any]]:
    """The record that remembers a carried-out admin request, appended with its change."""
    if request_id is None:
        return []
    return [{"type": "request", "request_id": str(request_id), "kind": kind,
             "topic_id": topic_id}]  # fmt: skip
