"""Consumer groups over the Kafka protocol: membership (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup), offsets (OffsetCommit, OffsetFetch) and administration (DescribeGroups,
ListGroups, DeleteGroups), each mapped onto the group's coordinator shard
(``rafka.actors.group_coordinator``).

Payloads pass through untouched: rafka's consumers and Kafka clients both write Kafka's
"consumer" protocol layout (``rafka.cluster.consumer_protocol``), so a group may mix them and
either kind may lead it. A v4+ join without a member id is answered MEMBER_ID_REQUIRED with
the id the coordinator handed out (KIP-394, ``rafka.cluster.group_member_ids``); rafka's own
consumers and joins before v4 get their id with the join itself.

Authorization follows Kafka's KafkaApis: READ on the group to join, sync, heartbeat, leave
and commit offsets, plus READ on each topic committed (per partition:
TOPIC_AUTHORIZATION_FAILED); DESCRIBE on the group and each topic to fetch offsets (READ
implies DESCRIBE); DESCRIBE on the group to describe it; DELETE to delete it; ListGroups
shows the groups the principal may DESCRIBE, or every group with DESCRIBE on the cluster.

Coordinator errors keep Kafka's group error codes; a failure to reach or write through the
coordinator becomes COORDINATOR_NOT_AVAILABLE, which every client retries after looking the
coordinator up again (Kafka's coordinator maps storage failures the same way). One refusal
is rafka's own: a member's commit of a partition outside its assignment (CommitFailed),
answered ILLEGAL_GENERATION, on which Kafka clients rejoin.
"""

from __future__ import annotations

from typing import Any

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.errors import (
    CommitFailed,
    MemberIdRequired,
    NonEmptyGroup,
    RafkaError,
    UnknownTopicOrPartition,
)
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers import handles
from rafka.wire.session import Session

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
INVALID_COMMIT_OFFSET_SIZE = 28
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
UNSTABLE_OFFSET_COMMIT = 88
#: Error codes a group API answers as the coordinator gave them; anything else from the
#: coordinator is a failure to reach it or to write through it (see ``_group_errno``).
GROUP_ERRNOS = frozenset({
    12,  # OFFSET_METADATA_TOO_LARGE
    14, 15, 16,  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
    22, 23, 24, 25, 26, 27,  # ILLEGAL_GENERATION .. REBALANCE_IN_PROGRESS
    28, 29, 30,  # INVALID_COMMIT_OFFSET_SIZE, TOPIC_/GROUP_AUTHORIZATION_FAILED
    42,  # INVALID_REQUEST
    68, 69,  # NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND
    79,  # MEMBER_ID_REQUIRED
    81, 82,  # GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID
    88,  # UNSTABLE_OFFSET_COMMIT
})  # fmt: skip
#: Write failures that mean the commit was too big for the log.
_TOO_LARGE_ERRNOS = frozenset({4, 10, 18})  # INVALID_FETCH_SIZE, RECORD_(LIST_)TOO_LARGE
#: Kafka's "authorized operations were not asked for".
OPERATIONS_NOT_ASKED = -(2**31)
#: What DescribeGroups reports a principal may do to a group (Kafka's group operations).
GROUP_OPERATIONS = (Op.READ, Op.DESCRIBE, Op.DELETE)
CLUSTER = "kafka-cluster"
#: OffsetFetch's answer for a partition without a committed offset.
NO_OFFSET = -1
NO_EPOCH = -1
#: DescribeGroups' answer for a group the coordinator does not have (Kafka's, v0-v5).
DEAD = "Dead"
STABLE = "Stable"


def _group_errno(error: BaseException | None) -> int:
    """The Kafka error code a group API answers for a coordinator's ``error``."""
    if error is None:
        return NONE
    errno = error.errno if isinstance(error, RafkaError) else -1
    if errno in GROUP_ERRNOS:
        return errno
    if errno in _TOO_LARGE_ERRNOS:
        return INVALID_COMMIT_OFFSET_SIZE
    if errno == NOT_LEADER_OR_FOLLOWER:
        return NOT_COORDINATOR
    return COORDINATOR_NOT_AVAILABLE


async def _call(session: Session, group_id: str, method: str, *args) -> Any:
    """``method(group_id, *args)`` on the group's coordinator shard: its answer, or the
    RafkaError raised reaching it (returned, as the coordinator returns its refusals)."""
    try:
        return await session.backend.group(group_id, method, group_id, *args)
    except RafkaError as e:
        return e


def _may_read_group(session: Session, group_id: str) -> bool:
    return session.authorize(Op.READ, Res.GROUP, group_id)


# -- membership --------------------------------------------------------------------------------


@handles(JOIN_GROUP)
async def join_group(session: Session, header: RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    member_id = body.get("member_id") or ""
    if not _may_read_group(session, group_id):
        return _join_error(GROUP_AUTHORIZATION_FAILED, member_id)
    session_timeout_ms = body["session_timeout_ms"]
    rebalance_timeout_ms = body.get("rebalance_timeout_ms", -1)
    if header.api_version == 0 or rebalance_timeout_ms < 0:
        rebalance_timeout_ms = session_timeout_ms  # v0 has none: Kafka uses the session's
    protocols = [(p["name"], bytes(p["metadata"])) for p in body.get("protocols") or ()]
    answer = await _call(
        session, group_id, "join_group", member_id, body.get("group_instance_id"),
        header.client_id or "", session.client_host, body.get("protocol_type") or "",
        protocols, session_timeout_ms, rebalance_timeout_ms, header.api_version >= 4,
    )  # fmt: skip
    error, result = (answer, None) if isinstance(answer, RafkaError) else answer
    if isinstance(error, MemberIdRequired):
        return _join_error(error.errno, error.member_id)
    if error is not None or result is None:
        return _join_error(_group_errno(error), member_id)
    return {
        "throttle_time_ms": 0, "error_code": NONE, "generation_id": result.generation,
        "protocol_type": body.get("protocol_type"), "protocol_name": result.protocol or "",
        "leader": result.leader_id or "", "skip_assignment": bool(result.skip_assignment),
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": instance, "metadata": bytes(data)}
                    for m, instance, data in result.members],
    }  # fmt: skip


def _join_error(errno: int, member_id: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": errno, "generation_id": -1,
            "protocol_name": "", "leader": "", "member_id": member_id,
            "members": []}  # fmt: skip


@handles(SYNC_GROUP)
async def sync_group(session: Session, header: RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    if not _may_read_group(session, group_id):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                "assignment": b""}  # fmt: skip
    # Every member sends the list, empty but for the leader's: the coordinator reads it from
    # the leader only, so an empty list from a leader means "nothing for anyone", as Kafka.
    assignments = {a["member_id"]: bytes(a["assignment"]) for a in body.get("assignments") or ()}
    answer = await _call(
        session, group_id, "sync_group", body["member_id"], body.get("group_instance_id"),
        body["generation_id"], assignments,
    )  # fmt: skip
    error, result = (answer, None) if isinstance(answer, RafkaError) else answer
    if error is not None or result is None:
        return {"throttle_time_ms": 0, "error_code": _group_errno(error), "assignment": b""}
    return {"throttle_time_ms": 0, "error_code": NONE, "protocol_name": result.protocol,
            "assignment": bytes(result.assignment)}  # fmt: skip


@handles(HEARTBEAT)
async def heartbeat(session: Session, header: RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    if not _may_read_group(session, group_id):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    error = await _call(session, group_id, "heartbeat", body["member_id"],
                        body.get("group_instance_id"), body["generation_id"])  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": _group_errno(error)}


@handles(LEAVE_GROUP)
async def leave_group(session: Session, header: RequestHeader, body: dict) -> dict:
    """v0-v2 name one member; v3+ a list (answered per member, as Kafka)."""
    group_id = body["group_id"]
    listed = body.get("members")
    if listed is None:
        members = [(body.get("member_id") or "", None)]
    else:
        members = [(m.get("member_id") or "", m.get("group_instance_id")) for m in listed]
    if not _may_read_group(session, group_id):
        errno = GROUP_AUTHORIZATION_FAILED
    else:
        errno = _group_errno(await _call(session, group_id, "leave_group", members))
    return {"throttle_time_ms": 0, "error_code": errno,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": NONE}
                        for m, i in members] if errno == NONE else []}  # fmt: skip


# -- offsets -----------------------------------------------------------------------------------


async def _partition_counts(session: Session, highest: dict[str, int]) -> dict[str, int | None]:
    """{topic: its partition count (0: it does not exist), or None when rafka cannot tell}
    for the topics of ``highest`` (topic -> the highest partition index committed), from the
    listener's metadata cache (re-read when an index lies beyond it). If the controller is
    away the commit goes ahead, as it would from rafka's own consumers, which commit without
    asking it."""
    counts: dict[str, int | None] = {}
    for name, index in highest.items():
        try:
            counts[name] = await session.backend.partition_count(name, index)
        except UnknownTopicOrPartition:
            counts[name] = 0
        except RafkaError:
            counts[name] = None
    return counts


def _has_partition(count: int | None, index: int) -> bool:
    return index >= 0 and (count is None or index < count)


@handles(OFFSET_COMMIT)
async def offset_commit(session: Session, header: RequestHeader, body: dict) -> dict:
    """Commits what the principal may commit; partitions of other topics get their error,
    and partitions that do not exist (a topic that does not exist, or an index outside
    its partitions) UNKNOWN_TOPIC_OR_PARTITION, as Kafka's KafkaApis.
    retention_time_ms (v2-v4) is ignored: retention is the cluster's, as in Kafka 2.1+.
    A commit with generation -1 and no member id comes from outside the group (an admin
    or a consumer using ``assign``), accepted while the group has no members."""
    group_id = body["group_id"]
    topics = body.get("topics") or ()
    errnos: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], tuple[int, int, str]] = {}
    group_allowed = _may_read_group(session, group_id)
    highest: dict[str, int] = {}
    for topic in topics:
        if group_allowed and session.authorize(Op.READ, Res.TOPIC, topic["name"]):
            indexes = [p["partition_index"] for p in topic.get("partitions") or ()]
            highest[topic["name"]] = max([highest.get(topic["name"], -1), *indexes])
    counts = await _partition_counts(session, highest)
    for topic in topics:
        name = topic["name"]
        for p in topic.get("partitions") or ():
            tp = (name, p["partition_index"])
            errnos[tp] = (
                GROUP_AUTHORIZATION_FAILED if not group_allowed
                else TOPIC_AUTHORIZATION_FAILED if name not in counts
                else UNKNOWN_TOPIC_OR_PARTITION if not _has_partition(counts[name], tp[1])
                else NONE
            )  # fmt: skip
            if errnos[tp] == NONE:
                offsets[tp] = (p["committed_offset"], p.get("committed_leader_epoch", NO_EPOCH),
                               p.get("committed_metadata") or "")  # fmt: skip
    if offsets:
        member_id = body.get("member_id") or ""
        generation = body.get("generation_id_or_member_epoch", -1)
        outside_group = generation < 0 and not member_id
        error = await _call(session, group_id, "commit_offsets", member_id,
                            body.get("group_instance_id"), generation, offsets,
                            outside_group)  # fmt: skip
        errno = _commit_errno(error)
        for tp in offsets:
            errnos[tp] = errno
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": errnos[(topic["name"], p["partition_index"])]}
            for p in topic.get("partitions") or ()]}
        for topic in topics]}  # fmt: skip


def _commit_errno(error: BaseException | None) -> int:
    """OffsetCommit's error code for the coordinator's ``error``. CommitFailed (a partition
    outside the member's assignment, a check Kafka does not make) has no Kafka code; it is
    answered ILLEGAL_GENERATION, which makes a Kafka client rejoin and learn its partitions
    anew, where a retriable code would have it repeat the same commit forever.

    NonEmptyGroup (a commit from outside a group that has members) is answered
    UNKNOWN_MEMBER_ID, as Kafka's classic coordinator answers it (ClassicGroup.
    validateOffsetCommit): NON_EMPTY_GROUP is not an OffsetCommit code. The mapping is
    made here, not in the coordinator's decision (``GroupOffsets.check_commit``), because
    rafka's own clients read NonEmptyGroup there as "stop the group's consumers first"
    (the admin's alter_group_offsets and reset_offsets, a Spark stream), and a standalone
    consumer's commit loop takes UnknownMemberId for "this member was removed, rejoin",
    which means nothing to a consumer that never joined."""
    if isinstance(error, CommitFailed):
        return ILLEGAL_GENERATION
    if isinstance(error, NonEmptyGroup):
        return UNKNOWN_MEMBER_ID
    return _group_errno(error)


@handles(OFFSET_FETCH)
async def offset_fetch(session: Session, header: RequestHeader, body: dict) -> dict:
    """The committed offset of each partition asked (v2+: every partition the group has
    when ``topics`` is null), -1 where none is committed. v7's require_stable answers
    UNSTABLE_OFFSET_COMMIT (retriable) for partitions whose offsets a transaction that has
    not ended is about to replace. Group-level errors: in each partition for v1, at the top
    for v2+ (as Kafka). Needs DESCRIBE (not READ) on the group and on each topic, as
    Kafka's: topics not authorized answer TOPIC_AUTHORIZATION_FAILED, or are left out of
    "every partition"."""
    group_id = body["group_id"]
    asked = body.get("topics")
    if asked is None and header.api_version < 2:
        asked = []  # v1 cannot ask for everything; a null list there is an empty one
    if not session.authorize(Op.DESCRIBE, Res.GROUP, group_id):
        return _fetch_error(header, asked, GROUP_AUTHORIZATION_FAILED)
    require_stable = bool(body.get("require_stable", False))
    if asked is None:
        return await _fetch_all(session, header, group_id, require_stable)
    refused = {t["name"] for t in asked
               if not session.authorize(Op.DESCRIBE, Res.TOPIC, t["name"])}  # fmt: skip
    wanted = [(t["name"], p) for t in asked if t["name"] not in refused
              for p in t.get("partition_indexes") or ()]  # fmt: skip
    found: dict = {}
    unstable = False
    if wanted:
        error, found = await _fetch(session, group_id, wanted, require_stable)
        if error is not None and error.errno == UNSTABLE_OFFSET_COMMIT:
            unstable, found = True, {}
        elif error is not None:
            return _fetch_error(header, asked, _group_errno(error))
    topics = []
    for t in asked:
        name = t["name"]
        errno = (TOPIC_AUTHORIZATION_FAILED if name in refused
                 else UNSTABLE_OFFSET_COMMIT if unstable else NONE)  # fmt: skip
        topics.append({"name": name, "partitions": [
            _fetched(p, found.get((name, p)), errno) for p in t.get("partition_indexes") or ()
        ]})  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": NONE, "topics": topics}


async def _fetch(session: Session, group_id: str, partitions, require_stable: bool) -> tuple:
    """(error or None, {(topic, partition): (offset, leader epoch, metadata)})."""
    answer = await _call(session, group_id, "fetch_offsets", partitions, require_stable)
    if isinstance(answer, RafkaError):
        return answer, {}
    error, found = answer
    return error, ({tuple(tp): v for tp, v in found.items()} if found else {})


async def _fetch_all(session: Session, header: RequestHeader, group_id: str,
                     require_stable: bool) -> dict:  # fmt: skip
    """Every partition the group has committed, of the topics the principal may DESCRIBE
    (others are left out, as Kafka does)."""
    error, found = await _fetch(session, group_id, None, require_stable)
    errno = NONE
    if error is not None and error.errno == UNSTABLE_OFFSET_COMMIT:
        # Which partitions are pending is the coordinator's to know; each partition is
        # reported unstable so the client retries them all (nothing is read too early).
        errno = UNSTABLE_OFFSET_COMMIT
        error, found = await _fetch(session, group_id, None, False)
    if error is not None:
        return _fetch_error(header, None, _group_errno(error))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(found):
        by_topic.setdefault(topic, []).append(partition)
    topics = [
        {"name": name, "partitions": [_fetched(p, found[(name, p)], errno) for p in partitions]}
        for name, partitions in by_topic.items()
        if session.authorize(Op.DESCRIBE, Res.TOPIC, name)
    ]  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": NONE, "topics": topics}


def _fetched(partition: int, committed: tuple | None, errno: int) -> dict:
    if committed is None or errno != NONE:
        return {"partition_index": partition, "committed_offset": NO_OFFSET,
                "committed_leader_epoch": NO_EPOCH, "metadata": "", "error_code": errno}
    offset, leader_epoch, metadata = committed
    return {"partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": leader_epoch if leader_epoch is not None else NO_EPOCH,
            "metadata": metadata or "", "error_code": NONE}  # fmt: skip


def _fetch_error(header: RequestHeader, asked: list | None, errno: int) -> dict:
    if header.api_version >= 2:
        return {"throttle_time_ms": 0, "error_code": errno, "topics": []}
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [_fetched(p, None, errno)
                                           for p in t.get("partition_indexes") or ()]}
        for t in asked or ()]}  # fmt: skip


# -- administration ----------------------------------------------------------------------------


@handles(DESCRIBE_GROUPS)
async def describe_groups(session: Session, header: RequestHeader, body: dict) -> dict:
    """Each group asked, in order. A group the coordinator does not have is described as
    Kafka does up to v5: no error, state Dead, no members."""
    with_operations = bool(body.get("include_authorized_operations", False))
    described = []
    for group_id in body.get("groups") or ():
        if not session.authorize(Op.DESCRIBE, Res.GROUP, group_id):
            described.append(_described(group_id, GROUP_AUTHORIZATION_FAILED))
            continue
        answer = await _call(session, group_id, "describe_group")
        error, description = (answer, None) if isinstance(answer, RafkaError) else answer
        if error is not None and error.errno != 69:  # 69: GROUP_ID_NOT_FOUND
            described.append(_described(group_id, _group_errno(error)))
            continue
        item = _described(group_id, NONE, description)
        if with_operations:
            item["authorized_operations"] = sum(
                1 << op for op in GROUP_OPERATIONS if session.authorize(op, Res.GROUP, group_id)
            )
        described.append(item)
    return {"throttle_time_ms": 0, "groups": described}


def _described(group_id: str, errno: int, description: dict | None = None) -> dict:
    if description is None:
        return {"error_code": errno, "group_id": group_id, "group_state": DEAD if errno == NONE
                else "", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": OPERATIONS_NOT_ASKED}  # fmt: skip
    # Kafka shows subscriptions and assignments of a Stable group only: in a rebalance
    # they are about to change.
    stable = description["state"] == STABLE
    return {
        "error_code": errno, "group_id": group_id, "group_state": description["state"],
        "protocol_type": description["protocol_type"] or "",
        "protocol_data": description["protocol"] or "",
        "members": [
            {"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
             "client_id": m.get("client_id") or "", "client_host": m.get("client_host") or "",
             "member_metadata": bytes(m.get("subscription") or b"") if stable else b"",
             "member_assignment": bytes(m.get("assignment") or b"") if stable else b""}
            for m in description["members"]
        ],
        "authorized_operations": OPERATIONS_NOT_ASKED,
    }  # fmt: skip


@handles(LIST_GROUPS)
async def list_groups(session: Session, header: RequestHeader, body: dict) -> dict:
    """Every shard's groups the principal may see; v4's states_filter keeps those in the
    states named (case-insensitive, as Kafka; empty: all)."""
    try:
        listings = await session.backend.groups("list_groups")
    except RafkaError as e:
        return {"throttle_time_ms": 0, "error_code": _group_errno(e), "groups": []}
    states = {s.lower() for s in body.get("states_filter") or ()}
    see_all = session.authorize(Op.DESCRIBE, Res.CLUSTER, CLUSTER)
    groups = [
        {"group_id": g["group_id"], "protocol_type": g.get("protocol_type") or "",
         "group_state": g["state"]}
        for shard in listings for g in shard
        if (not states or g["state"].lower() in states)
        and (see_all or session.authorize(Op.DESCRIBE, Res.GROUP, g["group_id"]))
    ]  # fmt: skip
    groups.sort(key=lambda g: g["group_id"])
    return {"throttle_time_ms": 0, "error_code": NONE, "groups": groups}


@handles(DELETE_GROUPS)
async def delete_groups(session: Session, header: RequestHeader, body: dict) -> dict:
    """Each named group that is empty goes with its committed offsets (NON_EMPTY_GROUP while
    it has members, GROUP_ID_NOT_FOUND for one that does not exist)."""
    results = []
    for group_id in dict.fromkeys(body.get("groups_names") or ()):  # once each, in order
        if not session.authorize(Op.DELETE, Res.GROUP, group_id):
            errno = GROUP_AUTHORIZATION_FAILED
        else:
            errno = _group_errno(await _call(session, group_id, "delete_group"))
        results.append({"group_id": group_id, "error_code": errno})
    return {"throttle_time_ms": 0, "results": results}
