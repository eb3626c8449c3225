"""The balancer's decisions: which replicas and leaderships to move, as a pure function of
the cluster view, the move history and the time (Cruise Control's goals, Redpanda's modes).

``plan`` works through the goals in priority order (``Goal``). For each it makes moves one at
a time on a projection of the cluster (counts, disk, traffic as if the moves so far were
done), each the cheapest that improves that goal while making no earlier goal worse, until
the goal holds, nothing more helps, or the throttle is reached. What still fails a goal is
reported in ``Plan.violations``.

- Leaving brokers hold nothing: a draining broker (and, once dead past ``heal_after_ms``, a
  lost one) gives up its leaderships and replicas. Replicas of a lost broker are re-created
  from the in-sync replicas that remain (the new replica copies the leader's log). A target
  that keeps the partition's racks is preferred; where none is left, emptying comes first.
- Rack awareness: a partition's replicas span as many racks as they can (one per rack while
  there are at least as many racks as replicas). No move takes a partition's last copy on a
  named disk to an ephemeral one (an autoscaled node's disk ends with it), except to empty
  a leaving broker when no named disk can take it.
- Disk capacity: no broker above ``disk_threshold`` of its disk after a move.
- Replicas per broker, leaders per broker: the most and the least loaded brokers differ by at
  most one (so each is within one of the mean).
- Bytes in and out per broker: none above ``usage_balance`` times the mean.

Hysteresis (no replica moves back and forth): a count goal moves only while the counts differ
by two or more, a traffic goal only from a broker above its threshold to one that stays under
it, a partition moved within ``cooldown_ms`` is not moved for a soft goal, and no soft goal
returns a replica within it to a broker it left (a hard goal may: a lost broker's replica is
re-created wherever it can be). Every move strictly lowers the goal it serves without
raising an earlier one, so repeated planning converges.

Throttle: at most ``max_moves_per_broker`` moves in flight per broker (as source, destination
or the leader the new replica copies from; a dead source does no work and is not counted) and
``max_moves`` in the cluster, the reassignments already in progress included.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable, Sequence

from rafka.cluster.balancer_types import (
    HARD_GOALS,
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

__all__ = ["plan", "active_goals", "HARD_GOALS"]


def active_goals(mode: Mode, balancing_node_add: bool = False,
                 requested: bool = False) -> tuple[Goal, ...]:  # fmt: skip
    """The goals pursued now. An admin's ``rebalance`` (``requested``) and the continuous
    mode pursue every goal; ``node_add`` pursues the counts while a joined broker is being
    given its share, and otherwise only empties leaving brokers; ``off`` only carries out
    drains."""
    every = tuple(Goal)
    if requested or mode is Mode.CONTINUOUS:
        return every
    if mode is Mode.NODE_ADD and balancing_node_add:
        return (Goal.LEAVING, Goal.RACK_AWARE, Goal.DISK_CAPACITY, Goal.REPLICA_COUNT,
                Goal.LEADER_COUNT)  # fmt: skip
    return (Goal.LEAVING,)


def plan(
    view: ClusterView, settings: BalancerSettings, history: MoveHistory, now_ms: int,
    goals: Sequence[Goal] | None = None,
) -> Plan:  # fmt: skip
    """The moves to start now (see the module docstring); ``goals`` defaults to
    ``active_goals(settings.mode)``."""
    goals = tuple(goals) if goals is not None else active_goals(settings.mode)
    state = _Projection(view, settings, history, now_ms)
    result = Plan()
    for goal in Goal:
        if goal in goals:
            _PURSUE[goal](state, result)
        problems = state.violations(goal)
        if problems:
            result.violations[goal] = problems
    return result


class _Projection:
    """The cluster as it will be once the moves planned so far are done."""

    def __init__(self, view: ClusterView, settings: BalancerSettings, history: MoveHistory,
                 now_ms: int) -> None:  # fmt: skip
        self.settings, self.history, self.now_ms = settings, history, now_ms
        self.brokers = {b.broker_id: b for b in view.brokers}
        self.partitions = {p.key: p for p in view.partitions}
        self.replicas = {p.key: list(p.replicas) for p in view.partitions}
        self.leader = {p.key: p.leader for p in view.partitions}
        heal = settings.mode is not Mode.OFF
        self.leaving = {
            b.broker_id for b in view.brokers
            if b.draining or (heal and not b.alive
                              and now_ms - b.dead_since_ms >= settings.heal_after_ms)
        }  # fmt: skip
        self.eligible = sorted(b.broker_id for b in view.brokers
                               if b.alive and b.broker_id not in self.leaving)  # fmt: skip
        self.rack = {b.broker_id: b.rack for b in view.brokers}
        self.lasting = {b.broker_id for b in view.brokers if not b.ephemeral}
        racks = {self.rack[b] for b in self.eligible}
        self.rack_count = 0 if None in racks else len(racks)
        self.disk = {b.broker_id: b.disk_used for b in view.brokers}
        self.in_flight: Counter[int] = Counter()
        for p in view.partitions:
            if p.moving:
                for b in _working(p.adding, p.removing, p.leader):
                    self.in_flight[b] += 1
        self.moves_in_flight = sum(1 for p in view.partitions if p.moving)
        self.moved_now: set[tuple[str, int]] = set()  # one move per partition per plan

    # -- what the projection says ------------------------------------------------------------

    def replica_counts(self) -> dict[int, int]:
        counts = {b: 0 for b in self.eligible}
        for replicas in self.replicas.values():
            for b in replicas:
                if b in counts:
                    counts[b] += 1
        return counts

    def leader_counts(self) -> dict[int, int]:
        counts = {b: 0 for b in self.eligible}
        for leader in self.leader.values():
            if leader in counts:
                counts[leader] += 1
        return counts

    def bytes_in(self) -> dict[int, float]:
        load = {b: 0.0 for b in self.eligible}
        for key, replicas in self.replicas.items():
            for b in replicas:
                if b in load:
                    load[b] += self.partitions[key].bytes_in_per_s
        return load

    def bytes_out(self) -> dict[int, float]:
        load = {b: 0.0 for b in self.eligible}
        for key, leader in self.leader.items():
            if leader in load:
                load[leader] += self.partitions[key].bytes_out_per_s
        return load

    def distinct_racks(self, replicas: Iterable[int]) -> int:
        racks = [self.rack.get(b) for b in replicas]
        return len(set(racks)) if None not in racks else 0

    def rack_aware(self, key: tuple[str, int]) -> bool:
        if not self.rack_count:
            return True
        replicas = self.replicas[key]
        return self.distinct_racks(replicas) >= min(len(replicas), self.rack_count)

    def disk_fits(self, broker: int, size: int) -> bool:
        capacity = self.brokers[broker].disk_capacity
        return not capacity or self.disk[broker] + size <= self.settings.disk_threshold * capacity

    def over_disk(self, broker: int) -> bool:
        capacity = self.brokers[broker].disk_capacity
        return bool(capacity) and self.disk[broker] > self.settings.disk_threshold * capacity

    def throttled(self, source: int, destination: int) -> bool:
        limit = self.settings.max_moves_per_broker
        source_works = self.brokers[source].alive
        return (self.moves_in_flight >= self.settings.max_moves
                or self.in_flight[destination] >= limit
                or (source_works and self.in_flight[source] >= limit))  # fmt: skip

    def movable(self, key: tuple[str, int], soft: bool) -> bool:
        """Not being reassigned already nor moved in this plan (the controller takes one
        reassignment of a partition at a time), led by a live in-sync replica (a new replica
        copies the leader's log: without one the move could never complete), and, for a
        soft goal, not moved within the cooldown."""
        p = self.partitions[key]
        if p.moving or key in self.moved_now:
            return False
        leader = self.brokers.get(p.leader)
        if leader is None or not leader.alive or p.leader not in p.isr:
            return False
        if self.in_flight[p.leader] >= self.settings.max_moves_per_broker:
            return False  # its leader already serves as many copies as the throttle allows
        return not (soft and self.history.cooling(key, self.now_ms, self.settings.cooldown_ms))

    def may_receive(self, key: tuple[str, int], broker: int, soft: bool = True) -> bool:
        """``broker`` may take a replica of the partition: it stays, holds none of it, has
        room, and (for a soft goal) is not one the partition left within the cooldown. A
        hard goal may go back: a lost broker's replica must be re-created where it can."""
        return (broker in self.eligible and broker not in self.replicas[key]
                and not (soft and self.history.left_recently(key, broker, self.now_ms,
                                                             self.settings.cooldown_ms))
                and self.disk_fits(broker, self.partitions[key].size_bytes))  # fmt: skip

    def keeps_racks(self, key: tuple[str, int], source: int, destination: int) -> bool:
        """Moving the replica lowers neither how many racks the partition spans nor leaves
        it with no copy on a lasting (named) disk it had: a copy on an ephemeral disk ends
        with its node (see ``keeps_lasting``)."""
        if not self.keeps_lasting(key, source, destination):
            return False
        if not self.rack_count:
            return True
        before = self.replicas[key]
        after = [destination if b == source else b for b in before]
        return self.distinct_racks(after) >= self.distinct_racks(before)

    def keeps_lasting(self, key: tuple[str, int], source: int, destination: int) -> bool:
        before = self.replicas[key]
        return (destination in self.lasting or source not in self.lasting
                or any(b in self.lasting for b in before if b != source))

    # -- changing it ---------------------------------------------------------------------------

    def move(self, result: Plan, key: tuple[str, int], source: int, destination: int,
             goal: Goal) -> None:  # fmt: skip
        # The new replica goes last: the preferred leader stays unless it is the one leaving.
        replicas = [b for b in self.replicas[key] if b != source] + [destination]
        self.replicas[key] = replicas
        size = self.partitions[key].size_bytes
        self.disk[source] -= size
        self.disk[destination] += size
        leader = self.partitions[key].leader
        for b in _working((destination,), (source,) if self.brokers[source].alive else (),
                          leader):  # fmt: skip
            self.in_flight[b] += 1
        self.moves_in_flight += 1
        self.moved_now.add(key)
        if self.leader[key] == source:
            # The reassignment elects an in-sync replica that stays (the new one has no data
            # yet); an election planned before for this partition would be undone by it.
            isr = self.partitions[key].isr
            staying = [b for b in replicas if b in isr and b != destination]
            self.leader[key] = staying[0] if staying else -1
            result.leader_moves = [lm for lm in result.leader_moves
                                   if (lm.topic, lm.partition) != key]  # fmt: skip
        result.moves.append(Move(key[0], key[1], tuple(replicas), source, destination, goal))

    def lead(self, result: Plan, key: tuple[str, int], leader: int, goal: Goal) -> None:
        """Elect ``leader``, made the preferred replica (first), as the controller does it."""
        self.leader[key] = leader
        self.replicas[key] = [leader] + [b for b in self.replicas[key] if b != leader]
        result.leader_moves.append(LeaderMove(key[0], key[1], leader, goal))

    # -- what stays wrong ----------------------------------------------------------------------

    def violations(self, goal: Goal) -> list[str]:
        if goal is Goal.RACK_AWARE:
            return [f"{t}-{p} spans too few racks" for (t, p) in sorted(self.replicas)
                    if not self.rack_aware((t, p))]  # fmt: skip
        if goal is Goal.LEAVING:
            return [f"broker {b} still holds {n} replica(s)" for b, n in sorted(Counter(
                b for rs in self.replicas.values() for b in rs if b in self.leaving).items())]
        if goal is Goal.DISK_CAPACITY:
            return [f"broker {b} is above {self.settings.disk_threshold:.0%} of its disk"
                    for b in self.eligible if self.over_disk(b)]  # fmt: skip
        if goal in (Goal.REPLICA_COUNT, Goal.LEADER_COUNT):
            counts = self.replica_counts() if goal is Goal.REPLICA_COUNT else self.leader_counts()
            if counts and max(counts.values()) - min(counts.values()) > 1:
                return [f"counts per broker range from {min(counts.values())} to "
                        f"{max(counts.values())}"]  # fmt: skip
            return []
        load = self.bytes_in() if goal is Goal.BYTES_IN else self.bytes_out()
        limit = self.settings.usage_balance * _mean(load)
        return [f"broker {b} at {v:,.0f} B/s, above {limit:,.0f}"
                for b, v in sorted(load.items()) if limit and v > limit]  # fmt: skip


# -- the goals ---------------------------------------------------------------------------------


def _rack_aware(state: _Projection, result: Plan) -> None:
    for key in sorted(state.replicas):
        if state.rack_aware(key) or not state.movable(key, soft=False):
            continue
        replicas = state.replicas[key]
        seen: Counter = Counter(state.rack[b] for b in replicas)
        # Move a follower from a rack used twice to a broker on a rack not used yet.
        sources = sorted((b for b in replicas if seen[state.rack[b]] > 1),
                         key=lambda b: (b == state.leader[key], b))  # fmt: skip
        counts = state.replica_counts()
        for source in sources:
            targets = [b for b in state.eligible if state.rack[b] not in seen
                       and state.may_receive(key, b, soft=False)
                       and state.keeps_lasting(key, source, b)
                       and not state.throttled(source, b)]  # fmt: skip
            if targets:
                destination = min(targets, key=lambda b: (counts[b], b))
                state.move(result, key, source, destination, Goal.RACK_AWARE)
                break


def _leaving(state: _Projection, result: Plan) -> None:
    if not state.leaving:
        return
    for key in sorted(state.replicas):
        leader = state.leader[key]
        if leader in state.leaving and state.brokers[leader].alive:
            # Hand leadership over first, to an in-sync replica that stays.
            isr = [b for b in state.partitions[key].isr
                   if b in state.replicas[key] and b in state.eligible]  # fmt: skip
            if isr:
                counts = state.leader_counts()
                state.lead(result, key, min(isr, key=lambda b: (counts[b], b)), Goal.LEAVING)
    for key in sorted(state.replicas):
        if not state.movable(key, soft=False):
            continue
        for source in [b for b in state.replicas[key] if b in state.leaving]:
            if not _has_in_sync_copy(state, key, source):
                continue  # nothing to copy from: it waits for a replica to come back
            counts = state.replica_counts()
            targets = [b for b in state.eligible if state.may_receive(key, b, soft=False)
                       and not state.throttled(source, b)]  # fmt: skip
            # A leaving broker must be emptied: an ephemeral target only when no lasting
            # one keeps the partition's copy on a named disk.
            racks_first = sorted(targets, key=lambda b: (
                not state.keeps_lasting(key, source, b), -_racks_after(state, key, source, b),
                counts[b], b))  # fmt: skip
            if racks_first:
                state.move(result, key, source, racks_first[0], Goal.LEAVING)
                break  # one reassignment per partition at a time: the next tick moves more


def _has_in_sync_copy(state: _Projection, key: tuple[str, int], source: int) -> bool:
    """A live in-sync leader to copy from: another broker when ``source`` is lost, or the
    draining source itself (a partition of one replica, or whose in-sync replicas all
    drain, is copied from it and only then leaves it)."""
    partition = state.partitions[key]
    leader = state.brokers.get(partition.leader)
    return leader is not None and leader.alive and partition.leader in partition.isr


def _racks_after(state: _Projection, key: tuple[str, int], source: int, destination: int) -> int:
    return state.distinct_racks([destination if b == source else b for b in state.replicas[key]])


def _disk_capacity(state: _Projection, result: Plan) -> None:
    for source in [b for b in state.eligible if state.over_disk(b)]:
        held = sorted((k for k, rs in state.replicas.items() if source in rs),
                      key=lambda k: -state.partitions[k].size_bytes)  # fmt: skip
        for key in held:
            if not state.over_disk(source):
                break
            if not state.movable(key, soft=False):
                continue
            targets = [b for b in state.eligible if state.may_receive(key, b, soft=False)
                       and state.keeps_racks(key, source, b)
                       and not state.throttled(source, b)]  # fmt: skip
            if targets:
                free = min(targets, key=lambda b: (state.disk[b] / max(
                    state.brokers[b].disk_capacity, 1), b))
                state.move(result, key, source, free, Goal.DISK_CAPACITY)


def _replica_count(state: _Projection, result: Plan) -> None:
    def step() -> bool:
        counts = state.replica_counts()
        for source in sorted(counts, key=lambda b: (-counts[b], b)):
            for destination in sorted(counts, key=lambda b: (counts[b], b)):
                if counts[source] - counts[destination] < 2:
                    break
                if state.throttled(source, destination):
                    continue
                key = _cheapest(state, source, lambda k: (
                    state.may_receive(k, destination)
                    and state.keeps_racks(k, source, destination)))
                if key is not None:
                    state.move(result, key, source, destination, Goal.REPLICA_COUNT)
                    return True
        return False

    while step():
        pass


def _leader_count(state: _Projection, result: Plan) -> None:
    def step() -> bool:
        counts = state.leader_counts()
        for source in sorted(counts, key=lambda b: (-counts[b], b)):
            for destination in sorted(counts, key=lambda b: (counts[b], b)):
                if counts[source] - counts[destination] < 2:
                    break
                key = _led_by(state, source, destination)
                if key is not None:
                    state.lead(result, key, destination, Goal.LEADER_COUNT)
                    return True
        return False

    while step():
        pass


def _bytes_in(state: _Projection, result: Plan) -> None:
    def step() -> bool:
        load = state.bytes_in()
        limit = state.settings.usage_balance * _mean(load)
        counts = state.replica_counts()
        for source in [b for b in sorted(load, key=lambda b: -load[b]) if load[b] > limit]:
            for destination in sorted(load, key=lambda b: load[b]):
                if state.throttled(source, destination) or (
                        counts[destination] + 1 - (counts[source] - 1) > 1):  # fmt: skip
                    continue  # the replica counts would fall out of balance

                def fits(k, source=source, destination=destination) -> bool:
                    rate = state.partitions[k].bytes_in_per_s
                    return (rate > 0 and load[destination] + rate <= limit
                            and state.leader[k] != source  # the leader counts stay
                            and state.may_receive(k, destination)
                            and state.keeps_racks(k, source, destination))  # fmt: skip

                key = _cheapest(state, source, fits)
                if key is not None:
                    state.move(result, key, source, destination, Goal.BYTES_IN)
                    return True
        return False

    while step():
        pass


def _bytes_out(state: _Projection, result: Plan) -> None:
    def step() -> bool:
        load = state.bytes_out()
        limit = state.settings.usage_balance * _mean(load)
        counts = state.leader_counts()
        for source in [b for b in sorted(load, key=lambda b: -load[b]) if load[b] > limit]:
            for destination in sorted(load, key=lambda b: load[b]):
                if counts[destination] + 1 - (counts[source] - 1) > 1:
                    continue  # the leader counts would fall out of balance
                key = _led_by(state, source, destination, lambda k: (
                    load[destination] + state.partitions[k].bytes_out_per_s <= limit
                    and state.partitions[k].bytes_out_per_s > 0))
                if key is not None:
                    state.lead(result, key, destination, Goal.BYTES_OUT)
                    return True
        return False

    while step():
        pass


def _cheapest(state: _Projection, source: int,
              allowed: Callable[[tuple[str, int]], bool]) -> tuple[str, int] | None:  # fmt: skip
    """The smallest partition with a replica on ``source`` that may move for a soft goal
    and passes ``allowed``; followers before leaders (no leadership changes hands)."""
    held = [k for k, rs in state.replicas.items() if source in rs and state.movable(k, soft=True)]
    held.sort(key=lambda k: (state.leader[k] == source, state.partitions[k].size_bytes, k))
    return next((k for k in held if allowed(k)), None)


def _led_by(state: _Projection, source: int, destination: int,
            allowed: Callable[[tuple[str, int]], bool] = lambda k: True,
            ) -> tuple[str, int] | None:  # fmt: skip
    """A partition led by ``source`` whose in-sync replicas include ``destination``; one
    whose preferred replica is ``destination`` first (no reorder, and the preferred-leader
    restore agrees with it)."""
    preferred_first = sorted(state.leader, key=lambda k: (state.replicas[k][0] != destination, k))
    for key in preferred_first:
        partition = state.partitions[key]
        if (state.leader[key] == source and destination in partition.isr
                and destination in state.replicas[key] and not partition.moving
                and allowed(key)):  # fmt: skip
            return key
    return None


def _working(adding, removing, leader: int) -> set[int]:
    """The brokers a move keeps busy: those adding a replica (copying), those removing one,
    and the leader the copies fetch from (Cruise Control counts the same)."""
    return set(adding) | set(removing) | ({leader} if leader >= 0 else set())


def _mean(load: dict[int, float]) -> float:
    return sum(load.values()) / len(load) if load else 0.0


_PURSUE: dict[Goal, Callable[[_Projection, Plan], None]] = {
    Goal.RACK_AWARE: _rack_aware,
    Goal.LEAVING: _leaving,
    Goal.DISK_CAPACITY: _disk_capacity,
    Goal.REPLICA_COUNT: _replica_count,
    Goal.LEADER_COUNT: _leader_count,
    Goal.BYTES_IN: _bytes_in,
    Goal.BYTES_OUT: _bytes_out,
}
