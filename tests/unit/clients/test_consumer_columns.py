"""``poll_columns`` after ``poll``: the records ``poll`` left buffered come back as their raw
bytes, whatever the consumer's deserializers, each once and in offset order."""

from __future__ import annotations

import json

import pytest

from rafka.clients.consumer import Consumer
from rafka.clients.metadata import MetadataCache
from rafka.types import TopicPartition

from .fake_fetch import TOPIC, FakeFetchGateway

TP = TopicPartition(TOPIC, 0)
KEYS = [b"k%d" % i for i in range(6)]
VALUES = [json.dumps({"i": i}).encode() for i in range(6)]


@pytest.fixture
def gateway(tmp_path):
    g = FakeFetchGateway(tmp_path)
    g.append(0, VALUES, KEYS)
    yield g
    g.close()


def make_consumer(gateway: FakeFetchGateway, **settings) -> Consumer:
    consumer = Consumer(gateway, MetadataCache(gateway), auto_offset_reset="earliest",
                        fetch_max_wait_ms=100, **settings)  # fmt: skip
    consumer._use_clock(gateway.clock, gateway.clock.sleep)
    consumer.assign([TP])
    return consumer


@pytest.mark.parametrize("deserializers", [
    {"key_deserializer": "str", "value_deserializer": "json"},
    {"value_deserializer": lambda data: int(json.loads(data)["i"])},
    {},
])  # fmt: skip
def test_poll_columns_after_poll_hands_out_the_leftover_records_as_raw_bytes(
    gateway, deserializers
):
    consumer = make_consumer(gateway, **deserializers)
    assert [r.offset for r in consumer.poll(timeout_ms=1000, max_records=2)] == [0, 1]

    table = consumer.poll_columns(timeout_ms=1000, max_records=3)

    assert table.column("offset").to_pylist() == [2, 3, 4]
    assert table.column("key").to_pylist() == KEYS[2:5]
    assert table.column("value").to_pylist() == VALUES[2:5]
    assert consumer.position(TP) == 5
    last = consumer.poll(timeout_ms=1000)
    assert [r.offset for r in last] == [5]
    expected = consumer._reader.value_deserializer
    assert last[0].value == (VALUES[5] if expected is None else expected(VALUES[5]))
