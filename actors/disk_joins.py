"""Disk nodes that join the Ray cluster become brokers by themselves.

Part of the Controller actor. Every ``JOIN_CHECK_S`` it lists the live Ray nodes that
declare the ``rafka_disk`` resource (``service.live_disks``) and starts a node agent for each
disk that has none, as ``rafka up`` does: the agent registers its disk with this controller
(getting the disk's broker id) and from then on heartbeats. A disk whose agent already
exists (running, or waiting for its node to come back) is left alone. Nothing is started
while the services stop (``rafka down``). The balancer then gives the new broker its share
(``partition.autobalancing.mode=node_add``).

A disk whose node is live but whose broker has not been heard for ``AGENT_STUCK_S`` gets its
agent restarted (``ray.kill`` with a restart): when a disk's node dies twice within the
time Ray takes to declare the first death (about 16 s), Ray can leave the agent's restart
pending on a node that is already gone, and the broker would stay fenced with its node up.

Ray's node table and actor names are read off the event loop (``asyncio.to_thread``): they
are synchronous calls to Ray's control store.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import ray

from rafka.actors.controller_core import ControllerCore
from rafka.actors.placement import agent_name

#: How often the live disk nodes are listed, s.
JOIN_CHECK_S = 2.0
#: How long a live disk's broker may stay unheard before its agent is restarted, s.
AGENT_STUCK_S = 30.0


class DiskJoins:
    """``live_disks()``, ``agent_exists(disk)`` and ``start_agent(disk)`` reach Ray (fakes in
    tests); ``start_agent`` returns once the agent has started (registered its disk)."""

    def __init__(self, core: ControllerCore, live_disks: Callable[[], list[str]],
                 agent_exists: Callable[[str], bool], start_agent: Callable[[str], None],
                 restart_agent: Callable[[str], None] = lambda disk: None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.core = core
        self.live_disks = live_disks
        self.agent_exists = agent_exists
        self.start_agent = start_agent
        self.restart_agent = restart_agent
        self.clock = clock
        self._with_agent: set[str] = set()  # disks known to have an agent
        self._unheard_since: dict[str, float] = {}  # live disks whose broker is not live

    async def run(self) -> None:
        # check() itself does nothing while the services stop.
        await self.core.every(lambda: JOIN_CHECK_S, self.check,
                              "looking for disk nodes that joined")

    async def check(self) -> list[str]:
        """Start an agent for every live disk without one; returns the disks started."""
        if self.core.stopping:
            return []
        started = []
        live = await asyncio.to_thread(self.live_disks)
        await self._restart_stuck(live)
        retired = set(self.core.image.retired_brokers.values())
        for disk in live:
            if disk in self._with_agent or disk in retired:
                continue  # a retired disk's node lives on until Ray releases it
            if not await asyncio.to_thread(self.agent_exists, disk):
                if self.core.stopping:
                    break
                self.core.logger.info("disk %s joined: starting its node agent", disk)
                await asyncio.to_thread(self.start_agent, disk)
                started.append(disk)
            self._with_agent.add(disk)
        return started

    async def _restart_stuck(self, live: list[str]) -> None:
        now = self.clock()
        for disk in list(self._unheard_since):
            if disk not in live:
                del self._unheard_since[disk]  # its node is down: nothing to restart
        for disk in live:
            broker = self.core.image.broker_for_disk(disk)
            if broker is None or self.core.liveness.is_live(broker.broker_id):
                self._unheard_since.pop(disk, None)
                continue
            since = self._unheard_since.setdefault(disk, now)
            if now - since >= AGENT_STUCK_S:
                self.core.logger.warning(
                    "broker %d (disk %s) has not been heard for %.0f s though its node is "
                    "up: restarting its node agent", broker.broker_id, disk, now - since,
                )  # fmt: skip
                self._unheard_since[disk] = now
                await asyncio.to_thread(self.restart_agent, disk)


def ray_restart_agent(namespace: str) -> Callable[[str], None]:
    def restart(disk: str) -> None:
        try:
            agent = ray.get_actor(agent_name(disk), namespace=namespace)
        except ValueError:
            return  # gone: the join check starts a new one
        ray.kill(agent, no_restart=False)

    return restart


def ray_agent_exists(namespace: str) -> Callable[[str], bool]:
    def exists(disk: str) -> bool:
        try:
            ray.get_actor(agent_name(disk), namespace=namespace)
        except ValueError:
            return False
        return True

    return exists
