"""The controller's partition decisions: leader elections, ISR changes and reassignments.

Plain Python, no Ray and no I/O. Each function takes a partition's state (and which brokers
are alive) and returns its next state, or None when nothing changes; the Controller actor
appends the new state as a metadata record and then tells the replicas. Rules (Kafka's, with
KIP-966's eligible leader replicas):

- a leader comes from the candidates (the ISR, then the eligible leader replicas), preferred
  order first (``replicas[0]`` is preferred), skipping any that restarted after an unclean
  shutdown while a candidate that did not may still come back;
- when every candidate restarted uncleanly (a correlated power loss), the replica with the
  longest log, by (last leader epoch, log end offset), among every replica that reported one
  since the partition lost its leader, leads and becomes the ISR alone: a replica that left
  the ISR while it still met min ISR may have kept committed records its candidates lost;
  until every candidate has reported, the partition waits without a leader;
- only with ``unclean.leader.election.enable`` may a replica outside the candidates lead,
  and then the ISR becomes that replica alone;
- a replica that leaves the ISR while the ISR is below ``min.insync.replicas`` becomes an
  eligible leader replica: no record was committed without it, because a leader does not
  advance its high watermark while its ISR is that small; the eligible set empties once the
  ISR is back at ``min.insync.replicas``;
- the ISR is never empty: when its last member dies it stays as the ISR and the partition
  has no leader (NO_LEADER) until a candidate comes back;
- every change of leader bumps ``leader_epoch``; every change of any kind bumps
  ``partition_epoch``;
- only the current leader, in its current epochs, may change the ISR, and it may only add a
  live replica.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Collection, Mapping

from rafka.cluster.metadata import NO_LEADER, LogPosition, PartitionState
from rafka.errors import (
    FencedLeaderEpoch,
    IneligibleReplica,
    InvalidReplicaAssignment,
    InvalidUpdateVersion,
    NoReassignmentInProgress,
    NotLeaderOrFollower,
)

#: The position an unclean restart reports when it could not read its log: below any other.
UNKNOWN_POSITION: LogPosition = (-1, -1)


def _preferred_order(p: PartitionState) -> list[int]:
    targets = p.target_replicas
    return targets + [b for b in p.replicas if b not in targets]


def choose_leader(
    p: PartitionState, live: Collection[int], unclean: bool
) -> tuple[int, str]:
    """(leader, how): ``how`` is "kept" (the current leader is live and in sync), "clean" (a
    live candidate that did not restart uncleanly), "longest" (every candidate restarted
    uncleanly and this one has the longest log), "unclean" (outside the candidates, with
    ``unclean``), or "none" (NO_LEADER: wait for a candidate)."""
    if p.leader != NO_LEADER and p.leader in live and p.leader in p.isr:
        return p.leader, "kept"
    ordered = _preferred_order(p)
    marked = p.unclean_logs
    for group in (p.isr, p.elr):
        for b in ordered:
            if b in group and b in live and b not in marked:
                return b, "clean"
    candidates = p.candidates
    if candidates and all(b in marked for b in candidates):
        # The longest live log that reported; but a candidate that is down again with a
        # longer one is waited for (candidates are always waited for), a replica outside
        # the candidates is not. Ties go to the preferred order (max() keeps the first).
        reported = [b for b in ordered if b in marked and b in live]
        best = max(reported, key=lambda b: marked[b], default=None)
        longer_down = [
            b for b in candidates
            if b not in live and (best is None or marked[b] > marked[best])
        ]  # fmt: skip
        if best is not None and not longer_down:
            return best, "longest"
    if unclean:
        for b in ordered:
            if b in live:
                return b, "unclean"
    return NO_LEADER, "none"


def _with(p: PartitionState, **changes) -> PartitionState:
    """``p`` changed, with its epochs bumped as the changes require."""
    new = replace(p, **changes)
    if new.leader != p.leader:
        new.leader_epoch = p.leader_epoch + 1
    new.partition_epoch = p.partition_epoch + 1
    return new


def _effective_min_isr(p: PartitionState, min_isr: int) -> int:
    """Kafka's effective min ISR: a partition cannot need more in-sync replicas than it has."""
    return max(1, min(min_isr, len(p.target_replicas)))


def _shrunk(p: PartitionState, isr: list[int], min_isr: int) -> list[int]:
    """The eligible leader replicas once the ISR becomes ``isr``: members that leave while
    it is below min ISR join them; they all leave once it is back at min ISR."""
    if len(isr) >= _effective_min_isr(p, min_isr):
        return []
    left = [b for b in p.isr if b not in isr]
    return [b for b in p.elr + left if b not in isr]


def _elected(
    p: PartitionState, live: Collection[int], unclean: bool, min_isr: int
) -> dict:
    """The fields of ``p`` after choosing a leader among the live replicas (NO_LEADER when
    none may lead yet). Candidates that restarted uncleanly leave the ISR and the eligible
    replicas once any leader is chosen: the leader's log is the truth from then on."""
    leader, how = choose_leader(p, live, unclean)
    marked = p.unclean_logs
    if how in ("longest", "unclean"):
        return dict(leader=leader, isr=[leader], elr=[], unclean_logs={})
    if how == "none":
        return dict(leader=NO_LEADER, isr=p.isr, elr=p.elr, unclean_logs=marked)
    clean_isr = [b for b in p.isr if b not in marked]
    if leader in p.isr:
        isr = clean_isr
    else:  # from the eligible replicas: the ISR's members are all down, out of the ISR now
        isr = [leader] + [b for b in clean_isr if b in live]
    candidates = [b for b in p.candidates if b not in marked and b not in isr]
    elr = [] if len(isr) >= _effective_min_isr(p, min_isr) else candidates
    return dict(leader=leader, isr=isr, elr=elr, unclean_logs={})


def _changed(p: PartitionState, fields: dict) -> PartitionState | None:
    if all(getattr(p, k) == v for k, v in fields.items()):
        return None
    return _with(p, **fields)


def fence_broker(
    p: PartitionState, broker: int, live: Collection[int], unclean: bool, min_isr: int = 1
) -> PartitionState | None:
    """``broker`` is dead (or fenced): it leaves the ISR (unless it is the last member;
    it becomes an eligible leader replica when the ISR is then below min ISR), and a
    partition it led gets a new leader."""
    if broker not in p.isr and p.leader != broker:
        return None
    isr = [b for b in p.isr if b != broker] or [broker]
    elr = _shrunk(p, isr, min_isr)
    marked = dict(p.unclean_logs)
    live = [b for b in live if b != broker]
    shrunk = replace(p, leader=NO_LEADER if p.leader == broker else p.leader, isr=isr,
                     elr=elr, unclean_logs=marked)  # fmt: skip
    return _changed(p, _elected(shrunk, live, unclean, min_isr))


def replica_failed(
    p: PartitionState, broker: int, live: Collection[int], unclean: bool, min_isr: int = 1
) -> PartitionState | None:
    """``broker``'s replica cannot write its log: it leaves the ISR as for a dead broker,
    and is no candidate at all (never an eligible leader replica: it could not write as a
    leader either), as Kafka takes an offline log directory's replicas out (KIP-858). With
    nothing else in sync it stays the ISR's last member, and the partition waits."""
    fenced = fence_broker(p, broker, live, unclean, min_isr)
    if broker in p.unclean_logs:  # nor may its reported log win the longest-log choice
        fenced = fenced or _with(p)
        fenced.unclean_logs = {b: v for b, v in fenced.unclean_logs.items() if b != broker}
    if fenced is None or broker not in fenced.elr:
        return fenced
    fenced.elr = [b for b in fenced.elr if b != broker]
    return fenced


def elect_if_leaderless(
    p: PartitionState, live: Collection[int], unclean: bool, min_isr: int = 1
) -> PartitionState | None:
    """A leader for a partition without a live one (a broker came back, or unclean
    election was just enabled)."""
    if p.leader != NO_LEADER and p.leader in live:
        return None
    return _changed(p, _elected(replace(p, leader=NO_LEADER), live, unclean, min_isr))


def replica_restarted(
    p: PartitionState,
    broker: int,
    live: Collection[int],
    unclean: bool,
    clean: bool,
    position: LogPosition | None = None,
    min_isr: int = 1,
) -> PartitionState | None:
    """``broker``'s replica actor started again; ``position`` is its log's (last leader
    epoch, log end offset). After a clean stop it lost nothing: a leader keeps leading (in
    a new epoch, so records it writes can never be confused with records of its earlier
    life) and a leaderless partition may elect it. After an unclean stop its log may have
    lost unflushed records: while another replica leads, it leaves the ISR and the eligible
    replicas and rejoins by catching up; while the partition has no leader (or it led), it
    stays a candidate marked unclean, so that a candidate that lost nothing is preferred
    and, if every candidate lost its tail, the longest log wins."""
    if broker not in p.replicas:
        return None
    live = {*live, broker}
    others_lead = p.leader not in (NO_LEADER, broker)
    if clean:
        if p.leader == broker:
            new = _with(p, leader=broker)
            new.leader_epoch = p.leader_epoch + 1
            return new
        if others_lead:
            return None
        return _changed(p, _elected(p, live, unclean, min_isr))
    if others_lead:
        isr = [b for b in p.isr if b != broker]
        elr = [b for b in p.elr if b != broker]
        return _changed(p, dict(isr=isr, elr=elr))
    marked = dict(p.unclean_logs)
    marked[broker] = tuple(position) if position is not None else UNKNOWN_POSITION
    fields = _elected(replace(p, leader=NO_LEADER, unclean_logs=marked), live, unclean,
                      min_isr)  # fmt: skip
    new = _with(p, **fields)
    if p.leader == broker:
        new.leader_epoch = p.leader_epoch + 1  # even when it leads again
    elif new.leader == p.leader and all(getattr(p, k) == v for k, v in fields.items()):
        return None
    return new


def preferred_leader(p: PartitionState, live: Collection[int]) -> PartitionState | None:
    """Leadership back to the preferred replica when it is live and in sync, from another
    live leader. A partition without a live leader is left to ``elect_if_leaderless``,
    whose rules for replicas that restarted uncleanly this must not bypass."""
    preferred = p.target_replicas[0]
    if p.leader == NO_LEADER or p.leader not in live:
        return None
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
    min_isr: int = 1,
) -> PartitionState:
    """The leader's ISR proposal, checked; raises (and changes nothing) when the proposal is
    stale or names a replica that may not join. ``incarnations`` are the replica epochs the
    leader saw each joining replica fetch in; ``current_incarnations`` the current ones the
    controller handed out (at each replica's start): a replica that restarted since it
    caught up may not join on its earlier life's progress. Members that leave while the ISR
    is below ``min_isr`` become eligible leader replicas."""
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
        raise IneligibleReplica(
            f"brokers {joining} are not alive, or their replicas were not seen running where "
            "the broker runs, and may not join the ISR yet"
        )
    known = current_incarnations or {}
    restarted = joiners_seen_in_an_earlier_life(p, new_isr, incarnations, known)
    if restarted:
        raise IneligibleReplica(
            f"replicas {restarted} restarted since the leader saw them catch up; they join "
            "once they have fetched again"
        )
    isr = [b for b in p.isr if b in new_isr] + [b for b in new_isr if b not in p.isr]
    if isr == p.isr:
        return p
    elr = _shrunk(p, isr, min_isr)
    # One change, one partition epoch: the ISR change and the reassignment it completes are
    # a single record.
    return complete_reassignment(
        replace(p, isr=isr, elr=elr), live, unclean=False, min_isr=min_isr
    ) or _with(p, isr=isr, elr=elr)


def joiners_seen_in_an_earlier_life(
    p: PartitionState,
    new_isr: list[int],
    incarnations: Mapping[int, int] | None,
    current_incarnations: Mapping[int, int],
) -> list[int]:
    """Replicas ``new_isr`` adds whose replica epoch, as the leader saw them fetch, is older
    than the current one recorded for them: their progress may be from an earlier life. (A
    replica created after its epoch was recorded, moved away and back, fetches with a newer
    one.)"""
    seen = incarnations or {}
    return [
        b for b in new_isr
        if b not in p.isr and b in current_incarnations
        and seen.get(b, -1) < current_incarnations[b]
    ]  # fmt: skip


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
        if target == p.target_replicas:
            return None  # the same plan again (a retried request): nothing to change
        raise InvalidReplicaAssignment(
            f"partition {p.partition} is already being reassigned (adding {p.adding}, "
            f"removing {p.removing}); wait for it to finish or cancel it first "
            "(admin.cancel_reassignment, `rafka topics reassign --cancel`)"
        )
    if target == p.replicas:
        return None
    adding = [b for b in target if b not in p.replicas]
    removing = [b for b in p.replicas if b not in target]
    return _with(p, replicas=target + removing, adding=adding, removing=removing)


def complete_reassignment(
    p: PartitionState, live: Collection[int], unclean: bool, min_isr: int = 1
) -> PartitionState | None:
    """Finish a reassignment whose target replicas are all in sync: the removed replicas
    leave, and leadership moves into the target set if it was outside it."""
    if not (p.adding or p.removing) or any(b not in p.isr for b in p.adding):
        return None
    target = p.target_replicas
    isr = [b for b in p.isr if b in target]
    if not isr:
        return None  # no target replica in sync yet
    return _settled_on(p, target, live, unclean, min_isr)


def cancel_reassignment(
    p: PartitionState, live: Collection[int], unclean: bool, min_isr: int = 1
) -> PartitionState:
    """Put a partition being reassigned back on its original replicas (Kafka's
    alterPartitionReassignments with no target, KIP-455), in the order the replica list has
    them, as Kafka's revert does: the replicas it was adding leave
    the replica set, the ISR and the eligible replicas; a leader among them gives way to an
    original replica in sync. Refused (NoReassignmentInProgress) when none is under way, and
    (InvalidReplicaAssignment) when no original replica is in sync any more: only the new
    ones hold every committed record then, and the reassignment should finish instead."""
    if not (p.adding or p.removing):
        raise NoReassignmentInProgress(
            f"partition {p.partition} is not being reassigned (replicas {p.replicas})"
        )
    original = [b for b in p.replicas if b not in p.adding]
    isr = [b for b in p.isr if b in original]
    if not isr:
        raise InvalidReplicaAssignment(
            f"partition {p.partition} cannot go back to {original}: none of them is in sync "
            f"(ISR {p.isr}); let the reassignment finish, then reassign again"
        )
    return _settled_on(p, original, live, unclean, min_isr)


def _settled_on(
    p: PartitionState, replicas: list[int], live: Collection[int], unclean: bool, min_isr: int
) -> PartitionState:
    """``p`` with its reassignment over and ``replicas`` as its replica set (the target when
    it completes, the original when it is cancelled): the others leave the ISR, the eligible
    replicas and the unclean marks, and a leader among them gives way."""
    candidate = replace(
        p, replicas=replicas, isr=[b for b in p.isr if b in replicas], adding=[], removing=[],
        leader=p.leader if p.leader in replicas else NO_LEADER,
        elr=[b for b in p.elr if b in replicas],
        unclean_logs={b: v for b, v in p.unclean_logs.items() if b in replicas},
    )  # fmt: skip
    fields = _elected(candidate, live, unclean, min_isr)
    return _with(p, replicas=replicas, adding=[], removing=[], **fields)
