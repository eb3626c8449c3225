"""GroupAdmin: the consumer-group half of ``Admin`` (Kafka's AdminClient group calls and
kafka-consumer-groups.sh): list, describe and delete groups, read, alter and reset offsets.

A group's calls go to its coordinator shard, which returns expected refusals as values;
they are raised here. Partition offsets are asked from each partition's leader with
``list_offset``, every request sent before any answer is awaited: one round trip however
many partitions a call covers. Topics are looked up without auto-creation.

Offsets are changed from outside a group only while it has no members (Kafka's rule: a live
member would overwrite them). ``reset_offsets`` checks that first, by describing the group,
so the refusal comes before any other work; the coordinator checks again when the commit
arrives (a consumer may have joined meanwhile) and then changes nothing. Arguments are
checked before anything is sent (TypeError or ValueError saying how to fix them).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping

from rafka.cluster.consumer_protocol import PROTOCOL_TYPE, decode_assignment
from rafka.errors import (
    GroupIdNotFound,
    InvalidGroupId,
    LeaderNotAvailable,
    NonEmptyGroup,
    RafkaError,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
    error_class,
)
from rafka.types import (
    GroupDescription,
    GroupListing,
    GroupPartitionOffsets,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)

#: How long one round of answers (from coordinators or partition leaders) may take.
TIMEOUT_S = 30.0
#: ``list_offset`` timestamps asking for the log start offset and the high watermark.
EARLIEST, LATEST = -2, -1
#: The strings ``reset_offsets(to=...)`` accepts besides a datetime or an offset.
RESET_TO = ("earliest", "latest")
#: An admin commits from outside the group (the coordinator's ``outside_group``), as no member
#: of no generation: accepted only while the group is empty.
ADMIN_MEMBER, ADMIN_INSTANCE, ADMIN_GENERATION, OUTSIDE_GROUP = "", None, -1, True
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


# -- argument checks (no I/O) -----------------------------------------------------------------


def check_group_id(group_id: Any) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupId(f"a group id must be a non-empty string, got {group_id!r}")
    return group_id


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _topic_partition(value: Any) -> TopicPartition:
    """``value`` as a TopicPartition: a (topic name, partition number >= 0) pair."""
    if (
        not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[0], str)
        or not value[0] or not _is_int(value[1])
    ):  # fmt: skip
        raise TypeError(f"{value!r} is not a partition: give TopicPartition(topic name, "
                        "partition number)")  # fmt: skip
    if value[1] < 0:
        raise ValueError(f"{value!r} has a negative partition number: partitions count from 0")
    return TopicPartition(*value)


def _topic_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a topic name must be a non-empty string, got {name!r}")
    return name


def _listed(value: Any, what: str, check: Callable[[Any], Any]) -> list:
    """``value``, a non-empty list of ``what``, each checked, without repeats."""
    if isinstance(value, (str, bytes, Mapping, TopicPartition)) or not isinstance(
        value, Iterable
    ):
        raise TypeError(f"{what} must be a list, got {value!r} (wrap a single one in a list)")
    items = list(dict.fromkeys(check(v) for v in value))
    if not items:
        raise ValueError(f"{what} is empty: name at least one, or leave it out (None)")
    return items


def _offset_and_metadata(value: Any, tp: TopicPartition) -> OffsetAndMetadata:
    """An offset to commit: an int >= 0 or an OffsetAndMetadata holding one."""
    offset, metadata, epoch = value if isinstance(value, OffsetAndMetadata) else (value, "", -1)
    if not _is_int(offset) or not isinstance(metadata, str) or not _is_int(epoch):
        raise TypeError(f"the offset for {tp.topic}-{tp.partition} must be an int or an "
                        f"OffsetAndMetadata(int, str, int), got {value!r}")  # fmt: skip
    if offset < 0:
        raise ValueError(f"the offset for {tp.topic}-{tp.partition} is {offset}: give 0 or more")
    return OffsetAndMetadata(offset, metadata, epoch)


def timestamp_ms(when: datetime) -> int:
    """Ms since the epoch of ``when``: a naive datetime is local time (as Kafka's tool reads
    --to-datetime), an aware one is converted; times before 1970 count as 0."""
    aware = when if when.utcoffset() is not None else when.astimezone()
    return max(0, (aware - _EPOCH) // _MS)


def reset_spec(to: Any, shift_by: Any) -> tuple[str, int | None]:
    """(how, value) of a reset: ("earliest" | "latest", None), ("datetime", ms),
    ("offset", n) or ("shift", n)."""
    if (to is None) == (shift_by is None):
        raise ValueError("give exactly one of to= ('earliest', 'latest', a datetime or an "
                         "offset) and shift_by= (an int, negative to go back); got "
                         + ("both" if to is not None else "neither"))  # fmt: skip
    if shift_by is not None:
        if not _is_int(shift_by):
            raise TypeError(f"shift_by must be an int (negative to go back), got {shift_by!r}")
        return "shift", shift_by
    if isinstance(to, str) and to.strip().lower() in RESET_TO:
        return to.strip().lower(), None
    if isinstance(to, str):
        raise ValueError(f"to={to!r} is unknown: give 'earliest', 'latest', a datetime or an "
                         "offset (an int >= 0)")  # fmt: skip
    if isinstance(to, datetime):
        return "datetime", timestamp_ms(to)
    if not _is_int(to):
        raise TypeError(f"to must be 'earliest', 'latest', a datetime or an int offset, got "
                        f"{to!r} (a date alone is not a datetime: give datetime(y, m, d))")
    if to < 0:
        raise ValueError(f"to={to} is negative: give an offset of 0 or more, or 'earliest'")
    return "offset", to


def reset_target(
    how: str, value: int | None, committed: int | None, log_start: int, high_watermark: int,
    found: int | None = None,
) -> int:  # fmt: skip
    """Where a reset puts one partition, clamped to [log start, high watermark] as Kafka does.
    A shift starts from the committed offset, or from the log start without one (where a
    consumer with auto.offset.reset=earliest would begin). ``found`` is the first offset at
    or after the datetime (-1: none, so the high watermark)."""
    target = {
        "earliest": lambda: log_start,
        "latest": lambda: high_watermark,
        "offset": lambda: value,
        "datetime": lambda: found if found is not None and found >= 0 else high_watermark,
        "shift": lambda: (log_start if committed is None else committed) + value,
    }[how]()
    return min(max(target, log_start), high_watermark)


def _assignment(data: bytes, protocol_type: str) -> list[TopicPartition]:
    """A member's partitions; empty for protocols other than "consumer" (opaque bytes) and
    for payloads of a layout this client does not know."""
    try:
        partitions = decode_assignment(data)[0] if protocol_type == PROTOCOL_TYPE else ()
    except ValueError:
        partitions = ()
    return [TopicPartition(t, p) for t, p in partitions]


def _members(raw: dict[str, Any]) -> list[MemberDescription]:
    return [
        MemberDescription(m["member_id"], m.get("group_instance_id"), m.get("client_id", ""),
                          m.get("client_host", ""), _assignment(m["assignment"],
                                                                raw.get("protocol_type")))
        for m in raw["members"]
    ]  # fmt: skip


def _description(
    raw: dict[str, Any], members: list[MemberDescription], ends: dict[TopicPartition, int]
) -> GroupDescription:
    owners = {tp: m.member_id for m in members for tp in m.assignment}
    committed = {TopicPartition(*tp): c for tp, c in raw["offsets"].items()}
    offsets = []
    for tp in sorted(set(committed) | set(owners)):
        c = committed.get(tp)
        end = ends.get(tp, -1)
        offset = None if c is None else c["offset"]
        lag = None if offset is None or end < 0 else end - offset
        offsets.append(GroupPartitionOffsets(
            tp.topic, tp.partition, offset, end, lag, owners.get(tp),
            "" if c is None else c.get("metadata") or "",
        ))  # fmt: skip
    return GroupDescription(
        raw["group_id"], raw["state"], raw.get("protocol_type") or "", raw.get("protocol") or "",
        raw["generation"], raw.get("leader") or None, members, offsets,
    )  # fmt: skip


def _raise(error: RafkaError | None, group_id: str) -> None:
    """Raise a coordinator's returned error, naming the group when its message does not."""
    if error is None:
        return
    if group_id not in str(error):
        raise type(error)(f"consumer group {group_id!r}: {error}")
    raise error


class GroupAdmin:
    """The consumer-group calls of ``Admin``, a mixin using its ``_gateway`` and
    ``_metadata``. Holds no state of its own: as thread-safe as those two."""

    _gateway: Any
    _metadata: Any

    # -- groups --------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        """Every group of every coordinator shard, by group id (all shards asked at once)."""
        refs = [self._gateway.send(h, "list_groups") for h in self._gateway.group_coordinators()]
        answers = self._gateway.get(refs, TIMEOUT_S, what="a group coordinator")
        return sorted(
            (GroupListing(g["group_id"], g["state"], g["protocol_type"], g["members"])
             for shard in answers for g in shard),
            key=lambda g: g.group_id,
        )  # fmt: skip

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol, generation, leader and members of ``group_id`` (assignments
        decoded for the "consumer" protocol), and per partition it has committed or a member
        owns: the committed offset, the log end offset (high watermark; -1 when the topic or
        partition is gone or has no leader now), the lag and the owner. Raises InvalidGroupId
        before sending, GroupIdNotFound for a group that does not exist."""
        return self.describe_groups([group_id])[0]

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """``describe_group`` of each id (once each, in order), in one round to the
        coordinators and one to the partition leaders."""
        ids = _listed(group_ids, "group_ids", check_group_id)
        refs = [self._gateway.send(self._gateway.group_coordinator(g), "describe_group", g)
                for g in ids]  # fmt: skip
        answers = self._gateway.get(refs, TIMEOUT_S, what="a group coordinator")
        for group_id, (error, _) in zip(ids, answers):
            _raise(error, group_id)
        raws = [raw for _, raw in answers]
        members = [_members(raw) for raw in raws]
        wanted = {TopicPartition(*tp) for raw in raws for tp in raw["offsets"]}
        wanted |= {tp for ms in members for m in ms for tp in m.assignment}
        ends = self._log_end_offsets(wanted)
        return [_description(raw, ms, ends) for raw, ms in zip(raws, members)]

    def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its committed offsets. Raises InvalidGroupId before
        sending, NonEmptyGroup while it has members, GroupIdNotFound when it does not exist."""
        group_id = check_group_id(group_id)
        _raise(self._call(group_id, "delete_group", group_id), group_id)

    # -- offsets -------------------------------------------------------------------------------

    def list_group_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None = None,
        require_stable: bool = False, timeout_s: float = 30.0,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of ``group_id`` for ``partitions`` (None: all it has),
        sorted; partitions without a commit, and groups that do not exist, give none.
        ``require_stable``: wait (up to ``timeout_s``) while a transaction that committed
        offsets of them is ending, so the answer includes what it commits (KIP-447)."""
        group_id = check_group_id(group_id)
        asked = None if partitions is None else [
            tuple(tp) for tp in _listed(partitions, "partitions", _topic_partition)
        ]
        deadline = time.monotonic() + timeout_s
        while True:
            error, offsets = self._call(group_id, "fetch_offsets", group_id, asked,
                                        require_stable)  # fmt: skip
            if not isinstance(error, UnstableOffsetCommit) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        _raise(error, group_id)
        return {
            TopicPartition(t, p): OffsetAndMetadata(o, m or "", e)
            for (t, p), (o, e, m) in sorted(offsets.items())
        }

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` for ``group_id`` as an admin (creating the group if need be).
        Raises TypeError/ValueError for offsets that are not ints >= 0 and
        UnknownTopicOrPartition naming a partition that does not exist, before sending;
        NonEmptyGroup while the group has members (nothing is changed)."""
        group_id = check_group_id(group_id)
        if not isinstance(offsets, Mapping):
            raise TypeError(f"offsets must be a dict {{TopicPartition: offset}}, got {offsets!r}")
        if not offsets:
            raise ValueError("offsets is empty: give at least one {TopicPartition: offset}")
        checked: dict[TopicPartition, OffsetAndMetadata] = {}
        for key, value in offsets.items():
            tp = _topic_partition(key)
            checked[tp] = _offset_and_metadata(value, tp)
        self._topics((tp.topic for tp in checked), checked)
        self._commit(group_id, checked)

    def reset_offsets(
        self, group_id: str, topics: list[str] | None = None,
        partitions: list[TopicPartition] | None = None, *, to: Any = None,
        shift_by: int | None = None, dry_run: bool = False,
    ) -> dict[TopicPartition, int]:  # fmt: skip
        """kafka-consumer-groups.sh --reset-offsets: the new offset of each partition,
        sorted, committed unless ``dry_run``. Partitions: all of ``topics`` plus
        ``partitions``; neither means all the group has committed offsets for (--all-topics).
        Exactly one of ``to`` ("earliest": log start; "latest": high watermark; a datetime,
        naive meaning local time: the first offset at or after it, else the high watermark;
        an int: that offset) and ``shift_by`` (added to the committed offset, or to the log
        start for a partition without one). Targets are clamped to [log start, high
        watermark]. Raises InvalidGroupId, TypeError or ValueError for bad arguments, then
        NonEmptyGroup while the group has members (a dry run too, as Kafka's tool refuses),
        UnknownTopicOrPartition naming what does not exist, GroupIdNotFound (ValueError if
        it exists) when nothing is named and the group has no committed offsets; the
        coordinator's NonEmptyGroup if a member joined meanwhile. A raise changes nothing."""
        group_id = check_group_id(group_id)
        how, value = reset_spec(to, shift_by)
        names = None if topics is None else _listed(topics, "topics", _topic_name)
        named = None if partitions is None else _listed(partitions, "partitions", _topic_partition)
        coordinator = self._gateway.group_coordinator(group_id)
        error, raw = self._call(group_id, "describe_group", group_id, handle=coordinator)
        if not isinstance(error, GroupIdNotFound):  # unknown: offsets may be set for a new one
            _raise(error, group_id)
        if raw is not None and raw["members"]:
            raise NonEmptyGroup(
                f"consumer group {group_id!r} is {raw['state']} with {len(raw['members'])} "
                "member(s): offsets can be reset only while it has none; stop its consumers "
                "first (nothing was changed)"
            )
        committed = {
            TopicPartition(*tp): c["offset"] for tp, c in (raw["offsets"] if raw else {}).items()
        }
        wanted, metas = self._reset_scope(group_id, raw is not None, committed, names, named)
        asked = (EARLIEST, LATEST) + ((value,) if how == "datetime" else ())
        bounds = self._ask_leaders(wanted, asked, metas)
        plan = {
            tp: reset_target(how, value, committed.get(tp), *bounds[tp]) for tp in sorted(wanted)
        }
        if not dry_run:
            new = {tp: OffsetAndMetadata(offset) for tp, offset in plan.items()}
            self._commit(group_id, new, coordinator)
        return plan

    # -- helpers -------------------------------------------------------------------------------

    def _reset_scope(
        self, group_id: str, exists: bool, committed: dict[TopicPartition, int],
        names: list[str] | None, named: list[TopicPartition] | None,
    ) -> tuple[set[TopicPartition], dict[str, Any]]:  # fmt: skip
        """The partitions a reset covers, checked to exist, and their topics' metadata."""
        if names is None and named is None:
            if not committed and not exists:
                raise GroupIdNotFound(
                    f"consumer group {group_id!r} does not exist, so it has no offsets to "
                    "reset: name the topics or partitions to set (that creates it)"
                )
            if not committed:
                raise ValueError(f"consumer group {group_id!r} has no committed offsets to "
                                 "reset: name topics= or partitions=")  # fmt: skip
            return set(committed), self._topics((tp.topic for tp in committed), committed)
        metas = self._topics(set(names or ()) | {tp.topic for tp in named or ()}, named or ())
        wanted = set(named or ())
        for name in names or ():
            if name not in metas:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
            wanted |= {TopicPartition(name, p) for p in range(len(metas[name]))}
        return wanted, metas

    def _call(self, group_id: str, method: str, *args: Any, handle: Any = None) -> Any:
        """``method(*args)`` of the group's coordinator (``handle`` when known): its answer."""
        if handle is None:
            handle = self._gateway.group_coordinator(group_id)
        return self._gateway.get(self._gateway.send(handle, method, *args), TIMEOUT_S,
                                 what=f"the coordinator of group {group_id!r}")  # fmt: skip

    def _commit(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata],
                handle: Any = None) -> None:  # fmt: skip
        """Commit as an admin: refused with NonEmptyGroup, changing nothing, if it has members."""
        payload = {(tp.topic, tp.partition): (o.offset, o.leader_epoch, o.metadata)
                   for tp, o in offsets.items()}  # fmt: skip
        # The gateway sends positional arguments only: the last is outside_group.
        _raise(self._call(group_id, "commit_offsets", group_id, ADMIN_MEMBER, ADMIN_INSTANCE,
                          ADMIN_GENERATION, payload, OUTSIDE_GROUP, handle=handle),
               group_id)  # fmt: skip

    def _topics(self, names: Iterable[str], check: Iterable[TopicPartition] = ()) -> dict:
        """{name: TopicMetadata} of those of ``names`` that exist, fresh from the controller
        in one call that never auto-creates a topic; UnknownTopicOrPartition names the first
        partition of ``check`` that does not exist."""
        names = sorted(set(names))
        counts = self._metadata.partition_counts(names, refresh=True) if names else {}
        metas = {n: self._metadata.cached(n) or self._metadata.topic(n) for n in counts}
        for tp in sorted(check):
            if tp.topic not in metas:
                raise UnknownTopicOrPartition(f"topic {tp.topic!r} does not exist ({tp})")
            if tp.partition >= counts[tp.topic]:
                raise UnknownTopicOrPartition(f"topic {tp.topic!r} has no partition "
                                              f"{tp.partition}: it has {counts[tp.topic]}")
        return metas

    def _ask_leaders(
        self, partitions: Iterable[TopicPartition], timestamps: tuple[int, ...], metas: dict,
        leaderless_ok: bool = False,
    ) -> dict[TopicPartition, tuple[int, ...]]:  # fmt: skip
        """``list_offset`` of each timestamp from each partition's leader, all in one round:
        {partition: (offset per timestamp)}. Partitions not in ``metas`` are left out, and
        with ``leaderless_ok`` those without a leader now (else LeaderNotAvailable)."""
        asked, refs = [], []
        for tp in sorted(partitions):
            meta = metas.get(tp.topic)
            if meta is None or tp.partition >= len(meta):
                continue
            try:
                replica = self._metadata.replica(meta, tp.partition)
            except LeaderNotAvailable:
                if leaderless_ok:
                    continue
                raise
            asked.append(tp)
            refs.extend(self._gateway.list_offset(replica, ts) for ts in timestamps)
        answers = self._gateway.get(refs, TIMEOUT_S, what="a partition leader") if refs else []
        out, n = {}, len(timestamps)
        for i, tp in enumerate(asked):
            offsets = []
            for errno, message, offset, _ in answers[i * n : (i + 1) * n]:
                if errno:
                    raise error_class(errno)(f"{tp.topic}-{tp.partition}: {message}")
                offsets.append(offset)
            out[tp] = tuple(offsets)
        return out

    def _log_end_offsets(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        metas = self._topics(tp.topic for tp in partitions)
        answers = self._ask_leaders(partitions, (LATEST,), metas, leaderless_ok=True)
        return {tp: answers[tp][0] if tp in answers else -1 for tp in partitions}
