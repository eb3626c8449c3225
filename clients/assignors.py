"""Consumer-group partition assignors, run by the group leader: range, roundrobin, sticky and
cooperative-sticky, with Kafka's semantics and protocol names. Pure Python: no Ray, no I/O.

Contract of ``Assignor.assign(partitions_per_topic, subscriptions)``:

- Input: the partition count of every existing topic, and each member's ``Subscription``.
  Topics a member subscribes to but absent from ``partitions_per_topic`` are ignored (they do
  not exist yet); a negative partition count raises ``ValueError``.
- Output: member id -> its partitions, sorted by (topic, partition). Every member id is a key,
  possibly with an empty list; a member only gets partitions of topics it subscribes to.
- Eager assignors give every partition of every subscribed topic to exactly one member. The
  cooperative assignor gives each at most once per round, never to a member while another
  member claims it, and exactly once after the follow-up round (same subscriptions and topics,
  each member owning what it was given).
- Deterministic: the result depends on the values of the input, never on the order of the
  ``subscriptions`` dict or on randomness.

Member order (range and roundrobin deal in it; sticky breaks ties with it) follows Kafka's
MemberInfo: static members (with a ``group_instance_id``) first, sorted by instance id, so their
assignment survives restarts under new member ids; then dynamic members sorted by member id.
Member id breaks the (invalid) tie of two members sharing an instance id.

Ownership claims (sticky assignors): a member's ``owned_partitions`` count only for topics it
still subscribes to and partitions that still exist. When several members claim one partition
the claim with the highest ``generation`` holds; if two or more tie at the highest, every claim
on that partition is dropped (nobody is known to own it). Kafka's equal-subscription path is
stricter (it ignores all claims of members behind the highest generation); per-partition
resolution keeps more of a stale member's undisputed partitions and is otherwise the same.
"""

from __future__ import annotations

import abc
import inspect
from collections import deque
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from rafka.errors import InvalidConfig
from rafka.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "DEFAULT_STRATEGY",
    "EAGER",
    "Assignor",
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "make_assignors",
    "rebalance_protocol",
    "revoked_partitions",
]

EAGER = "eager"
COOPERATIVE = "cooperative"
DEFAULT_STRATEGY = ("range", "cooperative-sticky")


class Subscription(NamedTuple):
    """What one member sends when it joins: the topics it wants, the partitions it owned in
    ``generation`` (-1: none/unknown), its static group.instance.id (None for dynamic members),
    and opaque user data."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: str | None = None
    user_data: bytes | None = None


class _Group:
    """The validated input every assignor works from."""

    def __init__(self, partitions_per_topic: Mapping[str, int],
                 subscriptions: Mapping[str, Subscription]) -> None:
        for topic, count in partitions_per_topic.items():
            if count < 0:
                raise ValueError(f"topic {topic!r} has a negative partition count ({count})")
        self.counts = dict(partitions_per_topic)
        self.subscriptions = subscriptions
        self.order = sorted(subscriptions, key=lambda m: _member_key(m, subscriptions[m]))
        self.rank = {m: i for i, m in enumerate(self.order)}
        # Existing topics each member subscribes to, and the members of each topic in order.
        self.topics = {m: frozenset(t for t in subscriptions[m].topics if t in self.counts)
                       for m in self.order}
        self.members_of: dict[str, list[str]] = {}
        for m in self.order:
            for topic in sorted(self.topics[m]):
                self.members_of.setdefault(topic, []).append(m)

    def partitions(self) -> list[TopicPartition]:
        """Every partition of every topic some member subscribes to, sorted."""
        return [TopicPartition(t, p)
                for t in sorted(self.members_of) for p in range(self.counts[t])]

    def claimants(self) -> dict[TopicPartition, set[str]]:
        """partition -> every member that claims to own it, whatever its generation or
        subscription."""
        out: dict[TopicPartition, set[str]] = {}
        for m in self.order:
            for tp in map(_as_tp, self.subscriptions[m].owned_partitions):
                out.setdefault(tp, set()).add(m)
        return out

    def valid_owners(self) -> dict[TopicPartition, str]:
        """partition -> the member whose claim on it holds (see the module docstring)."""
        claims: dict[TopicPartition, list[tuple[int, str]]] = {}
        for m in self.order:
            sub = self.subscriptions[m]
            for tp in set(map(_as_tp, sub.owned_partitions)):
                if tp.topic in self.topics[m] and 0 <= tp.partition < self.counts[tp.topic]:
                    claims.setdefault(tp, []).append((sub.generation, m))
        owners = {}
        for tp, claimants in claims.items():
            claimants.sort(key=lambda c: -c[0])
            if len(claimants) == 1 or claimants[0][0] > claimants[1][0]:
                owners[tp] = claimants[0][1]
        return owners


def _member_key(member_id: str, sub: Subscription) -> tuple:
    if sub.group_instance_id is not None:
        return (0, sub.group_instance_id, member_id)
    return (1, "", member_id)


def _as_tp(tp) -> TopicPartition:
    return tp if isinstance(tp, TopicPartition) else TopicPartition(*tp)


class Assignor(abc.ABC):
    """Base class: ``name`` is the protocol name sent in JoinGroup; ``rebalance_protocol`` is
    "eager" (members revoke everything before joining) or "cooperative" (members keep what they
    own and revoke only what the assignment takes away)."""

    name: str = ""
    rebalance_protocol: str = EAGER

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """member id -> partitions (sorted by topic, partition). Every member id of
        ``subscriptions`` is a key (possibly with an empty list). Topics subscribed to but
        missing from ``partitions_per_topic`` are ignored (they do not exist yet)."""
        group = _Group(partitions_per_topic, subscriptions)
        result = self._assign(group)
        return {m: sorted(result.get(m, ())) for m in group.order}

    @abc.abstractmethod
    def _assign(self, group: _Group) -> Mapping[str, Iterable[TopicPartition]]:
        """The assignment of ``group`` (member id -> partitions), by this strategy."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RangeAssignor(Assignor):
    """Per topic, the subscribed members in member order each get a contiguous range of
    partitions; the first ``count % members`` get one extra."""

    name = "range"

    def _assign(self, group):
        result: dict[str, list[TopicPartition]] = {m: [] for m in group.order}
        for topic, members in group.members_of.items():
            per_member, extra = divmod(group.counts[topic], len(members))
            start = 0
            for i, m in enumerate(members):
                end = start + per_member + (1 if i < extra else 0)
                result[m].extend(TopicPartition(topic, p) for p in range(start, end))
                start = end
        return result


class RoundRobinAssignor(Assignor):
    """All partitions sorted by (topic, partition) are dealt one at a time around the members in
    member order, skipping members not subscribed to the partition's topic."""

    name = "roundrobin"

    def _assign(self, group):
        result: dict[str, list[TopicPartition]] = {m: [] for m in group.order}
        members, i = group.order, 0
        for tp in group.partitions():  # only topics with a subscriber, so the scan ends
            while tp.topic not in group.topics[members[i]]:
                i = (i + 1) % len(members)
            result[members[i]].append(tp)
            i = (i + 1) % len(members)
        return result


class StickyAssignor(Assignor):
    """Balanced, and keeps as many owned partitions in place as balance allows.

    With identical subscriptions (members subscribed to no existing topic aside), the exact
    algorithm: each member keeps up to its quota of owned partitions (``P // M``, or one more
    for at most ``P % M`` members, given first to members that own that many), then the free
    partitions, sorted, fill members up to the minimum quota and then one extra each, in member
    order. That keeps the largest number of owned partitions any balanced assignment can.

    Otherwise (Kafka's general case): keep every valid owned partition; give each free
    partition (those with the fewest eligible members first) to its least-loaded eligible
    member; then rebalance, moving free partitions before owned ones, until the assignment is
    as balanced as the subscriptions allow (see ``_Balancer``), which single moves alone can
    stop short of (A on t0 with 3, B on t0 and t1 with 2, C on t1 with 1: it takes A -> B -> C).
    """

    name = "sticky"

    def _assign(self, group):
        return self._target(group, group.valid_owners())

    def _target(self, group: _Group, owners: dict[TopicPartition, str]):
        members = [m for m in group.order if group.topics[m]]
        if len({group.topics[m] for m in members}) <= 1:
            return _constrained(group, members, owners)
        return _general(group, owners)


class CooperativeStickyAssignor(StickyAssignor):
    """The sticky target, minus every partition another member claims: its owner revokes it,
    rejoins, and the next rebalance hands it to its new member (KIP-429). A partition stays
    only with its valid owner (see the module docstring). Every other claim holds a partition
    back too (a claim on a topic the member no longer subscribes to, two claims of one
    generation): a member that claims a partition may still be reading it, so nobody else
    gets it while anyone else claims it (Kafka's computePartitionsTransferringOwnership)."""

    name = "cooperative-sticky"
    rebalance_protocol = COOPERATIVE

    def _assign(self, group):
        owners = group.valid_owners()
        target = self._target(group, owners)
        claimants = group.claimants()
        return {m: [tp for tp in tps if owners.get(tp) == m or claimants.get(tp, {m}) == {m}]
                for m, tps in target.items()}  # fmt: skip


def _constrained(group: _Group, members: list[str], owners: dict[TopicPartition, str]):
    result: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return result
    partitions = group.partitions()
    min_quota, extra = divmod(len(partitions), len(members))
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp, m in sorted(owners.items()):
        owned[m].append(tp)
    slots = extra  # members that may still reach min_quota + 1
    for m in members:
        keep = min(len(owned[m]), min_quota)
        if slots and len(owned[m]) > min_quota:
            keep, slots = min_quota + 1, slots - 1
        result[m] = owned[m][:keep]
    kept = {tp for tps in result.values() for tp in tps}
    free = iter([tp for tp in partitions if tp not in kept])
    for m in members:
        while len(result[m]) < min_quota:
            result[m].append(next(free))
    for m in members:
        if not slots:
            break
        if len(result[m]) == min_quota:
            result[m].append(next(free))
            slots -= 1
    return result


def _general(group: _Group, owners: dict[TopicPartition, str]):
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in group.order}
    for tp, m in owners.items():
        assigned[m].add(tp)
    load = {m: len(tps) for m, tps in assigned.items()}
    free = [tp for tp in group.partitions() if tp not in owners]
    free.sort(key=lambda tp: (len(group.members_of[tp.topic]), tp))
    for tp in free:
        m = min(group.members_of[tp.topic], key=lambda m: (load[m], group.rank[m]))
        assigned[m].add(tp)
        load[m] += 1
    _Balancer(group, assigned, load, owners, set(free).__contains__).run()  # owned ones stay
    _Balancer(group, assigned, load, owners, lambda tp: True).run()
    return assigned


class _Balancer:
    """Moves ``movable`` partitions until no *cost-reducing path* is left: no chain of moves
    (member u hands a partition of topic t to a subscriber of t, which hands one on, ...) from
    u to a member with two or more fewer partitions. Such an assignment minimises the sum of
    squared loads and the largest load over all assignments that leave the other partitions
    where they are (Harvey et al., "Semi-matchings for bipartite graphs and load balancing").

    Run with only the free partitions movable, then with all: the owned partitions move only
    if balance needs it. That also makes cooperative rounds converge: round two starts from
    round one's optimum minus the partitions in transit, and placing those in transit
    reaches an optimum again, so no owned partition moves and nothing waits for a third round.

    Cost: cheap single moves (per member and topic, to the least-loaded subscriber) do the
    bulk; each path search is then a breadth-first search over members that expands each
    topic once, O(M * T), and every move lowers the sum of squared loads by at least two.
    """

    def __init__(self, group, assigned, load, owners, movable) -> None:
        self.group, self.assigned, self.load, self.owners = group, assigned, load, owners
        self.pools: dict[str, dict[str, set[TopicPartition]]] = {m: {} for m in group.order}
        for m, tps in assigned.items():
            for tp in filter(movable, tps):
                self.pools[m].setdefault(tp.topic, set()).add(tp)

    def run(self) -> None:
        self._single_moves()
        while path := self._cost_reducing_path():
            for giver, topic, taker in path:  # from the far end: each gives before it takes
                self._move(giver, topic, taker)

    def _by_load(self) -> list[str]:
        return sorted(self.group.order, key=lambda m: (-self.load[m], self.group.rank[m]))

    def _move(self, giver: str, topic: str, taker: str) -> None:
        pool = self.pools[giver][topic]
        tp = min(pool, key=lambda tp: (self.owners.get(tp) == giver, tp))  # not its own first
        pool.remove(tp)
        if not pool:
            del self.pools[giver][topic]
        self.pools[taker].setdefault(topic, set()).add(tp)
        self.assigned[giver].remove(tp)
        self.assigned[taker].add(tp)
        self.load[giver] -= 1
        self.load[taker] += 1

    def _single_moves(self) -> None:
        load, rank = self.load, self.group.rank
        moved = True
        while moved:
            moved = False
            for m in self._by_load():
                for topic in sorted(self.pools[m]):
                    while topic in self.pools[m]:
                        taker = min(self.group.members_of[topic], key=lambda w: (load[w], rank[w]))
                        if load[m] - load[taker] < 2:
                            break
                        self._move(m, topic, taker)
                        moved = True

    def _cost_reducing_path(self) -> list[tuple[str, str, str]]:
        load = self.load
        floor = min((load[m] for ms in self.group.members_of.values() for m in ms), default=0)
        for source in self._by_load():
            if load[source] - floor < 2:
                return []
            parent: dict[str, tuple[str, str] | None] = {source: None}
            expanded: set[str] = set()
            queue = deque([source])
            while queue:
                giver = queue.popleft()
                for topic in sorted(self.pools[giver].keys() - expanded):
                    expanded.add(topic)
                    for taker in self.group.members_of[topic]:
                        if taker in parent:
                            continue
                        parent[taker] = (giver, topic)
                        if load[taker] <= load[source] - 2:
                            path = []
                            while parent[taker] is not None:
                                giver, topic = parent[taker]
                                path.append((giver, topic, taker))
                                taker = giver
                            return path
                        queue.append(taker)
        return []


ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}

# Kafka's partition.assignment.strategy takes class names; accept them as aliases.
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def make_assignors(strategy=DEFAULT_STRATEGY) -> list[Assignor]:
    """The assignors of ``strategy``, in preference order: a name (or comma-separated names),
    an Assignor instance or class, or a list of those. Unknown names, an empty strategy and a
    name given twice raise ``InvalidConfig``."""
    items = [strategy] if isinstance(strategy, (str, Assignor, type)) else strategy
    try:
        items = list(items)
    except TypeError:
        raise InvalidConfig(f"partition.assignment.strategy: cannot use {strategy!r}") from None
    assignors: list[Assignor] = []
    for item in items:
        if isinstance(item, str):
            for name in filter(None, (part.strip() for part in item.split(","))):
                cls = ASSIGNORS.get(_JAVA_NAMES.get(name, name))
                if cls is None:
                    raise InvalidConfig(f"partition.assignment.strategy: unknown assignor "
                                        f"{name!r}; known: {', '.join(ASSIGNORS)}")
                assignors.append(cls())
        elif isinstance(item, Assignor):
            assignors.append(item)
        elif isinstance(item, type) and issubclass(item, Assignor):
            if inspect.isabstract(item):
                raise InvalidConfig(
                    f"partition.assignment.strategy: {item.__name__} is abstract; give a "
                    f"subclass that implements _assign, or one of {', '.join(ASSIGNORS)}"
                )
            assignors.append(item())
        else:
            raise InvalidConfig(f"partition.assignment.strategy: {item!r} is not an assignor")
    if not assignors:
        raise InvalidConfig("partition.assignment.strategy must name at least one assignor")
    names = [a.name for a in assignors]
    if not all(names):
        raise InvalidConfig(f"partition.assignment.strategy: an assignor has no name: {assignors}")
    if len(set(names)) != len(names):
        raise InvalidConfig(f"partition.assignment.strategy names an assignor twice: {names}")
    return assignors


def rebalance_protocol(assignors: Iterable[Assignor]) -> str:
    """The protocol every assignor supports: "cooperative" only if all are cooperative (a
    cooperative assignor also runs eagerly), else "eager"."""
    assignors = list(assignors)
    if not assignors:
        raise InvalidConfig("partition.assignment.strategy must name at least one assignor")
    if all(a.rebalance_protocol == COOPERATIVE for a in assignors):
        return COOPERATIVE
    return EAGER


def revoked_partitions(owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition],
                       protocol: str) -> set[TopicPartition]:
    """What a member owning ``owned`` gives up on receiving ``assigned``: eager, everything it
    owned (it revoked all before joining); cooperative, only what it owned and was not given."""
    if protocol == EAGER:
        return set(owned)
    if protocol == COOPERATIVE:
        return set(owned) - set(assigned)
    raise ValueError(f"unknown rebalance protocol {protocol!r}")
