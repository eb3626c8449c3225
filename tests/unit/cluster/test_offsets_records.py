"""The records of __consumer_offsets and the consumer protocol's payloads: exact round
trips, tombstones, and Kafka's group-to-partition mapping."""

import pytest

from rafka.cluster.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from rafka.cluster.offsets_records import (
    GroupKey,
    OffsetKey,
    coordinator_shard,
    decode_key,
    decode_value,
    group_key,
    group_value,
    java_string_hash,
    offset_key,
    offset_value,
)


@pytest.mark.parametrize(
    "text, expected",
    # Printed by String.hashCode() on Java 17.
    [("", 0), ("hello", 99162322), ("my-group", -1906497762), ("é☃", 16954),
     ("𝄞", 1772394), ("a-long-group-name-with-many-characters-1234567890", -650422232)],
)  # fmt: skip
def test_group_hash_is_java_string_hash_code(text, expected):
    """Kafka places a group by Java's String.hashCode over UTF-16 units; rafka computes the
    same value (astral characters count as two units)."""
    assert java_string_hash(text) == expected


def test_groups_map_to_kafka_s_partition_for_the_same_partition_count():
    """abs(hashCode) % partitions, with Kafka's abs mapping Integer.MIN_VALUE to 0."""
    assert coordinator_shard("hello", 50) == 99162322 % 50
    assert coordinator_shard("my-group", 50) == 1906497762 % 50 == 12
    assert all(0 <= coordinator_shard(f"group-{i}", 4) < 4 for i in range(200))


def test_offset_and_group_records_round_trip_and_tombstones_decode_to_none():
    """Each key names its kind; values come back as written; a missing value is a delete."""
    assert decode_key(offset_key("g", "orders", 3)) == OffsetKey("g", "orders", 3)
    assert decode_value(offset_value(42, 7, "meta", 1000)) == {
        "offset": 42, "leader_epoch": 7, "metadata": "meta", "commit_ms": 1000,
    }
    assert decode_key(group_key("g")) == GroupKey("g")
    assert decode_value(group_value({"generation": 3, "members": []}))["generation"] == 3
    assert decode_value(None) is None


def test_subscription_and_assignment_payloads_round_trip():
    """Topics, owned partitions (KIP-429) and generation survive the trip; an empty
    assignment payload is no partitions."""
    data = encode_subscription(["b", "a", "a"], [("a", 2), ("a", 0), ("b", 1)], 5, b"u")
    sub = decode_subscription(data)
    assert sub.topics == ("a", "b")
    assert sub.owned_partitions == (("a", 0), ("a", 2), ("b", 1))
    assert (sub.generation, sub.user_data) == (5, b"u")
    assert decode_assignment(encode_assignment([("t", 1), ("s", 0)])) == (
        (("s", 0), ("t", 1)), None
    )
    assert decode_assignment(b"") == ((), None)
    with pytest.raises(ValueError, match="not a consumer-protocol"):
        decode_subscription(b"\x01")
