"""Which replicas ``replication.throttled.rate`` throttles, and at what share of it.

As Kafka's replication quotas do for reassignments (KIP-73), only replicas that a move adds
are throttled, and only while they copy: a replica in ``adding`` and not in the ISR. In-sync
replicas (the ones acks=all and the high watermark wait for) and ordinary followers are never
throttled. Kafka's quota is per broker, on both ends: bytes a broker takes in for such
replicas, and bytes it sends to them as leader.

A broker's replicas live in several host actor processes (``replicas.per.actor``), so no one
process sees a broker's traffic. The approximation: the controller counts, from its metadata,
the replicas copying *into* each broker and *out of* each broker (as their partition's
leader), and tells each copying replica both counts in its state (``throttled_moves``: [into
its broker, out of its leader's broker]). Each such replica takes the broker's rate divided
by the larger count, with a token bucket of its own (``rafka.cluster.throttle``), enforced
where it fetches. Then for every broker the copying replicas' rates add up to at most the
rate, in and out, however they are packed into hosts, and no replica waits for another.
Why not a bucket per host shared by its copying replicas: hosts are a packing detail (one
replica each by default, so a host bucket is a replica bucket anyway), and dividing a broker's
rate among hosts needs the same counts from the controller plus a weight per host. What the
approximation gives up: a share left unused (a copy that waits on its leader, or ends before
the controller counts it out) is not lent to the others until the counts change. The leader
end is enforced by the follower too: a leader that held back its answers would hold back the
in-sync followers' answers batched with them (``ReplicaHost.replicate_many``), and with them
acks=all.

Counts go stale when another move starts or ends; the controller tells the copying replicas
whose counts changed again at once (``MoveCounts.changed``, ``copying_through``). Until a
replica hears, its share is the older one: too large when moves were added (briefly over the
rate), too small when moves ended.

Plain Python, no I/O; the controller calls ``count_moves`` once per metadata change, the
follower loop calls ``follower_rate`` before each fetch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, TypeVar

from rafka.cluster.metadata import PartitionState

#: The state field that carries a copying replica's counts: [into its broker, out of its
#: leader's broker]; None (or absent) for every other replica.
SHARE_FIELD = "throttled_moves"

T = TypeVar("T")


def copying(p: PartitionState) -> list[int]:
    """The replicas of ``p`` that copy its log for a move: being added, not in sync yet."""
    return [b for b in p.adding if b not in p.isr]


@dataclass(frozen=True)
class MoveCounts:
    """Replicas copying for moves, per broker: ``into`` counts them by their own broker,
    ``out_of`` by their partition's leader's broker."""

    into: dict[int, int] = field(default_factory=dict)
    out_of: dict[int, int] = field(default_factory=dict)

    def share(self, p: PartitionState, broker_id: int) -> list[int] | None:
        """[into ``broker_id``, out of ``p``'s leader's broker] for a copying replica of
        ``p``; None for any other replica."""
        if broker_id not in copying(p):
            return None
        return [self.into.get(broker_id, 0), self.out_of.get(p.leader, 0)]

    def changed(self, before: MoveCounts) -> set[int]:
        """The brokers whose counts differ from ``before``'s, either way."""
        return {b for mine, theirs in ((self.into, before.into), (self.out_of, before.out_of))
                for b in mine.keys() | theirs.keys()
                if mine.get(b, 0) != theirs.get(b, 0)}  # fmt: skip

    def copying_through(
        self, partitions: Iterable[tuple[T, PartitionState]], brokers: set[int]
    ) -> list[tuple[T, PartitionState, int]]:
        """(topic, partition, broker) of every copying replica among ``partitions`` (pairs
        of a topic and one of its partitions) whose share depends on ``brokers``: it copies
        into one of them, or from a leader on one."""
        return [(t, p, b) for t, p in partitions for b in copying(p)
                if b in brokers or p.leader in brokers]  # fmt: skip


def count_moves(partitions: Iterable[PartitionState]) -> MoveCounts:
    """The copying replicas of ``partitions``, counted per broker both ways."""
    into: dict[int, int] = {}
    out_of: dict[int, int] = {}
    for p in partitions:
        if not p.adding:  # most partitions: no move under way
            continue
        for b in copying(p):
            into[b] = into.get(b, 0) + 1
            out_of[p.leader] = out_of.get(p.leader, 0) + 1
    return MoveCounts(into, out_of)


def follower_rate(
    configured: int, state: Mapping[str, Any], broker_id: int, caught_up: bool
) -> int:
    """Bytes/s the fetches of ``broker_id``'s replica may take, 0 for no limit.
    ``configured`` is ``replication.throttled.rate`` (0: no limit), ``state`` the replica's
    partition state, ``caught_up`` whether its log reached the leader's high watermark at its
    last fetch (the leader may take it into the ISR then, so from there it is never held
    back, even before the controller's new ISR reaches it). At least 1 byte/s when limited."""
    if (configured <= 0 or caught_up or broker_id not in state.get("adding", ())
            or broker_id in state.get("isr", ())):  # fmt: skip
        return 0
    counts = state.get(SHARE_FIELD) or ()
    return max(1, configured // max([1, *counts]))
