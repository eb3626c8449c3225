"""Controller: the one actor that owns the cluster's metadata.

A thin shell: requests are decided by ``rafka.cluster.controller`` and
``rafka.cluster.elections`` (plain Python), the records they return are made durable by
``MetadataLog`` before anything else happens, and only then are node agents and replicas
told. Killed and restarted, the actor rebuilds everything from its metadata log.

Failover: node agents heartbeat here; a broker silent past ``broker.session.timeout.ms``
that also fails a direct probe is fenced (``rafka.cluster.liveness``): it leaves every ISR
and the partitions it led get new leaders from their ISRs, with bumped leader epochs. Ray
itself would mark the node dead only after about 16 s. A fenced broker's next heartbeat
brings it back; its replicas catch up and their leaders propose them back into the ISR.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import ray

from rafka.actors import metrics
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.placement import agent_name, coordinator_name, disk_dir, replica_name
from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import NO_LEADER, PartitionState, TopicState
from rafka.cluster.metadata_log import MetadataLog
from rafka.cluster.settings import setting
from rafka.cluster.offsets_records import coordinator_shard
from rafka.cluster.topics import CONSUMER_OFFSETS, is_internal
from rafka.errors import (
    BrokerNotAvailable,
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidReplicaAssignment,
    PreferredLeaderNotAvailable,
    RafkaError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from rafka.storage.config import LogConfig

CONTROLLER_DIR = "controller"
#: Cluster settings the replicas need (Kafka's broker property names).
REPLICA_SETTINGS = ("replica.lag.time.max.ms", "replica.fetch.wait.max.ms",
                    "replica.fetch.max.bytes")  # fmt: skip
#: How often the partition health gauges (under-replicated, offline) are refreshed besides
#: after every change, s: a broker's liveness changes without a metadata change.
HEALTH_GAUGES_INTERVAL_S = 5.0


class Controller:
    def __init__(self, data_root: str, disk: str, namespace: str, settings: dict[str, Any]):
        self.logger = actor_logger(__name__, "Controller")
        label_process_logs(self.logger.prefix)  # this process is the controller
        self.namespace = namespace
        self.disk = disk
        self.settings = dict(settings)
        self.store = MetadataLog(os.path.join(disk_dir(data_root, disk), CONTROLLER_DIR))
        self._lock = asyncio.Lock()  # one metadata change at a time, in log order
        self._agents: dict[int, Any] = {}
        self._replicas: dict[str, Any] = {}
        # (topic id, partition, broker) -> newest incarnation of that replica that checked
        # in after a restart. In memory: after a controller restart, the next check-ins
        # fill it again.
        self._incarnations: dict[tuple[str, int, int], int] = {}
        self._producer_ids: range = range(0)
        session_ms = setting(self.settings, "broker.session.timeout.ms")
        # Half a session of silence makes a broker a suspect and the probe gets the other
        # half: a broker is fenced one session after its last heartbeat unless it answers.
        self.liveness = BrokerLiveness(session_ms // 2)
        self._probe_timeout_s = session_ms / 2000
        self.liveness.track(self.image.brokers, _now_ms())
        self._probing: set[int] = set()
        self._background: set[asyncio.Task] = set()
        self._started = False
        self._stopping = False
        self._health_reported: set[str] = set()  # topics with health gauges set
        ray.get_runtime_context().current_actor.start.remote()

    @property
    def image(self):
        return self.store.image

    async def ping(self) -> dict[str, Any]:
        return {"disk": self.disk, "metadata_offset": self.image.offset, "pid": os.getpid()}

    async def start(self) -> None:
        """Start the timers (called by the actor itself once constructed)."""
        if not self._started:
            self._started = True
            self._spawn(self._watch_brokers())
            self._spawn(self._balance_leaders())
            self._spawn(self._report_health())

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _unclean(self, topic: TopicState) -> bool:
        return bool(LogConfig.from_dict(topic.config).unclean_leader_election_enable)

    # -- brokers -------------------------------------------------------------------------------

    async def register_broker(self, disk: str, broker_id: int | None, rack: str | None = None):
        async with self._lock:
            broker_id, records = decide.register_broker(self.image, disk, broker_id, rack)
            self.store.append(records)
            self._agents.pop(broker_id, None)
        self._broker_alive(broker_id)
        return broker_id

    async def heartbeat(self, disk: str, broker_id: int | None, rack: str | None = None):
        """A node agent is alive. Registers its disk when needed; returns (broker id,
        heartbeat interval in ms)."""
        known = self.image.brokers.get(broker_id) if broker_id is not None else None
        if known is None or known.disk != disk or known.rack != rack:
            broker_id = await self.register_broker(disk, broker_id, rack)
        else:
            self._broker_alive(broker_id)
        return broker_id, setting(self.settings, "broker.heartbeat.interval.ms")

    def _broker_alive(self, broker_id: int) -> None:
        if self.liveness.heartbeat(broker_id, _now_ms()):
            self.logger.warning("broker %d is back", broker_id)
            self._spawn(self._broker_back(broker_id))

    async def _broker_back(self, broker_id: int) -> None:
        """A fenced broker speaks again: lead where nobody can, and make sure its replica
        actors run (some may have been created while it was away)."""
        await self._change_partitions(
            lambda topic, p: elections.elect_if_leaderless(
                p, self.liveness.live(), self._unclean(topic)
            ) if broker_id in p.replicas else None
        )  # fmt: skip
        hosted = self.image.replicas_on(broker_id)
        for topic, p in hosted:
            # What it missed while fenced (pushes went only to live brokers), such as
            # having been replaced as leader.
            try:
                self._replica(topic, p, broker_id).update_state.remote(
                    self._replica_state(topic, p, broker_id)
                )
            except ValueError:
                pass
        states = [self._replica_state(topic, p, broker_id) for topic, p in hosted]
        if states:
            try:
                await self._call_agent(broker_id, "ensure_replicas", states)
            except (BrokerNotAvailable, ray.exceptions.RayActorError) as e:
                self.logger.warning("could not restore the replicas of broker %d: %r",
                                    broker_id, e)  # fmt: skip

    async def _watch_brokers(self) -> None:
        """Fence brokers whose heartbeats stopped and whose agent does not answer a probe."""
        interval = min(self.liveness.session_timeout_ms / 5000, 0.1)
        while True:
            await asyncio.sleep(interval)
            if self._stopping:
                return
            for broker_id in self.liveness.suspects(_now_ms()):
                if broker_id not in self._probing and broker_id in self.image.brokers:
                    self._probing.add(broker_id)
                    self._spawn(self._probe(broker_id))

    async def _probe(self, broker_id: int) -> None:
        try:
            try:
                await asyncio.wait_for(
                    self._agent(broker_id).ping.remote(), self._probe_timeout_s
                )
                self._broker_alive(broker_id)  # only slow: its heartbeats will resume
                return
            except (asyncio.TimeoutError, ray.exceptions.RayActorError, BrokerNotAvailable):
                pass
            await self.fence_broker(broker_id)
        finally:
            self._probing.discard(broker_id)

    async def fence_broker(self, broker_id: int) -> int:
        """Take ``broker_id`` out of every ISR and move the leadership it held; returns how
        many partitions changed."""
        self.liveness.fence(broker_id)
        self._agents.pop(broker_id, None)
        self.logger.warning("broker %d missed its heartbeats; fencing it", broker_id)
        return await self._change_partitions(
            lambda topic, p: elections.fence_broker(
                p, broker_id, self.liveness.live(), self._unclean(topic)
            )
        )  # fmt: skip

    async def _balance_leaders(self) -> None:
        """Kafka's auto.leader.rebalance.enable: move leadership back to preferred replicas."""
        interval = setting(self.settings, "leader.imbalance.check.interval.seconds")
        while setting(self.settings, "auto.leader.rebalance.enable"):
            await asyncio.sleep(interval)
            try:
                await self._change_partitions(
                    lambda topic, p: elections.preferred_leader(p, self.liveness.live()),
                    preferred=True,
                )
            except Exception:  # the next round tries again
                self.logger.exception("preferred leader election failed")

    # -- partition changes ---------------------------------------------------------------------

    async def _change_partitions(self, decide_one, only=None, preferred: bool = False) -> int:
        """Apply ``decide_one(topic, partition) -> new state | None`` to every partition (or
        to the (topic, partition) pairs in ``only``), record the changes in one append, and
        tell the replicas. Returns the number of partitions changed. ``preferred``: the
        changes are preferred-leader elections (for the election metrics)."""
        async with self._lock:
            changed = []
            pairs = only if only is not None else [
                (t, p) for t in self.image.topics.values() for p in t.partitions.values()
            ]  # fmt: skip
            for topic, p in pairs:
                new = decide_one(topic, p)
                if new is not None and new != p:
                    changed.append((topic, p, new))
            if not changed:
                return 0
            self.store.append([new.to_record(t.topic_id) for t, _, new in changed])
            for topic, old, new in changed:
                if new.leader != old.leader:
                    self.logger.warning("%s-%d: leader %d -> %d (epoch %d, ISR %s)",
                                        topic.name, new.partition, old.leader, new.leader,
                                        new.leader_epoch, new.isr)  # fmt: skip
        for topic, old, new in changed:
            metrics.partition_change(topic.name, new.partition, old, new, preferred)
            self._after_change(topic, old, new)
        self._refresh_health_gauges()
        return len(changed)

    def _refresh_health_gauges(self) -> None:
        """Set each topic's under-replicated and offline partition counts (a pass over the
        partitions in memory); a deleted topic's go to 0, since Ray keeps exporting a
        gauge's last value."""
        reported = set()
        for topic in list(self.image.topics.values()):
            under, offline = metrics.partition_health(
                topic.partitions.values(), self.liveness.is_live
            )
            metrics.topic_health(topic.name, under, offline)
            reported.add(topic.name)
        for gone in self._health_reported - reported:
            metrics.topic_health(gone, 0, 0)
        self._health_reported = reported

    async def _report_health(self) -> None:
        while not self._stopping:
            try:
                self._refresh_health_gauges()
            except Exception:  # a metric must never stop the controller; next round
                self.logger.exception("refreshing the partition health gauges failed")
            await asyncio.sleep(HEALTH_GAUGES_INTERVAL_S)

    def _after_change(self, topic: TopicState, old: PartitionState, new: PartitionState) -> None:
        """Tell the replicas of a changed partition; create replicas a reassignment adds and
        delete the ones a finished reassignment removed."""
        self._push_state(topic, new)
        added = [b for b in new.replicas if b not in old.replicas]
        if added:
            self._spawn(self._ensure({b: [self._replica_state(topic, new, b)] for b in added}))
        removed = [b for b in old.replicas if b not in new.replicas]
        for b in removed:
            self._spawn(self._delete_replica(topic, old, b))

    def _push_state(self, topic: TopicState, p: PartitionState) -> None:
        """Send the new state to every live replica, without waiting: a replica that misses
        it asks for it (``partition_state``) when its leader stops answering."""
        for broker_id in p.replicas:
            if not self.liveness.is_live(broker_id):
                continue
            try:
                handle = self._replica(topic, p, broker_id)
            except ValueError:
                continue
            handle.update_state.remote(self._replica_state(topic, p, broker_id))

    async def _delete_replica(self, topic: TopicState, p: PartitionState, broker_id: int):
        try:
            await self._call_agent(
                broker_id, "delete_replicas", [self._replica_state(topic, p, broker_id)]
            )
        except (BrokerNotAvailable, ray.exceptions.RayActorError) as e:
            self.logger.warning("could not delete the moved replica %s-%d on broker %d: %r",
                                topic.name, p.partition, broker_id, e)  # fmt: skip

    def _find_partition(self, topic_id: str, partition: int):
        topic = self.image.topics.get(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        return topic, p

    async def replica_started(
        self, topic_id: str, partition: int, broker_id: int, clean: bool,
        incarnation: int | None = None,
    ) -> tuple[dict | None, bool]:  # fmt: skip
        """A replica actor (re)started with its log: decide what it is now. Answers (its
        state, True), or (None, False) when it no longer belongs to the partition."""
        self._broker_alive(broker_id)
        if incarnation is not None:
            key = (topic_id, partition, broker_id)
            self._incarnations[key] = max(self._incarnations.get(key, incarnation), incarnation)
        topic, p = self._find_partition(topic_id, partition)
        if p is None or broker_id not in p.replicas:
            return None, False
        await self._change_partitions(
            lambda t, q: elections.replica_restarted(
                q, broker_id, self.liveness.live() | {broker_id}, self._unclean(t), clean
            ),
            only=[(topic, p)],
        )  # fmt: skip
        topic, p = self._find_partition(topic_id, partition)
        if p is None:
            return None, False
        return self._replica_state(topic, p, broker_id), True

    async def partition_state(self, topic_id: str, partition: int, broker_id: int):
        """The current state of a partition, as its replica on ``broker_id`` sees it."""
        topic, p = self._find_partition(topic_id, partition)
        if p is None or broker_id not in p.replicas:
            return None
        return self._replica_state(topic, p, broker_id)

    async def alter_isr(
        self, topic_id: str, partition: int, leader: int, leader_epoch: int,
        partition_epoch: int, new_isr: list[int], incarnations: dict | None = None,
    ) -> tuple[int, str, dict | None]:  # fmt: skip
        """A leader's ISR proposal (with the incarnation it saw each member fetch in).
        Answers (0, "", new state) or (errno, message, current state) when it was refused."""
        current = {
            b: self._incarnations[(topic_id, partition, b)]
            for b in new_isr if (topic_id, partition, b) in self._incarnations
        }  # fmt: skip
        topic, p = self._find_partition(topic_id, partition)
        if p is None:
            return UnknownTopicOrPartition.errno, "the partition no longer exists", None
        refusal: list[RafkaError] = []

        def decide_one(t, q):
            try:
                new = elections.alter_isr(
                    q, leader, leader_epoch, partition_epoch, new_isr, self.liveness.live(),
                    incarnations, current,
                )
            except RafkaError as e:
                refusal.append(e)
                return None
            return new

        await self._change_partitions(decide_one, only=[(topic, p)])
        topic, p = self._find_partition(topic_id, partition)
        state = self._replica_state(topic, p, leader) if p is not None else None
        if refusal:
            return refusal[0].errno, str(refusal[0]), state
        return 0, "", state

    async def elect_leaders(
        self, election_type: str = "preferred", topic: str | None = None,
        partitions: list[int] | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Preferred (leadership back to each partition's first replica) or unclean
        (a leader for partitions without one, from any live replica) elections, on demand."""
        if election_type not in ("preferred", "unclean"):
            raise InvalidReplicaAssignment(
                f"election type {election_type!r} is unknown; use 'preferred' or 'unclean'"
            )
        topics = [self.image.topic(topic)] if topic is not None else [
            t for t in self.image.topics.values()
        ]  # fmt: skip
        pairs = []
        for t in topics:
            for number in partitions if partitions is not None else sorted(t.partitions):
                pairs.append((t, decide.check_known(self.image, t.name, number)))
        live = self.liveness.live()
        outcome: dict[tuple[str, int], RafkaError | None] = {}

        def decide_one(t, p):
            if election_type == "preferred":
                new = elections.preferred_leader(p, live)
                if new is None:
                    outcome[t.topic_id, p.partition] = (
                        ElectionNotNeeded(f"{t.name}-{p.partition} is led by its preferred "
                                          f"replica {p.leader}")
                        if p.leader == p.target_replicas[0] else
                        PreferredLeaderNotAvailable(
                            f"the preferred replica {p.target_replicas[0]} of {t.name}-"
                            f"{p.partition} is not alive and in sync (ISR {p.isr})"
                        )
                    )  # fmt: skip
            else:
                new = elections.elect_if_leaderless(p, live, unclean=True)
                if new is None:
                    outcome[t.topic_id, p.partition] = (
                        ElectionNotNeeded(f"{t.name}-{p.partition} has a live leader "
                                          f"({p.leader})")
                        if p.leader != NO_LEADER and p.leader in live else
                        EligibleLeadersNotAvailable(
                            f"{t.name}-{p.partition} has no live replica to elect; bring one "
                            f"of the brokers {p.replicas} back"
                        )
                    )  # fmt: skip
            return new

        await self._change_partitions(
            decide_one, only=pairs, preferred=election_type == "preferred"
        )
        results = []
        for t, p in pairs:
            error = outcome.get((t.topic_id, p.partition))
            current = self.image.topics[t.topic_id].partitions[p.partition]
            results.append({
                "topic": t.name, "partition": p.partition, "leader": current.leader,
                "errno": error.errno if error else 0, "message": str(error) if error else "",
            })  # fmt: skip
        return results

    async def reassign_partitions(
        self, name: str, assignment: dict[int, list[int]]
    ) -> dict[str, Any]:
        """Move partitions of ``name`` to new replica lists (Kafka's
        kafka-reassign-partitions): new replicas copy the log by following the leader; the
        old ones are deleted once every new one is in sync."""
        topic = self.image.topic(name)
        pairs = [(topic, decide.check_known(self.image, name, int(n))) for n in assignment]
        for _, p in pairs:  # check them all before changing any
            elections.reassign(p, list(assignment[p.partition]), self.image.brokers)
        def decide_one(t, p):
            new = elections.reassign(p, list(assignment[p.partition]), self.image.brokers)
            if new is None:
                return None
            # A pure removal has nothing to copy and completes at once.
            done = elections.complete_reassignment(new, self.liveness.live(), self._unclean(t))
            if done is None:
                return new
            done.partition_epoch = new.partition_epoch  # one record, one bump
            return done

        await self._change_partitions(decide_one, only=pairs)
        return self._describe(self.image.topic(name))

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
        """Registered brokers that are not fenced and whose node agent exists."""
        live = []
        for broker_id in sorted(self.image.brokers):
            if not self.liveness.is_live(broker_id):
                continue
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
            "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
            "adding": p.adding, "removing": p.removing, "config": topic.config,
            "settings": {k: self.settings[k] for k in REPLICA_SETTINGS if k in self.settings},
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
            self._refresh_health_gauges()
            return self._describe(topic)

    async def create_partitions(self, name: str, total: int) -> dict[str, Any]:
        async with self._lock:
            records = decide.create_partitions(self.image, name, total, self._live_brokers())
            self.store.append(records)
            topic = self.image.topic(name)
            new = [topic.partitions[r["partition"]] for r in records]
            await self._ensure(self._states_by_broker(topic, new))
            self._refresh_health_gauges()
            return self._describe(topic)

    async def alter_topic_config(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            self.store.append(decide.alter_config(self.image, name, changes))
            topic = self.image.topic(name)
            config = topic.config
        pushes = []
        for p in topic.partitions.values():
            for b in p.replicas:
                if self.liveness.is_live(b):  # the others read it when they check in
                    try:
                        pushes.append(self._replica(topic, p, b).update_state.remote(
                            {"config": config}
                        ))  # fmt: skip
                    except ValueError:
                        pass
        if pushes:
            await asyncio.wait([asyncio.ensure_future(r) for r in pushes], timeout=10)
        if self._unclean(topic):  # partitions without a leader may take any live replica now
            await self._change_partitions(
                lambda t, q: elections.elect_if_leaderless(q, self.liveness.live(), True),
                only=[(topic, q) for q in topic.partitions.values()],
            )  # fmt: skip
        return self._describe(topic)

    async def delete_topic(self, name: str) -> None:
        async with self._lock:
            topic_id, records = decide.delete_topic(self.image, name)
            topic = self.image.topics[topic_id]
            self.store.append(records)
        self._refresh_health_gauges()
        by_broker = self._states_by_broker(topic, topic.partitions.values())
        live = set(self._live_brokers())
        await asyncio.gather(
            *(self._call_agent(b, "delete_replicas", s) for b, s in by_broker.items() if b in live)
        )

    def _replica(self, topic: TopicState, p: PartitionState, broker_id: int):
        name = replica_name(topic.topic_id, p.partition, broker_id)
        handle = self._replicas.get(name)
        if handle is None:
            handle = self._replicas[name] = ray.get_actor(name, namespace=self.namespace)
        return handle

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
                 "partition_epoch": p.partition_epoch, "replicas": p.replicas, "isr": p.isr,
                 "adding": p.adding, "removing": p.removing,
                 "offline": p.leader == NO_LEADER or not self.liveness.is_live(p.leader)}
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

    # -- group coordinators --------------------------------------------------------------------

    async def group_coordinator(self, group_id: str) -> dict[str, Any]:
        """Where ``group_id`` is served (Kafka's FindCoordinator): {"shard", "name", "shards"}.
        The first call creates ``__consumer_offsets`` and each shard's coordinator actor
        is started on first use."""
        shards = await self._offsets_topic()
        shard = coordinator_shard(group_id, shards)
        await self._coordinator(shard)
        return {"shard": shard, "name": coordinator_name(shard), "shards": shards}

    async def group_coordinators(self) -> list[str]:
        """The names of every coordinator shard (started if need be), for listing groups."""
        shards = await self._offsets_topic()
        await asyncio.gather(*(self._coordinator(k) for k in range(shards)))
        return [coordinator_name(k) for k in range(shards)]

    async def _offsets_topic(self) -> int:
        """The partition count of __consumer_offsets, creating the topic on first use with
        as many copies as ``offsets.topic.replication.factor`` and the live brokers allow."""
        if CONSUMER_OFFSETS in self.image.topic_ids:
            return len(self.image.topic(CONSUMER_OFFSETS).partitions)
        partitions = setting(self.settings, "offsets.topic.num.partitions")
        wanted = setting(self.settings, "offsets.topic.replication.factor")
        copies = max(1, min(wanted, len(self._live_brokers())))
        if copies < wanted:
            self.logger.warning(
                "%s gets %d copies, not offsets.topic.replication.factor=%d: only %d live "
                "broker(s)", CONSUMER_OFFSETS, copies, wanted, copies,
            )  # fmt: skip
        # Kafka's own settings for the offsets topic: compacted, 100 MiB segments.
        config = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}
        try:
            await self.create_topic(CONSUMER_OFFSETS, partitions, copies, config, internal=True)
        except TopicAlreadyExists:  # a concurrent first use created it
            pass
        return len(self.image.topic(CONSUMER_OFFSETS).partitions)

    async def _coordinator(self, shard: int):
        from rafka.actors.group_coordinator import GroupCoordinator

        handle = ray.remote(GroupCoordinator).options(
            name=coordinator_name(shard), namespace=self.namespace, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0, max_concurrency=1000,
            num_cpus=0,
        ).remote(self.namespace, shard, self.settings)  # fmt: skip
        await handle.ready.remote()
        return handle

    async def stop_coordinators(self) -> int:
        """Stop the group coordinator actors (``rafka down``); their state is in
        __consumer_offsets."""
        if CONSUMER_OFFSETS not in self.image.topic_ids:
            return 0
        stopped = 0
        for shard in range(len(self.image.topic(CONSUMER_OFFSETS).partitions)):
            try:
                handle = ray.get_actor(coordinator_name(shard), namespace=self.namespace)
            except ValueError:
                continue
            ray.kill(handle, no_restart=True)
            stopped += 1
        return stopped

    # -- status and shutdown -------------------------------------------------------------------

    async def describe_cluster(self) -> dict[str, Any]:
        brokers = []
        for broker_id, broker in sorted(self.image.brokers.items()):
            try:
                status = await asyncio.wait_for(self._agent(broker_id).status.remote(), 10)
                alive = True
            except (BrokerNotAvailable, ray.exceptions.RayActorError, asyncio.TimeoutError):
                status, alive = {}, False
            brokers.append({
                "broker_id": broker_id, "disk": broker.disk, "rack": broker.rack, "alive": alive,
                "fenced": broker_id in self.liveness.fenced, **status,
            })  # fmt: skip
        return {
            "controller_disk": self.disk, "metadata_offset": self.image.offset,
            "brokers": brokers, "topics": len(self.image.topics),
            "partitions": sum(len(t.partitions) for t in self.image.topics.values()),
        }  # fmt: skip

    async def stop_replicas(self) -> int:
        """Close every replica cleanly and stop its actor (``rafka down``)."""
        self._stopping = True  # heartbeats stop now; that is no reason to move leaders
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
                self.logger.warning("could not stop the replicas of a disk cleanly: %r", outcome)
        self.store.close()
        return sum(n for n in stopped if isinstance(n, int))


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
