"""Which host actor holds each replica: the placement decision and its metadata records."""

from __future__ import annotations

import pytest

from rafka.cluster import controller
from rafka.cluster.hosting import NO_HOST, host_loads, host_name, place, slots_of
from rafka.cluster.metadata import MetadataImage
from rafka.errors import InvalidRecord


def _image(brokers=(0, 1, 2)) -> MetadataImage:
    image = MetadataImage()
    for b in brokers:
        image.apply({"type": "broker", "broker_id": b, "disk": f"d{b}", "rack": None},
                    image.offset + 1)  # fmt: skip
    return image


def _apply(image: MetadataImage, records) -> None:
    image.check(records)
    for r in records:
        image.apply(r, image.offset + 1)


def _create(image: MetadataImage, name: str, partitions: int, rf: int = 1) -> str:
    topic_id, records = controller.create_topic(image, name, partitions, rf, None,
                                                sorted(image.brokers))  # fmt: skip
    _apply(image, records)
    return topic_id


def _keys(image: MetadataImage, topic_id: str):
    topic = image.topics[topic_id]
    return [(topic_id, p.partition, b) for p in topic.partitions.values() for b in p.replicas]


def test_one_replica_per_actor_gives_every_replica_a_host_of_its_own():
    image = _image([0])
    topic_id = _create(image, "t", 5)
    _apply(image, place(image, _keys(image, topic_id), per_actor=1))
    assert sorted(image.hosts.values()) == [0, 1, 2, 3, 4]


def test_packed_replicas_fill_a_host_before_the_next_starts():
    image = _image([0])
    topic_id = _create(image, "t", 250)
    _apply(image, place(image, _keys(image, topic_id), per_actor=100))
    assert host_loads(image) == {0: {0: 100, 1: 100, 2: 50}}


def test_a_later_topic_fills_the_open_host_first():
    image = _image([0])
    first = _create(image, "a", 150)
    _apply(image, place(image, _keys(image, first), per_actor=100))
    second = _create(image, "b", 60)
    _apply(image, place(image, _keys(image, second), per_actor=100))
    assert host_loads(image) == {0: {0: 100, 1: 100, 2: 10}}


def test_hosts_are_per_broker_and_every_replica_of_a_partition_is_placed():
    image = _image([0, 1, 2])
    topic_id = _create(image, "t", 30, rf=3)
    _apply(image, place(image, _keys(image, topic_id), per_actor=10))
    loads = host_loads(image)
    assert {b: sum(s.values()) for b, s in loads.items()} == {0: 30, 1: 30, 2: 30}
    assert all(n <= 10 for slots in loads.values() for n in slots.values())
    p = image.topics[topic_id].partitions[0]
    assert NO_HOST not in slots_of(image, topic_id, 0, p.replicas)


def test_a_placed_replica_keeps_its_host():
    image = _image([0])
    topic_id = _create(image, "t", 3)
    _apply(image, place(image, _keys(image, topic_id), per_actor=2))
    before = dict(image.hosts)
    assert place(image, _keys(image, topic_id), per_actor=2) == []
    assert image.hosts == before


def test_a_host_emptied_by_a_deletion_is_never_filled_again():
    """Its actor may be being stopped: a new replica goes to a new slot number."""
    image = _image([0])
    old = _create(image, "old", 2)
    _apply(image, place(image, _keys(image, old), per_actor=10))
    _apply(image, controller.delete_topic(image, "old")[1])
    new = _create(image, "new", 1)
    records = place(image, _keys(image, new), per_actor=10)
    assert [r["slot"] for r in records] == [1]


def test_host_slots_survive_a_snapshot():
    image = _image([0])
    old = _create(image, "old", 3)
    _apply(image, place(image, _keys(image, old), per_actor=1))
    _apply(image, controller.delete_topic(image, "old")[1])
    rebuilt = MetadataImage()
    for i, record in enumerate(image.to_records()):
        rebuilt.apply(record, i)
    assert rebuilt.hosts == image.hosts == {}
    assert rebuilt.next_host_slot == {0: 3}


def test_a_hosted_record_for_a_missing_partition_is_refused():
    image = _image([0])
    topic_id = _create(image, "t", 1)
    with pytest.raises(InvalidRecord):
        image.check([{"type": "hosted", "topic_id": topic_id, "partition": 5,
                      "broker_id": 0, "slot": 0}])  # fmt: skip
    with pytest.raises(InvalidRecord):
        image.check([{"type": "hosted", "topic_id": "gone", "partition": 0,
                      "broker_id": 0, "slot": 0}])  # fmt: skip


def test_host_names_differ_by_broker_and_slot():
    assert host_name(1, 12) != host_name(11, 2)


GIB = 1 << 30


def test_a_topic_that_fits_the_nodes_memory_passes_the_check():
    from rafka.cluster.hosting import check_fits

    check_fits(_image([0]), {0: 100}, 1, {0: 20 * GIB}, "topic 't'")
    check_fits(_image([0]), {0: 1000}, 100, {0: 20 * GIB}, "topic 't'")
    check_fits(_image([0]), {0: 900}, 1, {}, "topic 't'")  # memory unknown: not checked


def test_a_topic_too_big_for_the_nodes_memory_is_refused_naming_what_fits_and_the_setting():
    from rafka.cluster.hosting import check_fits
    from rafka.errors import PolicyViolation

    with pytest.raises(PolicyViolation) as refused:
        check_fits(_image([0]), {0: 900}, 1, {0: 20 * GIB}, "topic 'big'")
    message = str(refused.value)
    assert "topic 'big'" in message and "900 replica(s) on broker 0" in message
    assert "about 273 new replica(s) fit" in message  # 16 GiB / (58 + 2) MiB
    assert "replicas.per.actor" in message and "rafka up --set" in message


def test_open_room_in_existing_hosts_costs_no_new_host():
    from rafka.cluster.hosting import HOST_BASE_BYTES, REPLICA_BYTES, memory_needed

    image = _image([0])
    topic_id = _create(image, "t", 50)
    _apply(image, place(image, _keys(image, topic_id), per_actor=100))
    assert memory_needed(image, 0, 50, 100) == 50 * REPLICA_BYTES
    assert memory_needed(image, 0, 51, 100) == HOST_BASE_BYTES + 51 * REPLICA_BYTES


def test_replicas_placed_but_not_started_count_against_the_memory():
    """Two topics created back to back: the second is refused for the first's replicas,
    which the node's memory reading does not show yet."""
    from rafka.cluster.hosting import check_fits
    from rafka.errors import PolicyViolation

    check_fits(_image([0]), {0: 100}, 1, {0: 8 * GIB}, "topic 'a'")
    with pytest.raises(PolicyViolation):
        check_fits(_image([0]), {0: 100}, 1, {0: 8 * GIB}, "topic 'b'", {0: 100})


def test_more_host_actors_than_a_disk_pins_are_refused():
    from rafka.cluster.hosting import MAX_HOSTS_PER_DISK, check_fits
    from rafka.errors import PolicyViolation

    with pytest.raises(PolicyViolation, match="host actors"):
        check_fits(_image([0]), {0: MAX_HOSTS_PER_DISK + 1}, 1, {}, "topic 'many'")
    check_fits(_image([0]), {0: MAX_HOSTS_PER_DISK + 1}, 100, {}, "topic 'many'")
