"""The balancer on the controller: a timer that plans (``rafka.cluster.balancer``) and carries
out the plan, and the admin requests behind drain, undrain, rebalance and the status.

Part of the Controller actor, on its event loop. Every ``partition.autobalancing.tick
.interval.ms`` it builds the cluster view from the metadata image and the brokers' liveness,
plans with the goals the mode pursues now (``active_goals``), and starts each move as a
reassignment (the new replica copies the log by follower fetch; the old one is deleted once
the new one is in sync) and each leadership move as a reorder of the partition's replicas
followed by a preferred-leader election. A move in progress counts against the throttle
until its reassignment completes, so the next ticks start more as earlier ones finish.

Drains are durable (a ``drain`` metadata record): a restarted controller goes on emptying the
broker. A broker that joins (a broker id not known at the last tick) starts a node-add
balancing round in ``node_add`` mode, which lasts until a plan has nothing left to move.
Which brokers died and when is this controller's own observation (not durable): a restarted
controller starts the healing delay again, which only waits longer.

Sizes and traffic come from the brokers' load reports (``broker_loads``, sent by each node
agent every ``broker.load.report.interval.ms``, see ``load_reports``): a broker's disk
capacity and use are its latest report's; a partition's size is its largest replica's, its
bytes in its leader's append rate and its bytes out its leader's rate to consumers. Until a
broker reports (and once its report is stale) its partitions count as idle, so the traffic
goals move nothing for them; a disk of unknown capacity is left alone by the disk goal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.actors.broker_loads import NO_LOAD, BrokerLoads, partition_load
from rafka.actors.controller_core import ControllerCore, now_ms
from rafka.actors.partition_changes import PartitionChanges
from rafka.actors.placement import ephemeral_node
from rafka.actors.reassignments import Reassignments
from rafka.cluster.balancer import active_goals, plan
from rafka.cluster.balancer_types import (
    BalancerSettings,
    BrokerView,
    ClusterView,
    Goal,
    LeaderMove,
    Mode,
    Move,
    MoveHistory,
    PartitionView,
    Plan,
)
from rafka.cluster.settings import setting
from rafka.errors import InvalidReplicaAssignment, RafkaError


class Balancing:
    """See the Controller methods of the same names."""

    def __init__(self, core: ControllerCore, changes: PartitionChanges,
                 reassignments: Reassignments) -> None:  # fmt: skip
        self.core = core
        self.changes = changes
        self.reassignments = reassignments
        self.history = MoveHistory()
        self._dead_since: dict[int, int] = {}
        self._known: set[int] | None = None  # brokers seen at the last tick
        self._moving_since: dict[tuple[str, int], int] = {}  # reassignments seen in flight
        self.balancing_node_add = False
        self.last_plan: Plan | None = None
        self.moves_started = 0
        self._round = asyncio.Lock()  # one planning round at a time
        self.loads = BrokerLoads()  # the brokers' latest load reports

    # -- settings and view ---------------------------------------------------------------------

    def settings(self) -> BalancerSettings:
        s = self.core.settings
        return BalancerSettings(
            mode=Mode(setting(s, "partition.autobalancing.mode")),
            max_moves_per_broker=setting(s, "partition.autobalancing.concurrent.moves.per.broker"),
            max_moves=setting(s, "partition.autobalancing.concurrent.moves"),
            heal_after_ms=setting(s, "partition.autobalancing.node.availability.timeout.sec")
            * 1000,
        )  # fmt: skip

    def view(self, now: int) -> ClusterView:
        """The cluster as the metadata and the liveness say now; notes which brokers died
        (and since when) and which joined since the last look."""
        image, liveness = self.core.image, self.core.liveness
        for b in image.brokers:
            if liveness.is_live(b):
                self._dead_since.pop(b, None)
            else:
                self._dead_since.setdefault(b, now)
        known = set(image.brokers)
        if self._known is not None and known - self._known:
            self.balancing_node_add = True
        self._known = known
        loads = self.loads.current(image.brokers, now, self.report_interval_ms())
        brokers = tuple(
            BrokerView(b, rack=state.rack, dead_since_ms=self._dead_since.get(b),
                       draining=b in image.draining_brokers,
                       disk_capacity=loads.get(b, NO_LOAD).disk_capacity,
                       disk_used=loads.get(b, NO_LOAD).disk_used,
                       ephemeral=ephemeral_node(state.disk) is not None)
            for b, state in sorted(image.brokers.items())
        )  # fmt: skip
        partitions = []
        for t in image.topics.values():
            for _, p in sorted(t.partitions.items()):
                size, bytes_in, bytes_out = partition_load(loads, t.topic_id, p.partition,
                                                           p.replicas, p.leader)  # fmt: skip
                partitions.append(PartitionView(
                    t.name, p.partition, tuple(p.replicas), p.leader, tuple(p.isr),
                    size_bytes=size, bytes_in_per_s=bytes_in, bytes_out_per_s=bytes_out,
                    adding=tuple(p.adding), removing=tuple(p.removing)))  # fmt: skip
        moving = {p.key for p in partitions if p.moving}
        self._moving_since = {k: self._moving_since.get(k, now) for k in moving}
        return ClusterView(brokers, tuple(partitions))

    # -- load reports --------------------------------------------------------------------------

    def report_interval_ms(self) -> int:
        return setting(self.core.settings, "broker.load.report.interval.ms")

    def report_load(self, broker_id: int, report: dict[str, Any]) -> int:
        """See ``Controller.report_load``."""
        if not self.loads.record(broker_id, report, now_ms(), self.core.image.brokers):
            self.core.logger.debug("dropped the load report of unregistered broker %d",
                                   broker_id)  # fmt: skip
        return self.report_interval_ms()

    # -- the timer -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan and carry out every tick, for as long as the controller runs."""
        await self.core.every(self.tick_s, self.tick, "balancer tick")

    def tick_s(self) -> float:
        return setting(self.core.settings, "partition.autobalancing.tick.interval.ms") / 1000

    async def tick(self, requested: bool = False) -> Plan:
        """One round: plan with the goals pursued now and start what it says. Rounds never
        overlap (each plans on what the previous one started)."""
        async with self._round:
            return await self._tick(requested)

    async def _tick(self, requested: bool) -> Plan:
        now = now_ms()
        settings = self.settings()
        view = self.view(now)
        if await self._cancel_moves_to_leaving(view, settings, now):
            view = self.view(now)
        goals = active_goals(settings.mode, self.balancing_node_add, requested)
        result = plan(view, settings, self.history, now, goals)
        if self.balancing_node_add and result.empty and not any(p.moving for p in
                                                                view.partitions):
            self.balancing_node_add = False  # the joined broker has its share
        await self.carry_out(result, now)
        self.last_plan = result
        self.history.forget_before(now - settings.cooldown_ms)
        return result

    async def _cancel_moves_to_leaving(self, view: ClusterView, settings: BalancerSettings,
                                       now: int) -> bool:  # fmt: skip
        """Cancel reassignments adding a replica on a broker that is leaving (drained, or
        lost past the healing delay): that replica could never catch up, and the move would
        hold its partition (and the throttle) forever. True if any was cancelled."""
        heal = settings.mode is not Mode.OFF
        leaving = {b.broker_id for b in view.brokers if b.draining or (
            heal and not b.alive and now - b.dead_since_ms >= settings.heal_after_ms)}
        cancelled = False
        for p in view.partitions:
            if set(p.adding) & leaving:
                try:
                    await self.reassignments.cancel_reassignment(p.topic, [p.partition])
                    cancelled = True
                    self.core.logger.info("balancer: cancelled the move of %s-%d to leaving "
                                          "broker(s) %s", p.topic, p.partition,
                                          sorted(set(p.adding) & leaving))  # fmt: skip
                except RafkaError as e:
                    self.core.logger.info("balancer: could not cancel the move of %s-%d: %s",
                                          p.topic, p.partition, e)  # fmt: skip
        return cancelled

    async def carry_out(self, result: Plan, now: int) -> None:
        # Leaderships first: a partition planned to change leader and to move is reordered
        # and elected before its reassignment starts (the plan's target keeps that order).
        for lead in result.leader_moves:
            try:
                await self._lead(lead)
            except RafkaError as e:
                self.core.logger.info("balancer: %s-%d leadership not moved: %s", lead.topic,
                                      lead.partition, e)  # fmt: skip
        for move in result.moves:
            try:
                await self.reassignments.reassign_partitions(
                    move.topic, {move.partition: list(move.replicas)})
            except RafkaError as e:  # changed meanwhile: the next tick plans again
                self.core.logger.info("balancer: %s-%d not moved: %s", move.topic,
                                      move.partition, e)  # fmt: skip
                continue
            self.history.record(move, now)
            self.moves_started += 1
            self.core.logger.info("balancer (%s): %s-%d from broker %d to %d", move.goal.value,
                                  move.topic, move.partition, move.source, move.destination)

    async def _lead(self, lead: LeaderMove) -> None:
        """Make ``lead.leader`` the preferred replica, then elect it."""
        p = self.core.image.topic(lead.topic).partitions[lead.partition]
        if p.adding or p.removing or lead.leader not in p.isr:
            return
        order = [lead.leader] + [b for b in p.replicas if b != lead.leader]
        if order != list(p.replicas):
            await self.reassignments.reassign_partitions(lead.topic, {lead.partition: order})
        await self.changes.elect_leaders("preferred", lead.topic, [lead.partition])

    # -- admin ---------------------------------------------------------------------------------

    async def drain_broker(self, broker_id: int, draining: bool,
                           by: str = "admin") -> dict[str, Any]:  # fmt: skip
        """Record that ``broker_id`` is to be emptied (or no longer), then plan at once.
        ``by``: who asked ("autoscaler": the broker is to be retired once empty)."""
        if broker_id not in self.core.image.brokers:
            raise InvalidReplicaAssignment(
                f"broker {broker_id} is not registered; known brokers: "
                f"{sorted(self.core.image.brokers)}"
            )
        async with self.core.lock:
            image = self.core.image
            if draining and not set(image.brokers) - image.draining_brokers - {broker_id}:
                raise InvalidReplicaAssignment(
                    f"broker {broker_id} is the last broker not draining: its replicas would "
                    "have nowhere to go; add a disk node first"
                )
            if (broker_id in self.core.image.draining_brokers) != draining:
                self.core.store.append([{"type": "drain", "broker_id": broker_id,
                                         "draining": draining, "by": by}])  # fmt: skip
        if draining:
            await self.tick()
        return self.describe()

    async def rebalance(self, dry_run: bool) -> dict[str, Any]:
        """Plan with every goal; start it unless ``dry_run``. Returns the plan."""
        if dry_run:
            now = now_ms()
            async with self._round:
                result = plan(self.view(now), self.settings(), self.history, now, tuple(Goal))
        else:
            result = await self.tick(requested=True)
        return plan_to_dict(result)

    def describe(self) -> dict[str, Any]:
        """The mode, draining and dead brokers, moves in flight, what a plan with every goal
        would still find wrong, and per broker its replicas, leaderships, disk (capacity 0:
        not reported) and traffic as the goals count them (bytes/s: a partition's bytes in
        on every broker holding a replica of it, its bytes out on its leader's)."""
        now = now_ms()
        settings = self.settings()
        view = self.view(now)
        full = plan(view, settings, self.history, now, tuple(Goal))
        image = self.core.image
        return {
            "mode": settings.mode.value,
            "goals": [g.value for g in active_goals(settings.mode, self.balancing_node_add)],
            "balancing_node_add": self.balancing_node_add,
            "draining": sorted(image.draining_brokers),
            "dead": {b: now - t for b, t in sorted(self._dead_since.items())},
            "heal_after_ms": settings.heal_after_ms,
            "in_flight": [
                {"topic": p.topic, "partition": p.partition, "adding": list(p.adding),
                 "removing": list(p.removing), "isr": list(p.isr),
                 # since this controller first saw it (a stuck move shows here)
                 "for_ms": now - self._moving_since.get(p.key, now)}
                for p in view.partitions if p.moving
            ],  # fmt: skip
            "violations": {g.value: v for g, v in full.violations.items()},
            "pending": plan_to_dict(full),
            "moves_started": self.moves_started,
            "replicas": {b: sum(b in p.replicas for p in view.partitions)
                         for b in sorted(image.brokers)},  # fmt: skip
            "leaders": {b: sum(p.leader == b for p in view.partitions)
                        for b in sorted(image.brokers)},  # fmt: skip
            "disk_used": {b.broker_id: b.disk_used for b in view.brokers},
            "disk_capacity": {b.broker_id: b.disk_capacity for b in view.brokers},
            "bytes_in_per_s": {b: sum(p.bytes_in_per_s for p in view.partitions
                                      if b in p.replicas) for b in sorted(image.brokers)},
            "bytes_out_per_s": {b: sum(p.bytes_out_per_s for p in view.partitions
                                       if p.leader == b) for b in sorted(image.brokers)},
        }


def plan_to_dict(result: Plan) -> dict[str, Any]:
    """A plan as plain data (msgpack-friendly), for the admin client."""
    return {
        "moves": [_move_dict(m) for m in result.moves],
        "leader_moves": [{"topic": m.topic, "partition": m.partition, "leader": m.leader,
                          "goal": m.goal.value} for m in result.leader_moves],
        "violations": {g.value: v for g, v in result.violations.items()},
    }  # fmt: skip


def _move_dict(m: Move) -> dict[str, Any]:
    return {"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas),
            "source": m.source, "destination": m.destination, "goal": m.goal.value}
