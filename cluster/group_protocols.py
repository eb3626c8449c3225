"""Which protocol (assignor) a consumer group uses, and whether a joining member fits it.

A member offers protocols in its order of preference, each with its subscription bytes.
Kafka's rules: every member of a group has the group's protocol type; a member must offer
at least one protocol all the others offer too; when a generation forms, the group uses
the common protocol most members prefer. Pure functions over the members; no I/O.
"""

from __future__ import annotations

from typing import Iterable

from rafka.cluster.group_types import Member
from rafka.errors import InconsistentGroupProtocol


def common_protocols(members: Iterable[Member]) -> set[str]:
    """The protocol names every one of ``members`` offers (none for no members)."""
    common: set[str] | None = None
    for member in members:
        names = set(member.protocol_names())
        common = names if common is None else common & names
    return common or set()


def check_protocols(
    group_id: str, members: dict[str, Member], group_protocol_type: str | None,
    protocol_type: str, protocols: list,
) -> None:  # fmt: skip
    """InconsistentGroupProtocol unless a member joining with ``protocol_type`` and
    ``protocols`` [(name, subscription)] fits the group's current ``members``."""
    if not protocols or not protocol_type:
        raise InconsistentGroupProtocol(
            "a join must name a protocol type and at least one assignor"
        )
    if not members:
        return
    if protocol_type != group_protocol_type:
        raise InconsistentGroupProtocol(
            f"group {group_id} uses protocol type {group_protocol_type!r}, not {protocol_type!r}"
        )
    names = {str(n) for n, _ in protocols}
    common = common_protocols(members.values())
    if not names & common:
        raise InconsistentGroupProtocol(
            f"group {group_id}'s members use assignors {sorted(common)}; this member offers "
            f"{sorted(names)}. Give it a partition_assignment_strategy the others have too"
        )


def select_protocol(members: dict[str, Member], leader_id: str | None) -> str:
    """The protocol every member offers that most members prefer (Kafka's vote); a tie
    goes to the one the leader (or the first member) prefers. ``members`` is not empty
    and has a common protocol."""
    common = common_protocols(members.values())
    votes: dict[str, int] = {}
    for member in members.values():
        choice = next(n for n in member.protocol_names() if n in common)
        votes[choice] = votes.get(choice, 0) + 1
    first = members.get(leader_id or "") or next(iter(members.values()))
    order = [n for n in first.protocol_names() if n in votes]
    return max(order, key=lambda n: (votes[n], -order.index(n)))
