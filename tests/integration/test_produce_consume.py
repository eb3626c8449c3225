"""Producer and consumer against a real local cluster: delivery, ordering, codecs, acks."""

from __future__ import annotations

import threading
import time

import pytest

from rafka import TopicPartition
from rafka.errors import OffsetOutOfRange


def consume_all(cluster, topic: str, partitions: int, expected: int, **settings) -> list:
    consumer = cluster.consumer(auto_offset_reset="earliest", **settings)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    out: list = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(consumer.poll(timeout_ms=1000))
    consumer.close()
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd"])
def test_records_round_trip_with_keys_headers_and_every_codec(cluster, topic, compression):
    producer = cluster.producer(compression=compression, linger_ms=1)
    sent = []
    for i in range(300):
        key = None if i % 7 == 0 else b"key-%d" % i
        headers = [("n", b"%d" % i), ("empty", None)] if i % 2 else None
        value = None if i == 5 else b"value-%d-" % i + bytes(i % 50)
        sent.append((key, value, headers or ()))
        producer.send(topic, value=value, key=key, headers=headers, timestamp_ms=1_000 + i)
    producer.close()
    got = consume_all(cluster, topic, 1, len(sent))
    assert [(r.key, r.value, tuple(r.headers)) for r in got] == [
        (k, v, tuple(h)) for k, v, h in sent
    ]
    assert [r.offset for r in got] == list(range(len(sent)))
    assert [r.timestamp for r in got] == [1_000 + i for i in range(len(sent))]


def test_each_partition_keeps_send_order(cluster, make_topic):
    topic = make_topic(partitions=3)
    producer = cluster.producer(linger_ms=2, batch_size=4096)
    for i in range(3000):
        producer.send(topic, value=b"%d" % i, key=b"k%d" % (i % 13))
    producer.close()
    got = consume_all(cluster, topic, 3, 3000)
    assert len(got) == 3000
    by_partition: dict[int, list] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r)
    assert len(by_partition) > 1
    for records in by_partition.values():
        assert [r.offset for r in records] == list(range(len(records)))
        values = [int(r.value) for r in records]
        assert values == sorted(values)
        for r in records:  # one key, one partition
            assert {x.partition for x in got if x.key == r.key} == {r.partition}


# murmur2 of these keys, from Kafka's own client tests (UtilsTest.testMurmur2).
KAFKA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"abc": 479470107,
                 b"a-little-bit-long-string": -985981536}  # fmt: skip


def test_keyed_records_land_where_kafka_puts_them(cluster, make_topic):
    topic = make_topic(partitions=5)
    producer = cluster.producer()
    for key, hashed in KAFKA_MURMUR2.items():
        meta = producer.send(topic, value=b"v", key=key).result(timeout=30)
        assert meta.partition == (hashed & 0x7FFFFFFF) % 5


def test_acks_zero_does_not_wait_and_still_delivers(cluster, topic):
    producer = cluster.producer(acks=0)
    futures = [producer.send(topic, value=b"%d" % i) for i in range(100)]
    producer.flush()
    assert {f.result().offset for f in futures} == {-1}
    assert len(consume_all(cluster, topic, 1, 100)) == 100


def test_acks_one_and_all_report_offsets(cluster, topic):
    for acks in (1, "all"):
        producer = cluster.producer(acks=acks)
        offsets = [producer.send(topic, value=b"x").result(timeout=30).offset for _ in range(3)]
        producer.close()
        assert offsets == sorted(offsets) and offsets[0] >= 0


def test_send_callback_gets_metadata(cluster, topic):
    producer = cluster.producer()
    seen = []
    done = threading.Event()

    def on_delivery(meta, error):
        seen.append((meta, error))
        done.set()

    producer.send(topic, value=b"x", callback=on_delivery)
    producer.flush()
    assert done.wait(10)
    assert seen[0][1] is None and seen[0][0].offset == 0 and seen[0][0].topic == topic


def test_long_poll_returns_records_produced_while_waiting(cluster, topic):
    consumer = cluster.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    assert consumer.poll(timeout_ms=200) == []
    producer = cluster.producer(linger_ms=0)
    timer = threading.Timer(0.5, lambda: producer.send(topic, value=b"late").result())
    timer.start()
    started = time.monotonic()
    records = consumer.poll(timeout_ms=10_000)
    timer.join()
    assert [r.value for r in records] == [b"late"]
    assert time.monotonic() - started < 9  # woken by the append, not by the timeout


def test_seek_position_and_offsets_for_times(cluster, topic):
    producer = cluster.producer()
    for i in range(10):
        producer.send(topic, value=b"%d" % i, timestamp_ms=10_000 + 1000 * i)
    producer.close()
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.position(tp) == 0
    consumer.seek(tp, 7)
    assert [r.offset for r in consumer.poll(timeout_ms=5000)] == [7, 8, 9]
    assert consumer.position(tp) == 10
    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 10
    found = consumer.offsets_for_times({tp: 12_500})
    assert found[tp].offset == 3 and found[tp].timestamp == 13_000
    assert consumer.offsets_for_times({tp: 99_999_999})[tp] is None
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}


def test_latest_reset_skips_existing_records(cluster, topic):
    producer = cluster.producer()
    producer.send(topic, value=b"old").result(timeout=30)
    consumer = cluster.consumer()  # auto_offset_reset="latest"
    consumer.assign([TopicPartition(topic, 0)])
    assert consumer.poll(timeout_ms=300) == []
    producer.send(topic, value=b"new").result(timeout=30)
    assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"new"]


def test_reset_none_raises_offset_out_of_range(cluster, topic):
    consumer = cluster.consumer(auto_offset_reset="none")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    with pytest.raises(OffsetOutOfRange):
        consumer.poll(timeout_ms=100)
    consumer.seek(tp, 1000)  # past the end
    with pytest.raises(OffsetOutOfRange, match="outside the log"):
        consumer.poll(timeout_ms=2000)


def test_out_of_range_seek_resets_to_earliest(cluster, topic):
    cluster.producer().send(topic, value=b"a").result(timeout=30)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 50)
    assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"a"]


def test_paused_partition_returns_nothing_until_resumed(cluster, make_topic):
    topic = make_topic(partitions=2)
    producer = cluster.producer()
    for p in (0, 1):
        producer.send(topic, value=b"p%d" % p, partition=p)
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer.assign([tp0, tp1])
    consumer.pause(tp1)
    got = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = consumer.poll(timeout_ms=500)
    assert [r.value for r in got] == [b"p0"]
    assert consumer.poll(timeout_ms=300) == []
    consumer.resume(tp1)
    assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"p1"]


def test_serializers_round_trip(cluster, topic):
    producer = cluster.producer(key_serializer="str", value_serializer="json")
    producer.send(topic, value={"a": [1, 2]}, key="k").result(timeout=30)
    consumer = cluster.consumer(
        auto_offset_reset="earliest", key_deserializer="str", value_deserializer="json"
    )
    consumer.assign([TopicPartition(topic, 0)])
    (record,) = consumer.poll(timeout_ms=5000)
    assert (record.key, record.value) == ("k", {"a": [1, 2]})
