"""The controller's partition decisions: leader elections, ISR changes and reassignments.

Plain Python, no Ray and no I/O. Each function takes a partition's state (and which brokers
are alive) and returns its next state, or None when nothing changes; the Controller actor
appends the new state as a metadata record and then tells the replicas. Rules (Kafka's):

- a leader comes from the ISR, preferred order first (``replicas[0]`` is preferred); only
  with ``unclean.leader.election.enable`` may an out-of-sync live replica lead, and then the
  ISR becomes that replica alone;
- the ISR is never empty: when its last member dies it stays as the ISR and the partition
  has no leader (NO_LEADER) until that member comes back;
- every change of leader bumps ``leader_epoch``; every change of any kind bumps
  ``partition_epoch``;
- only the current leader, in its current epochs, may change the ISR, and it may only add a
  live replica.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Collection, Mapping

from rafka.cluster.metadata import NO_LEADER, PartitionState
from rafka.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidReplicaAssignment,
    InvalidUpdateVersion,
    NotLeaderOrFollower,
)


def choose_leader(p: PartitionState, live: Collection[int], unclean: bool) -> tuple[int, bool]:
    """(leader, was_unclean): the first live ISR member in preferred order (the current
    leader if it is still live and in sync), else with ``unclean`` the first live replica,
    else NO_LEADER."""
    if p.leader != NO_LEADER and p.leader in live and p.leader in p.isr:
        return p.leader, False
    targets = p.target_replicas
    ordered = targets + [b for b in p.replicas if b not in targets]
    for b in ordered:
        if b in p.isr and b in live:
            return b, False
    if unclean:
        for b in ordered:
            if b in live:
                return b, True
    return NO_LEADER, False


def _with(p: PartitionState, **changes) -> PartitionState:
    """``p`` changed, with its epochs bumped as the changes require."""
    new = replace(p, **changes)
    if new.leader != p.leader:
        new.leader_epoch = p.leader_epoch + 1
    new.partition_epoch = p.partition_epoch + 1
    return new


def _elect(p: PartitionState, isr: list[int], live: Collection[int], unclean: bool):
    candidate = replace(p, isr=isr)
    leader, was_unclean = choose_leader(candidate, live, unclean)
    if was_unclean:
        isr = [leader]
    return leader, isr


def fence_broker(
    p: PartitionState, broker: int, live: Collection[int], unclean: bool
) -> PartitionState | None:
    """``broker`` is dead (or fenced): it leaves the ISR (unless it is the last member), and
    a partition it led gets a new leader."""
    if broker not in p.isr and p.leader != broker:
        return None
    isr = [b for b in p.isr if b != broker] or [broker]
    live = [b for b in live if b != broker]
    leader, isr = _elect(replace(p, leader=NO_LEADER if p.leader == broker else p.leader),
                         isr, live, unclean)  # fmt: skip
    if leader == p.leader and isr == p.isr:
        return None
    return _with(p, leader=leader, isr=isr)


def elect_if_leaderless(
    p: PartitionState, live: Collection[int], unclean: bool
) -> PartitionState | None:
    """A leader for a partition without a live one (a broker came back, or unclean
    election was just enabled)."""
    if p.leader != NO_LEADER and p.leader in live:
        return None
    leader, isr = _elect(replace(p, leader=NO_LEADER), p.isr, live, unclean)
    if leader == NO_LEADER and p.leader == NO_LEADER:
        return None
    return _with(p, leader=leader, isr=isr)


def replica_restarted(
    p: PartitionState, broker: int, live: Collection[int], unclean: bool, clean: bool
) -> PartitionState | None:
    """``broker``'s replica actor started again. After an unclean stop its log may have lost
    unflushed records, so it leaves the ISR (unless it is the last member) and rejoins by
    catching up; if it led, another live in-sync replica takes over, and with none live the
    partition has no leader (as for any election, unless unclean election is enabled). A
    leader that restarts keeps nothing of its old epoch: it always gets a new one, so records
    it writes can never be confused with records it lost."""
    if broker not in p.replicas:
        return None
    isr = p.isr if clean else ([b for b in p.isr if b != broker] or [broker])
    if p.leader == broker:
        if clean:
            leader = broker
        else:  # it left the ISR (unless it was the last member): elect as after a death
            leader, isr = _elect(replace(p, leader=NO_LEADER), isr, [*live, broker], unclean)
        new = _with(p, leader=leader, isr=isr)
        new.leader_epoch = p.leader_epoch + 1
        return new
    if p.leader == NO_LEADER:
        leader, isr = _elect(p, isr, [*live, broker], unclean)
        return _with(p, leader=leader, isr=isr) if leader != NO_LEADER or isr != p.isr else None
    return _with(p, isr=isr) if isr != p.isr else None


def preferred_leader(p: PartitionState, live: Collection[int]) -> PartitionState | None:
    """Leadership back to the preferred replica when it is live and in sync."""
    preferred = p.target_replicas[0]
    if p.leader == preferred or preferred not in p.isr or preferred not in live:
        return None
    return _with(p, leader=preferred)


def alter_isr(
    p: PartitionState,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: list[int],
    live: Collection[int],
    incarnations: Mapping[int, int] | None = None,
    current_incarnations: Mapping[int, int] | None = None,
) -> PartitionState:
    """The leader's ISR proposal, checked; raises (and changes nothing) when the proposal is
    stale or names a replica that may not join. ``incarnations`` are those the leader saw
    each joining replica fetch in; ``current_incarnations`` the newest the controller knows
    (from replicas checking in after a restart): a replica that restarted since it caught up
    may not join on its earlier life's progress."""
    if leader != p.leader:
        raise NotLeaderOrFollower(
            f"broker {leader} proposed an ISR but the leader is {p.leader}"
        )
    if leader_epoch != p.leader_epoch:
        raise FencedLeaderEpoch(
            f"ISR proposal from leader epoch {leader_epoch}; the current epoch is {p.leader_epoch}"
        )
    if partition_epoch != p.partition_epoch:
        raise InvalidUpdateVersion(
            f"ISR proposal based on partition epoch {partition_epoch}; the current one is "
            f"{p.partition_epoch}"
        )
    if (
        leader not in new_isr
        or any(b not in p.replicas for b in new_isr)
        or len(set(new_isr)) != len(new_isr)
    ):
        raise InvalidReplicaAssignment(
            f"proposed ISR {new_isr} must hold the leader {leader} and only replicas "
            f"{p.replicas}, each once"
        )
    joining = [b for b in new_isr if b not in p.isr and b not in live]
    if joining:
        raise IneligibleReplica(f"brokers {joining} are not alive and may not join the ISR")
    known = current_incarnations or {}
    seen = incarnations or {}
    restarted = [
        b for b in new_isr
        if b not in p.isr and b in known and seen.get(b) != known[b]
    ]  # fmt: skip
    if restarted:
        raise IneligibleReplica(
            f"replicas {restarted} restarted since the leader saw them catch up; they join "
            "once they have fetched again"
        )
    isr = [b for b in p.isr if b in new_isr] + [b for b in new_isr if b not in p.isr]
    if isr == p.isr:
        return p
    # One change, one partition epoch: the ISR change and the reassignment it completes are
    # a single record.
    return complete_reassignment(replace(p, isr=isr), live, unclean=False) or _with(p, isr=isr)


def reassign(
    p: PartitionState, target: list[int], brokers: Collection[int]
) -> PartitionState | None:
    """Start moving the partition to ``target`` (preferred first): the new replicas are added
    and copy the log by fetching from the leader; ``complete_reassignment`` drops the old
    ones once every target replica is in sync."""
    if not target or len(set(target)) != len(target):
        raise InvalidReplicaAssignment(
            f"replica list {target} must name at least one broker, each once"
        )
    unknown = [b for b in target if b not in brokers]
    if unknown:
        raise InvalidReplicaAssignment(
            f"brokers {unknown} are not registered; known brokers: {sorted(brokers)}"
        )
    if p.adding or p.removing:
        raise InvalidReplicaAssignment(
            f"partition {p.partition} is already being reassigned (adding {p.adding}, "
            f"removing {p.removing}); wait for it to finish"
        )
    if target == p.replicas:
        return None
    adding = [b for b in target if b not in p.replicas]
    removing = [b for b in p.replicas if b not in target]
    return _with(p, replicas=target + removing, adding=adding, removing=removing)


def complete_reassignment(
    p: PartitionState, live: Collection[int], unclean: bool
) -> PartitionState | None:
    """Finish a reassignment whose target replicas are all in sync: the removed replicas
    leave, and leadership moves into the target set if it was outside it."""
    if not (p.adding or p.removing) or any(b not in p.isr for b in p.adding):
        return None
    target = p.target_replicas
    isr = [b for b in p.isr if b in target]
    if not isr:
        return None  # no target replica in sync yet
    candidate = replace(
        p, replicas=target, isr=isr, adding=[], removing=[],
        leader=p.leader if p.leader in target else NO_LEADER,
    )  # fmt: skip
    leader, isr = _elect(candidate, isr, live, unclean)
    new = _with(p, replicas=target, isr=isr, adding=[], removing=[], leader=leader)
    return new
