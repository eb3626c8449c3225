"""The "consumer" group protocol's payloads: what a member subscribes to, what it is given.

The group coordinator treats protocol payloads as opaque bytes, as Kafka's does, except for
one check: a member may commit offsets only for partitions in its assignment, so it reads
assignments back with ``decode_assignment``.

Layout (msgpack, version first so a later layout can be told apart)::

    subscription  [1, [topic, ...], {topic: [partition, ...]} owned, generation, user_data]
    assignment    [1, {topic: [partition, ...]}, user_data]

``owned`` and ``generation`` carry the partitions the member held in that generation
(Kafka's ConsumerProtocolSubscription v1+, KIP-429): sticky assignors keep them where they
can, and cooperative rebalancing revokes only what moves.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import msgpack

PROTOCOL_TYPE = "consumer"
VERSION = 1


class MemberSubscription(NamedTuple):
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, int], ...]
    generation: int
    user_data: bytes | None


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(int(partition))
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def _flatten(by_topic: dict[str, list[int]]) -> tuple[tuple[str, int], ...]:
    return tuple((t, p) for t in sorted(by_topic) for p in by_topic[t])


def encode_subscription(
    topics: Iterable[str],
    owned_partitions: Iterable[tuple[str, int]] = (),
    generation: int = -1,
    user_data: bytes | None = None,
) -> bytes:
    return msgpack.packb(
        [VERSION, sorted(set(topics)), _by_topic(owned_partitions), generation, user_data]
    )


def decode_subscription(data: bytes) -> MemberSubscription:
    """Raises ValueError for bytes that are not a subscription of a known version."""
    try:
        version, topics, owned, generation, user_data = msgpack.unpackb(data)[:5]
    except Exception as e:
        raise ValueError(f"not a consumer-protocol subscription: {e}") from None
    if version != VERSION:
        raise ValueError(f"subscription version {version} is unknown (this client knows 1)")
    return MemberSubscription(tuple(topics), _flatten(owned), generation, user_data)


def encode_assignment(
    partitions: Iterable[tuple[str, int]], user_data: bytes | None = None
) -> bytes:
    return msgpack.packb([VERSION, _by_topic(partitions), user_data])


def decode_assignment(data: bytes) -> tuple[tuple[tuple[str, int], ...], bytes | None]:
    """(partitions, user_data); an empty payload is an empty assignment. ValueError for
    bytes that are not an assignment of a known version."""
    if not data:
        return (), None
    try:
        version, by_topic, user_data = msgpack.unpackb(data, strict_map_key=False)[:3]
    except Exception as e:
        raise ValueError(f"not a consumer-protocol assignment: {e}") from None
    if version != VERSION:
        raise ValueError(f"assignment version {version} is unknown (this client knows 1)")
    return _flatten(by_topic), user_data
