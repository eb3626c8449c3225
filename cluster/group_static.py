"""Static membership (KIP-345): a consumer with a ``group_instance_id`` keeps its place in
the group across restarts of its process.

``StaticMembership`` is mixed into ``rafka.cluster.group.Group``. When the process of a
static member comes back with no member id, it takes the old member's place under a new
member id (the old one is fenced) and, in a stable group whose subscription is unchanged,
the old member's assignment, without a rebalance: answered once the group's record naming
it is written, undone if that write fails (so memory and the log agree on who holds the
instance).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from rafka.cluster.consumer_protocol import PROTOCOL_TYPE, decode_subscription
from rafka.cluster.group_types import (
    JOIN,
    SYNC,
    Effects,
    GroupState,
    JoinResult,
    Member,
    StaticTakeoverWrite,
    SyncResult,
)
from rafka.errors import CoordinatorNotAvailable, FencedInstanceId, RafkaError


class StaticMembership:
    """The static-member half of ``Group``. It changes ``members``, ``static_members``,
    ``leader_id`` and ``_takeovers`` (instance id -> the takeover being written), and starts
    rebalances through the group's ``_prepare_rebalance`` and ``_maybe_complete_join``.

    A takeover in a Stable group whose subscription is unchanged does as Kafka's
    ``updateStaticMemberAndRebalance``: the new member replaces the old one at once (the
    old member id is fenced), the group's record is written, and only then is the new
    member answered. While the write is in flight the new member counts as waiting for its
    join (``awaiting_join``): no session expiry, and a rebalance that completes meanwhile
    answers it, which ends the takeover (the new generation's record names it). A write
    that fails while its takeover is still pending puts back the member the log holds."""

    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader_id: str | None
    members: dict[str, Member]
    static_members: dict[str, str]
    _takeovers: dict[str, StaticTakeoverWrite]

    if TYPE_CHECKING:

        def _prepare_rebalance(self, now: int, reason: str) -> Effects: ...

        def _maybe_complete_join(self, now: int) -> Effects: ...

        def _join_result(self, member_id: str) -> JoinResult: ...

        def _error_join(self, member_id: str, error: RafkaError) -> JoinResult: ...

    def _replace_static(
        self, instance_id: str, client_id: str, client_host: str, protocols: list,
        session_timeout_ms: int, rebalance_timeout_ms: int, now: int,
    ) -> tuple[str, Effects]:  # fmt: skip
        """A static member's process came back (with no member id): it takes the old
        member's place and, in a stable group with an unchanged subscription, its assignment,
        without a rebalance, once that is written. The old member id is fenced."""
        old_id = self.static_members[instance_id]
        old = self.members[old_id]
        effects = Effects()
        fenced = FencedInstanceId(
            f"group_instance_id {instance_id!r} was taken over by a newer member of group "
            f"{self.group_id}"
        )
        if old.awaiting_join:
            effects.replies[(old_id, JOIN)] = self._error_join(old_id, fenced)
        if old.awaiting_sync:
            effects.replies[(old_id, SYNC)] = SyncResult(None, b"", fenced)
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = Member(
            new_id, instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocols, assignment=old.assignment,
            heartbeat_deadline_ms=now + session_timeout_ms, awaiting_join=True,
            # the instance's partitions of this generation, whichever process holds them
            owned_partitions=old.owned_partitions, assigned_partitions=old.assigned_partitions,
        )  # fmt: skip
        self._swap(old_id, member)
        pending = self._takeovers.pop(instance_id, None)
        if (
            self.state == GroupState.STABLE and self._same_subscription(old, member)
            and not self._revocations_pending(old)
        ):  # fmt: skip
            # A takeover of a takeover still being written: the log still holds the first
            # one's previous member, so that is the one to put back on failure.
            write = StaticTakeoverWrite(
                self.generation, instance_id, new_id, pending.previous if pending else old
            )
            self._takeovers[instance_id] = write
            effects.writes.append(write)
            return new_id, effects
        effects.merge(self._prepare_rebalance(now, f"static member {instance_id} came back"))
        return new_id, effects.merge(self._maybe_complete_join(now))

    @staticmethod
    def _revocations_pending(old: Member) -> bool:
        """Whether the old process still had partitions to give up in this generation (it
        owned them when it joined and was not given them again: a cooperative follow-up
        rebalance was due). The new process owns nothing, so it would never ask for that
        rebalance, and the partitions would stay with nobody: rebalance instead."""
        if old.owned_partitions is None or old.assigned_partitions is None:
            return False
        return bool(old.owned_partitions - old.assigned_partitions)

    def _same_subscription(self, old: Member, new: Member) -> bool:
        """Whether the new process of a static member can keep the old one's assignment:
        it offers the group's assignor and subscribes to the same topics ("consumer"
        protocol: the owned partitions and generation it declares differ after a restart
        and do not matter here) or, for other protocol types, the same bytes."""
        if self.protocol is None or self.protocol not in new.protocol_names():
            return False
        if self.protocol not in old.protocol_names():
            return False
        before, after = old.metadata(self.protocol), new.metadata(self.protocol)
        if self.protocol_type == PROTOCOL_TYPE:
            try:
                return decode_subscription(before).topics == decode_subscription(after).topics
            except ValueError:
                pass  # not rafka's encoding: compare the bytes
        return before == after

    def _takeover_written(self, write: StaticTakeoverWrite) -> Effects:
        """The record naming the new member is durable: answer its join, unless the
        takeover ended meanwhile (a rebalance answered it, or it was replaced or removed)."""
        effects = Effects()
        if self._takeovers.get(write.instance_id) is not write:
            return effects
        del self._takeovers[write.instance_id]
        member = self.members[write.member_id]
        if self.state != GroupState.STABLE:
            return effects  # a rebalance started: the member waits for its join phase
        member.awaiting_join = False
        # A leader keeps the assignment but hears the members' subscriptions, so it can
        # tell when their topics grow (Kafka's KIP-814).
        leader = member.member_id == self.leader_id
        assigned = set().union(*(
            m.assigned_partitions or () for m in self.members.values()
        )) if leader else set()  # fmt: skip
        effects.replies[(member.member_id, JOIN)] = self._join_result(member.member_id)._replace(
            skip_assignment=leader, assigned=tuple(sorted(assigned))
        )
        return effects

    def _takeover_failed(
        self, write: StaticTakeoverWrite, error: RafkaError, now: int
    ) -> Effects:
        """The record naming the new member was not written: put back the member the log
        holds for the instance and tell the new process to retry, unless the takeover
        ended meanwhile (then a newer record names whoever holds the instance now)."""
        effects = Effects()
        if self._takeovers.get(write.instance_id) is not write:
            return effects
        del self._takeovers[write.instance_id]
        previous = write.previous
        previous.awaiting_join = previous.awaiting_sync = False
        previous.heartbeat_deadline_ms = now + previous.session_timeout_ms
        self._swap(write.member_id, previous)
        # No member id in the answer (as Kafka): the process joins again as a new one.
        effects.replies[(write.member_id, JOIN)] = self._error_join(
            "", CoordinatorNotAvailable(
                f"group {self.group_id} could not store that static member "
                f"{write.instance_id!r} came back ({error}); retry the join"
            ),
        )  # fmt: skip
        return effects

    def _swap(self, member_id: str, member: Member) -> None:
        """``member`` takes the place of ``member_id``: the same position among the members
        (so the record lists them in the same order), the instance, and the lead."""
        self.members = {
            (member.member_id if k == member_id else k): (member if k == member_id else m)
            for k, m in self.members.items()
        }  # fmt: skip
        self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id == member_id:
            self.leader_id = member.member_id
