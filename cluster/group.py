"""One consumer group as a state machine: membership, generations, rebalances, offsets.

This is Kafka's classic group protocol (join, sync, heartbeat, leave) as plain Python, with
the clock passed in as ``now`` (ms) and no I/O. The coordinator actor owns one ``Group`` per
group id and does what the machine asks through ``Effects``: deliver replies to members
whose join or sync call is waiting, and write the group's metadata record to
``__consumer_offsets`` before the replies that depend on it.

States (Kafka's names), what each does and where it moves:

    Empty                no members; offsets may be kept.        -> PreparingRebalance, Dead
    PreparingRebalance   waiting for every member to (re)join,   -> CompletingRebalance,
                         until the rebalance timeout                 Empty, Dead
    CompletingRebalance  joined; waiting for the leader's        -> Stable, PreparingRebalance,
                         assignment (sync)                           Dead
    Stable               assignment handed out; heartbeats       -> PreparingRebalance, Dead
    Dead                 being deleted (or expired): refuses     -> Empty, if the deletion
                         joins and commits; once the deletion       could not be written
                         is written, never used again

Invariants: ``generation`` grows by one with every completed join; a member's heartbeat,
sync or commit names the generation it joined, and an older one is refused; every
partition of an assignment belongs to at most one member (the leader's assignor ensures
it); a static member (``group_instance_id``) keeps its place and assignment across restarts
of its process while it comes back within its session timeout.

Here: states, joins and rebalances, syncs, heartbeats, leaving and timers. Offsets (which
commits are accepted, expiry) are in ``group_offsets``, static members' takeovers in
``group_static``, the choice of assignor in ``group_protocols``, the metadata record and the
description in ``group_record``. A write of the record the group waits for is a
``GroupWrite`` in ``Effects.writes``, handed back to ``persisted`` or ``persist_failed``.

Not thread-safe: the actor calls it from one event loop, never awaiting in the middle of a
call, so every call is atomic.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Iterable

from rafka.cluster import group_record
from rafka.cluster.group_member_ids import MemberIdHandout
from rafka.cluster.group_offsets import GroupOffsets
from rafka.cluster.group_protocols import check_protocols, select_protocol
from rafka.cluster.group_static import StaticMembership
from rafka.cluster.group_types import (
    JOIN,
    AssignmentWrite,
    NO_GENERATION,
    SYNC,
    CommittedOffset,
    Effects,
    GroupConfig,
    GroupState,
    GroupWrite,
    JoinResult,
    Member,
    StaticTakeoverWrite,
    SyncResult,
)
from rafka.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    IllegalGeneration,
    InvalidGroupId,
    InvalidSessionTimeout,
    RafkaError,
    RebalanceInProgress,
    UnknownMemberId,
)

log = logging.getLogger(__name__)


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(set(GroupState)),
}


class Group(GroupOffsets, StaticMembership, MemberIdHandout):
    """One group; see the module docstring for its states. Its offsets (``GroupOffsets``)
    and static members (``StaticMembership``) are handled in their own modules."""

    def __init__(self, group_id: str, config: GroupConfig, now: int) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupId(f"group id must be a non-empty string, got {group_id!r}")
        self.group_id = group_id
        self.config = config
        self.state = GroupState.EMPTY
        self.state_changed_ms = now
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member id
        self._init_member_id_handout()
        self._takeovers: dict[str, StaticTakeoverWrite] = {}  # see StaticMembership
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self._commits_in_flight: dict[int, dict[tuple[str, int], CommittedOffset]] = {}
        self._commit_ids = 0  # see GroupOffsets
        self._rebalance_deadline_ms = 0
        self._initial_delay_until_ms = 0
        self._sync_deadline_ms = 0

    # -- states --------------------------------------------------------------------------------

    def _transition(self, to: GroupState, now: int) -> None:
        if self.state not in _VALID_PREVIOUS[to]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {to.value}")
        log.debug("group %s: %s -> %s", self.group_id, self.state.value, to.value)
        self.state = to
        self.state_changed_ms = now

    @property
    def is_empty(self) -> bool:
        return not self.members

    # -- join ----------------------------------------------------------------------------------

    def join(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: list,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now: int,
        require_known_member_id: bool = False,
    ) -> tuple[str, Effects]:
        """A member joins or rejoins. Returns its member id (new ones get one here) and the
        effects; the caller's own answer is in the replies under (member id, JOIN), now or
        when the rebalance completes. With ``require_known_member_id`` (JoinGroup v4+) a
        dynamic member's first join only gets its id (``group_member_ids``)."""
        self._check_join(protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms)
        protocols = [(str(n), bytes(d)) for n, d in protocols]
        self._forget_expired_member_ids(now)
        if not member_id:
            if group_instance_id is not None and group_instance_id in self.static_members:
                return self._replace_static(
                    group_instance_id, client_id, client_host, protocols, session_timeout_ms,
                    rebalance_timeout_ms, now,
                )  # fmt: skip
            self._check_room()
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id and group_instance_id is None:
                self._hand_out(member_id, session_timeout_ms, now)
            return self._add_member(member_id, group_instance_id, client_id, client_host,
                                    protocol_type, protocols, session_timeout_ms,
                                    rebalance_timeout_ms, now)  # fmt: skip
        if self._take_handed_out(member_id):
            return self._add_member(member_id, group_instance_id, client_id, client_host,
                                    protocol_type, protocols, session_timeout_ms,
                                    rebalance_timeout_ms, now)  # fmt: skip
        member = self._member(member_id, group_instance_id)
        changed = member.protocols != protocols
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.heartbeat_deadline_ms = now + session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            member.awaiting_join = True
            return member_id, self._maybe_complete_join(now)
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not changed and (
            self.state == GroupState.COMPLETING_REBALANCE or member_id != self.leader_id
        ):
            # The member lost the answer, or rejoins with nothing new: it is in this
            # generation already (Kafka answers with the current generation).
            effects = Effects()
            effects.replies[(member_id, JOIN)] = self._join_result(member_id)
            return member_id, effects
        member.awaiting_join = True
        effects = self._prepare_rebalance(now, f"{member_id} rejoined with a new subscription")
        return member_id, effects.merge(self._maybe_complete_join(now))

    def _add_member(
        self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
        protocol_type: str, protocols: list, session_timeout_ms: int, rebalance_timeout_ms: int,
        now: int,
    ) -> tuple[str, Effects]:  # fmt: skip
        member = Member(
            member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocols,
        )  # fmt: skip
        self.members[member_id] = member
        if group_instance_id is not None:
            self.static_members[group_instance_id] = member_id
        if self.protocol_type is None:
            self.protocol_type = protocol_type
        member.awaiting_join = True
        member.heartbeat_deadline_ms = now + session_timeout_ms
        effects = self._prepare_rebalance(now, f"{member_id} joined")
        return member_id, effects.merge(self._maybe_complete_join(now))

    def _check_join(
        self, protocol_type: str, protocols: list, session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> None:  # fmt: skip
        if self.state == GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {self.group_id} is being removed; retry")
        low, high = self.config.min_session_timeout_ms, self.config.max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeout(
                f"session_timeout_ms={session_timeout_ms} is outside the cluster's "
                f"group.min.session.timeout.ms={low} .. group.max.session.timeout.ms={high}"
            )
        if rebalance_timeout_ms < 1:
            raise InvalidSessionTimeout(f"rebalance timeout {rebalance_timeout_ms} ms must be > 0")
        check_protocols(self.group_id, self.members, self.protocol_type, protocol_type, protocols)

    def _prepare_rebalance(self, now: int, reason: str) -> Effects:
        effects = Effects()
        if self.state == GroupState.PREPARING_REBALANCE:
            if now < self._initial_delay_until_ms:  # each new member extends the delay
                self._initial_delay_until_ms = min(
                    now + self.config.initial_rebalance_delay_ms, self._rebalance_deadline_ms
                )
            return effects
        if self.state == GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    effects.replies[(member.member_id, SYNC)] = SyncResult(
                        None, b"", RebalanceInProgress(
                            f"group {self.group_id} is rebalancing again ({reason}); rejoin"
                        ),
                    )  # fmt: skip
        was_empty = self.state == GroupState.EMPTY
        log.info("group %s: preparing to rebalance: %s", self.group_id, reason)
        self._transition(GroupState.PREPARING_REBALANCE, now)
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self._rebalance_deadline_ms = now + timeout
        self._initial_delay_until_ms = (
            min(now + self.config.initial_rebalance_delay_ms, self._rebalance_deadline_ms)
            if was_empty else 0
        )  # fmt: skip
        return effects

    def _maybe_complete_join(self, now: int) -> Effects:
        if self.state != GroupState.PREPARING_REBALANCE or now < self._initial_delay_until_ms:
            return Effects()
        if all(m.awaiting_join for m in self.members.values()):
            return self._complete_join(now)
        return Effects()

    def _complete_join(self, now: int) -> Effects:
        """End the join phase: members that did not rejoin are out, the generation grows,
        and every joined member gets its answer (the leader with the subscriptions)."""
        effects = Effects()
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            log.info("group %s: %s did not rejoin in time", self.group_id, member.member_id)
            self._remove(member.member_id)
        self.generation += 1
        self._takeovers.clear()  # their members are answered here, in the new generation
        if not self.members:
            self.protocol = self.leader_id = None
            self.protocol_type = None
            self._transition(GroupState.EMPTY, now)
            effects.writes.append(AssignmentWrite(self.generation))
            return effects
        self.protocol = select_protocol(self.members, self.leader_id)
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE, now)
        self._sync_deadline_ms = now + max(m.rebalance_timeout_ms for m in self.members.values())
        for member in self.members.values():
            member.awaiting_join = False
            member.assignment = b""
            self._learn_partitions(member)
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            effects.replies[(member.member_id, JOIN)] = self._join_result(member.member_id)
        log.info(
            "group %s: generation %d with %d members, leader %s, assignor %s",
            self.group_id, self.generation, len(self.members), self.leader_id, self.protocol,
        )  # fmt: skip
        return effects

    def _join_result(self, member_id: str) -> JoinResult:
        members = []
        if member_id == self.leader_id:
            members = [
                (m.member_id, m.group_instance_id, m.metadata(self.protocol))
                for m in self.members.values()
            ]
        return JoinResult(member_id, self.generation, self.protocol, self.leader_id, members)

    def _error_join(self, member_id: str, error: RafkaError) -> JoinResult:
        return JoinResult(member_id, NO_GENERATION, None, None, [], error=error)

    # -- sync ----------------------------------------------------------------------------------

    def sync(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes] | None,
        now: int,
    ) -> Effects:
        """A member asks for its assignment of ``generation``; the leader brings everyone's
        (``assignments``). The answer is under (member id, SYNC): at once in a stable group,
        else once the leader's assignment has been written."""
        member = self._member(member_id, group_instance_id)
        self._check_generation(generation, member_id)
        if self.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {self.group_id} is rebalancing; rejoin first")
        strangers = sorted(set(assignments or ()) - set(self.members))
        if strangers and self.state == GroupState.COMPLETING_REBALANCE:
            # Members are fixed within a generation: an assignment naming others was made
            # for another membership (a generation number a restarted coordinator reused).
            raise IllegalGeneration(
                f"the assignment member {member_id} sent to group {self.group_id} names "
                f"{len(strangers)} member(s) not in generation {self.generation} (e.g. "
                f"{strangers[0]}): it is from an earlier membership; rejoin"
            )
        effects = Effects()
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        if self.state == GroupState.STABLE:
            effects.replies[(member_id, SYNC)] = SyncResult(self.protocol, member.assignment)
            return effects
        member.awaiting_sync = True
        if member_id == self.leader_id and assignments is not None:
            for other in self.members.values():
                other.assignment = bytes(assignments.get(other.member_id, b""))
                self._learn_partitions(other)
            # once written, persisted() moves the group to Stable and answers the syncs
            effects.writes.append(AssignmentWrite(self.generation))
        return effects

    def persisted(self, write: GroupWrite, now: int) -> Effects:
        """The record ``write`` asked for is durable. The assignment of the current
        generation: a group waiting for it becomes Stable and every waiting sync gets its
        assignment. A static member's takeover: its join is answered."""
        if isinstance(write, StaticTakeoverWrite):
            return self._takeover_written(write)
        effects = Effects()
        if self.state != GroupState.COMPLETING_REBALANCE or write.generation != self.generation:
            return effects
        self._transition(GroupState.STABLE, now)
        for member in self.members.values():
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            if member.awaiting_sync:
                member.awaiting_sync = False
                effects.replies[(member.member_id, SYNC)] = SyncResult(
                    self.protocol, member.assignment
                )
        return effects

    def persist_failed(self, write: GroupWrite, error: RafkaError, now: int) -> Effects:
        """Writing the record ``write`` asked for failed. The assignment of the current
        generation: the waiting syncs fail with a retriable error and the group rebalances.
        A static member's takeover: undone (``StaticMembership``)."""
        if isinstance(write, StaticTakeoverWrite):
            return self._takeover_failed(write, error, now)
        if self.state != GroupState.COMPLETING_REBALANCE or write.generation != self.generation:
            return Effects()
        effects = Effects()
        for member in self.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                effects.replies[(member.member_id, SYNC)] = SyncResult(
                    None, b"", CoordinatorNotAvailable(
                        f"the assignment of group {self.group_id} could not be stored "
                        f"({error}); rejoin"
                    ),
                )  # fmt: skip
        return effects.merge(self._prepare_rebalance(now, "storing the assignment failed"))

    # -- heartbeat, leave, timers --------------------------------------------------------------

    def heartbeat(
        self, member_id: str, group_instance_id: str | None, generation: int, now: int
    ) -> None:
        """Keep the member's session alive. RebalanceInProgress tells it to rejoin."""
        member = self._member(member_id, group_instance_id)
        self._check_generation(generation, member_id)
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {self.group_id} is rebalancing; rejoin")

    def leave(self, members: Iterable[tuple[str | None, str | None]], now: int) -> Effects:
        """Members leave: each named by member id, or by group_instance_id (a static member,
        as an admin removes one). Unknown members are ignored."""
        effects = Effects()
        removed = []
        for member_id, instance_id in members:
            if instance_id is not None and not member_id:
                member_id = self.static_members.get(instance_id)
            member = self.members.get(member_id or "")
            if member is None:
                continue
            if instance_id is not None and member.group_instance_id not in (None, instance_id):
                continue
            if member.awaiting_join:
                effects.replies[(member_id, JOIN)] = self._error_join(
                    member_id, UnknownMemberId(f"{member_id} left group {self.group_id}")
                )
            self._remove(member_id)
            removed.append(member_id)
        if removed:
            effects.merge(self._membership_changed(now, f"{', '.join(removed)} left"))
        return effects

    def tick(self, now: int) -> Effects:
        """Expire silent members and end join or sync phases whose time is up."""
        effects = Effects()
        expired = [
            m.member_id for m in self.members.values()
            if not m.awaiting_join and not m.awaiting_sync and m.heartbeat_deadline_ms < now
        ]  # fmt: skip
        for member_id in expired:
            log.info("group %s: %s's session expired", self.group_id, member_id)
            self._remove(member_id)
        if expired:
            effects.merge(self._membership_changed(now, "session expired"))
        if self.state == GroupState.PREPARING_REBALANCE:
            if now >= self._rebalance_deadline_ms:
                effects.merge(self._complete_join(now))
            else:
                effects.merge(self._maybe_complete_join(now))
        elif self.state == GroupState.COMPLETING_REBALANCE and now >= self._sync_deadline_ms:
            for member in [m for m in self.members.values() if not m.awaiting_sync]:
                self._remove(member.member_id)
            effects.merge(self._membership_changed(now, "the leader sent no assignment"))
        return effects

    def _membership_changed(self, now: int, reason: str) -> Effects:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            effects = self._prepare_rebalance(now, reason)
            return effects.merge(self._maybe_complete_join(now))
        if self.state == GroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(now)
        return Effects()

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
            takeover = self._takeovers.get(member.group_instance_id)
            if takeover is not None and takeover.member_id == member_id:
                del self._takeovers[member.group_instance_id]  # nothing left to answer or undo
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    # -- checks --------------------------------------------------------------------------------

    def _member(self, member_id: str, group_instance_id: str | None) -> Member:
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is not None and current != member_id:
                raise FencedInstanceId(
                    f"group_instance_id {group_instance_id!r} now belongs to another member "
                    f"of group {self.group_id}; this consumer was replaced"
                )
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(
                f"group {self.group_id} has no member {member_id!r} (its session expired, "
                "it left, or the group was rebalanced without it); rejoin"
            )
        return member

    def _check_generation(self, generation: int, member_id: str) -> None:
        if generation != self.generation:
            raise IllegalGeneration(
                f"member {member_id} is in generation {generation} of group {self.group_id}, "
                f"which is at generation {self.generation}; rejoin"
            )

    # -- persistence and description -----------------------------------------------------------

    def metadata_record(self) -> dict[str, Any]:
        """The group's metadata as stored in __consumer_offsets (``group_record``)."""
        return group_record.metadata_record(self)

    @classmethod
    def from_record(
        cls, group_id: str, record: dict[str, Any], config: GroupConfig, now: int
    ) -> "Group":
        """A group read back from its metadata record: Stable with its members (their
        sessions start now) or Empty."""
        group = cls(group_id, config, now)
        group_record.restore_members(group, record, now)
        for member in group.members.values():
            group._learn_partitions(member)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def describe(self) -> dict[str, Any]:
        return group_record.describe(self)
