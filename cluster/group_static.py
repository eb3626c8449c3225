"""Static membership (KIP-345): a consumer with a ``group_instance_id`` keeps its place in
the group across restarts of its process.

``StaticMembership`` is mixed into ``rafka.cluster.group.Group``. When the process of a
static member comes back with no member id, it takes the old member's place under a new
member id (the old one is fenced) and, in a stable group whose subscription is unchanged,
the old member's assignment, without a rebalance.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from rafka.cluster.group_types import (
    JOIN,
    SYNC,
    Effects,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from rafka.errors import FencedInstanceId, RafkaError


class StaticMembership:
    """The static-member half of ``Group``. It changes ``members``, ``static_members`` and
    ``leader_id`` and starts rebalances through the group's ``_prepare_rebalance`` and
    ``_maybe_complete_join``."""

    group_id: str
    state: GroupState
    protocol: str | None
    leader_id: str | None
    members: dict[str, Member]
    static_members: dict[str, str]

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
        without a rebalance. The old member id is fenced."""
        old_id = self.static_members[instance_id]
        old = self.members.pop(old_id)
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
            heartbeat_deadline_ms=now + session_timeout_ms,
            # the instance's partitions of this generation, whichever process holds them
            owned_partitions=old.owned_partitions, assigned_partitions=old.assigned_partitions,
        )  # fmt: skip
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        same = self.protocol is not None and self.protocol in member.protocol_names() and (
            member.metadata(self.protocol) == old.metadata(self.protocol)
            if self.protocol in old.protocol_names() else False
        )  # fmt: skip
        if self.state == GroupState.STABLE and same:
            result = self._join_result(new_id)._replace(
                members=[], skip_assignment=new_id == self.leader_id
            )
            effects.replies[(new_id, JOIN)] = result
            effects.persist = True
            return new_id, effects
        member.awaiting_join = True
        effects.merge(self._prepare_rebalance(now, f"static member {instance_id} came back"))
        return new_id, effects.merge(self._maybe_complete_join(now))
