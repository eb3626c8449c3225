"""Host packing on the controller: a timer that moves a hot replica into a host actor of its
own and a long-cold lone replica into a shared host (decisions: ``rafka.cluster.host_packing``).

Part of the Controller actor, on its event loop. Every ``TICK_MIN_S`` or balancer tick,
whichever is longer, it reads the replicas' loads from the brokers' load reports (the
balancer's ``loads``), decides, and carries out each re-host:

1. under the controller's lock, with the metadata re-checked (the replica still in the slot
   decided on, still named, its partition not being reassigned), the move is recorded: a
   ``hosted`` record names the new slot. From then on the metadata names the new host: a
   client that asks meanwhile is sent there, finds no replica (or no host) yet, and retries
   as it does while a host restarts;
2. the replica's node agent is asked to start it where the metadata says (``BrokerCalls
   .ensure``, the path that starts a missing replica). The agent finds it in its old host,
   has that host close it (flushed, producer state snapshotted, clean-shutdown marker, out
   of the old host's members file) and only once that answered opens it in the new host.
   Reopened on its own files, the replica checks in like one whose host restarted cleanly:
   a new replica epoch, and a leader keeps leading in a new leader epoch;
3. the partition's state, which names its replicas' hosts, is pushed to every replica, so
   followers fetch from the leader's new host.

A controller that dies between 1 and 2 leaves the replica running in its old host while the
metadata names the new one: the reconcile sees the agent report it in another slot than the
metadata's and starts it where the metadata says, which is step 2. A move the agent could
not make (the old host did not answer) is left the same way to the reconcile: the agent
never opens a replica in the new host before the old one said it closed it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.actors.balancing import Balancing
from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.broker_loads import partition_load
from rafka.actors.controller_core import ControllerCore, now_ms
from rafka.cluster.host_packing import HOT, PackingHistory, Rehost, decide, moving_replicas
from rafka.cluster.hosting import host_loads, named_replicas
from rafka.cluster.settings import setting

#: The shortest pause between two packing rounds, s: a round acts on load reports (every
#: ``broker.load.report.interval.ms``, 5 s by default) and moves at most one replica per
#: broker; every 30 s is often enough for a replica that turned hot to get a host of its
#: own within a minute, and rare enough that the decision costs nothing.
TICK_MIN_S = 30.0
#: Re-hosts remembered for ``describe``.
RECENT = 20


class HostPacking:
    """The packing timer of one controller; see the module doc."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, balancing: Balancing) -> None:
        self.core = core
        self.calls = calls
        self.balancing = balancing
        self.history = PackingHistory()
        self.rehosts_done = 0
        self.recent: list[dict[str, Any]] = []
        self._round = asyncio.Lock()

    def interval_s(self) -> float:
        tick_ms = setting(self.core.settings, "partition.autobalancing.tick.interval.ms")
        return max(TICK_MIN_S, tick_ms / 1000)

    async def run(self) -> None:
        """A round every ``interval_s`` for as long as the controller runs."""
        await self.core.every(self.interval_s, self.tick, "host packing round")

    def loads(self, now: int) -> dict:
        """Each replica's load, bytes/s, where its partition's leader's broker reports."""
        image = self.core.image
        current = self.balancing.loads.current(image.brokers, now,
                                               self.balancing.report_interval_ms())
        known = {b for b, load in current.items() if not load.stale}
        out = {}
        for t in image.topics.values():
            for p in t.partitions.values():
                if p.leader not in known:
                    continue
                _, bytes_in, bytes_out = partition_load(current, t.topic_id, p.partition,
                                                        p.replicas, p.leader)  # fmt: skip
                for b in p.replicas:
                    out[(t.topic_id, p.partition, b)] = bytes_in + (
                        bytes_out if b == p.leader else 0.0)
        return out

    async def tick(self, now: int | None = None) -> list[Rehost]:
        """One round: decide, then carry out each re-host; returns those carried out."""
        async with self._round:
            now = now_ms() if now is None else now
            settings = self.core.settings
            per_actor = setting(settings, "replicas.per.actor")
            threshold = setting(settings, "partition.hot.bytes.per.sec")
            busy = {k for k in named_replicas(self.core.image)
                    if self.calls.starting(*k)}  # fmt: skip
            decided = decide(self.core.image, self.loads(now), per_actor, threshold,
                             self.history, now, busy)  # fmt: skip
            done = []
            for rehost in decided:
                if await self.rehost(rehost, now):
                    done.append(rehost)
            self.history.forget_before(now)
            return done

    async def rehost(self, r: Rehost, now: int) -> bool:
        """Carry out one re-host (see the module doc); False when the metadata changed
        since the decision, and nothing was done."""
        core = self.core
        async with core.lock:
            image = core.image
            if (image.hosts.get(r.key) != r.from_slot or r.key not in named_replicas(image)
                    or r.key in moving_replicas(image)):
                return False
            if r.reason == HOT:
                fits = r.to_slot == image.next_host_slot.get(r.broker_id, 0)  # still unused
            else:  # still holds named replicas (not being stopped), with room
                held = host_loads(image).get(r.broker_id, {}).get(r.to_slot, 0)
                fits = 0 < held < setting(core.settings, "replicas.per.actor")
            if not fits:
                return False
            core.store.append([r.record()])
        self.history.rehosted(r.key, now)
        self.rehosts_done += 1
        self.recent = (self.recent + [{
            "topic_id": r.topic_id, "partition": r.partition, "broker_id": r.broker_id,
            "from_slot": r.from_slot, "to_slot": r.to_slot, "reason": r.reason,
            "bytes_per_s": r.load, "at_ms": now,
        }])[-RECENT:]  # fmt: skip
        core.logger.info("host packing: replica of partition %d of topic id %s on broker %d "
                         "(%s, %.0f B/s) from host %d to host %d", r.partition, r.topic_id,
                         r.broker_id, r.reason, r.load, r.from_slot, r.to_slot)  # fmt: skip
        topic = image.topics[r.topic_id]
        p = topic.partitions[r.partition]
        failed = await self.calls.ensure({r.broker_id: [self.calls.replica_state(topic, p,
                                                                                 r.broker_id)]})
        if failed:  # the reconcile moves it later: the agent reports it in its old slot
            core.logger.warning("host packing: the move to host %d is left to the reconcile: "
                                "%r", r.to_slot, failed[r.broker_id])  # fmt: skip
        topic = core.image.topics.get(r.topic_id)
        p = topic.partitions.get(r.partition) if topic is not None else None
        if p is not None:
            self.calls.push_state(topic, p)  # followers find the leader's new host
        return True

    def describe(self) -> dict[str, Any]:
        """How many re-hosts this controller carried out, and the latest few."""
        return {"rehosts": self.rehosts_done, "recent": list(self.recent)}
