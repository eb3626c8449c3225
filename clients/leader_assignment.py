"""The group leader's work: run the group's assignor over every member's subscription, and
check that a cooperative assignment moves no partition in one rebalance.

Pure Python (no Ray, no I/O): the leader's ``GroupMember`` passes in the partition counts it
looked up.

Cooperative rule (KIP-429, Kafka's ``ConsumerCoordinator.validateCooperativeAssignment``): a
partition that one member gives up in a rebalance (it claimed it and is not given it) may not
be given to another member in the same rebalance, or both would read it until the first one
has revoked it. The built-in cooperative-sticky assignor never does that; a custom one that
does is refused with ``IllegalState``.
"""

from __future__ import annotations

import logging
from typing import Iterable

from rafka.clients.assignors import COOPERATIVE, Assignor, Subscription
from rafka.cluster.consumer_protocol import decode_subscription, encode_assignment
from rafka.errors import IllegalState
from rafka.types import TopicPartition

log = logging.getLogger(__name__)


def subscriptions_of(members: Iterable[tuple[str, str | None, bytes]]) -> dict[str, Subscription]:
    """{member id: Subscription} from the join answer's (member id, instance id, bytes)."""
    out = {}
    for member_id, instance_id, data in members:
        sub = decode_subscription(data)
        out[member_id] = Subscription(
            tuple(sub.topics), tuple(TopicPartition(t, p) for t, p in sub.owned_partitions),
            sub.generation, instance_id, sub.user_data,
        )  # fmt: skip
    return out


def assign(
    assignor: Assignor,
    partition_counts: dict[str, int],
    subscriptions: dict[str, Subscription],
) -> dict[str, bytes]:
    """{member id: encoded assignment}. IllegalState when a cooperative assignor moves a
    partition from one member to another in one rebalance."""
    assigned = assignor.assign(partition_counts, subscriptions)
    strangers = sorted(set(assigned) - set(subscriptions))
    if strangers:  # the coordinator would refuse an assignment naming non-members
        log.warning("assignor %r assigned to %d id(s) not in the group (e.g. %s); dropped",
                    assignor.name, len(strangers), strangers[0])  # fmt: skip
        assigned = {m: tps for m, tps in assigned.items() if m in subscriptions}
    if assignor.rebalance_protocol == COOPERATIVE:
        check_cooperative(assignor.name, subscriptions, assigned)
    return {m: encode_assignment(tps) for m, tps in assigned.items()}


def check_cooperative(
    name: str,
    subscriptions: dict[str, Subscription],
    assigned: dict[str, list[TopicPartition]],
) -> None:
    """Raise IllegalState if a partition some member gives up is given to another member."""
    revoked: dict[TopicPartition, str] = {}
    added: dict[TopicPartition, str] = {}
    for member_id, sub in subscriptions.items():
        owned = set(sub.owned_partitions)
        given = set(assigned.get(member_id, ()))
        for tp in owned - given:
            revoked[tp] = member_id
        for tp in given - owned:
            added[tp] = member_id
    moved = sorted(revoked.keys() & added.keys())
    if moved:
        shown = ", ".join(f"{tp.topic}-{tp.partition} ({revoked[tp]} -> {added[tp]})"
                          for tp in moved[:5])  # fmt: skip
        raise IllegalState(
            f"assignor {name!r} moved {len(moved)} partition(s) straight from one member to "
            f"another in one cooperative rebalance: {shown}. A cooperative assignor must "
            "leave a partition unassigned while its owner revokes it; fix the assignor or "
            "make it an eager one (rebalance_protocol = 'eager')"
        )
