"""The controller's side of ``replication.throttled.rate``: what it tells copying replicas.

Each replica that a move adds, while it copies, is told in its state how many moves copy into
its broker and out of its leader's (``rafka.cluster.replication_quota``: the share of the
broker's rate it may take). The counts come from the metadata, counted once per metadata
change. When they change (a move starts, ends or catches up), the copying replicas whose
share depends on a changed broker must hear it, not only the replicas of the partition that
changed: ``to_tell_again`` names them, once per round of state pushes.

Part of the Controller actor (``BrokerCalls``), on its event loop; nothing is persisted: a
new controller counts from its metadata, and its reconcile pushes every state at start.
"""

from __future__ import annotations

from rafka.actors.controller_core import ControllerCore
from rafka.cluster.metadata import PartitionState, TopicState
from rafka.cluster.replication_quota import MoveCounts, count_moves


class MoveShares:
    """Move counts of ``core``'s metadata, and the replicas to tell when they change."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        self._counted: tuple[tuple[int, int], MoveCounts] | None = None  # (image id, offset)
        self._told: MoveCounts | None = None  # as of the last round of pushes

    def counts(self) -> MoveCounts:
        """The copying replicas per broker, both ways: a pass over the partitions in memory
        (about 7 ms for 20,000 partitions on the dev machine), once per metadata change."""
        image = self.core.image
        key = (id(image), image.offset)
        if self._counted is None or self._counted[0] != key:
            partitions = (p for t in image.topics.values() for p in t.partitions.values())
            self._counted = (key, count_moves(partitions))
        return self._counted[1]

    def share(self, p: PartitionState, broker_id: int) -> list[int] | None:
        """What ``broker_id``'s replica of ``p`` is told: [moves into its broker, moves out
        of its leader's broker] while it copies for a move, else None."""
        return self.counts().share(p, broker_id)

    def to_tell_again(
        self, queued: set[tuple[str, int, int]]
    ) -> list[tuple[TopicState, PartitionState, int]]:
        """(topic, partition, broker) of the copying replicas whose share changed since the
        last call, but those in ``queued`` ((topic id, partition, broker) already being
        told). The first call only notes the counts."""
        counts, told = self.counts(), self._told
        self._told = counts
        changed = counts.changed(told) if told is not None else set()
        if not changed:
            return []
        pairs = [(t, p) for t in self.core.image.topics.values() for p in t.partitions.values()
                 if p.adding]  # fmt: skip
        return [(t, p, b) for t, p, b in counts.copying_through(pairs, changed)
                if (t.topic_id, p.partition, b) not in queued]  # fmt: skip
