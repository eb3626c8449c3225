"""A consumer group as data: the metadata record it keeps in ``__consumer_offsets``, the group
read back from that record, and its description for admins.

The record (one per group, key ``group_key(group_id)``, compacted: the newest wins)::

    protocol_type  str | None   "consumer" for rafka's consumers; None while it has none
    generation     int          the generation the record stores
    protocol       str | None   the assignor the generation uses
    leader         str | None   the leader's member id
    members        [ {member_id, group_instance_id, client_id, client_host,
                      session_timeout_ms, rebalance_timeout_ms,
                      subscription (bytes, for ``protocol``), assignment (bytes)} ]

No I/O: the coordinator writes and reads the record; these functions only build and read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rafka.cluster.group_types import Member

if TYPE_CHECKING:
    from rafka.cluster.group import Group


def metadata_record(group: "Group") -> dict[str, Any]:
    """The group's metadata as stored in __consumer_offsets (members and assignment)."""
    return {
        "protocol_type": group.protocol_type, "generation": group.generation,
        "protocol": group.protocol, "leader": group.leader_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "session_timeout_ms": m.session_timeout_ms,
             "rebalance_timeout_ms": m.rebalance_timeout_ms,
             "subscription": m.metadata(group.protocol) if group.protocol else b"",
             "assignment": m.assignment}
            for m in group.members.values()
        ],
    }  # fmt: skip


def restore_members(group: "Group", record: dict[str, Any], now: int) -> None:
    """Fill a new, empty ``group`` from its metadata ``record``: its generation, protocol,
    leader and members (their sessions start at ``now``, ms)."""
    group.generation = record["generation"]
    group.protocol_type = record["protocol_type"]
    group.protocol = record["protocol"]
    group.leader_id = record["leader"]
    for m in record["members"]:
        member = Member(
            m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
            m["session_timeout_ms"], m["rebalance_timeout_ms"],
            [(group.protocol, m["subscription"])], m["assignment"],
            heartbeat_deadline_ms=now + m["session_timeout_ms"],
        )  # fmt: skip
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id


def describe(group: "Group") -> dict[str, Any]:
    """What an admin sees: state, protocol, generation, members (with their subscription
    for the group's protocol, b"" when none is chosen) and committed offsets."""
    return {
        "group_id": group.group_id, "state": group.state.value,
        "protocol_type": group.protocol_type or "", "protocol": group.protocol or "",
        "generation": group.generation, "leader": group.leader_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "client_host": m.client_host,
             "subscription": _subscription(group, m), "assignment": m.assignment}
            for m in group.members.values()
        ],
        "offsets": {
            tp: {"offset": c.offset, "leader_epoch": c.leader_epoch,
                 "metadata": c.metadata, "commit_ms": c.commit_ms}
            for tp, c in group.offsets.items()
        },
    }  # fmt: skip


def _subscription(group: "Group", member: Member) -> bytes:
    if group.protocol is None or group.protocol not in member.protocol_names():
        return b""
    return member.metadata(group.protocol)
