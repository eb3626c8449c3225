"""The consumer's group API: subscribe, commit, committed, and the hooks its membership uses.

``GroupConsumerMixin`` is part of ``Consumer`` (kept apart so the fetch path and the group
path each stay readable). With a ``group_id`` the consumer can commit offsets and read its
committed ones; with ``subscribe`` it also joins the group and is handed partitions by it
(``rafka.clients.consumer_group.GroupMember``), rather than choosing them with ``assign``.

Positions: a partition handed to the consumer starts at the group's committed offset, or,
without one, where ``auto_offset_reset`` says. With ``enable_auto_commit`` the consumer
commits what it has consumed (the position after the records ``poll`` returned) every
``auto_commit_interval_ms``, before giving partitions up in a rebalance, and on ``close``:
at-least-once delivery, as in Kafka.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Iterable

from rafka.clients.consumer_group import GroupMember, matching_topics
from rafka.clients.rebalance_listener import ConsumerRebalanceListener
from rafka.errors import (
    CommitFailed,
    IllegalState,
    InvalidConfig,
    InvalidGroupId,
    RafkaError,
)
from rafka.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)


def check_group_settings(
    group_id: str | None, group_instance_id: str | None, session_timeout_ms: int,
    heartbeat_interval_ms: int, max_poll_interval_ms: int, auto_commit_interval_ms: int,
    metadata_max_age_ms: int,
) -> None:  # fmt: skip
    if group_id is not None and (not isinstance(group_id, str) or not group_id):
        raise InvalidGroupId(f"group_id must be a non-empty string or None, got {group_id!r}")
    if group_instance_id is not None and (
        not isinstance(group_instance_id, str) or not group_instance_id
    ):
        raise InvalidConfig(
            f"group_instance_id must be a non-empty string or None, got {group_instance_id!r}"
        )
    for name, value in (
        ("session_timeout_ms", session_timeout_ms), ("heartbeat_interval_ms",
        heartbeat_interval_ms), ("max_poll_interval_ms", max_poll_interval_ms),
        ("auto_commit_interval_ms", auto_commit_interval_ms),
        ("metadata_max_age_ms", metadata_max_age_ms),
    ):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidConfig(f"{name}={value!r} is invalid; give an integer >= 1")
    if heartbeat_interval_ms >= session_timeout_ms:
        raise InvalidConfig(
            f"heartbeat_interval_ms={heartbeat_interval_ms} must be lower than "
            f"session_timeout_ms={session_timeout_ms} (Kafka advises a third of it)"
        )


class GroupConsumerMixin:
    """Needs from the Consumer: ``_gateway``, ``_metadata``, ``_partitions`` (tp -> state
    with ``position``), ``_add_partitions``, ``_remove_partitions``, ``_reset`` and
    ``request_timeout_s``; and ``isolation_level`` when not Kafka's default."""

    #: The Consumer's setting: a read_committed consumer starts from stable offsets only.
    isolation_level = "read_uncommitted"

    def _init_group(
        self, group_id: str | None, group_instance_id: str | None, client_id: str,
        enable_auto_commit: bool, auto_commit_interval_ms: int, session_timeout_ms: int,
        heartbeat_interval_ms: int, max_poll_interval_ms: int,
        partition_assignment_strategy: Any, metadata_max_age_ms: int,
    ) -> None:  # fmt: skip
        check_group_settings(
            group_id, group_instance_id, session_timeout_ms, heartbeat_interval_ms,
            max_poll_interval_ms, auto_commit_interval_ms, metadata_max_age_ms,
        )  # fmt: skip
        self.group_id = group_id
        self.enable_auto_commit = bool(enable_auto_commit) and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        self._subscription: list[str] = []  # topics named, or matched by the pattern
        self._pattern: re.Pattern | None = None
        self._listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        self._member: GroupMember | None = None
        self._member_args = dict(
            group_instance_id=group_instance_id, client_id=client_id,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            assignment_strategy=partition_assignment_strategy,
            metadata_max_age_ms=metadata_max_age_ms,
        )  # fmt: skip
        if group_id is not None:  # bad strategies fail here, not at the first subscribe
            from rafka.clients.assignors import make_assignors

            make_assignors(partition_assignment_strategy)

    # -- subscribing ---------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | None = None,
        pattern: str | re.Pattern | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group and read the partitions it hands this consumer: of ``topics`` (a
        list of names; a name starting with "^" is a regular expression, as in librdkafka)
        or of every topic ``pattern`` matches, including topics created later (checked every
        metadata_max_age_ms). Partitions added to a subscribed topic are picked up too.
        ``listener`` hears of revoked, assigned and lost partitions."""
        self._check_open()
        if self.group_id is None:
            raise InvalidGroupId(
                "subscribe() needs a consumer group: create the consumer with group_id=...; "
                "without one, choose partitions with assign()"
            )
        if self._partitions and self._member is None:
            raise IllegalState(
                "this consumer has partitions from assign(); subscribe() and assign() are "
                "mutually exclusive: unsubscribe() first, or use another consumer"
            )
        if isinstance(topics, str):
            topics = [topics]
        names = list(topics or ())
        regexes = [n for n in names if n.startswith("^")]
        if pattern is not None or regexes:
            if pattern is not None and names:
                raise ValueError("give topics or pattern, not both")
            if len(regexes) != len(names) or len(regexes) > 1:
                raise ValueError("give one regular expression, or a list of plain topic names")
            source = pattern if pattern is not None else regexes[0]
            try:
                self._pattern = source if isinstance(source, re.Pattern) else re.compile(source)
            except re.error as e:
                raise ValueError(f"pattern {source!r} is not a regular expression: {e}") from None
            self._subscription = sorted(
                matching_topics(self._pattern, self._metadata.topic_names())
            )
        else:
            if not names:
                raise ValueError("subscribe() needs topics (a list of names) or a pattern")
            for name in names:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"topic names must be non-empty strings, got {name!r}")
            self._pattern = None
            self._subscription = sorted(set(names))
        if listener is not None:
            self._listener = listener
        if self._member is None:
            self._member = GroupMember(
                self._gateway, self._metadata, self, self.group_id,
                request_timeout_s=self.request_timeout_s, **self._member_args,
            )  # fmt: skip
        else:
            self._member.request_rejoin()

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matches now)."""
        return set(self._subscription)

    def unsubscribe(self) -> None:
        """Give up every partition (listener told) and leave the group."""
        self._check_open()
        if self._member is not None:
            self._leave_prepare()
            self._member.close()
            self._member = None
        self._subscription = []
        self._pattern = None
        self._partitions = {}

    def _leave_prepare(self) -> None:
        """Kafka's onLeavePrepare: give every partition up before leaving, committing
        first (auto-commit) while still in a generation; a member out of the group reports
        them lost instead (they may be another member's now)."""
        owned = self.owned()
        if not owned:
            return
        lost = not self._member.in_generation()
        if not lost:
            self.commit_consumed()
        self.revoke(owned, lost=lost)

    # -- hooks for GroupMember -----------------------------------------------------------------

    def owned(self) -> set[TopicPartition]:
        return set(self._partitions)

    def subscribed_topics(self) -> list[str]:
        return list(self._subscription)

    def refresh_subscription(self) -> bool:
        """For a pattern: look for newly matching topics. True when the set changed."""
        if self._pattern is None:
            return False
        matched = sorted(matching_topics(self._pattern, self._metadata.topic_names()))
        if matched == self._subscription:
            return False
        log.info("group %s: the pattern now matches %s", self.group_id, matched)
        self._subscription = matched
        return True

    def revoke(self, partitions: set[TopicPartition], lost: bool) -> None:
        try:
            if lost:
                self._listener.on_partitions_lost(set(partitions))
            else:
                self._listener.on_partitions_revoked(set(partitions))
        finally:
            self._remove_partitions(partitions)

    def assign_from_group(self, partitions: set[TopicPartition]) -> None:
        self._add_partitions(partitions)
        self._listener.on_partitions_assigned(set(partitions))

    def commit_consumed(self) -> None:
        """Auto-commit before partitions are given up (errors are logged: the partitions
        go anyway, and their records since the last commit may be read again)."""
        if not self.enable_auto_commit:
            return
        try:
            self.commit()
        except RafkaError as e:
            log.warning("group %s: committing before the rebalance failed: %s", self.group_id, e)

    # -- committing ----------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(s.position) for tp, s in self._partitions.items()
            if s.position is not None
        }  # fmt: skip

    def _offsets_to_commit(self, offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
        if self.group_id is None:
            raise InvalidGroupId(
                "committing offsets needs a consumer group: create the consumer with group_id"
            )
        if offsets is None:
            return self._consumed()
        out = {}
        for tp, value in dict(offsets).items():
            tp = TopicPartition(*tp)
            if isinstance(value, OffsetAndMetadata):
                committed = value
            elif isinstance(value, int) and not isinstance(value, bool):
                committed = OffsetAndMetadata(value)
            else:
                raise TypeError(
                    f"the offset for {tp} must be an int or OffsetAndMetadata, got {value!r}"
                )
            if committed.offset < 0:
                raise ValueError(f"the offset for {tp} must be >= 0, got {committed.offset}")
            out[tp] = committed
        if self._member is not None:
            foreign = sorted(set(out) - set(self._partitions))
            if foreign:
                raise CommitFailed(
                    f"{', '.join(f'{t}-{p}' for t, p in foreign)} not assigned to this "
                    f"member of group {self.group_id} (it owns {sorted(self._partitions)}); "
                    "commit only the partitions it owns"
                )
        return out

    def commit(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None,
        asynchronous: bool = False,
        callback: Callable | None = None,
    ) -> None:
        """Commit ``offsets`` ({TopicPartition: next offset to read, or OffsetAndMetadata};
        default: the position of every partition, i.e. everything ``poll`` returned) to the
        group. Synchronous by default (retriable failures are retried until
        request_timeout_ms); ``asynchronous=True`` returns at once and ``callback(offsets,
        error)`` runs on a later poll. CommitFailed when the member left the generation or
        names partitions it does not own; nothing is committed then."""
        self._check_open()
        to_commit = self._offsets_to_commit(offsets)
        if not to_commit:
            return
        member = self._member or self._standalone_member()
        if asynchronous:
            member.commit_async(to_commit, callback)
        else:
            member.commit(to_commit, self.request_timeout_s)

    def commit_async(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable | None = None,
    ) -> None:
        self.commit(offsets, asynchronous=True, callback=callback)

    def committed(
        self, partitions: TopicPartition | Iterable[TopicPartition]
    ) -> OffsetAndMetadata | None | dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset for one partition (None when it has none), or a dict
        for several. A read_committed consumer waits (within request_timeout_ms) while a
        transaction that committed offsets of them is ending, as Kafka's does (KIP-447)."""
        self._check_open()
        if self.group_id is None:
            raise InvalidGroupId("committed() needs a consumer created with group_id")
        single = isinstance(partitions, TopicPartition)
        wanted = [partitions] if single else [TopicPartition(*tp) for tp in partitions]
        member = self._member or self._standalone_member()
        found = member.committed(wanted, self.request_timeout_s,
                                 require_stable=self.isolation_level == "read_committed")
        if single:
            return found.get(partitions)
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group membership, for ``producer.send_offsets_to_transaction``:
        offsets it sends are refused once a newer generation fenced this member."""
        self._check_open()
        if self.group_id is None:
            raise InvalidGroupId("group_metadata() needs a consumer created with group_id")
        member = self._member
        if member is None:
            return ConsumerGroupMetadata(self.group_id)
        return ConsumerGroupMetadata(self.group_id, member.generation, member.member_id,
                                     member.group_instance_id)  # fmt: skip

    def _standalone_member(self) -> GroupMember:
        """Commits of a consumer that uses assign() with a group_id: as no member (generation
        -1), accepted while the group has no active members."""
        member = getattr(self, "_standalone", None)
        if member is None:
            member = self._standalone = GroupMember(
                self._gateway, self._metadata, self, self.group_id, standalone=True,
                request_timeout_s=self.request_timeout_s, **self._member_args,
            )  # fmt: skip
        return member

    # -- during poll ---------------------------------------------------------------------------

    def _group_poll(self) -> None:
        if self._member is not None:
            self._member.poll()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
            consumed = self._consumed()
            if consumed and (self._member is None or self._member.stable):
                self.commit(consumed, asynchronous=True)

    def _resolve_positions(self) -> None:
        """Positions of new partitions: the committed offset, else auto_offset_reset."""
        missing = [tp for tp, s in self._partitions.items() if s.position is None]
        if not missing:
            return
        if self.group_id is not None:
            member = self._member or self._standalone_member()
            # This consumer's own commits still under way come first: a partition given up
            # with an asynchronous commit and handed back must start after that commit.
            member.finish_async_commits_of(missing, self.request_timeout_s)
            # A read_committed consumer starts from stable offsets only (KIP-447): offsets
            # a transaction committed are not replaced by it while it ends.
            stable = self.isolation_level == "read_committed"
            for tp, committed in member.committed(missing, self.request_timeout_s,
                                                  require_stable=stable).items():  # fmt: skip
                state = self._partitions.get(tp)
                if state is not None and state.position is None:
                    state.clear()
                    state.position = state.fetch_offset = committed.offset
        for tp in missing:
            state = self._partitions.get(tp)
            if state is not None and state.position is None:
                self._reset(state)

    def _close_group(self) -> None:
        if self._member is not None:
            try:
                self._leave_prepare()
            except Exception:  # closing goes on; the error is the listener's
                log.exception("group %s: the rebalance listener failed", self.group_id)
            self._member.close()
        elif self.enable_auto_commit and self._consumed():
            try:
                self.commit()
            except RafkaError as e:
                log.warning("group %s: the final commit failed: %s", self.group_id, e)
        standalone = getattr(self, "_standalone", None)
        if standalone is not None:
            standalone.close()
