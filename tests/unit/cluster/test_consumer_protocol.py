"""The "consumer" protocol's payloads against Kafka's layout (kafka-python as the oracle) and
rafka's earlier msgpack layout."""

from __future__ import annotations

import msgpack
import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KafkaAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KafkaSubscription,
)

from rafka.cluster.consumer_protocol import (
    MemberSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

# kafka-python loads its JSON schemas with a deprecated importlib.resources call.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _kafka_subscription(version: int, **fields) -> bytes:
    owned = [KafkaSubscription.TopicPartition(topic=t, partitions=ps)
             for t, ps in fields.pop("owned", {}).items()]  # fmt: skip
    return KafkaSubscription(version=version, owned_partitions=owned, **fields).encode()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_kafka_python_encodes_decode_at_every_version(version):
    """A Kafka client's subscription of any version 0-3 reads back with the fields that
    version carries (defaults for the rest)."""
    data = _kafka_subscription(
        version, topics=["b", "a"], user_data=b"\x00\x01sticky", owned={"a": [2, 0]},
        generation_id=7, rack_id="rack-1",
    )  # fmt: skip
    sub = decode_subscription(data)
    assert sub.topics == ("a", "b")
    assert sub.user_data == b"\x00\x01sticky"
    assert sub.owned_partitions == ((("a", 0), ("a", 2)) if version >= 1 else ())
    assert sub.generation == (7 if version >= 2 else -1)
    assert sub.rack_id == ("rack-1" if version >= 3 else None)


def test_a_kafka_subscription_with_null_user_data_and_no_topics_decodes():
    """Null user data and an empty topic list are valid subscriptions."""
    sub = decode_subscription(_kafka_subscription(1, topics=[], user_data=None))
    assert sub == MemberSubscription((), (), -1, None, None)


def test_subscriptions_rafka_encodes_are_read_by_kafka_python():
    """rafka's subscription is Kafka's v2 (v3 with a rack), every field as kafka-python
    reads it."""
    data = encode_subscription(["t2", "t1", "t1"], [("t1", 3), ("t1", 1), ("t2", 0)], 12, b"ud")
    decoded = KafkaSubscription.decode(data)
    assert decoded.version == 2
    assert decoded.topics == ["t1", "t2"]
    assert decoded.user_data == b"ud"
    assert [(tp.topic, tp.partitions) for tp in decoded.owned_partitions] == [
        ("t1", [1, 3]), ("t2", [0])]
    assert decoded.generation_id == 12
    with_rack = KafkaSubscription.decode(encode_subscription(["t"], rack_id="r"))
    assert (with_rack.version, with_rack.rack_id, with_rack.user_data) == (3, "r", None)


def test_rafka_subscription_bytes_are_exactly_kafka_python_s():
    """Equal fields give byte-identical payloads: the layout is Kafka's, not a look-alike."""
    ours = encode_subscription(["a"], [("a", 0)], 3, None)
    theirs = _kafka_subscription(2, topics=["a"], user_data=None, owned={"a": [0]},
                                 generation_id=3)  # fmt: skip
    assert ours == theirs
    assert ours == bytes.fromhex(
        "0002" "00000001" "0001" "61" "ffffffff" "00000001" "0001" "61" "00000001" "00000000"
        "00000003"
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignments_kafka_python_encodes_decode_at_every_version(version):
    """A Kafka leader's assignment of any version reads back sorted, with its user data."""
    data = KafkaAssignment(
        version=version,
        assigned_partitions=[KafkaAssignment.TopicPartition(topic="z", partitions=[4, 1]),
                             KafkaAssignment.TopicPartition(topic="a", partitions=[0])],
        user_data=b"u",
    ).encode()  # fmt: skip
    assert decode_assignment(data) == ((("a", 0), ("z", 1), ("z", 4)), b"u")


def test_assignments_rafka_encodes_are_read_by_kafka_python():
    """rafka's assignment is Kafka's v0, as kafka-python reads it (null user data too)."""
    decoded = KafkaAssignment.decode(encode_assignment([("b", 2), ("a", 1), ("b", 0)]))
    assert decoded.version == 0
    assert sorted(decoded.partitions()) == [("a", 1), ("b", 0), ("b", 2)]
    assert decoded.user_data is None
    assert KafkaAssignment.decode(encode_assignment([], b"x")).user_data == b"x"


def test_higher_versions_are_read_by_their_known_fields():
    """A version past 3 (a later Kafka appending fields) reads what rafka knows and ignores
    the rest, as Kafka's readers do."""
    data = bytearray(encode_subscription(["t"], [("t", 0)], 5, None, rack_id="r"))
    data[1] = 9
    sub = decode_subscription(bytes(data) + b"\x00\x00\x00\x00future")
    assert (sub.topics, sub.owned_partitions, sub.generation, sub.rack_id) == (
        ("t",), (("t", 0),), 5, "r")
    assignment = bytearray(encode_assignment([("t", 1)]))
    assignment[1] = 4
    assert decode_assignment(bytes(assignment) + b"\x01")[0] == (("t", 1),)


def test_payloads_of_rafka_s_earlier_msgpack_layout_still_decode():
    """Groups stored before the switch to Kafka's layout keep their subscriptions and
    assignments readable."""
    old_sub = msgpack.packb([1, ["a", "b"], {"a": [1, 0]}, 4, b"u"])
    assert decode_subscription(old_sub) == MemberSubscription(
        ("a", "b"), (("a", 0), ("a", 1)), 4, b"u")
    old_assignment = msgpack.packb([1, {"a": [3, 2]}, None])
    assert decode_assignment(old_assignment) == ((("a", 2), ("a", 3)), None)


def test_an_empty_assignment_payload_is_no_partitions():
    """Empty bytes (a member the leader gave nothing) is an empty assignment."""
    assert decode_assignment(b"") == ((), None)


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\x00\x02\x00\x00\x00\x05\x00\x01a", b"\xff\xff\x00\x00\x00\x00",
    b"\x00\x00\x7f\xff\xff\xff", msgpack.packb([2, [], {}, -1, None]), b"\x93\xc1",
])  # fmt: skip
def test_bytes_that_are_no_subscription_raise_value_error(data):
    """Truncated, negative-version, impossible-count and unknown-layout bytes raise
    ValueError (the coordinator then skips its partition checks), never anything else."""
    with pytest.raises(ValueError):
        decode_subscription(data)


@pytest.mark.parametrize("data", [
    b"\x00", b"\x00\x00\x00\x00\x00\x01\x00\x05ab", msgpack.packb([7, {}, None]),
    b"\x00\x00\x00\x00\x00\x01\xff\xff",
])  # fmt: skip
def test_bytes_that_are_no_assignment_raise_value_error(data):
    """Malformed assignments raise ValueError."""
    with pytest.raises(ValueError):
        decode_assignment(data)


def test_round_trips_keep_every_field():
    """encode then decode gives the same subscription and assignment back."""
    sub = decode_subscription(encode_subscription(["x", "y"], [("y", 1)], 2, b"", "rack"))
    assert sub == MemberSubscription(("x", "y"), (("y", 1),), 2, b"", "rack")
    assert decode_assignment(encode_assignment([("x", 0)], b"d")) == ((("x", 0),), b"d")


# -- mixed groups: Kafka clients and rafka consumers -------------------------------------------


def test_rafka_s_leader_assigns_to_kafka_members_and_they_read_it():
    """A rafka leader reads a kafka-python member's cooperative subscription (owned
    partitions and generation included) and gives it an assignment kafka-python reads."""
    from rafka.clients.assignors import make_assignors
    from rafka.clients.leader_assignment import assign, subscriptions_of

    kafka_member = _kafka_subscription(2, topics=["t"], user_data=b"", owned={"t": [1]},
                                       generation_id=4)  # fmt: skip
    rafka_member = encode_subscription(["t"], [("t", 0)], 4)
    subs = subscriptions_of([("kafka-1", None, kafka_member), ("rafka-1", None, rafka_member)])
    assert [tp.partition for tp in subs["kafka-1"].owned_partitions] == [1]
    (cooperative,) = make_assignors("cooperative-sticky")
    assigned = assign(cooperative, {"t": 2}, subs)
    assert KafkaAssignment.decode(assigned["kafka-1"]).partitions() == [("t", 1)]
    assert decode_assignment(assigned["rafka-1"])[0] == (("t", 0),)


def test_assignor_names_are_kafka_clients_names():
    """rafka's assignors go by the protocol names kafka-python (and librdkafka: range,
    roundrobin, cooperative-sticky) use, so a mixed group finds a common assignor."""
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    from rafka.clients.assignors import ASSIGNORS

    theirs = {a.name for a in (RangePartitionAssignor, RoundRobinPartitionAssignor,
                               StickyPartitionAssignor, CooperativeStickyAssignor)}
    assert theirs == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    assert theirs <= set(ASSIGNORS)


def test_a_kafka_leader_reads_rafka_members_subscriptions():
    """kafka-python's cooperative-sticky assignor, leading, reads a rafka member's topics,
    owned partitions and generation."""
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

    parsed = CooperativeStickyAssignor.parse_member_metadata(
        KafkaSubscription.decode(encode_subscription(["t"], [("t", 3)], 6)))
    assert (parsed.subscription, parsed.generation) == (["t"], 6)
    assert [(tp.topic, tp.partition) for tp in parsed.partitions] == [("t", 3)]


def test_the_group_checks_commits_of_a_kafka_member_against_its_kafka_assignment():
    """The coordinator decodes a Kafka client's payloads to know which partitions the member
    may commit, so a Kafka member is held to its assignment as a rafka member is; its
    description carries the subscription bytes as the client sent them."""
    from rafka.cluster.group import CommittedOffset, Group, GroupConfig, GroupState
    from rafka.errors import CommitFailed

    group = Group("g", GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0), 0)
    kafka_sub = _kafka_subscription(0, topics=["t"], user_data=b"")
    member_id, _ = group.join("", None, "kafka", "host", "consumer", [("range", kafka_sub)],
                              1_000, 5_000, 0)  # fmt: skip
    group.tick(1)
    assignment = KafkaAssignment(
        version=1, assigned_partitions=[KafkaAssignment.TopicPartition(topic="t",
                                                                      partitions=[0])],
        user_data=None).encode()  # fmt: skip
    effects = group.sync(member_id, None, group.generation, {member_id: assignment}, 2)
    for write in effects.writes:
        group.persisted(write, 3)
    assert group.state == GroupState.STABLE
    group.check_commit(member_id, None, group.generation, {("t", 0): CommittedOffset(5, 0, "", 0)})
    with pytest.raises(CommitFailed):
        group.check_commit(member_id, None, group.generation,
                           {("t", 1): CommittedOffset(5, 0, "", 0)})  # fmt: skip
    (described,) = group.describe()["members"]
    assert described["subscription"] == kafka_sub and described["assignment"] == assignment
