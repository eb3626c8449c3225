"""Real Kafka clients from PyPI (confluent-kafka/librdkafka and kafka-python) against the
shared cluster's Kafka listener, and records crossing between them and rafka's handles."""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck
import kafka as kp
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from rafka import TopicPartition
from tests.integration.test_produce_consume import consume_all

RECORDS = 300
TIMEOUT_S = 60


def _records(count: int = RECORDS) -> list[tuple[bytes | None, bytes | None, list, int]]:
    """(key, value, headers, timestamp ms): null keys, a null value and headers included."""
    base = int(time.time() * 1000) - 10_000
    out = []
    for i in range(count):
        key = None if i % 7 == 0 else b"k%d" % i
        value = None if i == 5 else b"value-%d-" % i + b"x" * (i % 50)
        headers = [("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
        out.append((key, value, headers, base + i))
    return out


def _confluent_produce(bootstrap: str, topic: str, records, **config) -> list[int]:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    offsets: list = []
    errors: list = []

    def delivered(error, message):
        (errors if error else offsets).append(error or message.offset())

    for key, value, headers, timestamp in records:
        producer.produce(topic, value=value, key=key, headers=headers or None,
                         timestamp=timestamp, on_delivery=delivered)  # fmt: skip
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors, errors
    return offsets


def _confluent_consume(bootstrap: str, topic: str, count: int, partitions: int = 1,
                       **config) -> list:  # fmt: skip
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            **config})  # fmt: skip
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert not message.error(), message.error()
            out.append(message)
    finally:
        consumer.close()
    return out


def _commit(consumer) -> None:
    """Commit what ``consumer`` read; librdkafka refuses when it read nothing since its
    last commit (_NO_OFFSET), which here means there is nothing to commit."""
    try:
        consumer.commit(asynchronous=False)
    except ck.KafkaException as e:
        if e.args[0].code() != ck.KafkaError._NO_OFFSET:
            raise


def _headers(pairs) -> list:
    return [(k, None if v is None else bytes(v)) for k, v in (pairs or ())]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_records_from_librdkafka_read_back_identically_through_kafka_and_rafka(
    cluster, topic, kafka_bootstrap, compression
):
    records = _records()
    offsets = _confluent_produce(kafka_bootstrap["PLAINTEXT"], topic, records,
                                 **{"compression.type": compression,
                                    "enable.idempotence": True})  # fmt: skip
    assert sorted(offsets) == list(range(RECORDS))
    through_kafka = _confluent_consume(kafka_bootstrap["PLAINTEXT"], topic, RECORDS)
    assert [(m.offset(), m.key(), m.value(), _headers(m.headers()), m.timestamp()[1])
            for m in through_kafka] == [
        (i, k, v, h, t) for i, (k, v, h, t) in enumerate(records)]  # fmt: skip
    through_rafka = consume_all(cluster, topic, 1, RECORDS)
    assert [(r.offset, r.key, r.value, _headers(r.headers), r.timestamp)
            for r in through_rafka] == [
        (i, k, v, h, t) for i, (k, v, h, t) in enumerate(records)]  # fmt: skip


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_records_from_rafkas_producer_reach_both_kafka_clients(
    cluster, topic, kafka_bootstrap, compression
):
    records = _records()
    producer = cluster.producer(compression=compression, linger_ms=2)
    for key, value, headers, timestamp in records:
        producer.send(topic, value=value, key=key, headers=headers, timestamp_ms=timestamp)
    producer.flush()
    producer.close()
    expected = [(i, k, v, h, t) for i, (k, v, h, t) in enumerate(records)]
    got = _confluent_consume(kafka_bootstrap["PLAINTEXT"], topic, RECORDS)
    assert [(m.offset(), m.key(), m.value(), _headers(m.headers()), m.timestamp()[1])
            for m in got] == expected  # fmt: skip
    consumer = kp.KafkaConsumer(bootstrap_servers=kafka_bootstrap["PLAINTEXT"],
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=10_000)  # fmt: skip
    consumer.assign([kp.TopicPartition(topic, 0)])
    got = [m for _, m in zip(range(RECORDS), consumer)]
    consumer.close()
    assert [(m.offset, m.key, m.value, _headers(m.headers), m.timestamp) for m in got] == expected


def test_kafka_python_produces_and_consumes_with_gzip(cluster, topic, kafka_bootstrap):
    producer = kp.KafkaProducer(bootstrap_servers=kafka_bootstrap["PLAINTEXT"],
                                compression_type="gzip", acks="all", linger_ms=5)  # fmt: skip
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(RECORDS)]
    producer.flush(TIMEOUT_S)
    offsets = sorted(f.get(timeout=TIMEOUT_S).offset for f in futures)
    producer.close()
    assert offsets == list(range(RECORDS))
    got = consume_all(cluster, topic, 1, RECORDS)
    assert [(r.key, r.value) for r in got] == [(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)]


def test_admin_clients_create_grow_describe_and_delete_topics(cluster, kafka_bootstrap):
    name = f"kadmin-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"]})
    futures = admin.create_topics([NewTopic(name, 2, 1, config={"retention.ms": "3600000"})])
    futures[name].result(TIMEOUT_S)
    assert cluster.admin().describe_topic(name).config["retention.ms"] == 3600000
    with pytest.raises(ck.KafkaException) as exists:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)
    assert exists.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    admin.create_partitions([NewPartitions(name, 3)])[name].result(TIMEOUT_S)
    assert len(cluster.admin().describe_topic(name).partitions) == 3
    resource = ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["retention.ms"].value == "3600000"
    python_admin = kp.KafkaAdminClient(bootstrap_servers=kafka_bootstrap["PLAINTEXT"])
    assert name in python_admin.list_topics()
    python_admin.delete_topics([name], timeout_ms=TIMEOUT_S * 1000)
    python_admin.close()
    assert name not in cluster.admin().list_topics()


def test_a_kafka_group_rebalances_between_two_members_and_resumes_from_commits(
    cluster, make_topic, kafka_bootstrap
):
    topic = make_topic(partitions=4)
    _confluent_produce(kafka_bootstrap["PLAINTEXT"], topic,
                       [(b"%d" % i, b"%d" % i, [], int(time.time() * 1000))
                        for i in range(400)])  # fmt: skip
    group = f"kgroup-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": kafka_bootstrap["PLAINTEXT"], "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}  # fmt: skip
    first = ck.Consumer(config)
    first.subscribe([topic])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 200 and time.monotonic() < deadline:
        message = first.poll(0.5)
        if message is not None and not message.error():
            seen[int(message.value())] = message.partition()
    _commit(first)
    second = ck.Consumer(config)
    second.subscribe([topic])
    assigned: dict[str, set] = {"first": set(), "second": set()}
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and not (assigned["first"] and assigned["second"]):
        for name, consumer in (("first", first), ("second", second)):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen[int(message.value())] = message.partition()
            assigned[name] = {tp.partition for tp in consumer.assignment()}
    assert assigned["first"] and assigned["second"]
    assert assigned["first"].isdisjoint(assigned["second"])
    assert assigned["first"] | assigned["second"] == {0, 1, 2, 3}
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 400 and time.monotonic() < deadline:
        for consumer in (first, second):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen[int(message.value())] = message.partition()
    for consumer in (first, second):
        _commit(consumer)
        consumer.close()
    assert set(seen) == set(range(400))
    committed = cluster.admin().describe_group(group)
    assert sum(o.committed or 0 for o in committed.offsets) == 400


def test_a_kafka_client_and_a_rafka_consumer_share_one_group(cluster, make_topic,
                                                            kafka_bootstrap):  # fmt: skip
    topic = make_topic(partitions=2)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    kafka_member = ck.Consumer({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"],
                                "group.id": group, "auto.offset.reset": "earliest",
                                "session.timeout.ms": 6000,
                                "heartbeat.interval.ms": 500})  # fmt: skip
    kafka_member.subscribe([topic])
    rafka_member = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                                    session_timeout_ms=6000, heartbeat_interval_ms=500)
    rafka_member.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    kafka_has: set = set()
    rafka_has: set = set()
    while time.monotonic() < deadline and not (kafka_has and rafka_has):
        kafka_member.poll(0.2)
        rafka_member.poll(timeout_ms=200)
        kafka_has = {tp.partition for tp in kafka_member.assignment()}
        rafka_has = {tp.partition for tp in rafka_member.assignment()}
    kafka_member.close()
    rafka_member.close()
    assert kafka_has and rafka_has and kafka_has.isdisjoint(rafka_has)
    assert kafka_has | rafka_has == {0, 1}


def test_offsets_by_time_and_the_ends_answer_list_offsets(cluster, topic, kafka_bootstrap):
    records = _records(50)
    _confluent_produce(kafka_bootstrap["PLAINTEXT"], topic, records)
    consumer = ck.Consumer({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"],
                            "group.id": "offsets-by-time"})  # fmt: skip
    low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    found = consumer.offsets_for_times([ck.TopicPartition(topic, 0, records[20][3])], 10)
    consumer.close()
    assert (low, high) == (0, 50)
    assert found[0].offset == 20


def test_a_transactional_consume_transform_produce_commits_atomically(
    cluster, make_topic, kafka_bootstrap
):
    source, sink = make_topic(), make_topic()
    bootstrap = kafka_bootstrap["PLAINTEXT"]
    _confluent_produce(bootstrap, source, [(None, b"%d" % i, [], int(time.time() * 1000))
                                           for i in range(100)])  # fmt: skip
    group = f"etl-{uuid.uuid4().hex[:8]}"
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([ck.TopicPartition(source, 0, 0)])
    producer = ck.Producer({"bootstrap.servers": bootstrap,
                            "transactional.id": f"etl-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(TIMEOUT_S)
    # An aborted transaction first: its records must never be read committed.
    producer.begin_transaction()
    producer.produce(sink, value=b"aborted")
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    moved = 0
    deadline = time.monotonic() + TIMEOUT_S
    while moved < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        producer.produce(sink, value=b"t" + message.value())
        moved += 1
    positions = [ck.TopicPartition(source, 0, 100)]
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                         TIMEOUT_S)  # fmt: skip
    producer.commit_transaction(TIMEOUT_S)
    consumer.close()
    committed = _confluent_consume(bootstrap, sink, 100, **{"isolation.level": "read_committed"})
    assert [m.value() for m in committed] == [b"t%d" % i for i in range(100)]
    rafka_view = consume_all(cluster, sink, 1, 100, isolation_level="read_committed")
    assert [r.value for r in rafka_view] == [b"t%d" % i for i in range(100)]
    reader = cluster.consumer(group_id=group, isolation_level="read_committed")
    committed_offset = reader.committed(TopicPartition(source, 0))
    reader.close()
    assert committed_offset is not None and committed_offset.offset == 100
