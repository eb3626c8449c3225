"""The metadata image and the controller's decisions: records in, image out, nothing else.

Every change to the image is a record; replaying ``to_records()`` rebuilds an equal image, and
the controller's functions only return records (a refused request changes nothing)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.cluster import controller
from rafka.cluster.metadata import (
    NO_LEADER,
    REMEMBERED_REQUESTS,
    BrokerState,
    MetadataImage,
    PartitionState,
    TopicState,
)
from rafka.cluster.placement import assign_replicas
from rafka.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRecord,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)

BROKERS = [0, 1, 2]


# -- helpers -----------------------------------------------------------------------------------


def commit(image: MetadataImage, records: list[dict]) -> None:
    """Apply ``records`` at the offsets the metadata log would give them."""
    for record in records:
        image.apply(record, image.offset + 1)


def image_with(*records: dict) -> MetadataImage:
    image = MetadataImage()
    commit(image, list(records))
    return image


def state(image: MetadataImage):
    """Everything an image holds, deep-copied, for equality checks."""
    return copy.deepcopy(
        (image.topics, image.topic_ids, image.brokers, image.next_producer_id, image.offset)
    )


def rebuilt(image: MetadataImage) -> MetadataImage:
    copy_ = MetadataImage()
    for record in image.to_records():
        copy_.apply(record, image.offset)
    return copy_


def same_content(a: MetadataImage, b: MetadataImage) -> bool:
    return (a.topics, a.topic_ids, a.brokers, a.next_producer_id) == (
        b.topics, b.topic_ids, b.brokers, b.next_producer_id,
    )  # fmt: skip


def created(image: MetadataImage, name: str, partitions=3, rf=2, config=None, **kw) -> str:
    topic_id, records = controller.create_topic(
        image, name, partitions, rf, config, kw.pop("brokers", BROKERS), **kw
    )
    commit(image, records)
    return topic_id


def topic_record(topic_id="t1", name="orders", config=None, internal=False) -> dict:
    return {"type": "topic", "topic_id": topic_id, "name": name, "config": config or {},
            "internal": internal}  # fmt: skip


def partition_record(
    topic_id="t1", partition=0, replicas=(0, 1), isr=None, leader=None, leader_epoch=0,
    partition_epoch=0, adding=(), removing=(), elr=(), unclean_logs=(),
) -> dict:  # fmt: skip
    replicas = list(replicas)
    return {
        "type": "partition", "topic_id": topic_id, "partition": partition,
        "replicas": replicas, "isr": list(isr if isr is not None else replicas),
        "leader": replicas[0] if leader is None else leader, "leader_epoch": leader_epoch,
        "partition_epoch": partition_epoch, "adding": list(adding), "removing": list(removing),
        "elr": list(elr), "unclean_logs": [list(c) for c in unclean_logs],
    }  # fmt: skip


def broker_record(broker_id: int, disk: str, rack: str | None = None) -> dict:
    return {"type": "broker", "broker_id": broker_id, "disk": disk, "rack": rack}


def with_brokers(racks: dict[int, str | None]) -> MetadataImage:
    """An image that knows brokers ``racks`` (broker id -> rack), disk ``/d<id>`` each."""
    return image_with(*(broker_record(b, f"/d{b}", rack) for b, rack in racks.items()))


# -- MetadataImage.apply, record by record -----------------------------------------------------


def test_empty_image_has_offset_minus_one_and_nothing_in_it():
    """A new image knows no topics, brokers or producer ids and has applied no record."""
    image = MetadataImage()
    assert (image.topics, image.topic_ids, image.brokers) == ({}, {}, {})
    assert image.next_producer_id == 0
    assert image.offset == -1


def test_broker_record_adds_the_disk_under_its_broker_id():
    """A broker record maps the broker id to its disk; broker_for_disk finds it back."""
    image = image_with({"type": "broker", "broker_id": 4, "disk": "/d/a"})
    assert image.brokers == {4: BrokerState(4, "/d/a")}
    assert image.broker_for_disk("/d/a") == BrokerState(4, "/d/a")
    assert image.broker_for_disk("/d/b") is None
    assert image.offset == 0


def test_broker_record_carries_the_rack_and_an_old_record_without_one_means_no_rack():
    """The rack of a broker record lands in BrokerState; a record written before racks
    existed (no "rack" field) gives rack None."""
    image = image_with(broker_record(0, "/a", "r1"), {"type": "broker", "broker_id": 1,
                                                      "disk": "/b"})  # fmt: skip
    assert image.brokers == {0: BrokerState(0, "/a", "r1"), 1: BrokerState(1, "/b", None)}
    commit(image, [broker_record(0, "/a", "r2")])
    assert image.brokers[0].rack == "r2"


def test_topic_record_creates_a_topic_findable_by_name():
    """A topic record registers the topic by id and by name, with no partitions yet; a
    record without a creation offset (written before they existed) counts its own."""
    image = image_with(topic_record(config={"retention.ms": 5}, internal=True))
    topic = image.topic("orders")
    assert topic == TopicState("t1", "orders", {"retention.ms": 5}, True, {}, created_at=0)
    assert image.topic_ids == {"orders": "t1"}


def test_unknown_topic_name_raises_unknown_topic_naming_it():
    """Looking up a name no topic has raises UnknownTopicOrPartition saying which."""
    with pytest.raises(UnknownTopicOrPartition, match="'nope'"):
        MetadataImage().topic("nope")


def test_partition_record_sets_the_whole_partition_state():
    """A partition record creates a partition with replicas, ISR, leader and epoch."""
    image = image_with(topic_record(), partition_record(replicas=(2, 0), leader_epoch=0))
    assert image.topic("orders").partitions == {0: PartitionState(0, [2, 0], [2, 0], 2, 0)}


def test_partition_record_carries_partition_epoch_and_a_reassignment():
    """partition_epoch, adding and removing land in the state; target_replicas is the
    replica set without the replicas being removed."""
    image = image_with(topic_record(), partition_record(
        replicas=(0, 1, 2), isr=(0, 1), partition_epoch=7, adding=(2,), removing=(0,)
    ))  # fmt: skip
    state_ = image.topic("orders").partitions[0]
    assert state_ == PartitionState(0, [0, 1, 2], [0, 1], 0, 0, 7, [2], [0])
    assert state_.target_replicas == [1, 2]
    assert state_.to_record("t1") == partition_record(
        replicas=(0, 1, 2), isr=(0, 1), partition_epoch=7, adding=(2,), removing=(0,)
    )


def test_partition_record_written_before_partition_epochs_applies_with_defaults():
    """A partition record of an older metadata log (no partition_epoch, adding, removing)
    gives partition epoch 0 and no reassignment."""
    old = partition_record(replicas=(1, 0), leader_epoch=4)
    for key in ("partition_epoch", "adding", "removing"):
        del old[key]
    image = image_with(topic_record(), old)
    assert image.topic("orders").partitions[0] == PartitionState(0, [1, 0], [1, 0], 1, 4, 0,
                                                                 [], [])  # fmt: skip


def test_later_partition_record_replaces_leadership():
    """A second record for the same partition replaces its state (a leader change)."""
    image = image_with(
        topic_record(),
        partition_record(replicas=(0, 1)),
        partition_record(replicas=(0, 1), isr=(1,), leader=1, leader_epoch=1),
    )
    assert image.topic("orders").partitions[0] == PartitionState(0, [0, 1], [1], 1, 1)


def test_partition_record_may_leave_a_partition_leaderless():
    """NO_LEADER with an empty ISR is a valid state (every replica is down)."""
    image = image_with(
        topic_record(), partition_record(replicas=(0,), isr=(), leader=NO_LEADER, leader_epoch=3)
    )
    assert image.topic("orders").partitions[0].leader == NO_LEADER


def test_config_record_replaces_the_overrides():
    """A config record replaces the topic's overrides as a whole (not merged)."""
    image = image_with(
        topic_record(config={"retention.ms": 1, "segment.bytes": 1024}),
        {"type": "config", "topic_id": "t1", "config": {"cleanup.policy": "compact"}},
    )
    assert image.topic("orders").config == {"cleanup.policy": "compact"}


def test_delete_record_removes_the_topic_and_frees_its_name():
    """After a delete the name is unknown and can be created again under a new id."""
    image = image_with(
        topic_record(), partition_record(), {"type": "delete", "topic_id": "t1"}
    )
    assert image.topics == {} and image.topic_ids == {}
    commit(image, [topic_record(topic_id="t2")])
    assert image.topic("orders").topic_id == "t2"


def test_producer_ids_record_never_moves_the_counter_back():
    """The producer-id counter takes the largest ``next`` it has seen."""
    image = image_with({"type": "producer_ids", "next": 2000})
    assert image.next_producer_id == 2000
    commit(image, [{"type": "producer_ids", "next": 1000}])
    assert image.next_producer_id == 2000


def test_unknown_record_type_raises_naming_type_and_offset_and_keeps_offset():
    """A record of an unknown type is refused with its type and offset; offset stays."""
    image = image_with({"type": "broker", "broker_id": 0, "disk": "d"})
    with pytest.raises(ValueError, match=r"'bogus' at offset 7"):
        image.apply({"type": "bogus"}, 7)
    assert image.offset == 0


def test_apply_records_the_offset_it_was_given():
    """``offset`` is the metadata-log offset of the last record applied."""
    image = MetadataImage()
    image.apply({"type": "broker", "broker_id": 0, "disk": "d"}, 41)
    assert image.offset == 41


def test_apply_copies_lists_and_dicts_out_of_the_record():
    """Mutating a record after applying it does not change the image."""
    config = {"retention.ms": 1}
    part = partition_record()
    image = image_with(topic_record(config=config), part)
    config["retention.ms"] = 2
    part["replicas"].append(9)
    part["isr"].clear()
    topic = image.topic("orders")
    assert topic.config == {"retention.ms": 1}
    assert topic.partitions[0].replicas == [0, 1] and topic.partitions[0].isr == [0, 1]


def test_replicas_on_lists_every_partition_a_broker_holds():
    """replicas_on(b) gives exactly the (topic, partition) pairs whose replicas include b."""
    image = image_with(
        topic_record(),
        partition_record(partition=0, replicas=(0, 1)),
        partition_record(partition=1, replicas=(1, 2)),
        partition_record(partition=2, replicas=(2, 0)),
    )
    assert sorted(p.partition for _t, p in image.replicas_on(1)) == [0, 1]
    assert sorted(p.partition for _t, p in image.replicas_on(0)) == [0, 2]
    assert image.replicas_on(5) == []


# -- to_records rebuilds an equal image --------------------------------------------------------


@st.composite
def record_sequences(draw):
    """A valid sequence of metadata records: every record refers to things that exist."""
    records: list[dict] = []
    topics: dict[str, dict] = {}  # topic id -> {"name", "partitions"}
    names = set()
    next_id = 0
    retired: set[int] = set()
    for _ in range(draw(st.integers(0, 40))):
        kinds = ["broker", "topic", "producer_ids", "fenced", "drain", "controller",
                 "settings", "request", "retire"]
        if topics:
            kinds += ["partition", "config", "delete"]
        kind = draw(st.sampled_from(kinds))
        if kind == "broker":
            records.append(broker_record(
                draw(st.integers(0, 6)), draw(st.sampled_from(["/a", "/b", "/c", "/d"])),
                draw(st.sampled_from([None, "r1", "r2"])),
            ))  # fmt: skip
        elif kind == "topic":
            name = draw(st.text("abc._-", min_size=1, max_size=5))
            if name in names:
                continue
            topic_id = f"id{next_id}"
            next_id += 1
            names.add(name)
            topics[topic_id] = {"name": name, "partitions": 0}
            records.append(topic_record(
                topic_id, name, draw(st.dictionaries(
                    st.sampled_from(["retention.ms", "segment.bytes", "cleanup.policy"]),
                    st.one_of(st.integers(0, 10**6), st.sampled_from(["compact", "delete"])),
                )), draw(st.booleans()),
            ))  # fmt: skip
        elif kind == "partition":
            topic_id = draw(st.sampled_from(sorted(topics)))
            count = topics[topic_id]["partitions"]
            partition = draw(st.integers(0, count))  # an existing one, or the next
            topics[topic_id]["partitions"] = max(count, partition + 1)
            replicas = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
            isr = [b for b in replicas if draw(st.booleans())]
            leader = isr[0] if isr else NO_LEADER
            adding = [b for b in replicas[1:] if draw(st.booleans())]
            removing = [b for b in replicas if b not in adding and draw(st.booleans())]
            records.append(partition_record(
                topic_id, partition, replicas, isr, leader, draw(st.integers(0, 50)),
                draw(st.integers(0, 80)), adding, removing,
            ))  # fmt: skip
        elif kind == "config":
            records.append({"type": "config", "topic_id": draw(st.sampled_from(sorted(topics))),
                            "config": draw(st.dictionaries(
                                st.sampled_from(["retention.ms", "flush.ms"]),
                                st.integers(0, 10**9)))})  # fmt: skip
        elif kind == "delete":
            topic_id = draw(st.sampled_from(sorted(topics)))
            names.discard(topics.pop(topic_id)["name"])
            records.append({"type": "delete", "topic_id": topic_id})
        elif kind == "fenced":
            records.append({"type": "fenced", "broker_id": draw(st.integers(0, 6)),
                            "fenced": draw(st.booleans())})  # fmt: skip
        elif kind == "drain":
            records.append({"type": "drain", "broker_id": draw(st.integers(0, 6)),
                            "draining": draw(st.booleans())})  # fmt: skip
        elif kind == "retire":
            # Ids 7-9 are never named by a partition (those draw 0-6), so they hold nothing.
            broker_id = draw(st.integers(7, 9))
            if broker_id in retired:
                continue
            retired.add(broker_id)
            records += [broker_record(broker_id, f"/auto-{broker_id}", None),
                        {"type": "drain", "broker_id": broker_id, "draining": True},
                        {"type": "retire", "broker_id": broker_id}]  # fmt: skip
        elif kind == "controller":
            records.append({"type": "controller", "epoch": draw(st.integers(0, 9))})
        elif kind == "settings":
            records.append({"type": "settings", "settings": draw(st.dictionaries(
                st.sampled_from(["num.partitions", "broker.session.timeout.ms"]),
                st.integers(1, 10**5)))})  # fmt: skip
        elif kind == "request":
            records.append({"type": "request", "request_id": draw(st.text("xyz", max_size=3)),
                            "kind": "create_topic", "topic_id": "id0"})  # fmt: skip
        else:
            records.append({"type": "producer_ids", "next": draw(st.integers(0, 10**6))})
    return records


@given(record_sequences())
def test_to_records_rebuilds_an_equal_image(records):
    """Replaying an image's to_records() from empty gives the same topics, partitions,
    configs, brokers and producer-id counter, whatever records built it."""
    image = image_with(*records)
    copy_ = rebuilt(image)
    assert same_content(copy_, image)
    assert copy_.to_records() == image.to_records()


@given(record_sequences())
def test_rebuilt_image_shares_no_mutable_state_with_the_original(records):
    """A snapshot's records are copies: changing the original image afterwards (as later
    records do) leaves the rebuilt one as it was."""
    image = image_with(*records)
    copy_ = rebuilt(image)
    before = state(copy_)
    for topic in image.topics.values():
        topic.config["mutated"] = True
        for p in topic.partitions.values():
            p.replicas.append(99)
            p.isr.append(99)
            p.adding.append(99)
            p.removing.append(99)
    assert state(copy_) == before


@given(record_sequences())
def test_applying_records_in_two_halves_equals_applying_them_at_once(records):
    """Snapshot-then-replay: rebuilding from a snapshot of a prefix and applying the rest
    gives the image that applying every record gives."""
    cut = len(records) // 2
    whole = image_with(*records)
    prefix = image_with(*records[:cut])
    resumed = rebuilt(prefix)
    commit(resumed, records[cut:])
    assert same_content(resumed, whole)


# -- controller.create_topic -------------------------------------------------------------------


def test_create_topic_returns_a_topic_record_then_one_record_per_partition():
    """The records name a fresh topic id; each partition starts with its replicas as ISR,
    the first replica as leader and leader epoch 0."""
    image = MetadataImage()
    topic_id, records = controller.create_topic(image, "orders", 4, 2, None, BROKERS)
    assert records[0] == {**topic_record(topic_id, "orders", {}, False), "created_at": 0}
    plan = assign_replicas(topic_id, 0, 4, 2, BROKERS)
    assert records[1:] == [partition_record(topic_id, p, plan[p]) for p in range(4)]
    commit(image, records)
    topic = image.topic("orders")
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    for p in topic.partitions.values():
        assert len(set(p.replicas)) == 2 and p.leader == p.replicas[0] and p.isr == p.replicas


def test_create_topic_gives_every_topic_a_new_id():
    """Two topics never share an id."""
    image = MetadataImage()
    ids = {created(image, f"t{i}", partitions=1, rf=1) for i in range(20)}
    assert len(ids) == 20


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "x" * 250, "é", "a/b", None, 7])
def test_create_topic_refuses_illegal_names(name):
    """Names Kafka refuses raise InvalidTopic."""
    with pytest.raises(InvalidTopic):
        controller.create_topic(MetadataImage(), name, 1, 1, None, BROKERS)


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_create_topic_refuses_internal_names_unless_rafka_creates_them(name):
    """Users may not create internal topics; rafka may, and marks them internal."""
    image = MetadataImage()
    with pytest.raises(InvalidTopic, match="internal"):
        controller.create_topic(image, name, 1, 1, None, BROKERS)
    topic_id, records = controller.create_topic(image, name, 1, 1, None, BROKERS, internal=True)
    assert records[0]["internal"] is True
    commit(image, records)
    assert image.topic(name).internal


def test_create_topic_refuses_an_existing_name_with_topic_already_exists():
    """Creating a topic twice raises TopicAlreadyExists naming it."""
    image = MetadataImage()
    created(image, "orders")
    with pytest.raises(TopicAlreadyExists, match="'orders'"):
        controller.create_topic(image, "orders", 3, 2, None, BROKERS)


@pytest.mark.parametrize(
    "existing, new", [("a.b", "a_b"), ("a_b", "a.b"), ("x.y_z", "x_y.z"), ("..a", "__a")]
)
def test_create_topic_refuses_names_differing_only_in_dot_and_underscore(existing, new):
    """Names equal up to '.' vs '_' collide: InvalidTopic names the existing topic."""
    image = MetadataImage()
    created(image, existing, partitions=1, rf=1)
    with pytest.raises(InvalidTopic, match="collides") as info:
        controller.create_topic(image, new, 1, 1, None, BROKERS)
    assert repr(existing) in str(info.value)


def test_create_topic_allows_names_that_differ_otherwise():
    """'a.b' and 'a-b' do not collide."""
    image = MetadataImage()
    created(image, "a.b", partitions=1, rf=1)
    created(image, "a-b", partitions=1, rf=1)
    assert set(image.topic_ids) == {"a.b", "a-b"}


@pytest.mark.parametrize(
    "partitions", [0, -1, True, False, 1.0, "3", None, controller.MAX_PARTITIONS + 1]
)
def test_create_topic_refuses_partition_counts_that_are_not_positive_ints(partitions):
    """0, negatives, bools, non-ints and counts above MAX_PARTITIONS raise InvalidPartitions."""
    with pytest.raises(InvalidPartitions):
        controller.create_topic(MetadataImage(), "t", partitions, 1, None, BROKERS)


@pytest.mark.parametrize("rf, brokers", [(4, [0, 1, 2]), (1, []), (0, [0, 1]), (-1, [0])])
def test_create_topic_refuses_impossible_replication_factors(rf, brokers):
    """A replication factor above the live broker count (or below 1) raises
    InvalidReplicationFactor."""
    with pytest.raises(InvalidReplicationFactor):
        controller.create_topic(MetadataImage(), "t", 1, rf, None, brokers)


def test_create_topic_places_replicas_only_on_the_live_brokers_given():
    """Every replica lands on one of the brokers passed in."""
    _tid, records = controller.create_topic(MetadataImage(), "t", 10, 2, None, [3, 7, 9])
    for record in records[1:]:
        assert set(record["replicas"]) <= {3, 7, 9}


def test_create_topic_normalises_config_to_the_values_logconfig_parsed():
    """Overrides are stored as LogConfig reads them (string numbers become ints, policy
    lists become 'a,b'), and only the overrides given."""
    _tid, records = controller.create_topic(
        MetadataImage(), "t", 1, 1,
        {"retention.ms": "3600000", "cleanup.policy": "delete, compact",
         "unclean.leader.election.enable": "TRUE"},
        BROKERS,
    )  # fmt: skip
    assert records[0]["config"] == {
        "retention.ms": 3600000, "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    "config, named",
    [({"retention.msx": 1}, "retention.msx"), ({"retention.ms": -2}, "retention.ms"),
     ({"segment.bytes": "big"}, "segment.bytes"), ({"cleanup.policy": "keep"}, "cleanup.policy"),
     ([("retention.ms", 1)], "dict"), ("retention.ms=1", "dict")],
)  # fmt: skip
def test_create_topic_refuses_bad_config_naming_the_property(config, named):
    """Unknown names, out-of-range values and non-dict configs raise InvalidConfig."""
    with pytest.raises(InvalidConfig, match=named):
        controller.create_topic(MetadataImage(), "t", 1, 1, config, BROKERS)


def test_validate_config_of_none_is_no_overrides():
    """No config means no overrides."""
    assert controller.validate_config(None) == {}
    assert controller.validate_config({}) == {}


# -- controller.create_partitions --------------------------------------------------------------


def test_create_partitions_adds_only_the_new_partitions_with_the_same_replication():
    """Growing 3 -> 5 returns records for partitions 3 and 4, placed as a 5-partition topic
    would have placed them, with the topic's replication factor."""
    image = MetadataImage()
    topic_id = created(image, "t", partitions=3, rf=2)
    before = copy.deepcopy(image.topic("t").partitions)
    records = controller.create_partitions(image, "t", 5, BROKERS)
    plan = assign_replicas(topic_id, 0, 5, 2, BROKERS)
    assert records == [partition_record(topic_id, p, plan[p]) for p in (3, 4)]
    commit(image, records)
    partitions = image.topic("t").partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert {p: partitions[p] for p in (0, 1, 2)} == before


@pytest.mark.parametrize("total", [3, 2, 1, 0, -1])
def test_create_partitions_never_shrinks_or_keeps_the_count(total):
    """A count at or below the current one raises InvalidPartitions."""
    image = MetadataImage()
    created(image, "t", partitions=3)
    with pytest.raises(InvalidPartitions):
        controller.create_partitions(image, "t", total, BROKERS)


def test_create_partitions_refuses_bool_and_oversized_counts():
    """True is not a count; neither is one above MAX_PARTITIONS."""
    image = MetadataImage()
    created(image, "t", partitions=1, rf=1)
    for total in (True, controller.MAX_PARTITIONS + 1, 2.0):
        with pytest.raises(InvalidPartitions):
            controller.create_partitions(image, "t", total, BROKERS)


def test_create_partitions_of_unknown_or_internal_topic_is_refused():
    """Unknown topics raise UnknownTopicOrPartition; internal ones InvalidTopic."""
    image = MetadataImage()
    created(image, "__consumer_offsets", partitions=1, rf=1, internal=True)
    with pytest.raises(UnknownTopicOrPartition):
        controller.create_partitions(image, "nope", 4, BROKERS)
    with pytest.raises(InvalidTopic, match="internal"):
        controller.create_partitions(image, "__consumer_offsets", 4, BROKERS)


def test_create_partitions_needs_enough_brokers_for_the_replication_factor():
    """With fewer live brokers than the topic's replication factor, growing is refused."""
    image = MetadataImage()
    created(image, "t", partitions=1, rf=3)
    with pytest.raises(InvalidReplicationFactor):
        controller.create_partitions(image, "t", 2, [0, 1])


# -- controller.alter_config -------------------------------------------------------------------


def test_alter_config_sets_values_and_keeps_other_overrides():
    """Setting a property merges it into the existing overrides, normalised."""
    image = MetadataImage()
    topic_id = created(image, "t", config={"retention.ms": 1000})
    records = controller.alter_config(image, "t", {"segment.bytes": "2048"})
    assert records == [{"type": "config", "topic_id": topic_id,
                        "config": {"retention.ms": 1000, "segment.bytes": 2048}}]  # fmt: skip
    commit(image, records)
    assert image.topic("t").config == {"retention.ms": 1000, "segment.bytes": 2048}


def test_alter_config_with_none_resets_a_property_to_its_default():
    """A None value removes the override; resetting one that is not set changes nothing."""
    image = MetadataImage()
    created(image, "t", config={"retention.ms": 1000, "segment.bytes": 2048})
    commit(image, controller.alter_config(image, "t", {"retention.ms": None, "flush.ms": None}))
    assert image.topic("t").config == {"segment.bytes": 2048}


def test_alter_config_refuses_bad_values_naming_them():
    """A bad value or unknown name raises InvalidConfig."""
    image = MetadataImage()
    created(image, "t")
    with pytest.raises(InvalidConfig, match="min.insync.replicas"):
        controller.alter_config(image, "t", {"min.insync.replicas": 0})
    with pytest.raises(InvalidConfig, match="nonsense"):
        controller.alter_config(image, "t", {"nonsense": 1})


def test_alter_config_of_unknown_or_internal_topic_is_refused():
    """Unknown topics raise UnknownTopicOrPartition; internal topics InvalidTopic."""
    image = MetadataImage()
    created(image, "__transaction_state", partitions=1, rf=1, internal=True)
    with pytest.raises(UnknownTopicOrPartition):
        controller.alter_config(image, "nope", {"retention.ms": 1})
    with pytest.raises(InvalidTopic):
        controller.alter_config(image, "__transaction_state", {"retention.ms": 1})


# -- controller.delete_topic -------------------------------------------------------------------


def test_delete_topic_returns_its_id_and_one_delete_record():
    """Deleting gives the topic id and a delete record; applying it frees the name."""
    image = MetadataImage()
    topic_id = created(image, "t")
    deleted_id, records = controller.delete_topic(image, "t")
    assert deleted_id == topic_id
    assert records == [{"type": "delete", "topic_id": topic_id}]
    commit(image, records)
    with pytest.raises(UnknownTopicOrPartition):
        image.topic("t")
    assert created(image, "t") != topic_id


def test_delete_topic_refuses_unknown_and_internal_topics():
    """Unknown topics raise UnknownTopicOrPartition; internal topics InvalidTopic."""
    image = MetadataImage()
    created(image, "__consumer_offsets", partitions=1, rf=1, internal=True)
    with pytest.raises(UnknownTopicOrPartition):
        controller.delete_topic(image, "t")
    with pytest.raises(InvalidTopic):
        controller.delete_topic(image, "__consumer_offsets")


def test_deleting_a_topic_frees_its_collision_key():
    """After 'a.b' is deleted, 'a_b' may be created."""
    image = MetadataImage()
    created(image, "a.b", partitions=1, rf=1)
    commit(image, controller.delete_topic(image, "a.b")[1])
    created(image, "a_b", partitions=1, rf=1)


def test_check_known_returns_the_partition_or_names_the_valid_range():
    """A known partition's state comes back; an unknown one raises naming the range."""
    image = MetadataImage()
    created(image, "t", partitions=2)
    assert controller.check_known(image, "t", 1) is image.topic("t").partitions[1]
    with pytest.raises(UnknownTopicOrPartition, match=r"0\.\.1, not 2"):
        controller.check_known(image, "t", 2)


# -- controller.register_broker ----------------------------------------------------------------


def test_register_broker_gives_new_disks_new_ids_in_order():
    """Unknown disks get ids 0, 1, 2, ... (one past the largest known)."""
    image = MetadataImage()
    for expected, disk in enumerate(["/a", "/b", "/c"]):
        broker_id, records = controller.register_broker(image, disk, None)
        assert broker_id == expected
        assert records == [broker_record(expected, disk)]
        commit(image, records)


def test_register_broker_returns_the_same_id_for_a_known_disk_without_records():
    """A disk that re-joins keeps its id, whether or not it names it, and needs no record."""
    image = MetadataImage()
    commit(image, controller.register_broker(image, "/a", None)[1])
    commit(image, controller.register_broker(image, "/b", None)[1])
    assert controller.register_broker(image, "/b", None) == (1, [])
    assert controller.register_broker(image, "/b", 1) == (1, [])


def test_register_broker_takes_the_id_meta_properties_holds_for_a_new_disk():
    """A disk that brings its own id (meta.properties) keeps it; the next new disk goes
    past it."""
    image = MetadataImage()
    broker_id, records = controller.register_broker(image, "/a", 7)
    assert broker_id == 7
    commit(image, records)
    assert controller.register_broker(image, "/b", None)[0] == 8


def test_register_broker_refuses_an_id_that_belongs_to_another_disk():
    """Two disks claiming one broker id (copied data) raise InvalidConfig naming both."""
    image = MetadataImage()
    commit(image, controller.register_broker(image, "/a", None)[1])
    with pytest.raises(InvalidConfig, match="'/b'.*broker id 0.*'/a'"):
        controller.register_broker(image, "/b", 0)


def test_register_broker_records_the_rack_of_a_new_broker():
    """A new disk's record carries its rack; the image then knows it."""
    image = MetadataImage()
    broker_id, records = controller.register_broker(image, "/a", None, "rack-1")
    assert (broker_id, records) == (0, [broker_record(0, "/a", "rack-1")])
    commit(image, records)
    assert image.brokers[0] == BrokerState(0, "/a", "rack-1")


def test_register_broker_records_a_changed_rack_and_nothing_for_the_same_one():
    """Re-registering with the rack the metadata holds needs no record; a new rack, or
    none any more (the label was removed), gives a record keeping the broker id."""
    image = MetadataImage()
    commit(image, controller.register_broker(image, "/a", None, "r1")[1])
    assert controller.register_broker(image, "/a", 0, "r1") == (0, [])
    assert controller.register_broker(image, "/a", None, "r1") == (0, [])
    broker_id, records = controller.register_broker(image, "/a", 0, "r2")
    assert (broker_id, records) == (0, [broker_record(0, "/a", "r2")])
    commit(image, records)
    assert controller.register_broker(image, "/a", 0, None) == (0, [broker_record(0, "/a")])


def test_register_broker_treats_an_empty_rack_as_none():
    """An empty rack label means no rack (as Kafka's empty broker.rack)."""
    image = MetadataImage()
    commit(image, controller.register_broker(image, "/a", None)[1])
    assert controller.register_broker(image, "/a", 0, "") == (0, [])


@pytest.mark.parametrize("rack", [7, b"r1", ["r1"]])
def test_register_broker_refuses_a_rack_that_is_not_a_string(rack):
    """A rack must be a str (a label value): InvalidConfig names the disk and the value."""
    with pytest.raises(InvalidConfig, match=r"rack of disk '/a'"):
        controller.register_broker(MetadataImage(), "/a", None, rack)


# -- racks in create_topic and create_partitions -----------------------------------------------

RACKS = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}


def test_broker_racks_reads_the_image_and_gives_none_for_unknown_brokers():
    """broker_racks maps each broker to its rack in the image, None when it has none or
    the image does not know it."""
    image = with_brokers({0: "a", 1: None})
    assert controller.broker_racks(image, [0, 1, 2]) == {0: "a", 1: None, 2: None}


def test_create_topic_places_replicas_on_distinct_racks_when_brokers_have_racks():
    """With racks in the image, create_topic uses the rack-aware plan: each partition of a
    replication-factor-3 topic on 3 brokers spans all 3 racks."""
    image = with_brokers(RACKS)
    topic_id, records = controller.create_topic(image, "t", 12, 3, None, list(RACKS))
    plan = assign_replicas(topic_id, 0, 12, 3, list(RACKS), RACKS)
    assert records[1:] == [partition_record(topic_id, p, plan[p]) for p in range(12)]
    for record in records[1:]:
        assert {RACKS[b] for b in record["replicas"]} == {"a", "b", "c"}


def test_create_topic_without_racks_keeps_the_rack_unaware_plan():
    """Brokers registered without a rack get exactly the rack-unaware plan."""
    image = with_brokers({0: None, 1: None, 2: None})
    topic_id, records = controller.create_topic(image, "t", 6, 2, None, BROKERS)
    plan = assign_replicas(topic_id, 0, 6, 2, BROKERS)
    assert records[1:] == [partition_record(topic_id, p, plan[p]) for p in range(6)]


def test_create_topic_refuses_live_brokers_of_which_only_some_have_a_rack():
    """A mix of brokers with and without a rack raises InvalidReplicaAssignment naming the
    brokers without one and the label to set; racks of brokers not live do not count."""
    image = with_brokers({0: "a", 1: None, 2: "b", 3: None})
    with pytest.raises(InvalidReplicaAssignment, match=r"\(s\) 1, 3 have no rack.*rafka-rack"):
        controller.create_topic(image, "t", 1, 1, None, [0, 1, 2, 3])
    _tid, records = controller.create_topic(image, "t", 4, 2, None, [1, 3])  # none has a rack
    assert all(set(r["replicas"]) == {1, 3} for r in records[1:])


def test_create_partitions_places_new_partitions_rack_aware():
    """Added partitions continue the rack-aware plan of the topic."""
    image = with_brokers(RACKS)
    topic_id = created(image, "t", partitions=2, rf=2, brokers=list(RACKS))
    records = controller.create_partitions(image, "t", 5, list(RACKS))
    plan = assign_replicas(topic_id, 0, 5, 2, list(RACKS), RACKS)
    assert records == [partition_record(topic_id, p, plan[p]) for p in (2, 3, 4)]
    for record in records:
        assert len({RACKS[b] for b in record["replicas"]}) == 2


def test_create_partitions_takes_the_replication_factor_a_reassignment_leads_to():
    """While partition 0 is being reassigned (replicas 0,1,2 = target 1,2 plus 0 being
    removed), new partitions get the target's replication factor, 2."""
    image = MetadataImage()
    created(image, "t", partitions=1, rf=2)
    topic = image.topic("t")
    commit(image, [partition_record(topic.topic_id, 0, (0, 1, 2), adding=(2,), removing=(0,))])
    records = controller.create_partitions(image, "t", 3, BROKERS)
    assert [len(r["replicas"]) for r in records] == [2, 2]


# -- controller.allocate_producer_ids ----------------------------------------------------------


def test_allocate_producer_ids_hands_out_disjoint_contiguous_blocks():
    """Each applied allocation gives the next PRODUCER_ID_BLOCK ids, never reusing one."""
    image = MetadataImage()
    seen: set[int] = set()
    blocks = []
    for _ in range(5):
        block, records = controller.allocate_producer_ids(image)
        assert len(block) == controller.PRODUCER_ID_BLOCK
        assert seen.isdisjoint(block)
        seen.update(block)
        blocks.append(block)
        commit(image, records)
    assert [b.start for b in blocks] == [i * controller.PRODUCER_ID_BLOCK for i in range(5)]


def test_producer_ids_stay_unused_after_a_rebuild():
    """A block handed out before a snapshot is not handed out again after it."""
    image = MetadataImage()
    first, records = controller.allocate_producer_ids(image)
    commit(image, records)
    second, _ = controller.allocate_producer_ids(rebuilt(image))
    assert set(first).isdisjoint(second)


# -- decisions never touch the image -----------------------------------------------------------


def _populated() -> MetadataImage:
    image = MetadataImage()
    for disk in ("/a", "/b", "/c"):
        commit(image, controller.register_broker(image, disk, None)[1])
    commit(image, controller.register_broker(image, "/racked", None, "r1")[1])  # broker 3
    created(image, "orders", partitions=3, rf=2, config={"retention.ms": 1000})
    created(image, "a.b", partitions=1, rf=1)
    created(image, "__consumer_offsets", partitions=2, rf=1, internal=True)
    commit(image, controller.allocate_producer_ids(image)[1])
    return image


REFUSED = {
    "illegal name": lambda i: controller.create_topic(i, "a b", 1, 1, None, BROKERS),
    "internal name": lambda i: controller.create_topic(i, "__consumer_offsets", 1, 1, None,
                                                       BROKERS),
    "duplicate": lambda i: controller.create_topic(i, "orders", 1, 1, None, BROKERS),
    "collision": lambda i: controller.create_topic(i, "a_b", 1, 1, None, BROKERS),
    "zero partitions": lambda i: controller.create_topic(i, "new", 0, 1, None, BROKERS),
    "rf too big": lambda i: controller.create_topic(i, "new", 1, 4, None, BROKERS),
    "bad config": lambda i: controller.create_topic(i, "new", 1, 1, {"x": 1}, BROKERS),
    "shrink": lambda i: controller.create_partitions(i, "orders", 2, BROKERS),
    "grow internal": lambda i: controller.create_partitions(i, "__consumer_offsets", 5, BROKERS),
    "grow unknown": lambda i: controller.create_partitions(i, "nope", 5, BROKERS),
    "bad alter": lambda i: controller.alter_config(i, "orders", {"retention.ms": "soon"}),
    "alter internal": lambda i: controller.alter_config(i, "__consumer_offsets", {}),
    "delete unknown": lambda i: controller.delete_topic(i, "nope"),
    "delete internal": lambda i: controller.delete_topic(i, "__consumer_offsets"),
    "stolen broker id": lambda i: controller.register_broker(i, "/z", 0),
    "bad rack": lambda i: controller.register_broker(i, "/z", None, 5),
    "mixed racks": lambda i: controller.create_topic(i, "new", 1, 1, None, [0, 1, 2, 3]),
    "grow mixed racks": lambda i: controller.create_partitions(i, "orders", 6, [0, 1, 2, 3]),
}  # fmt: skip

ACCEPTED = {
    "create": lambda i: controller.create_topic(i, "new", 2, 2, {"retention.ms": 5}, BROKERS),
    "grow": lambda i: controller.create_partitions(i, "orders", 6, BROKERS),
    "alter": lambda i: controller.alter_config(i, "orders", {"retention.ms": None}),
    "delete": lambda i: controller.delete_topic(i, "orders"),
    "new broker": lambda i: controller.register_broker(i, "/z", None),
    "rack changed": lambda i: controller.register_broker(i, "/a", 0, "r9"),
    "producer ids": lambda i: controller.allocate_producer_ids(i),
}


@pytest.mark.parametrize("call", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_request_leaves_the_image_unchanged(call):
    """A decision function that raises has changed nothing in the image."""
    image = _populated()
    before = state(image)
    with pytest.raises((InvalidTopic, InvalidPartitions, InvalidConfig, TopicAlreadyExists,
                        InvalidReplicationFactor, UnknownTopicOrPartition,
                        InvalidReplicaAssignment)):  # fmt: skip
        call(image)
    assert state(image) == before


@pytest.mark.parametrize("call", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_an_accepted_request_only_returns_records(call):
    """Decisions return records; the image changes only when they are applied."""
    image = _populated()
    before = state(image)
    call(image)
    assert state(image) == before


# -- records are checked before they are written ----------------------------------------------


def test_check_accepts_records_that_build_on_each_other_in_one_append():
    image = image_with(broker_record(0, "/a"))
    topic_id, records = controller.create_topic(image, "t", 2, 1, None, [0])
    image.check(records + [{"type": "delete", "topic_id": topic_id}])
    assert "t" not in image.topic_ids  # nothing applied


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"type": "partition", "topic_id": "nope", "partition": 0, "replicas": [0],
          "isr": [0], "leader": 0, "leader_epoch": 0}, "does not exist"),
        ({"type": "config", "topic_id": "nope", "config": {}}, "does not exist"),
        ({"type": "delete", "topic_id": "nope"}, "does not exist"),
        ({"type": "replica_epoch", "topic_id": "T", "partition": 7, "broker_id": 0,
          "epoch": 1}, "no such partition"),
        ({"type": "replica_nodes", "node": "n", "replicas": [["nope", 0, 0]]}, "unknown topics"),
        ({"type": "topic", "topic_id": "T2", "name": "t", "config": {}, "internal": False},
         "already exists"),
        ({"type": "partition", "topic_id": "T", "partition": 0, "replicas": [0, 1],
          "isr": [2], "leader": 2, "leader_epoch": 0}, "not within"),
        ({"type": "partition", "topic_id": "T", "partition": 0, "replicas": [0, 1],
          "isr": [0], "leader": 1, "leader_epoch": 0}, "not in the ISR"),
        ({"type": "mystery"}, "unknown metadata record type"),
    ],
    ids=["partition-of-unknown-topic", "config-of-unknown-topic", "delete-unknown",
         "epoch-of-unknown-partition", "nodes-of-unknown-topic", "name-taken", "isr-outside",
         "leader-outside-isr", "unknown-type"],
)  # fmt: skip
def test_check_refuses_a_record_that_could_not_be_applied(bad, message):
    image = image_with(topic_record("T", "t"), partition_record("T", 0, [0, 1], [0, 1], 0, 0))
    before = image.to_records()
    with pytest.raises(InvalidRecord, match=message):
        image.check([bad])
    assert image.to_records() == before


def test_check_refuses_a_record_for_a_topic_deleted_earlier_in_the_same_append():
    image = image_with(topic_record("T", "t"), partition_record("T", 0, [0], [0], 0, 0))
    with pytest.raises(InvalidRecord, match="does not exist"):
        image.check([{"type": "delete", "topic_id": "T"},
                     {"type": "config", "topic_id": "T", "config": {}}])  # fmt: skip


def test_only_the_latest_admin_request_ids_are_remembered():
    image = MetadataImage()
    commit(image, [{"type": "request", "request_id": str(i), "kind": "create_topic"}
                   for i in range(REMEMBERED_REQUESTS + 5)])  # fmt: skip
    assert len(image.requests) == REMEMBERED_REQUESTS
    assert "4" not in image.requests and "5" in image.requests


def test_a_retired_broker_leaves_the_brokers_and_its_id_and_disk_are_never_used_again():
    image = image_with(broker_record(0, "a", None), broker_record(1, "auto-x", None),
                       {"type": "drain", "broker_id": 1, "draining": True},
                       {"type": "retire", "broker_id": 1})  # fmt: skip
    assert set(image.brokers) == {0} and image.retired_brokers == {1: "auto-x"}
    assert not image.draining_brokers
    assert controller.register_broker(image, "new-disk", None)[0] == 2
    with pytest.raises(InvalidConfig, match="retired"):
        controller.register_broker(image, "auto-x", None)
    with pytest.raises(InvalidConfig, match="retired"):
        controller.register_broker(image, "other", 1)
    assert rebuilt(image).retired_brokers == {1: "auto-x"}


def test_a_broker_holding_replicas_cannot_be_retired():
    image = image_with(broker_record(0, "a", None), broker_record(1, "b", None),
                       topic_record("id0", "t", {}, False),
                       partition_record("id0", 0, [0, 1], [0, 1], 0, 0, 0))  # fmt: skip
    with pytest.raises(InvalidRecord, match="drain it"):
        image.check([{"type": "retire", "broker_id": 1}])
    with pytest.raises(InvalidRecord, match="not registered"):
        image.check([{"type": "retire", "broker_id": 5}])
