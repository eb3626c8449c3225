"""Broker liveness on the controller: registration, heartbeats, probes, fencing, return.

Node agents heartbeat here; a broker silent past half of ``broker.session.timeout.ms`` is a
suspect and its agent is probed directly for the other half; one that does not answer is
fenced (``rafka.cluster.liveness`` decides who is a suspect): it leaves every ISR and the
partitions it led get new leaders from their ISRs, with bumped leader epochs. Ray itself
would mark the node dead only after about 16 s. A fenced broker's next heartbeat brings it
back: it leads where nobody can, is told the states it missed, and its replica actors are
started again where needed; its replicas catch up and their leaders propose them back into
the ISR.

Part of the Controller actor, on its event loop. Registrations and fencing are durable
(metadata log): after a controller restart a broker fenced before it starts fenced, and its
first heartbeat brings it back as usual; every other registered broker starts live and is
fenced only if it then stays silent.
"""

from __future__ import annotations

import asyncio
import time

from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import (
    ControllerCore,
    min_insync_replicas,
    now_ms,
    unclean_election_enabled,
)
from rafka.actors.partition_changes import PartitionChanges
from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.settings import setting


#: A watch tick this late (ms) means the controller itself was starved (see ``watch``).
STALL_MS = 50


class BrokerWatch:
    """Which brokers are live, kept by heartbeats and probes, and what follows a change."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls, changes: PartitionChanges):
        self.core = core
        self.calls = calls
        self.changes = changes
        # The probe gets the second half of the session: a broker is fenced one session
        # after its last heartbeat unless it answers.
        self._probe_timeout_s = setting(core.settings, "broker.session.timeout.ms") / 2000
        self._probing: set[int] = set()

    async def register(self, disk: str, broker_id: int | None, rack: str | None) -> int:
        """Register the broker of ``disk`` (a new id when ``broker_id`` is None); it is live."""
        core = self.core
        async with core.lock:
            broker_id, records = decide.register_broker(core.image, disk, broker_id, rack)
            core.store.append(records)
            self.calls.forget_agent(broker_id)
        self.alive(broker_id)
        return broker_id

    async def heartbeat(
        self, disk: str, broker_id: int | None, rack: str | None, node_id: str | None
    ):
        """See ``Controller.heartbeat``."""
        known = self.core.image.brokers.get(broker_id) if broker_id is not None else None
        if known is None or known.disk != disk or known.rack != rack:
            broker_id = await self.register(disk, broker_id, rack)
        if node_id is not None:
            await self.changes.broker_seen_on(broker_id, node_id)
        self.alive(broker_id)
        return broker_id, setting(self.core.settings, "broker.heartbeat.interval.ms")

    def alive(self, broker_id: int) -> None:
        """``broker_id`` was heard from: a fenced broker comes back, and so does every
        broker the first time this controller hears it (it may have been left leading
        nothing, or a partition without a leader, when the previous controller stopped)."""
        back = self.core.liveness.heartbeat(broker_id, now_ms())
        first = broker_id not in self.core.heard
        self.core.heard.add(broker_id)
        if back or first:
            if back:
                self.core.logger.warning("broker %d is back", broker_id)
            self.core.spawn(self._broker_back(broker_id))

    async def _broker_back(self, broker_id: int) -> None:
        """A fenced broker speaks again: record that, lead where nobody can, and make sure
        its replica actors run (some may have been created while it was away)."""
        core, calls = self.core, self.calls

        def unfence():
            if broker_id not in core.image.fenced_brokers or not core.liveness.is_live(broker_id):
                return []
            return [{"type": "fenced", "broker_id": broker_id, "fenced": False}]

        # Never over a leader whose broker this controller has not heard yet (it just
        # started): if that broker is gone, its fencing moves the leadership.
        await self.changes.elect_where_leaderless(
            only=core.image.replicas_on(broker_id), before=unfence
        )
        hosted = core.image.replicas_on(broker_id)
        for topic, p in hosted:
            # What it missed while fenced (pushes went only to live brokers), such as
            # having been replaced as leader.
            calls.tell(topic.topic_id, p.partition, broker_id,
                       calls.replica_state(topic, p, broker_id))  # fmt: skip
        states = [calls.replica_state(topic, p, broker_id) for topic, p in hosted]
        # A failure is logged, and the reconcile tries again; a replica that could not
        # start gives up the leadership it kept while it might have been starting.
        if states and await calls.ensure({broker_id: states}):
            await self.changes.elect_where_leaderless(only=hosted)

    async def watch(self) -> None:
        """Fence brokers whose heartbeats stopped and whose agent does not answer a probe."""
        core = self.core
        interval = min(core.liveness.session_timeout_ms / 5000, 0.1)
        woke = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            if core.stopping:
                return
            # Woken late: this process got no CPU for a while, and heartbeats that came
            # meanwhile may not be read yet. The stall is nobody's silence.
            late_ms = int((time.monotonic() - woke - interval) * 1000)
            woke = time.monotonic()
            if late_ms > STALL_MS:
                core.liveness.not_listening(late_ms, now_ms())
            for broker_id in core.liveness.suspects(now_ms()):
                if broker_id not in self._probing and broker_id in core.image.brokers:
                    self._probing.add(broker_id)
                    core.spawn(self._probe(broker_id))

    async def _probe(self, broker_id: int) -> None:
        try:
            started = time.monotonic()
            if await self.calls.ping_agent(broker_id, self._probe_timeout_s):
                self.alive(broker_id)  # only slow: its heartbeats will resume
                return
            await asyncio.sleep(0)  # heartbeats that arrived meanwhile are read first
            late_ms = int((time.monotonic() - started - self._probe_timeout_s) * 1000)
            if late_ms > STALL_MS:
                # This process got no CPU while it waited: the answer may be in, unread.
                # The stall is nobody's silence; the watch probes again if it lasts.
                self.core.liveness.not_listening(late_ms, now_ms())
                return
            if broker_id not in self.core.liveness.suspects(now_ms()):
                return  # a heartbeat came while the probe waited: it is live
            await self.fence(broker_id)
        finally:
            self._probing.discard(broker_id)

    async def fence(self, broker_id: int) -> int:
        """Take ``broker_id`` out of every ISR and move the leadership it held, recording
        that it is fenced in the same append; returns how many partitions changed."""
        core = self.core
        core.liveness.fence(broker_id)
        core.fencings += 1
        self.calls.forget_agent(broker_id)
        core.logger.warning("broker %d missed its heartbeats; fencing it", broker_id)

        def record_fenced():
            # Unless it spoke again meanwhile (it is back, and its return is on its way).
            if broker_id in core.image.fenced_brokers or core.liveness.is_live(broker_id):
                return []
            return [{"type": "fenced", "broker_id": broker_id, "fenced": True}]

        return await self.changes.change(
            lambda topic, p: elections.fence_broker(
                p, broker_id, core.electable(topic.topic_id, p.partition),
                unclean_election_enabled(topic),
                min_insync_replicas(topic),
            ),
            before=record_fenced,
        )  # fmt: skip
