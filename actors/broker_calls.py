"""The controller's calls to brokers: their node agents and the replica actors they host.

Node agents create, stop and delete replica actors (``ensure_replicas``, ``stop_replicas``,
``delete_replicas``); replicas receive their partition states (``update_state``) directly.
Each replica is told its state as a dict built here (``replica_state``), which is the one
place that decides what a replica knows of its partition and of the cluster settings; every
state carries the controller epoch, so a replica can refuse one from an older controller.
A replica that a move is adding also learns its share of ``replication.throttled.rate``
(``move_shares``), and is told again when that share changes.

Used by the other parts of the Controller, on its event loop; every Ray call goes through
``RayActors`` (a fake one in tests). Handles are cached in memory and dropped when a call to
them fails or their replica is deleted or created again (a replica moved away and back is a
new actor under the same name). State pushes are fire and forget: a replica that misses one
asks for its state when its leader stops answering, and the controller's periodic reconcile
pushes every state again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from rafka.actors.controller_core import ControllerCore
from rafka.actors.move_shares import MoveShares
from rafka.actors.placement import agent_name, replica_name
from rafka.actors.ray_actors import ActorDied, RayActors
from rafka.cluster import hosting, node_restarts
from rafka.cluster.hosting import NO_HOST, slots_of
from rafka.cluster.metadata import PartitionState, TopicState
from rafka.cluster.replication_quota import SHARE_FIELD
from rafka.cluster.settings import setting
from rafka.errors import BrokerNotAvailable

#: Cluster settings the replicas need (Kafka's broker property names).
REPLICA_SETTINGS = ("replica.lag.time.max.ms", "replica.fetch.wait.max.ms",
                    "replica.fetch.max.bytes", "replication.throttled.rate")  # fmt: skip


#: How long the reconcile waits for an agent's list of the replicas its hosts hold, s.
HOSTED_TIMEOUT_S = 20.0

#: What of a replica's state may change while its actor starts (the pushes of those changes
#: found no actor): compared with what it was created with once it runs.
CHANGES_WHILE_STARTING = ("leader_epoch", "partition_epoch", "config", "hosts", SHARE_FIELD)


class BrokerCalls:
    """Node agent and replica handles of one controller, and the calls made through them."""

    def __init__(self, core: ControllerCore, actors: RayActors):
        self.core = core
        self.actors = actors
        self._agents: dict[int, Any] = {}
        self._replicas: dict[str, Any] = {}
        self._name_locks: dict[str, tuple[asyncio.Lock, int]] = {}  # name -> (lock, users)
        self._pushes: list[tuple[Any, dict]] = []  # state pushes of this event-loop turn
        self.move_shares = MoveShares(core)
        #: Names of replicas the last ``replica_names`` found in another host than the
        #: metadata names (a re-host recorded, not carried out): the reconcile moves them.
        self.misplaced: set[str] = set()
        # Replicas of new topics and partitions not started yet: clients are told their
        # partitions are not available, and describe lists them as starting.
        self.awaiting_start: set[tuple[str, int, int]] = set()
        # Replicas this controller tried to start, and could not (their last attempt
        # failed): one of them that was never seen running may lose its leadership.
        self.failed_to_start: set[tuple[str, int, int]] = set()

    # -- node agents ---------------------------------------------------------------------------

    def agent(self, broker_id: int):
        """The node agent of ``broker_id``; BrokerNotAvailable when it is unknown or down."""
        handle = self._agents.get(broker_id)
        if handle is None:
            broker = self.core.image.brokers.get(broker_id)
            if broker is None:
                raise BrokerNotAvailable(f"broker {broker_id} is not registered")
            handle = self.actors.find(agent_name(broker.disk))
            if handle is None:
                raise BrokerNotAvailable(
                    f"broker {broker_id} (disk {broker.disk!r}) has no running node agent; "
                    "start the node with its disk, then run `rafka up`"
                )
            self._agents[broker_id] = handle
        return handle

    def forget_agent(self, broker_id: int) -> None:
        """Drop the cached handle (the broker registered again or was fenced)."""
        self._agents.pop(broker_id, None)

    async def call_agent(self, broker_id: int, method: str, *args, patience_s: float = 30.0):
        """Call a node agent, waiting out a restart (Ray brings an agent back when its disk's
        node returns) for up to ``patience_s``."""
        deadline = time.monotonic() + patience_s
        delay = 0.1
        while True:
            try:
                return await self.actors.call(self.agent(broker_id), method, *args)
            except ActorDied:
                self._agents.pop(broker_id, None)
                if time.monotonic() + delay > deadline:
                    raise BrokerNotAvailable(
                        f"the node agent of broker {broker_id} did not answer for "
                        f"{patience_s:.0f} s; is its disk's node up?"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def ping_agent(self, broker_id: int, timeout_s: float) -> bool:
        """True when the broker's agent answers within ``timeout_s``."""
        try:
            await self.actors.call(self.agent(broker_id), "ping", timeout_s=timeout_s)
            return True
        except (asyncio.TimeoutError, BrokerNotAvailable):
            self._agents.pop(broker_id, None)
            return False

    async def agent_status(self, broker_id: int, timeout_s: float = 10.0) -> dict | None:
        """The agent's ``status()`` (disk usage, node); None when it does not answer."""
        try:
            return await self.actors.call(self.agent(broker_id), "status", timeout_s=timeout_s)
        except (asyncio.TimeoutError, BrokerNotAvailable):
            return None

    def placeable_brokers(self) -> list[int]:
        """Live brokers that may take new replicas: not draining (a broker being emptied
        is cordoned off, as KIP-1066 does for brokers being removed)."""
        return [b for b in self.live_brokers() if b not in self.core.image.draining_brokers]

    def live_brokers(self) -> list[int]:
        """Registered brokers that are not fenced and whose node agent exists."""
        live = []
        for broker_id in sorted(self.core.image.brokers):
            if not self.core.liveness.is_live(broker_id):
                continue
            try:
                self.agent(broker_id)
                live.append(broker_id)
            except BrokerNotAvailable:
                pass
        return live

    async def agent_node(self, broker_id: int) -> str | None:
        """The Ray node the broker's agent runs on; None when it does not answer."""
        try:
            return await asyncio.wait_for(
                self.call_agent(broker_id, "node_id", patience_s=5.0), 10.0
            )
        except (BrokerNotAvailable, asyncio.TimeoutError, ValueError):
            return None

    # -- replicas ------------------------------------------------------------------------------

    def replica(self, topic_id: str, partition: int, broker_id: int):
        """The handle of one partition's replica on ``broker_id`` (reached through its host
        actor); None when it has no host yet or its host does not run."""
        name = replica_name(topic_id, partition, broker_id)
        handle = self._replicas.get(name)
        if handle is None:
            slot = self.core.image.hosts.get((topic_id, partition, broker_id))
            if slot is None:
                return None
            handle = self.actors.replica(topic_id, partition, broker_id, slot)
            if handle is not None:
                self._replicas[name] = handle
        return handle

    def forget_replica(self, topic_id: str, partition: int, broker_id: int) -> None:
        self._replicas.pop(replica_name(topic_id, partition, broker_id), None)

    def replica_state(self, topic: TopicState, p: PartitionState, broker_id: int) -> dict:
        """What the replica of ``p`` on ``broker_id`` is told of its partition."""
        settings = self.core.settings
        return {
            "topic": topic.name, "topic_id": topic.topic_id, "partition": p.partition,
            "broker_id": broker_id, "replicas": p.replicas, "isr": p.isr, "leader": p.leader,
            "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
            "adding": p.adding, "removing": p.removing, "config": topic.config,
            "topic_created_at": topic.created_at,
            "hosts": slots_of(self.core.image, topic.topic_id, p.partition, p.replicas),
            "controller_epoch": self.core.image.controller_epoch,
            "settings": {k: settings[k] for k in REPLICA_SETTINGS if k in settings},
            SHARE_FIELD: self.move_shares.share(p, broker_id),
        }  # fmt: skip

    def states_by_broker(self, topic: TopicState, partitions) -> dict[int, list[dict]]:
        """The replica states of ``partitions`` of ``topic``, grouped by broker."""
        out: dict[int, list[dict]] = {}
        for p in partitions:
            for broker_id in p.replicas:
                out.setdefault(broker_id, []).append(self.replica_state(topic, p, broker_id))
        return out

    def all_states_by_broker(self) -> dict[int, list[dict]]:
        """The replica states of every partition of every topic, grouped by broker."""
        by_broker: dict[int, list[dict]] = {}
        for topic in list(self.core.image.topics.values()):
            for b, states in self.states_by_broker(topic, topic.partitions.values()).items():
                by_broker.setdefault(b, []).extend(states)
        return by_broker

    def names_a_replica(self, topic_id: str, partition: int, broker_id: int) -> bool:
        """True when the metadata names this replica now (its topic and partition exist and
        the broker is in its replica set)."""
        topic = self.core.image.topics.get(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        return p is not None and broker_id in p.replicas

    def may_be_starting(self, topic_id: str, partition: int, broker_id: int) -> bool:
        """True unless this replica was seen running somewhere or failed to start: a
        controller that died while it created the replica left no trace of the start, and
        its agent may be creating it still."""
        key = (topic_id, partition, broker_id)
        return (self.starting(topic_id, partition, broker_id)
                or (key not in self.core.image.replica_nodes
                    and key not in self.failed_to_start))  # fmt: skip

    def starting(self, topic_id: str, partition: int, broker_id: int) -> bool:
        """True while this replica is waiting to be started (its topic or partition was
        just created), or is being created or deleted."""
        return ((topic_id, partition, broker_id) in self.awaiting_start
                or replica_name(topic_id, partition, broker_id) in self._name_locks)  # fmt: skip

    @contextlib.asynccontextmanager
    async def _replicas_held(self, states: list[dict]):
        """Hold the named replicas (in name order) while they are created or deleted: a
        replica moved away and straight back, or a topic deleted while its actors are being
        created, must not have its creation and deletion cross at the agent. Each holder
        re-checks the metadata once it holds them."""
        names = sorted({replica_name(s["topic_id"], s["partition"], s["broker_id"])
                        for s in states})  # fmt: skip
        locks = []
        for name in names:
            lock, users = self._name_locks.get(name, (asyncio.Lock(), 0))
            self._name_locks[name] = (lock, users + 1)
            locks.append(lock)
        acquired = []
        try:
            for lock in locks:
                await lock.acquire()
                acquired.append(lock)
            yield
        finally:
            for lock in acquired:
                lock.release()
            for name in names:
                held, users = self._name_locks[name]
                if users == 1:
                    del self._name_locks[name]
                else:
                    self._name_locks[name] = (held, users - 1)

    async def ensure(
        self, by_broker: dict[int, list[dict]], new: bool = False
    ) -> dict[int, BaseException]:
        """Have each broker's agent start the replica actors named (those the metadata still
        names once they are held), where they do not run. ``new``: the replicas were just
        added to their partitions (a topic or partition created, a reassignment's new
        replicas); a replica created here with an empty log then starts in a replica epoch
        reserved now (above any of its earlier lives'). Any other replica started here ran
        before (its host or its files were lost): it checks in first, whatever its
        directory holds, like one that finds its files. Returns the brokers where some
        replica did not start, with the error: they are left to the reconcile."""
        by_broker = {b: states for b, states in by_broker.items() if states}
        if not by_broker:
            return {}
        self.place(by_broker)
        if not new:
            by_broker = {b: [{**s, "must_check_in": True} for s in states]
                         for b, states in by_broker.items()}  # fmt: skip
        epoch = self.core.reserve_replica_epoch()
        outcomes = await asyncio.gather(
            *(self._ensure_on(b, states, epoch) for b, states in by_broker.items()),
            return_exceptions=True,
        )
        failed = {b: o for b, o in zip(by_broker, outcomes) if isinstance(o, BaseException)}
        for b, states in by_broker.items():
            keys = {(s["topic_id"], s["partition"], b) for s in states}
            if b in failed:
                self.failed_to_start |= keys
            else:
                self.failed_to_start -= keys
        for b, error in failed.items():
            self.core.logger.warning("could not start replicas of broker %d: %r", b, error)
        return failed

    def place(self, by_broker: dict[int, list[dict]]) -> None:
        """Give every replica of ``by_broker`` (of every broker at once, so each state
        carries the hosts of its partition's other replicas too) a host, recorded."""
        image = self.core.image
        keys = [(s["topic_id"], s["partition"], b) for b, states in by_broker.items()
                for s in states if (s["topic_id"], s["partition"], b) not in image.hosts
                and self.names_a_replica(s["topic_id"], s["partition"], b)]  # fmt: skip
        if keys:
            per_actor = setting(self.core.settings, "replicas.per.actor")
            self.core.store.append(hosting.place(image, keys, per_actor))
        for b, states in by_broker.items():
            for i, s in enumerate(states):
                topic = image.topics.get(s["topic_id"])
                p = topic.partitions.get(s["partition"]) if topic is not None else None
                if p is not None and b in p.replicas:
                    states[i] = {**s, "hosts": slots_of(image, topic.topic_id, p.partition,
                                                        p.replicas),
                                 "host": image.hosts[(topic.topic_id, p.partition, b)]}

    async def _ensure_on(self, broker_id: int, states: list[dict], epoch: int) -> None:
        """``ensure`` on one broker, holding only that broker's replica names."""
        async with self._replicas_held(states):
            # The host as the metadata says now: a re-host (``host_packing``) may have been
            # recorded while this waited for the names.
            hosts = self.core.image.hosts
            states = [{**s, "replica_epoch": epoch,
                       "host": hosts.get((s["topic_id"], s["partition"], broker_id), NO_HOST)}
                      for s in states if "host" in s
                      and self.names_a_replica(s["topic_id"], s["partition"], broker_id)]
            if not states:
                return
            for s in states:  # a cached handle may be of an earlier actor of that name
                self.forget_replica(s["topic_id"], s["partition"], broker_id)
            described = await self.call_agent(broker_id, "ensure_replicas", states)
        # Replicas running with their logs (created empty, or checked in) are where they run;
        # one still waiting to check in ("starting") is not vouched for here.
        started = [d for d in described if "error" not in d]
        by_node: dict[str, list] = {}
        for d in started:
            if d.get("node_id") and d.get("role") != "starting":
                by_node.setdefault(d["node_id"], []).append(
                    (d["topic_id"], d["partition"], d["broker_id"])
                )
        for node, keys in by_node.items():
            self.core.store.append(node_restarts.replicas_seen_on(self.core.image, node, keys))
        # The partitions may have changed while their actors were being created, and the
        # pushes of those changes found no actor: tell them the state they have now.
        sent = {(s["topic_id"], s["partition"]): s for s in states}
        for d in started:
            s = sent.get((d["topic_id"], d["partition"]))
            topic = self.core.image.topics.get(d["topic_id"])
            p = topic.partitions.get(d["partition"]) if topic is not None else None
            if s is None or p is None or broker_id not in p.replicas:
                continue
            now = self.replica_state(topic, p, broker_id)
            if any(now[k] != s.get(k) for k in CHANGES_WHILE_STARTING):
                self.tell(topic.topic_id, p.partition, broker_id, now)
        errors = [d["error"] for d in described if "error" in d]
        if errors:
            raise BrokerNotAvailable(
                f"{len(errors)} replica(s) of broker {broker_id} did not start: {errors[0]}"
            )

    def tell(self, topic_id: str, partition: int, broker_id: int, state: dict) -> None:
        """Send the whole ``state`` to one replica without waiting. Pushes made in one turn
        of the event loop go out together, one call per host actor; a cached handle is
        dropped if its host turns out to be gone."""
        handle = self.replica(topic_id, partition, broker_id)
        if handle is None:
            return
        if not self._pushes:
            asyncio.get_running_loop().call_soon(self._send_pushes)
        self._pushes.append((handle, state))

    def _send_pushes(self) -> None:
        pushes, self._pushes = self._pushes, []
        # Moves started or ended: the other copying replicas of their brokers get new shares.
        queued = {(s["topic_id"], s["partition"], s["broker_id"]) for _, s in pushes}
        for topic, p, b in self.move_shares.to_tell_again(queued):
            handle = self.replica(topic.topic_id, p.partition, b)
            if handle is not None and self.core.liveness.is_live(b):
                pushes.append((handle, self.replica_state(topic, p, b)))

        def gone(state: dict) -> None:
            self.forget_replica(state["topic_id"], state["partition"], state["broker_id"])

        self.actors.push_states(pushes, on_failure=gone)

    def push_state(self, topic: TopicState, p: PartitionState) -> None:
        """Send the partition's state to every live replica, without waiting: a replica that
        misses it asks for it (``partition_state``) when its leader stops answering."""
        for broker_id in p.replicas:
            if self.core.liveness.is_live(broker_id):
                self.tell(topic.topic_id, p.partition, broker_id,
                          self.replica_state(topic, p, broker_id))  # fmt: skip

    async def push_config(self, topic: TopicState, timeout_s: float = 10.0) -> None:
        """Send a topic's config to its live replicas and wait (up to ``timeout_s``) until
        they took it; the others read it when they check in."""
        change = {"config": topic.config, "controller_epoch": self.core.image.controller_epoch}
        calls = []
        for p in topic.partitions.values():
            for b in p.replicas:
                handle = self.replica(topic.topic_id, p.partition, b)
                if handle is not None and self.core.liveness.is_live(b):
                    calls.append(
                        self.actors.call(handle, "update_state", change, timeout_s=timeout_s)
                    )
        await asyncio.gather(*calls, return_exceptions=True)

    def confirm_replica_epoch(
        self, topic: TopicState, p: PartitionState, broker_id: int, recorded: int
    ) -> None:
        """Ask the replica of ``p`` on ``broker_id`` to check in again if it runs in an older
        replica epoch than ``recorded`` (see ``PartitionReplica.confirm_replica_epoch``)."""
        handle = self.replica(topic.topic_id, p.partition, broker_id)
        if handle is not None:  # else it is restarting and will check in
            self.actors.send(handle, "confirm_replica_epoch", recorded)

    async def delete_replica(self, topic: TopicState, p: PartitionState, broker_id: int):
        """Have the agent of ``broker_id`` delete its replica of ``p`` (moved away)."""
        await self.delete_replicas(broker_id, [self.replica_state(topic, p, broker_id)])

    async def delete_replicas(self, broker_id: int, states: list[dict]) -> int:
        """Have the agent of ``broker_id`` delete these replicas (files and actors), those
        the metadata no longer names once they are held; how many it deleted (0 when the
        agent cannot be reached: they delete themselves when they next check in)."""
        async with self._replicas_held(states):
            states = [s for s in states if not self.names_a_replica(
                s["topic_id"], s["partition"], broker_id)]  # fmt: skip
            if not states:
                return 0
            for s in states:
                self.forget_replica(s["topic_id"], s["partition"], broker_id)
            try:
                return await self.call_agent(broker_id, "delete_replicas", states)
            except BrokerNotAvailable as e:
                self.core.logger.warning("could not delete %d replica(s) on broker %d: %r",
                                         len(states), broker_id, e)  # fmt: skip
                return 0

    async def replica_names(self) -> tuple[set[str], set[int]]:
        """Names (``replica_name``) of every replica held by a host actor that exists
        (alive, restarting or slow to answer), asked of the live brokers' agents (and, in
        ``misplaced``, those held in another host than the metadata names), and the
        live brokers whose agent did not answer in time: what their hosts hold is unknown,
        so none of their replicas counts as missing or stray."""
        live = self.live_brokers()

        async def hosted(broker_id: int):
            # The call is made inside the task: one cancelled before it starts leaves no
            # coroutine behind that was never awaited.
            return await asyncio.wait_for(self.call_agent(broker_id, "hosted", patience_s=1.0),
                                          HOSTED_TIMEOUT_S)  # fmt: skip

        answers = await asyncio.gather(*(hosted(b) for b in live), return_exceptions=True)
        names: set[str] = set()
        unknown: set[int] = set()
        self.misplaced = set()
        for broker_id, answer in zip(live, answers):
            if isinstance(answer, BaseException):
                unknown.add(broker_id)
                continue
            names.update(replica_name(t, p, b) for t, p, b, *_ in answer)
            self.misplaced.update(  # held in another host than the metadata names
                replica_name(t, p, b) for t, p, b, *slot in answer
                if slot and self.core.image.hosts.get((t, p, b), slot[0]) != slot[0])
        return names, unknown

    def running_hosts(self, topic_id: str, p: PartitionState) -> list[int]:
        """The host slot of each of ``p``'s replicas, NO_HOST for one of a new topic or
        partition not started yet (clients are told its partition is not available until
        it runs; any other replica's host answers for it, retriably, while it restarts)."""
        image = self.core.image
        return [NO_HOST if (topic_id, p.partition, b) in self.awaiting_start
                else image.hosts.get((topic_id, p.partition, b), NO_HOST)
                for b in p.replicas]  # fmt: skip

    def starting_replicas(self, topic_id: str, p: PartitionState) -> list[int]:
        """The brokers of ``p``'s replicas that are new and not started yet."""
        return [b for b in p.replicas if (topic_id, p.partition, b) in self.awaiting_start]
