"""Controller: the one actor that owns the cluster's metadata.

A thin shell: requests are decided by ``rafka.cluster.controller`` and
``rafka.cluster.elections`` (plain Python), the records they return are made durable by
``MetadataLog`` before anything else happens, and only then are node agents and replicas
told. Killed and restarted, the actor rebuilds everything from its metadata log.

One controller at a time: the metadata directory is locked while a controller process has
it open, and each process that opens it records a new controller epoch, which every state
it pushes or answers carries; replicas refuse states from an older controller epoch.
Cluster settings are kept in the metadata log: settings given at a start override the
stored ones, and a start without them keeps them.

Failover: node agents heartbeat here; a broker silent past ``broker.session.timeout.ms``
that also fails a direct probe is fenced (``rafka.cluster.liveness``): it leaves every ISR
and the partitions it led get new leaders from their ISRs, with bumped leader epochs. Ray
itself would mark the node dead only after about 16 s. A fenced broker's next heartbeat
brings it back; its replicas catch up and their leaders propose them back into the ISR.

This class holds the Ray methods (Ray calls them by name) and hands each to the part that
owns it, all sharing one ``ControllerCore`` (metadata log, lock, settings, liveness):

- ``BrokerWatch`` (``broker_watch``): registration, heartbeats, probes, fencing, return;
- ``PartitionChanges`` (``partition_changes``): every partition state change and the
  requests that make them (check-ins, ISR proposals, elections, reassignments);
- ``Reassignments`` (``reassignments``): moving partitions, and cancelling a move;
- ``Balancing`` (``balancing``): the balancer's timer, drains and rebalance requests, and
  the brokers' load reports (``broker_loads``);
- ``HostPacking`` (``host_packing``): a hot replica into a host actor of its own, cold ones
  back into shared hosts (with ``replicas.per.actor`` > 1);
- ``Reconciler`` (``reconcile``): at start and periodically, replica actors made to match
  the metadata (states pushed, missing actors created, strays deleted);
- ``TopicAdmin`` (``topic_admin``): create, grow, configure, delete, describe topics;
- ``CoordinatorShards`` (``coordinator_shards``): the group coordinator actors;
- ``BrokerCalls`` (``broker_calls``): the calls to node agents and replica actors;
- ``DiskJoins`` (``disk_joins``): a node agent for every disk node that joins, and a restart
  for one whose node is up but which is not heard;
- ``Autoscaling`` (``autoscaling``): disk nodes asked of Ray's autoscaler, and idle
  autoscaled brokers drained, retired and given back.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray

from rafka.actors.autoscaling import Autoscaling, ray_request_disks, ray_stop_actors
from rafka.actors.balancing import Balancing
from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.broker_watch import BrokerWatch
from rafka.actors.controller_core import ControllerCore, now_ms
from rafka.actors.controller_security import ControllerSecurity
from rafka.actors.disk_joins import DiskJoins, ray_agent_exists, ray_restart_agent
from rafka.actors.host_packing import HostPacking
from rafka.actors.coordinator_shards import CoordinatorShards
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.partition_changes import PartitionChanges
from rafka.actors.controller_listeners import ListenerRegistry
from rafka.actors.placement import disk_dir
from rafka.actors.ray_actors import RayActors
from rafka.actors.reassignments import Reassignments
from rafka.actors.reconcile import Reconciler
from rafka.actors.topic_admin import TopicAdmin
from rafka.cluster import controller as decide
from rafka.cluster.hosting import host_loads
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata_log import MetadataLog
from rafka.cluster.settings import setting
from rafka.storage.directory_lock import DirectoryLocked

CONTROLLER_DIR = "controller"


class Controller:
    """The Ray actor; one per cluster, named and pinned to the disk of its metadata log."""

    def __init__(self, data_root: str, disk: str, namespace: str, settings: dict[str, Any]):
        self.logger = actor_logger(__name__, "Controller")
        label_process_logs(self.logger.prefix)  # this process is the controller
        self.namespace = namespace
        self.disk = disk
        try:
            store = MetadataLog(os.path.join(disk_dir(data_root, disk), CONTROLLER_DIR))
        except DirectoryLocked as e:
            # An older controller process still runs. A constructor that raises leaves the
            # actor dead for good; a process that exits is restarted by Ray, and tries again.
            self.logger.error("%s; exiting, to be started again", e)
            os._exit(1)
        parts = build_parts(store, settings, namespace, RayActors(namespace), self.logger)
        for name, part in parts.items():
            setattr(self, name, part)
        self.joins = DiskJoins(self.core, _live_disks, ray_agent_exists(namespace),
                               lambda disk: _start_node_agent(data_root, disk, namespace),
                               ray_restart_agent(namespace))  # fmt: skip
        self.autoscaling = Autoscaling(self.core, self.balancing, ray_request_disks,
                                       ray_stop_actors(namespace), disk,
                                       _live_disks)  # fmt: skip
        self.topics.on_too_few_brokers = self.autoscaling.want_for_topic
        self.settings = self.core.settings
        self._producer_ids: range = range(0)
        self._started = False
        ray.get_runtime_context().current_actor.start.remote()

    @property
    def image(self):
        return self.core.image

    async def ping(self) -> dict[str, Any]:
        return {
            "disk": self.disk, "metadata_offset": self.image.offset, "pid": os.getpid(),
            "controller_epoch": self.image.controller_epoch, "stopping": self.core.stopping,
        }  # fmt: skip

    async def start(self) -> None:
        """Start the timers (called by the actor itself once constructed)."""
        if not self._started:
            self._started = True
            self.core.spawn(self.brokers.watch())
            self.core.spawn(self.changes.balance_leaders())
            self.core.spawn(self.changes.report_health())
            # What the previous controller recorded but never carried out (a push, actors
            # to create or delete) is done now, then periodically. (A partition the crash
            # left without a leader gets one at the first heartbeat of a broker that may
            # lead it.)
            self.core.spawn(self._reconcile_then_repeat())
            self.core.spawn(self.balancing.run())
            self.core.spawn(self.host_packing.run())
            self.core.spawn(self.joins.run())
            self.core.spawn(self.autoscaling.run())

    async def _reconcile_then_repeat(self) -> None:
        try:
            await self.reconciler.reconcile()
        except Exception:  # the periodic round tries again
            self.logger.exception("reconcile at start failed")
        await self.reconciler.run()

    async def settings_in_force(self) -> dict[str, Any]:
        """The cluster settings this controller uses (kept in the metadata log)."""
        return dict(self.core.settings)

    # -- brokers -------------------------------------------------------------------------------

    async def register_broker(self, disk: str, broker_id: int | None, rack: str | None = None):
        return await self.brokers.register(disk, broker_id, rack)

    async def heartbeat(
        self, disk: str, broker_id: int | None, rack: str | None = None,
        node_id: str | None = None, memory_available: int | None = None,
    ):  # fmt: skip
        """A node agent is alive, on Ray node ``node_id`` with ``memory_available`` bytes
        free. Registers its disk when needed; returns (broker id, heartbeat interval in
        ms)."""
        answer = await self.brokers.heartbeat(disk, broker_id, rack, node_id)
        if memory_available is not None:
            self.core.memory_available[answer[0]] = int(memory_available)
        return answer

    async def report_load(self, broker_id: int, report: dict[str, Any]) -> int:
        """A node agent's disk use and partition traffic (``rafka.actors.load_reports``),
        for the balancer; answers the report interval, ms."""
        return self.balancing.report_load(broker_id, report)

    async def fence_broker(self, broker_id: int) -> int:
        """Take ``broker_id`` out of every ISR and move the leadership it held; returns how
        many partitions changed."""
        return await self.brokers.fence(broker_id)

    # -- partition states ----------------------------------------------------------------------

    async def replica_started(
        self, topic_id: str, partition: int, broker_id: int, clean: bool,
        position: tuple[int, int] | None = None, node_id: str | None = None,
    ) -> tuple[dict | None, bool, int]:  # fmt: skip
        """A replica actor (re)started with its log, closed cleanly or not, at ``position``
        (the last leader epoch it wrote, its log end offset): decide what it is now. Answers
        (its state, True, its new replica epoch), or (None, False, -1) when it no longer
        belongs to the partition. ``node_id``: the Ray node it runs on."""
        answer = await self.changes.replica_started(
            topic_id, partition, broker_id, clean, position, node_id
        )
        if answer[0] is not None:  # taken: it speaks for a live broker
            self.brokers.alive(broker_id)
        return answer

    async def replica_failed(
        self, topic_id: str, partition: int, broker_id: int, replica_epoch: int, reason: str
    ) -> None:
        """A follower replica cannot write its log (a full or failing disk): it leaves the
        ISR, as Kafka takes an offline log directory's replicas out, and rejoins by catching
        up once its appends work again."""
        await self.changes.replica_failed(topic_id, partition, broker_id, replica_epoch, reason)

    async def replicas_failed(self, broker_id: int, keys: list, reason: str) -> int:
        """Replicas of ``broker_id`` (``[topic id, partition, replica epoch]`` each) failed
        together: their host actor died. They leave their ISRs and lose their leaderships at once, as a
        fenced broker's do; restarted, each checks in and rejoins by catching up."""
        return await self.changes.replicas_failed(broker_id, keys, reason)

    async def partition_state(self, topic_id: str, partition: int, broker_id: int):
        """The current state of a partition, as its replica on ``broker_id`` sees it."""
        return self.changes.partition_state(topic_id, partition, broker_id)

    async def alter_isr(
        self, topic_id: str, partition: int, leader: int, leader_epoch: int,
        partition_epoch: int, new_isr: list[int], incarnations: dict | None = None,
    ) -> tuple[int, str, dict | None]:  # fmt: skip
        """A leader's ISR proposal (with the replica epoch it saw each member fetch in).
        Answers (0, "", new state) or (errno, message, current state) when it was refused."""
        return await self.changes.alter_isr(
            topic_id, partition, leader, leader_epoch, partition_epoch, new_isr, incarnations
        )

    async def elect_leaders(
        self, election_type: str = "preferred", topic: str | None = None,
        partitions: list[int] | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Preferred (leadership back to each partition's first replica) or unclean
        (a leader for partitions without one, from any live replica) elections, on demand."""
        return await self.changes.elect_leaders(election_type, topic, partitions)

    async def reassign_partitions(
        self, name: str, assignment: dict[int, list[int]]
    ) -> dict[str, Any]:
        """Move partitions of ``name`` to new replica lists (Kafka's
        kafka-reassign-partitions): new replicas copy the log by following the leader; the
        old ones are deleted once every new one is in sync. The same plan again is a no-op."""
        await self.reassignments.reassign_partitions(name, assignment)
        return self.topics.describe(self.image.topic(name))

    async def cancel_reassignment(
        self, name: str, partitions: list[int] | None = None
    ) -> dict[str, Any]:
        """Put partitions of ``name`` being reassigned (all of them when ``partitions`` is
        None) back on their original replicas; the replicas they were adding are deleted."""
        await self.reassignments.cancel_reassignment(name, partitions)
        return self.topics.describe(self.image.topic(name))

    async def drain_broker(self, broker_id: int, draining: bool = True) -> dict[str, Any]:
        """Empty ``broker_id`` of its replicas and leaderships (``draining=False`` cancels),
        so its node can be removed; answers the balancer's status."""
        return await self.balancing.drain_broker(broker_id, draining)

    async def rebalance(self, dry_run: bool = True) -> dict[str, Any]:
        """A plan over every goal of the balancer; carried out unless ``dry_run``."""
        return await self.balancing.rebalance(dry_run)

    async def describe_balancer(self) -> dict[str, Any]:
        return {**self.balancing.describe(), "host_packing": self.host_packing.describe(),
                "autoscaling": self.autoscaling.describe()}

    async def describe_autoscaler(self) -> dict[str, Any]:
        return self.autoscaling.describe()

    async def retired_disks(self) -> list[str]:
        """Disks of retired brokers (their nodes may live on until Ray releases them)."""
        return sorted(self.image.retired_brokers.values())

    async def reconcile(self) -> dict[str, int]:
        """Make the replica actors match the metadata now: every state pushed, missing
        actors created, strays deleted (``rafka.actors.reconcile``); returns the counts."""
        return vars(await self.reconciler.reconcile())

    # -- topics --------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict | None,
        internal: bool = False, request_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """``request_id``: the same for every attempt of one admin call, so a retry of a
        creation that succeeded is answered as the first attempt was."""
        return await self.topics.create_topic(
            name, partitions, replication_factor, config, internal, request_id
        )

    async def create_partitions(
        self, name: str, total: int, request_id: str | None = None
    ) -> dict[str, Any]:
        return await self.topics.create_partitions(name, total, request_id)

    async def alter_topic_config(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        return await self.topics.alter_topic_config(name, changes)

    async def delete_topic(self, name: str, request_id: str | None = None) -> None:
        await self.topics.delete_topic(name, request_id)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return self.topics.list_topics(include_internal)

    async def describe_topics(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        return self.topics.describe_topics(names)

    async def metadata(self, names: list[str], allow_auto_create: bool = True) -> dict[str, Any]:
        """Leaders for ``names``: {name: description}, or {name: (errno, message)} for a topic
        that does not exist (created first when ``auto.create.topics.enable`` is on)."""
        return await self.topics.metadata(names, allow_auto_create)

    # -- producers -----------------------------------------------------------------------------

    async def allocate_producer_id(self) -> tuple[int, int]:
        """A producer id never handed out before (and epoch 0), for an idempotent producer."""
        async with self.core.lock:
            if not self._producer_ids:
                self._producer_ids, records = decide.allocate_producer_ids(self.image)
                self.core.store.append(records)
            producer_id = self._producer_ids[0]
            self._producer_ids = self._producer_ids[1:]
            return producer_id, 0

    # -- group coordinators --------------------------------------------------------------------

    async def group_coordinator(self, group_id: str) -> dict[str, Any]:
        """Where ``group_id`` is served (Kafka's FindCoordinator): {"shard", "name", "shards"}.
        The first call creates ``__consumer_offsets`` and each shard's coordinator actor
        is started on first use."""
        return await self.coordinators.group_coordinator(group_id)

    async def group_coordinators(self) -> list[str]:
        """The names of every coordinator shard (started if need be), for listing groups."""
        return await self.coordinators.group_coordinators()

    async def transaction_coordinator(self, transactional_id: str) -> dict[str, Any]:
        """Where ``transactional_id`` is served: {"shard", "name", "shards"}. The first call
        creates ``__transaction_state``; each shard's coordinator starts on first use."""
        return await self.coordinators.transaction_coordinator(transactional_id)

    async def transaction_coordinators(self) -> list[str]:
        """The names of every transaction coordinator shard (started if need be)."""
        return await self.coordinators.transaction_coordinators()

    async def stop_coordinators(self) -> int:
        """Stop the group and transaction coordinator actors (``rafka down``); their state
        is in __consumer_offsets and __transaction_state."""
        return await self.coordinators.stop_coordinators()

    # -- Kafka listeners -----------------------------------------------------------------------

    async def register_listener(self, broker_ids: list[int], endpoints: list) -> int:
        """A listener actor's report: ``endpoints`` ((protocol, host, port)) reach the
        brokers ``broker_ids``. Repeated every few seconds; see ``ListenerRegistry``."""
        return self.listeners.register(broker_ids, endpoints)

    async def listener_endpoints(self, protocol: str | None = None) -> dict[int, list]:
        """Live brokers' advertised Kafka endpoints: {broker id: [(protocol, host, port)]}."""
        return self.listeners.endpoints(protocol)

    async def kafka_metadata(
        self, names: list[str] | None, allow_auto_create: bool, protocol: str
    ) -> dict[str, Any]:
        """Brokers, controller and topics for a Kafka Metadata answer over ``protocol``."""
        return await self.listeners.kafka_metadata(names, allow_auto_create, protocol)

    # -- users and ACLs (``controller_security``) ---------------------------------------------

    async def upsert_user(
        self, name: str, credentials: dict[str, dict], replace: bool = False
    ) -> None:
        """Set ``name``'s SCRAM credentials ({mechanism: credential from
        ``rafka.cluster.scram.make_credential``}); ``replace`` drops its other mechanisms."""
        await self.security.upsert_user(name, credentials, replace)

    async def delete_user(self, name: str, mechanisms: list[str] | None = None) -> None:
        """Delete ``name``'s credentials for ``mechanisms`` (None: the user)."""
        await self.security.delete_user(name, mechanisms)

    async def list_users(self) -> list[dict[str, Any]]:
        """[{"name", "mechanisms", "iterations": {mechanism: n}}], never keys."""
        return self.security.list_users()

    async def create_acls(self, bindings: list[tuple]) -> list[tuple[int, str]]:
        """Create ACL bindings (``AclBinding.to_tuple()``); (errno, message) per binding."""
        return await self.security.create_acls(bindings)

    async def describe_acls(self, acl_filter: tuple | None = None) -> list[tuple]:
        """The bindings an ``AclBindingFilter`` tuple matches (None: all)."""
        return self.security.describe_acls(acl_filter)

    async def delete_acls(self, filters: list[tuple | None]) -> list[list[tuple]]:
        """Delete the bindings each filter matches; per filter, the bindings it deleted."""
        return await self.security.delete_acls(filters)

    async def security_snapshot(self, known_version: int) -> dict[str, Any] | None:
        """None when ``known_version`` is current, else {"version", "users": {name:
        {mechanism: credential}}, "acls": [binding tuple, ...]}, for listeners to cache."""
        return self.security.security_snapshot(known_version)

    # -- status and shutdown -------------------------------------------------------------------

    async def describe_cluster(self) -> dict[str, Any]:
        brokers = []
        known = sorted(self.image.brokers.items())
        statuses = await asyncio.gather(*(self.calls.agent_status(b) for b, _ in known))
        loads = host_loads(self.image)
        for (broker_id, broker), status in zip(known, statuses):
            alive = status is not None
            status = status or {}
            brokers.append({
                "broker_id": broker_id, "disk": broker.disk, "rack": broker.rack, "alive": alive,
                "fenced": broker_id in self.core.liveness.fenced,
                "hosted_replicas": sum(loads.get(broker_id, {}).values()),
                "host_actors": len(loads.get(broker_id, {})), **status,
            })  # fmt: skip
        return {
            "controller_disk": self.disk, "metadata_offset": self.image.offset,
            "controller_epoch": self.image.controller_epoch,
            "fencings": self.core.fencings,
            "replicas_per_actor": setting(self.core.settings, "replicas.per.actor"),
            "brokers": brokers, "topics": len(self.image.topics),
            "bootstrap_servers": self.listeners.bootstrap_servers(),
            "partitions": sum(len(t.partitions) for t in self.image.topics.values()),
        }  # fmt: skip

    async def stop_replicas(self) -> int:
        """Close every replica cleanly and stop its actor (``rafka down``). The controller
        stops watching brokers and reconciling; its metadata log stays open (every record is
        flushed as it is appended), so a ``rafka down`` interrupted here leaves a controller
        that still answers, and ``start_services`` replaces it."""
        self.core.stopping = True  # heartbeats stop now; that is no reason to move leaders
        stopped = await asyncio.gather(
            *(self.calls.call_agent(b, "stop_replicas") for b in self.calls.live_brokers()),
            return_exceptions=True,
        )  # fmt: skip
        for outcome in stopped:
            if isinstance(outcome, BaseException):  # that disk's replicas recover on start
                self.logger.warning("could not stop the replicas of a disk cleanly: %r", outcome)
        return sum(n for n in stopped if isinstance(n, int))


def _live_disks() -> list[str]:
    from rafka.actors.service import live_disks  # service imports this module

    return live_disks()


def _start_node_agent(data_root: str, disk: str, namespace: str) -> None:
    from rafka.actors.service import start_node_agent

    start_node_agent(data_root, disk, namespace)


def build_parts(
    store: MetadataLog, settings: dict[str, Any], namespace: str, actors: RayActors, logger,
    clock=now_ms,
) -> dict[str, Any]:  # fmt: skip
    """The controller's parts over an opened metadata log (``core``, ``calls``, ``changes``,
    ``brokers``, ``topics``, ``reassignments``, ``balancing``, ``host_packing``, ``reconciler``,
    ``coordinators``, ``listeners``), after
    taking over the log: a new controller epoch is recorded, and the cluster settings become
    the stored ones overridden by ``settings``. ``actors`` is the Ray layer (a fake in
    tests)."""
    image = store.image
    store.append([{"type": "controller", "epoch": image.controller_epoch + 1}])
    in_force = {**image.settings, **settings}
    if in_force != image.settings:
        store.append([{"type": "settings", "settings": in_force}])
    session_ms = setting(in_force, "broker.session.timeout.ms")
    # Half a session of silence makes a broker a suspect and the probe gets the other
    # half: a broker is fenced one session after its last heartbeat unless it answers.
    liveness = BrokerLiveness(session_ms // 2)
    liveness.track(image.brokers, clock())
    for broker_id in image.fenced_brokers:  # fenced before the restart: until it speaks
        liveness.fence(broker_id)
    core = ControllerCore(store, in_force, namespace, liveness, logger)
    calls = BrokerCalls(core, actors)
    changes = PartitionChanges(core, calls)
    topics = TopicAdmin(core, calls, changes)
    reassignments = Reassignments(core, changes)
    balancing = Balancing(core, changes, reassignments)
    return {
        "core": core, "calls": calls, "changes": changes,
        "brokers": BrokerWatch(core, calls, changes), "topics": topics,
        "reassignments": reassignments,
        "balancing": balancing, "host_packing": HostPacking(core, calls, balancing),
        "reconciler": Reconciler(core, calls, changes), "security": ControllerSecurity(core),
        "coordinators": CoordinatorShards(core, calls, topics),
        "listeners": ListenerRegistry(core, topics),
    }  # fmt: skip
