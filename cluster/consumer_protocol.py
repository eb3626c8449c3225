"""The "consumer" group protocol's payloads: what a member subscribes to, what it is given.

The group coordinator treats protocol payloads as opaque bytes, as Kafka's does, except for
one check: a member may commit offsets only for partitions in its assignment, so it reads
assignments back with ``decode_assignment``.

rafka writes Kafka's own layout (non-flexible, big-endian; strings int16-length UTF-8,
arrays int32 count, nullable bytes int32 length with -1 for null), so a group may mix rafka's
consumers and Kafka clients: either kind of leader reads the other kind's subscriptions::

    ConsumerProtocolSubscription
      version           int16     2 (3 when a rack id is given)
      topics            [string]
      user_data         bytes?    assignor-specific, passed back to the leader untouched
      owned_partitions  [topic string, partitions [int32]]    v1+
      generation_id     int32                                 v2+ (-1: none)
      rack_id           string?                               v3+

    ConsumerProtocolAssignment (the same fields at every version 0-3; rafka writes 0)
      version              int16
      assigned_partitions  [topic string, partitions [int32]]
      user_data            bytes?

``owned_partitions`` and ``generation_id`` carry the partitions the member held in that
generation (KIP-429): sticky assignors keep them where they can, and cooperative rebalancing
revokes only what moves. The versions written are the lowest carrying these fields; readers
of every Kafka client accept them, and read a higher version's known fields (as this module
does: later versions only append fields).

Before Kafka's layout rafka wrote msgpack (``[1, topics, {topic: [partition]} owned,
generation, user_data]`` and ``[1, {topic: [partition]}, user_data]``); groups stored then
are still in __consumer_offsets, so those payloads are still read. A msgpack array starts
with a byte 0x90-0x9f or 0xdc/0xdd, Kafka's layout with its int16 version's high byte 0x00.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

import msgpack

PROTOCOL_TYPE = "consumer"
#: The versions rafka writes (see the module docstring).
SUBSCRIPTION_VERSION = 2
SUBSCRIPTION_VERSION_WITH_RACK = 3
ASSIGNMENT_VERSION = 0
#: The version of the msgpack layout of earlier rafka releases.
LEGACY_VERSION = 1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class MemberSubscription(NamedTuple):
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, int], ...]
    generation: int
    user_data: bytes | None
    rack_id: str | None = None


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(int(partition))
    return {t: sorted(set(ps)) for t, ps in sorted(out.items())}


def _flatten(by_topic: dict[str, list[int]]) -> tuple[tuple[str, int], ...]:
    return tuple((t, p) for t in sorted(by_topic) for p in sorted(by_topic[t]))


# -- writing -----------------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka's 32767")
    return _INT16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return _INT16.pack(-1) if value is None else _string(value)


def _nullable_bytes(value: bytes | None) -> bytes:
    return _INT32.pack(-1) if value is None else _INT32.pack(len(value)) + bytes(value)


def _topic_partitions(by_topic: dict[str, list[int]]) -> bytes:
    parts = [_INT32.pack(len(by_topic))]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(partitions)))
        parts.extend(_INT32.pack(p) for p in partitions)
    return b"".join(parts)


def encode_subscription(
    topics: Iterable[str],
    owned_partitions: Iterable[tuple[str, int]] = (),
    generation: int = -1,
    user_data: bytes | None = None,
    rack_id: str | None = None,
) -> bytes:
    """Kafka's ConsumerProtocolSubscription v2 (v3 with ``rack_id``); topics sorted, so
    equal subscriptions give equal bytes."""
    version = SUBSCRIPTION_VERSION if rack_id is None else SUBSCRIPTION_VERSION_WITH_RACK
    names = sorted(set(topics))
    parts = [_INT16.pack(version), _INT32.pack(len(names))]
    parts.extend(_string(t) for t in names)
    parts.append(_nullable_bytes(user_data))
    parts.append(_topic_partitions(_by_topic(owned_partitions)))
    parts.append(_INT32.pack(generation))
    if version >= 3:
        parts.append(_nullable_string(rack_id))
    return b"".join(parts)


def encode_assignment(
    partitions: Iterable[tuple[str, int]], user_data: bytes | None = None
) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0, topics and partitions sorted."""
    return (
        _INT16.pack(ASSIGNMENT_VERSION)
        + _topic_partitions(_by_topic(partitions))
        + _nullable_bytes(user_data)
    )


# -- reading -----------------------------------------------------------------------------------


class _Reader:
    """Reads Kafka's non-flexible primitives; ValueError on bytes that end too soon."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{n} bytes wanted at byte {self.pos} of {len(self.data)}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise ValueError(f"null string at byte {self.pos - 2} where one is required")
        return str(self._take(n), "utf-8")

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else str(self._take(n), "utf-8")

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else bytes(self._take(n))

    def count(self) -> int:
        """An array's length; a null array (-1) reads as empty."""
        n = self.int32()
        if n < -1 or n > len(self.data) - self.pos:  # each element takes at least one byte
            raise ValueError(f"array of {n} elements at byte {self.pos - 4} is impossible")
        return max(n, 0)

    def topic_partitions(self) -> tuple[tuple[str, int], ...]:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out.extend((topic, self.int32()) for _ in range(self.count()))
        return _flatten(_by_topic(out))


def _is_legacy(data: bytes) -> bool:
    return data[0] in range(0x90, 0xA0) or data[0] in (0xDC, 0xDD)


def _kafka_version(reader: _Reader, what: str) -> int:
    version = reader.int16()
    if version < 0:
        raise ValueError(f"{what} version {version} is invalid")
    return version


def decode_subscription(data: bytes) -> MemberSubscription:
    """Kafka's ConsumerProtocolSubscription of any version (fields of versions after 3 are
    skipped), or rafka's earlier msgpack layout; topics come sorted. Raises ValueError for
    other bytes."""
    if not data:
        raise ValueError("not a consumer-protocol subscription: no bytes")
    if _is_legacy(data):
        return _legacy_subscription(data)
    try:
        reader = _Reader(data)
        version = _kafka_version(reader, "subscription")
        topics = tuple(sorted({reader.string() for _ in range(reader.count())}))
        user_data = reader.nullable_bytes()
        owned = reader.topic_partitions() if version >= 1 else ()
        generation = reader.int32() if version >= 2 else -1
        rack_id = reader.nullable_string() if version >= 3 else None
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer-protocol subscription: {e}") from None
    return MemberSubscription(topics, owned, generation, user_data, rack_id)


def decode_assignment(data: bytes) -> tuple[tuple[tuple[str, int], ...], bytes | None]:
    """(partitions, user_data) from Kafka's ConsumerProtocolAssignment of any version, or
    rafka's earlier msgpack layout; an empty payload is an empty assignment. ValueError for
    other bytes."""
    if not data:
        return (), None
    if _is_legacy(data):
        return _legacy_assignment(data)
    try:
        reader = _Reader(data)
        _kafka_version(reader, "assignment")
        partitions = reader.topic_partitions()
        user_data = reader.nullable_bytes()
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer-protocol assignment: {e}") from None
    return partitions, user_data


def _legacy_subscription(data: bytes) -> MemberSubscription:
    try:
        version, topics, owned, generation, user_data = msgpack.unpackb(data)[:5]
    except Exception as e:
        raise ValueError(f"not a consumer-protocol subscription: {e}") from None
    if version != LEGACY_VERSION:
        raise ValueError(f"subscription version {version} of rafka's msgpack layout is unknown")
    return MemberSubscription(tuple(topics), _flatten(owned), generation, user_data)


def _legacy_assignment(data: bytes) -> tuple[tuple[tuple[str, int], ...], bytes | None]:
    try:
        version, by_topic, user_data = msgpack.unpackb(data, strict_map_key=False)[:3]
    except Exception as e:
        raise ValueError(f"not a consumer-protocol assignment: {e}") from None
    if version != LEGACY_VERSION:
        raise ValueError(f"assignment version {version} of rafka's msgpack layout is unknown")
    return _flatten(by_topic), user_data
