"""Partition reassignments on the controller: start one, or cancel one under way.

Kafka's alterPartitionReassignments (KIP-455): a partition gets a new replica set; the
replicas it adds copy the log by following the leader, and once every one is in sync the
ones it removes are deleted (``rafka.cluster.elections.reassign`` and
``complete_reassignment``). Cancelling puts the partition back on its original replicas and
deletes the ones it was adding (``elections.cancel_reassignment``).

Part of the Controller actor, on its event loop. Each request is checked against every
partition it names before anything changes, then decided under the lock on the partitions'
current states (``PartitionChanges.change``): a partition changed meanwhile is decided as it
is then. Starting and deleting actors follows the append (``PartitionChanges``); a crash in
between is repaired by the reconcile.
"""

from __future__ import annotations

from rafka.actors.controller_core import (
    ControllerCore,
    min_insync_replicas,
    unclean_election_enabled,
)
from rafka.actors.partition_changes import PartitionChanges
from rafka.cluster import controller as decide
from rafka.cluster import elections
from rafka.cluster.metadata import PartitionState, TopicState
from rafka.errors import RafkaError


class Reassignments:
    """See the Controller methods of the same names."""

    def __init__(self, core: ControllerCore, changes: PartitionChanges):
        self.core = core
        self.changes = changes

    async def reassign_partitions(self, name: str, assignment: dict[int, list[int]]) -> None:
        image = self.core.image
        topic = image.topic(name)
        pairs = [(topic, decide.check_known(image, name, int(n))) for n in assignment]
        for _, p in pairs:  # check them all before changing any
            elections.reassign(p, list(assignment[p.partition]), image.brokers)

        def decide_one(t: TopicState, p: PartitionState) -> PartitionState | None:
            new = elections.reassign(p, list(assignment[p.partition]), self.core.image.brokers)
            if new is None:
                return None
            # A pure removal has nothing to copy and completes at once.
            done = elections.complete_reassignment(
                new, self.core.electable(t.topic_id, p.partition), unclean_election_enabled(t),
                min_insync_replicas(t),
            )
            if done is None:
                return new
            done.partition_epoch = new.partition_epoch  # one record, one bump
            return done

        await self._change(decide_one, pairs)

    async def cancel_reassignment(self, name: str, partitions: list[int] | None) -> None:
        image = self.core.image
        topic = image.topic(name)
        if partitions is None:
            pairs = [(topic, p) for _, p in sorted(topic.partitions.items())
                     if p.adding or p.removing]  # fmt: skip
        else:
            pairs = [(topic, decide.check_known(image, name, int(n))) for n in partitions]
        live = self.core.liveness.live()
        for t, p in pairs:  # check them all before changing any
            elections.cancel_reassignment(p, live, unclean_election_enabled(t))

        def decide_one(t: TopicState, p: PartitionState) -> PartitionState | None:
            return elections.cancel_reassignment(
                p, self.core.electable(t.topic_id, p.partition), unclean_election_enabled(t),
                min_insync_replicas(t),
            )

        await self._change(decide_one, pairs)

    async def _change(self, decide_one, pairs) -> None:
        """``PartitionChanges.change`` over ``pairs``; a refusal decided on a partition's
        current state (it changed after the checks) is raised once the rest are recorded."""
        refused: list[RafkaError] = []

        def guarded(t: TopicState, p: PartitionState) -> PartitionState | None:
            try:
                return decide_one(t, p)
            except RafkaError as e:
                refused.append(e)
                return None

        await self.changes.change(guarded, only=pairs)
        if refused:
            raise refused[0]
