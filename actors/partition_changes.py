"""Partition state changes: decide, append, then tell the replicas.

Every change of a partition's leader, ISR, epochs or replica set goes through ``change``: a
decision function from ``rafka.cluster.elections`` (plain Python) is applied to the
partitions, the changed states are appended to the metadata log in one append under the
controller's lock, and only then are the replicas told (and replicas a reassignment adds or
removes are created or deleted). The requests that lead to changes live here too: a
replica's check-in after a restart, a leader's ISR proposal, elections and reassignments on
demand, and the periodic preferred-leader balance.

Part of the Controller actor, on its event loop. Durable state is the metadata log, replica
epochs included (which life of a replica checked in last), so a controller restart forgets
none. Pushes are not retried: a replica that missed one pulls its state
(``partition_state``), and the reconcile (``rafka.actors.reconcile``) pushes every state
again at start and periodically. Reassignments are in ``rafka.actors.reassignments``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from rafka.actors import metrics
from rafka.actors.broker_calls import BrokerCalls
from rafka.actors.controller_core import (
    ControllerCore,
    min_insync_replicas,
    unclean_election_enabled,
)
from rafka.cluster import controller as decide
from rafka.cluster import elections, node_restarts
from rafka.cluster.metadata import NO_LEADER, PartitionState, TopicState
from rafka.cluster.settings import setting
from rafka.errors import (
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidReplicaAssignment,
    PreferredLeaderNotAvailable,
    RafkaError,
    UnknownTopicOrPartition,
)

#: How often the partition health gauges (under-replicated, offline) are refreshed besides
#: after every change, s: a broker's liveness changes without a metadata change.
HEALTH_GAUGES_INTERVAL_S = 5.0

#: ``decide_one(topic, partition) -> new state | None`` (None or an equal state: no change).
DecideOne = Callable[[TopicState, PartitionState], "PartitionState | None"]


class PartitionChanges:
    """Changes to partition states, and the calls that ask for them."""

    def __init__(self, core: ControllerCore, calls: BrokerCalls):
        self.core = core
        self.calls = calls
        self._health_reported: set[str] = set()  # topics with health gauges set

    async def change(
        self, decide_one: DecideOne, only=None, preferred: bool = False, before=None
    ) -> int:
        """Apply ``decide_one(topic, partition) -> new state | None`` to every partition (or
        to the partitions of the (topic, partition) pairs in ``only``), record the changes in
        one append, and tell the replicas. Returns the number of partitions changed.
        ``preferred``: the changes are preferred-leader elections (for the election metrics).
        ``before()``, if given, runs first under the lock and returns records applied before
        the decisions and appended with them (one durable step).

        Every decision is made on the partition as it is once the lock is held (a pair in
        ``only`` names the partition; its state may be stale by then), and a partition that
        is gone by then is skipped."""
        core = self.core
        async with core.lock:
            extra = before() if before is not None else []
            changed = []
            if only is not None:
                pairs = []
                for topic, p in only:
                    current_topic, current = self.find_partition(topic.topic_id, p.partition)
                    if current is not None:
                        pairs.append((current_topic, current))
            else:
                pairs = [(t, p) for t in core.image.topics.values()
                         for p in t.partitions.values()]  # fmt: skip
            for topic, p in pairs:
                new = decide_one(topic, p)
                if new is not None and new != p:
                    changed.append((topic, p, new))
            if not changed and not extra:
                return 0
            core.store.append(extra + [new.to_record(t.topic_id) for t, _, new in changed])
            for topic, old, new in changed:
                if new.leader != old.leader:
                    core.logger.warning("%s-%d: leader %d -> %d (epoch %d, ISR %s)",
                                        topic.name, new.partition, old.leader, new.leader,
                                        new.leader_epoch, new.isr)  # fmt: skip
        for topic, old, new in changed:
            metrics.partition_change(topic.name, new.partition, old, new, preferred)
            self._after_change(topic, old, new)
        self.refresh_health_gauges()
        return len(changed)

    def _after_change(self, topic: TopicState, old: PartitionState, new: PartitionState) -> None:
        """Tell the replicas of a changed partition; create replicas a reassignment adds and
        delete the ones a finished reassignment removed."""
        calls = self.calls
        calls.push_state(topic, new)
        added = [b for b in new.replicas if b not in old.replicas]
        if added:
            self.core.spawn(self._create_added(topic, new, added))
        removed = [b for b in old.replicas if b not in new.replicas]
        for b in removed:
            self.core.spawn(calls.delete_replica(topic, old, b))

    def electable_or_starting(self, topic_id: str, p: PartitionState) -> set[int]:
        """The replicas of ``p`` that may be elected now, and its leader if its replica is
        starting (a new topic's: it leads as soon as it runs, and is not replaced)."""
        live = self.core.electable(topic_id, p.partition)
        if p.leader != NO_LEADER and self.calls.starting(topic_id, p.partition, p.leader):
            live = live | {p.leader}
        return live

    async def elect_where_leaderless(self, only=None, before=None) -> int:
        """Elect a leader for every partition (of ``only``'s (topic, partition) pairs) that
        has none, or whose leader's broker speaks but whose leader replica may not lead
        there (its actor could not be started, or its node restarted and it has not checked
        in), from the replicas that may lead now: after replica actors were created (a
        replica is electable once it runs where its broker runs). A leader whose broker has
        not spoken since this controller started keeps leading, and so does one that may be
        starting still (see ``BrokerCalls.may_be_starting``). ``before``: as for
        ``change``."""
        core, calls = self.core, self.calls

        def decide_one(t: TopicState, q: PartitionState) -> PartitionState | None:
            if q.leader != NO_LEADER and (
                q.leader not in core.heard
                or calls.may_be_starting(t.topic_id, q.partition, q.leader)
                or q.leader in core.electable(t.topic_id, q.partition)
            ):
                return None
            return elections.elect_if_leaderless(
                q, core.electable(t.topic_id, q.partition), unclean_election_enabled(t),
                min_insync_replicas(t),
            )

        return await self.change(decide_one, only=only, before=before)

    async def _create_added(self, topic: TopicState, p: PartitionState, added: list[int]):
        """Start the replicas a reassignment adds; one that cannot be started now (the
        failure is logged) is created by the next reconcile, or cancelled with the
        reassignment."""
        calls = self.calls
        await calls.ensure({b: [calls.replica_state(topic, p, b)] for b in added}, new=True)

    # -- health gauges -------------------------------------------------------------------------

    def refresh_health_gauges(self) -> None:
        """Set each topic's under-replicated and offline partition counts (a pass over the
        partitions in memory); a deleted topic's go to 0, since Ray keeps exporting a
        gauge's last value."""
        reported = set()
        for topic in list(self.core.image.topics.values()):
            under, offline = metrics.partition_health(
                topic.partitions.values(), self.core.liveness.is_live
            )
            metrics.topic_health(topic.name, under, offline)
            reported.add(topic.name)
        for gone in self._health_reported - reported:
            metrics.topic_health(gone, 0, 0)
        self._health_reported = reported

    async def report_health(self) -> None:
        while not self.core.stopping:
            try:
                self.refresh_health_gauges()
            except Exception:  # a metric must never stop the controller; next round
                self.core.logger.exception("refreshing the partition health gauges failed")
            await asyncio.sleep(HEALTH_GAUGES_INTERVAL_S)

    # -- what replicas ask -----------------------------------------------------------------------

    def find_partition(self, topic_id: str, partition: int):
        """(topic, partition state), either None when unknown."""
        topic = self.core.image.topics.get(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        return topic, p

    async def replica_started(
        self, topic_id: str, partition: int, broker_id: int, clean: bool,
        position: tuple[int, int] | None, node_id: str | None = None,
    ) -> tuple[dict | None, bool, int]:  # fmt: skip
        """See ``Controller.replica_started`` (which also counts it as a heartbeat)."""
        core = self.core
        topic, p = self.find_partition(topic_id, partition)
        if not core.image.knows_topic(topic_id):
            # Not deleted here: this metadata never knew the topic (another metadata log's?):
            # the replica keeps its data and asks again.
            core.logger.info("a check-in of topic id %s, unknown to this metadata", topic_id)
            return None, True, -1
        if p is None or broker_id not in p.replicas:
            return None, False, -1
        known = core.image.broker_nodes.get(broker_id)
        if node_id is not None and known is not None and node_id != known:
            # A new node for the broker, or a late check-in of a dead life on the old one:
            # only the broker's agent tells which; without its answer, the replica retries.
            agent_node = await self.calls.agent_node(broker_id)
            if agent_node != node_id:
                core.logger.warning("%s-%d: a check-in of broker %d from node %s, whose agent "
                                    "runs on %s; not taken", topic.name, partition, broker_id,
                                    node_id, agent_node)  # fmt: skip
                return None, True, -1
            await self.broker_seen_on(broker_id, node_id)
        elif node_id is not None and known is None:
            await self.broker_seen_on(broker_id, node_id)
        epoch_of: list[int] = []

        def record_start():
            # Under the lock, with the decision: recorded before the replica hears it (its
            # fetches carry it from now on), and never electable before its mark is applied.
            if node_id is not None and core.image.broker_nodes.get(broker_id) != node_id:
                return []  # the broker moved again meanwhile: the replica retries
            _, current = self.find_partition(topic_id, partition)
            if current is None or broker_id not in current.replicas:
                return []  # deleted or moved away meanwhile: answered below
            replica_epoch, records = decide.start_replica(core.image, topic_id, partition,
                                                          broker_id, node_id)  # fmt: skip
            epoch_of.append(replica_epoch)
            return records

        def decide_one(t, q):
            if not epoch_of:
                return None
            return elections.replica_restarted(
                q, broker_id, core.electable(topic_id, partition) | {broker_id},
                unclean_election_enabled(t), clean, position, min_insync_replicas(t),
            )

        await self.change(decide_one, only=[(topic, p)], before=record_start)
        topic, p = self.find_partition(topic_id, partition)
        if p is None or broker_id not in p.replicas:
            return None, False, -1
        if not epoch_of:
            return None, True, -1
        return self.calls.replica_state(topic, p, broker_id), True, epoch_of[0]

    async def broker_seen_on(self, broker_id: int, node_id: str) -> None:
        """The broker's agent, or one of its replicas, runs on Ray node ``node_id``. On a new
        node (its node restarted) the broker's replicas may have lost their unflushed tails:
        they leave every ISR, leadership moves, and none is elected until it checks in from
        there (``rafka.cluster.node_restarts``)."""
        core = self.core
        if core.image.broker_nodes.get(broker_id) == node_id:
            return  # the usual heartbeat: no lock, no record
        async with core.lock:
            kind, records = node_restarts.broker_seen_on(core.image, broker_id, node_id)
            core.store.append(records)
        if kind != node_restarts.MOVED:
            return
        core.logger.warning("broker %d is on a new node; its replicas leave the ISRs until "
                            "they check in", broker_id)  # fmt: skip
        await self.change(
            lambda t, q: elections.fence_broker(
                q, broker_id, core.electable(t.topic_id, q.partition) - {broker_id},
                unclean_election_enabled(t), min_insync_replicas(t),
            ) if broker_id in q.replicas else None
        )  # fmt: skip

    async def replica_failed(
        self, topic_id: str, partition: int, broker_id: int, replica_epoch: int, reason: str
    ) -> None:
        """See ``Controller.replica_failed``."""
        topic, p = self.find_partition(topic_id, partition)
        if p is None or broker_id not in p.replicas:
            return
        if decide.replica_epochs_of(self.core.image, topic_id, partition).get(
            broker_id, -1
        ) > replica_epoch:
            return  # a report from an earlier life of the replica
        self.core.logger.warning("%s-%d: the replica on broker %d failed (%s); it leaves the ISR",
                                 topic.name, partition, broker_id, reason)  # fmt: skip
        core = self.core
        await self.change(
            lambda t, q: elections.replica_failed(
                q, broker_id, core.electable(topic_id, partition) - {broker_id},
                unclean_election_enabled(t), min_insync_replicas(t),
            ),
            only=[(topic, p)],
        )  # fmt: skip

    async def replicas_failed(self, broker_id: int, keys: list, reason: str) -> int:
        """Replicas of ``broker_id`` (``[topic id, partition, replica epoch of the life that
        failed]`` each) failed together (their host actor died): each leaves
        the ISR, and where one led, a leader is elected from the rest of the ISR, as for a
        fenced broker; they rejoin by checking in and catching up. Returns how many
        partitions changed."""
        core = self.core
        image = core.image
        # A life (replica epoch) older than the one recorded: the replica restarted and
        # checked in again since; -1: the life is not known.
        wanted = {(t, p) for t, p, *life in keys if not life or life[0] < 0
                  or decide.replica_epochs_of(image, t, p).get(broker_id, -1) <= life[0]}
        only = [(topic, p) for topic in list(image.topics.values())
                for p in topic.partitions.values()
                if (topic.topic_id, p.partition) in wanted and broker_id in p.replicas]  # fmt: skip
        if not only:
            return 0
        core.logger.warning("%d replica(s) of broker %d failed (%s); they leave their ISRs",
                            len(only), broker_id, reason)  # fmt: skip
        for topic, p in only:  # its host is new, or restarted: a fresh handle
            self.calls.forget_replica(topic.topic_id, p.partition, broker_id)
        return await self.change(
            lambda t, q: elections.fence_broker(
                q, broker_id, core.electable(t.topic_id, q.partition) - {broker_id},
                unclean_election_enabled(t), min_insync_replicas(t),
            ),
            only=only,
        )  # fmt: skip

    def partition_state(self, topic_id: str, partition: int, broker_id: int) -> dict | None:
        """The current state of a partition, as its replica on ``broker_id`` sees it."""
        topic, p = self.find_partition(topic_id, partition)
        if p is None or broker_id not in p.replicas:
            return None
        return self.calls.replica_state(topic, p, broker_id)

    async def alter_isr(
        self, topic_id: str, partition: int, leader: int, leader_epoch: int,
        partition_epoch: int, new_isr: list[int], incarnations: dict | None,
    ) -> tuple[int, str, dict | None]:  # fmt: skip
        """See ``Controller.alter_isr``."""
        topic, p = self.find_partition(topic_id, partition)
        if p is None:
            return UnknownTopicOrPartition.errno, "the partition no longer exists", None
        refusal: list[RafkaError] = []
        to_confirm: list[tuple[int, int]] = []  # (broker, its recorded replica epoch)

        def decide_one(t, q):
            current = decide.replica_epochs_of(self.core.image, topic_id, partition)
            try:
                # Joiners and a leader chosen when a reassignment completes come from the
                # brokers that may be elected (heard since this controller started, and
                # checked in from their current node), as every other election does.
                return elections.alter_isr(
                    q, leader, leader_epoch, partition_epoch, new_isr,
                    self.core.electable(topic_id, partition), incarnations, current,
                    min_insync_replicas(t),
                )
            except RafkaError as e:
                refusal.append(e)
                # A joiner seen in an older replica epoch than the recorded one is asked to
                # confirm it: if it runs in the older one, the record came from a dead life's
                # late check-in, and it would otherwise never join again.
                to_confirm.extend(
                    (b, current[b]) for b in elections.joiners_seen_in_an_earlier_life(
                        q, new_isr, incarnations, current)
                )  # fmt: skip
                return None

        await self.change(decide_one, only=[(topic, p)])
        topic, p = self.find_partition(topic_id, partition)
        state = self.calls.replica_state(topic, p, leader) if p is not None else None
        if p is not None:
            for b, recorded in to_confirm:
                self.calls.confirm_replica_epoch(topic, p, b, recorded)
        if refusal:
            return refusal[0].errno, str(refusal[0]), state
        return 0, "", state

    # -- what operators ask ----------------------------------------------------------------------

    async def elect_leaders(
        self, election_type: str, topic: str | None, partitions: list[int] | None
    ) -> list[dict[str, Any]]:
        """See ``Controller.elect_leaders``."""
        if election_type not in ("preferred", "unclean"):
            raise InvalidReplicaAssignment(
                f"election type {election_type!r} is unknown; use 'preferred' or 'unclean'"
            )
        image = self.core.image
        topics = [image.topic(topic)] if topic is not None else [
            t for t in image.topics.values()
        ]  # fmt: skip
        pairs = []
        for t in topics:
            for number in partitions if partitions is not None else sorted(t.partitions):
                pairs.append((t, decide.check_known(image, t.name, number)))
        outcome: dict[tuple[str, int], RafkaError | None] = {}

        def decide_one(t, p):
            live = self.electable_or_starting(t.topic_id, p)
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
                new = elections.elect_if_leaderless(p, live, True, min_insync_replicas(t))
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

        await self.change(decide_one, only=pairs, preferred=election_type == "preferred")
        results = []
        for t, p in pairs:
            error = outcome.get((t.topic_id, p.partition))
            _, current = self.find_partition(t.topic_id, p.partition)
            if current is None:  # deleted while the election waited
                error = UnknownTopicOrPartition(f"{t.name}-{p.partition} no longer exists")
                current = p
            results.append({
                "topic": t.name, "partition": p.partition, "leader": current.leader,
                "errno": error.errno if error else 0, "message": str(error) if error else "",
            })  # fmt: skip
        return results

    async def balance_leaders(self) -> None:
        """Kafka's auto.leader.rebalance.enable: move leadership back to preferred replicas."""
        settings = self.core.settings
        interval = setting(settings, "leader.imbalance.check.interval.seconds")
        while setting(settings, "auto.leader.rebalance.enable"):
            await asyncio.sleep(interval)
            try:
                await self.change(
                    lambda topic, p: elections.preferred_leader(
                        p, self.core.electable(topic.topic_id, p.partition)
                    ),
                    preferred=True,
                )
            except Exception:  # the next round tries again
                self.core.logger.exception("preferred leader election failed")
