"""A consumer group's offsets: which commits it accepts, what it holds, which commits are
being written, what has expired and what a deletion removes.

``GroupOffsets`` is mixed into ``rafka.cluster.group.Group``. ``offsets`` maps (topic,
partition) to the ``CommittedOffset`` the coordinator wrote to ``__consumer_offsets`` and
had acknowledged; nothing is added before its write succeeded, so memory never claims more
than the log holds. Commits in flight (accepted, being written) are tracked until their
write ends. No I/O, no clock: times are passed in (ms).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable

from rafka.cluster.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
)
from rafka.cluster.group_types import NO_GENERATION, CommittedOffset, GroupState
from rafka.errors import (
    CommitFailed,
    CoordinatorNotAvailable,
    IllegalGeneration,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)

if TYPE_CHECKING:
    from rafka.cluster.group_types import GroupConfig, Member

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GroupOffsets:
    """The offsets half of ``Group``. It reads the group's membership (``state``,
    ``members``, ``generation``, ``protocol_type``, ``protocol``, ``config``,
    ``state_changed_ms``) and its checks ``_member`` and ``_check_generation``; it changes
    ``offsets``, the commits in flight (``_commits_in_flight``: commit id -> offsets, ids
    from ``_commit_ids``) and the partitions members may commit, and marks the group Dead
    while it is deleted."""

    group_id: str
    config: "GroupConfig"
    state: GroupState
    state_changed_ms: int
    generation: int
    protocol_type: str | None
    protocol: str | None
    members: dict[str, "Member"]
    offsets: dict[TopicPartition, CommittedOffset]
    _commits_in_flight: dict[int, dict[TopicPartition, CommittedOffset]]
    _commit_ids: int

    if TYPE_CHECKING:

        def _member(self, member_id: str, group_instance_id: str | None) -> "Member": ...

        def _check_generation(self, generation: int, member_id: str) -> None: ...

        def _transition(self, to: GroupState, now: int) -> None: ...

    # -- deletion --------------------------------------------------------------------------------

    def mark_dead(self, now: int) -> None:
        """The group is being deleted (or forgotten): it refuses joins and commits with
        CoordinatorNotAvailable, a retriable error, until it is gone or revived."""
        if self.members:
            raise NonEmptyGroup(
                f"group {self.group_id} is {self.state.value} with {len(self.members)} "
                "member(s); stop its consumers before deleting it"
            )
        self._transition(GroupState.DEAD, now)

    def revive(self, now: int) -> None:
        """Writing the group's deletion failed, so nothing was deleted: the same group is
        Empty again, with its offsets and the commits still being written."""
        self._transition(GroupState.EMPTY, now)

    # -- commits ---------------------------------------------------------------------------------

    def check_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: dict[TopicPartition, CommittedOffset],
        outside_group: bool = False,
        transactional: bool = False,
    ) -> None:
        """Raise the typed error that refuses this commit, or return to accept it.

        From a member (``outside_group`` False): a current member of the current generation,
        outside the sync phase (Kafka checks no more). A "consumer" member may commit the
        partitions assigned to it in this generation and those it declared owned in the
        join that formed it, unless another member was assigned them: a cooperative member
        commits what it gives up in on_partitions_revoked. A member without a member id or a generation is refused,
        even by an empty group: it was expelled and must rejoin before it commits.

        From outside the group (``outside_group``: an admin reset, or a consumer using
        ``assign`` with a group id): member "" and generation -1, accepted only while the
        group has no members.

        ``transactional`` (TxnOffsetCommit), as Kafka's coordinator checks it: from outside
        the group (v0-2, or a producer given only the group id, which cannot name a member)
        accepted whatever the group's members; from a member (KIP-447) checked as any
        member's commit, except that the sync phase does not refuse it."""
        if self.state == GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {self.group_id} is being removed; retry")
        self._check_metadata(offsets)
        if outside_group:
            self._check_outside_commit(member_id, generation, members_allowed=transactional)
            return
        if not member_id:
            raise UnknownMemberId(
                f"a commit to group {self.group_id} names no member id: the member was "
                "removed from the group (or never joined); rejoin, then commit"
            )
        member = self._member(member_id, group_instance_id)
        if generation < 0:
            raise IllegalGeneration(
                f"member {member_id} commits to group {self.group_id} with no generation "
                f"({generation}); the group is at generation {self.generation}: rejoin"
            )
        if self.state == GroupState.COMPLETING_REBALANCE and not transactional:
            raise RebalanceInProgress(
                f"group {self.group_id} is completing a rebalance; commit after it"
            )
        self._check_generation(generation, member_id)
        if member.owned_partitions is not None and member.assigned_partitions is not None:
            # Usually everything committed is in its assignment; only the rest is looked at.
            # What it declared owned but another member was given is not its own any more
            # (a stale claim), even in the generation of the claim.
            rest = set(offsets) - member.assigned_partitions
            given_away = set().union(*(
                m.assigned_partitions & rest for m in self.members.values()
                if m is not member and m.assigned_partitions
            )) if rest else set()  # fmt: skip
            foreign = sorted(rest - (member.owned_partitions - given_away))
            if foreign:
                names = ", ".join(f"{t}-{p}" for t, p in foreign)
                raise CommitFailed(
                    f"{names} not assigned to member {member_id} of group {self.group_id} in "
                    f"generation {generation}, nor owned by it when it joined; commit only "
                    "the partitions it owns"
                )

    def _check_outside_commit(self, member_id: str, generation: int,
                              members_allowed: bool) -> None:  # fmt: skip
        if member_id:
            raise UnknownMemberId(
                f"a commit from outside group {self.group_id} names member {member_id!r}; "
                "from outside a group commit with member id \"\" (a member commits as one)"
            )
        if generation != NO_GENERATION:
            raise IllegalGeneration(
                f"a commit from outside group {self.group_id} names generation {generation}; "
                f"from outside a group commit with generation {NO_GENERATION}"
            )
        if self.members and not members_allowed:
            raise NonEmptyGroup(
                f"group {self.group_id} is {self.state.value} with {len(self.members)} "
                "member(s); offsets can be set from outside the group only while it is "
                "empty: stop its consumers first"
            )

    def _learn_partitions(self, member: "Member") -> None:
        """Decode, once per generation and assignment, which partitions ``member`` may
        commit (``Member.owned_partitions``, ``Member.assigned_partitions``)."""
        if self.protocol_type != PROTOCOL_TYPE or self.protocol is None:
            member.owned_partitions = member.assigned_partitions = None
            return
        try:
            owned = decode_subscription(member.metadata(self.protocol)).owned_partitions
            assigned = decode_assignment(member.assignment)[0]
        except (KeyError, ValueError) as e:
            # Not rafka's encoding: the coordinator cannot tell which partitions the member
            # holds, so it checks the member and generation only, as Kafka does.
            log.warning("group %s: partitions of %s not checked on commit: %s", self.group_id,
                        member.member_id, e)  # fmt: skip
            member.owned_partitions = member.assigned_partitions = None
            return
        member.owned_partitions = frozenset(owned)
        member.assigned_partitions = frozenset(assigned)

    def _check_metadata(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        limit = self.config.offset_metadata_max_bytes
        for (topic, partition), committed in offsets.items():
            size = len(committed.metadata.encode())
            if size > limit:
                raise OffsetMetadataTooLarge(
                    f"the metadata committed for {topic}-{partition} is {size} bytes; the "
                    f"limit is offset.metadata.max.bytes={limit}"
                )

    # -- commits in flight, expiry, deletion ---------------------------------------------------
    #
    # The coordinator writes to __consumer_offsets in order (FIFO) and awaits each write, so
    # other calls run between a decision and its write's end. Memory and the log agree after
    # every interleaving because: a commit is applied only after its records are written;
    # expiry never decides on a partition with a commit in flight and, once its tombstones
    # are written, deletes only offsets still as it decided (a commit applied meanwhile was
    # written after the tombstones, so it is the log's last word); a deletion tombstones the
    # partitions of commits in flight too (their records are queued before the tombstones).

    def begin_commit(self, offsets: dict[TopicPartition, CommittedOffset]) -> int:
        """A commit ``check_commit`` accepted is being written: returns its id for
        ``end_commit``. Call it with no await after the check."""
        self._commit_ids += 1
        self._commits_in_flight[self._commit_ids] = dict(offsets)
        return self._commit_ids

    def end_commit(self, commit_id: int, written: bool) -> None:
        """The write of commit ``commit_id`` ended: applied to memory if ``written``."""
        offsets = self._commits_in_flight.pop(commit_id)
        if written:
            self.offsets.update(offsets)

    def commit(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Apply offsets already written, with no commit in flight to track (a reload)."""
        self.offsets.update(offsets)

    def commits_in_flight(self, partitions: Iterable[TopicPartition] | None = None) -> set[int]:
        """The ids of the commits of any of ``partitions`` (None: any) being written now. A
        fetch of committed offsets waits for those (not for later ones): a member that gave
        a partition up with a commit and got it back must not read the offset from before
        its own commit."""
        wanted = None if partitions is None else {tuple(tp) for tp in partitions}
        return {
            commit_id for commit_id, offsets in self._commits_in_flight.items()
            if wanted is None or wanted & offsets.keys()
        }  # fmt: skip

    def commits_ended(self, commit_ids: Iterable[int]) -> bool:
        return not any(c in self._commits_in_flight for c in commit_ids)

    def _partitions_in_flight(self) -> set[TopicPartition]:
        return {tp for offsets in self._commits_in_flight.values() for tp in offsets}

    def expired_offsets(self, now: int) -> dict[TopicPartition, CommittedOffset]:
        """Offsets to delete, as they are now: those of a group empty for longer than
        offsets retention (ms), counted from the later of their commit and the group
        becoming empty (KIP-211), except partitions with a commit being written."""
        if self.state != GroupState.EMPTY:
            return {}
        retention = self.config.offsets_retention_ms
        busy = self._partitions_in_flight()
        return {
            tp: c for tp, c in self.offsets.items()
            if tp not in busy and max(c.commit_ms, self.state_changed_ms) + retention < now
        }  # fmt: skip

    def delete_expired_offsets(
        self, expired: dict[TopicPartition, CommittedOffset]
    ) -> list[TopicPartition]:
        """The tombstones of ``expired`` (from ``expired_offsets``) are written: delete
        those offsets still unchanged; returns the partitions deleted."""
        deleted = [tp for tp, c in expired.items() if self.offsets.get(tp) == c]
        for tp in deleted:
            del self.offsets[tp]
        return deleted

    def offsets_to_delete(self) -> set[TopicPartition]:
        """The partitions a deletion of the group tombstones: every committed one, and
        those of commits being written."""
        return set(self.offsets) | self._partitions_in_flight()

    @property
    def is_forgettable(self) -> bool:
        """Whether the coordinator may drop the group from memory: Empty, with no offsets
        and no commit being written (its log holds nothing it must remember)."""
        return (
            self.state == GroupState.EMPTY and not self.members and not self.offsets
            and not self._commits_in_flight
        )  # fmt: skip
