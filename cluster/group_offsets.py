"""A consumer group's offsets: which commits it accepts, what it holds, what has expired.

``GroupOffsets`` is mixed into ``rafka.cluster.group.Group``. ``offsets`` maps (topic,
partition) to the ``CommittedOffset`` the coordinator wrote to ``__consumer_offsets`` and
had acknowledged; nothing is added before its write succeeded, so memory never claims more
than the log holds. No I/O, no clock: times are passed in (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from rafka.cluster.consumer_protocol import PROTOCOL_TYPE, decode_assignment
from rafka.cluster.group_types import CommittedOffset, GroupState
from rafka.errors import (
    CommitFailed,
    CoordinatorNotAvailable,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
)

if TYPE_CHECKING:
    from rafka.cluster.group_types import GroupConfig, Member

TopicPartition = tuple[str, int]


class GroupOffsets:
    """The offsets half of ``Group``. It reads the group's membership (``state``,
    ``members``, ``protocol_type``, ``config``, ``state_changed_ms``) and its checks
    ``_member`` and ``_check_generation``; it changes only ``offsets``."""

    group_id: str
    config: "GroupConfig"
    state: GroupState
    state_changed_ms: int
    protocol_type: str | None
    members: dict[str, "Member"]
    offsets: dict[TopicPartition, CommittedOffset]

    if TYPE_CHECKING:

        def _member(self, member_id: str, group_instance_id: str | None) -> "Member": ...

        def _check_generation(self, generation: int, member_id: str) -> None: ...

    def check_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> None:
        """Raise the typed error that refuses this commit, or return to accept it. A commit
        without a member (generation -1: an admin reset or a consumer using ``assign``) is
        accepted only while the group has no members."""
        if self.state == GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {self.group_id} is being removed; retry")
        self._check_metadata(offsets)
        if generation < 0 and not member_id:
            if self.members:
                raise NonEmptyGroup(
                    f"group {self.group_id} is {self.state.value} with {len(self.members)} "
                    "member(s); offsets can be set from outside the group only while it is "
                    "empty: stop its consumers first"
                )
            return
        member = self._member(member_id, group_instance_id)
        if self.state == GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgress(
                f"group {self.group_id} is completing a rebalance; commit after it"
            )
        self._check_generation(generation, member_id)
        if self.protocol_type == PROTOCOL_TYPE:
            owned = set(decode_assignment(member.assignment)[0])
            foreign = sorted(set(offsets) - owned)
            if foreign:
                names = ", ".join(f"{t}-{p}" for t, p in foreign)
                raise CommitFailed(
                    f"{names} not assigned to member {member_id} of group {self.group_id} in "
                    f"generation {generation}; commit only the partitions it owns"
                )

    def _check_metadata(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        limit = self.config.offset_metadata_max_bytes
        for (topic, partition), committed in offsets.items():
            size = len(committed.metadata.encode())
            if size > limit:
                raise OffsetMetadataTooLarge(
                    f"the metadata committed for {topic}-{partition} is {size} bytes; the "
                    f"limit is offset.metadata.max.bytes={limit}"
                )

    def commit(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Apply offsets that ``check_commit`` accepted and the coordinator wrote."""
        self.offsets.update(offsets)

    def expired_offsets(self, now: int) -> list[TopicPartition]:
        """Offsets to delete: those of a group empty for longer than offsets retention,
        counted from the later of the last commit and the group becoming empty (KIP-211)."""
        if self.state != GroupState.EMPTY:
            return []
        retention = self.config.offsets_retention_ms
        return [
            tp for tp, c in self.offsets.items()
            if max(c.commit_ms, self.state_changed_ms) + retention < now
        ]  # fmt: skip

    def delete_offsets(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.pop(tp, None)
