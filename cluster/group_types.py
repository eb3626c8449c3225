"""The values the group state machine (``rafka.cluster.group``) takes and gives: its states,
its limits, a member, a committed offset, the answers to join and sync, and the effects of a
call."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from rafka.errors import RafkaError

NO_GENERATION = -1
#: Keys of the waiting calls in ``Effects.replies``: (member id, JOIN or SYNC).
JOIN = "join"
SYNC = "sync"


class GroupState(enum.Enum):
    """Kafka's names; ``rafka.cluster.group`` says what each does and where it moves."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's limits, under Kafka's broker property names (see settings)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


class JoinResult(NamedTuple):
    """A join's answer. The leader gets every member's (id, instance id, subscription) in
    ``members`` and runs the assignor, unless ``skip_assignment`` (a static leader that
    came back into a stable group: the assignment stands; ``assigned`` then lists the
    partitions the group's members hold, so the leader can tell when a topic grows)."""

    member_id: str
    generation: int
    protocol: str | None
    leader_id: str | None
    members: list
    skip_assignment: bool = False
    error: RafkaError | None = None
    assigned: tuple = ()  # ((topic, partition), ...) with skip_assignment


class SyncResult(NamedTuple):
    protocol: str | None
    assignment: bytes
    error: RafkaError | None = None


@dataclass(eq=False)
class GroupWrite:
    """A write of the group's metadata record that the group waits for. The actor writes
    the record as it is once the effects carrying this write are applied, then hands the
    write back: ``Group.persisted(write, now)`` when it is durable, else
    ``Group.persist_failed(write, error, now)``. Compared by identity.

    ``generation``: the group's generation when the write was asked for."""

    generation: int


@dataclass(eq=False)
class AssignmentWrite(GroupWrite):
    """The record of a new generation: its members and the leader's assignment (or, for a
    group left empty, no members). Once durable, a group completing that rebalance
    becomes Stable and answers the waiting syncs; if it fails, it rebalances again."""


@dataclass(eq=False)
class StaticTakeoverWrite(GroupWrite):
    """The record naming ``member_id``, the new process of static member ``instance_id``,
    in place of ``previous`` (the member the log holds for that instance). Once durable,
    the new member's join is answered; if it fails, ``previous`` is put back."""

    instance_id: str
    member_id: str
    previous: "Member"


@dataclass
class Effects:
    """What the actor must do after a call: deliver ``replies`` to waiting calls, keyed by
    (member id, JOIN or SYNC), and perform ``writes`` (see ``GroupWrite``): one write of
    the group's record serves them all."""

    replies: dict[tuple[str, str], JoinResult | SyncResult] = field(default_factory=dict)
    writes: list[GroupWrite] = field(default_factory=list)

    @property
    def persist(self) -> bool:
        """Whether the group's record must be written."""
        return bool(self.writes)

    def merge(self, other: "Effects") -> "Effects":
        self.replies.update(other.replies)
        self.writes.extend(other.writes)
        return self


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list  # [(assignor name, subscription bytes)], in preference order
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    awaiting_join: bool = False
    awaiting_sync: bool = False
    #: The partitions it may commit in this generation ("consumer" protocol), decoded once:
    #: those it declared owned in the join that formed the generation, and those assigned
    #: to it. None: not checked (another protocol type, or payloads rafka cannot decode).
    owned_partitions: frozenset[tuple[str, int]] | None = None
    assigned_partitions: frozenset[tuple[str, int]] | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]
