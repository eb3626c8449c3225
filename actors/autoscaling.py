"""Autoscaling on the controller: asks Ray's autoscaler for disk nodes and gives idle
autoscaled ones back (the decisions are ``rafka.cluster.autoscaling``'s).

Part of the Controller actor. With ``partition.autoscaling.enable``, every balancer tick
(``partition.autobalancing.tick.interval.ms``) it decides on the balancer's view of the
cluster and carries the decision out:

- a request is ``ray.autoscaler.sdk.request_resources`` with one ``{"rafka_disk": 1}``
  bundle per broker wanted (Ray's request is a target for the whole cluster, it replaces the
  previous one; retired nodes Ray has not released yet are added: ``live_disks`` tells); a
  node that joins becomes a broker by itself (``disk_joins``) and the
  balancer (mode ``node_add``) gives it its share;
- a scale-down drains the emptiest removable broker (the balancer's drain, durable); once the
  broker holds nothing a ``retire`` record removes it from the metadata (so the node agent
  is not started again while the node lives on), its actors are stopped, and the request
  drops by one, so the node is idle and Ray's idle timeout releases it.

Removable: a broker on an ephemeral disk (``rafka-disk=auto``, ``rafka.actors.placement``)
that does not hold the controller. A named disk is never given back: its node is one the
operator keeps (a fixed worker group), and its data outlives a restart.

A topic creation refused for too few brokers asks for them too (``want_for_topic``), for a
while, so the creation succeeds when retried once the nodes have joined.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from rafka.actors.balancing import Balancing
from rafka.actors.controller_core import ControllerCore, now_ms
from rafka.actors.placement import DISK_RESOURCE, agent_name, ephemeral_node
from rafka.cluster.autoscaling import AutoscalerState, AutoscalingSettings, Decision, decide
from rafka.cluster.hosting import host_name
from rafka.cluster.settings import setting
from rafka.errors import InvalidRecord


class Autoscaling:
    """``request(n)`` asks Ray for ``n`` disk nodes; ``stop(names)`` kills the named actors
    for good (fakes in tests). ``controller_disk``: the disk this controller runs on."""

    def __init__(self, core: ControllerCore, balancing: Balancing,
                 request: Callable[[int], None], stop: Callable[[list[str]], None],
                 controller_disk: str,
                 live_disks: Callable[[], list[str]] = lambda: []) -> None:  # fmt: skip
        self.core = core
        self.balancing = balancing
        self.request = request
        self.stop = stop
        self.controller_disk = controller_disk
        self.live_disks = live_disks
        self.state = AutoscalerState()
        self.last: Decision | None = None
        self.retired: list[int] = []

    def settings(self) -> AutoscalingSettings:
        s = self.core.settings
        return AutoscalingSettings(
            enabled=setting(s, "partition.autoscaling.enable"),
            min_brokers=setting(s, "partition.autoscaling.min.brokers"),
            max_brokers=setting(s, "partition.autoscaling.max.brokers"),
            max_replicas_per_broker=setting(s, "partition.autoscaling.max.replicas.per.broker"),
            max_bytes_in_per_broker=setting(s, "partition.autoscaling.max.bytes.in.per.broker"),
            max_bytes_out_per_broker=setting(s,
                                             "partition.autoscaling.max.bytes.out.per.broker"),
            disk_threshold=self.balancing.settings().disk_threshold,
            scale_down_delay_ms=setting(s, "partition.autoscaling.scale.down.delay.ms"),
            dead_grace_ms=self.balancing.settings().heal_after_ms,
        )  # fmt: skip

    @property
    def enabled(self) -> bool:
        return setting(self.core.settings, "partition.autoscaling.enable")

    def want_for_topic(self, brokers: int, topic: str = "") -> bool:
        """A creation of ``topic`` was refused for want of ``brokers`` brokers; True if they
        are asked for (autoscaling is on, and ``max.brokers`` allows as many)."""
        if not self.enabled:
            return False
        return self.state.want_for_topic(brokers, now_ms(), self.settings().max_brokers, topic)

    def removable(self) -> set[int]:
        return {b.broker_id for b in self.core.image.brokers.values()
                if ephemeral_node(b.disk) is not None and b.disk != self.controller_disk}

    # -- the timer -----------------------------------------------------------------------------

    async def run(self) -> None:
        await self.core.every(self.balancing.tick_s, self._round, "autoscaler tick")

    async def _round(self) -> None:
        if self.enabled:
            await self.tick()
        elif self.state.requested is not None:
            # Turned off: Ray would otherwise keep the nodes the last request named for good.
            await asyncio.to_thread(self.request, 0)
            self.state.requested = None

    async def tick(self) -> Decision:
        now = now_ms()
        image = self.core.image
        if self.state.retiring is None:
            # Durable: a restarted controller goes on retiring what it was draining.
            ours = sorted(image.autoscaler_drains & image.draining_brokers)
            self.state.retiring = ours[0] if ours else None
        view = self.balancing.view(now)
        retired = set(image.retired_brokers.values())
        live = set(await asyncio.to_thread(self.live_disks)) if retired else set()
        await self._stop_retired(retired & live)
        decision = decide(view, self.settings(), self.state, self.removable(), now,
                          len(retired & live))  # fmt: skip
        self.last = decision
        if decision.retire is not None and not await self.retire(decision.retire):
            # Not empty after all (a replica placed on it meanwhile): keep retiring it, and
            # keep the request Ray has until it is retired.
            self.state.retiring, self.state.requested = decision.retire, None
            return decision
        if decision.request is not None:
            self.core.logger.info("autoscaler: asking Ray for %d disk node(s) (%s)",
                                  decision.request, "; ".join(decision.reasons))  # fmt: skip
            await asyncio.to_thread(self.request, decision.request)
        if decision.undrain is not None:
            self.core.logger.info("autoscaler: keeping broker %d (%s)", decision.undrain,
                                  "; ".join(decision.reasons))  # fmt: skip
            await self.balancing.drain_broker(decision.undrain, False)
        if decision.drain is not None:
            self.core.logger.info("autoscaler: draining broker %d to give its node back (%s)",
                                  decision.drain, "; ".join(decision.reasons))  # fmt: skip
            await self.balancing.drain_broker(decision.drain, True, by="autoscaler")
        return decision

    async def retire(self, broker_id: int) -> bool:
        """Remove an emptied broker for good and stop its actors (the record first: the
        disk-join check then no longer starts an agent on the node while it lives on).
        False if the metadata refuses (it holds a replica again)."""
        core = self.core
        async with core.lock:
            broker = core.image.brokers.get(broker_id)
            if broker is None:
                return True
            try:
                core.store.append([{"type": "retire", "broker_id": broker_id}])
            except InvalidRecord as e:
                core.logger.info("autoscaler: broker %d not retired: %s", broker_id, e)
                return False
        core.liveness.forget(broker_id)
        await self._stop_retired({broker.disk})
        self.retired.append(broker_id)
        core.logger.info("autoscaler: retired broker %d (disk %s); its node is idle now",
                         broker_id, broker.disk)  # fmt: skip
        return True

    async def _stop_retired(self, disks: set[str]) -> None:
        """Stop the actors of retired brokers on ``disks`` (again after a controller
        restart between the record and the stop: a retired node must end up idle)."""
        image = self.core.image
        names = []
        for broker_id, disk in image.retired_brokers.items():
            if disk in disks:
                slots = image.next_host_slot.get(broker_id, 0)
                names += [host_name(broker_id, s) for s in range(slots)] + [agent_name(disk)]
        if names:
            await asyncio.to_thread(self.stop, names)

    def describe(self) -> dict[str, Any]:
        last = self.last
        return {
            "enabled": self.enabled,
            "wanted": last.wanted if last else None,
            "requested": self.state.requested,
            "retiring": self.state.retiring,
            "retired": list(self.retired),
            "reasons": list(last.reasons) if last else [],
            "removable": sorted(self.removable()),
        }


def ray_request_disks(brokers: int) -> None:
    """Ask Ray's autoscaler for ``brokers`` disk nodes in all (a target, not an increment)."""
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=[{DISK_RESOURCE: 1}] * brokers)


def ray_stop_actors(namespace: str) -> Callable[[list[str]], None]:
    def stop(names: list[str]) -> None:
        import ray

        for name in names:
            try:
                handle = ray.get_actor(name, namespace=namespace)
            except ValueError:
                continue
            ray.kill(handle, no_restart=True)

    return stop
