"""The columnar path: whole columns in (send_batch), Arrow tables out (poll_columns), readable
by the per-record path and vice versa."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from rafka import TopicPartition
from rafka.clients.partitioner import default_partition

from .test_produce_consume import consume_all


def read_columns(cluster, topic: str, partitions: int, expected: int) -> pa.Table:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    tables = []
    rows = 0
    deadline = time.monotonic() + 60
    while rows < expected and time.monotonic() < deadline:
        table = consumer.poll_columns(timeout_ms=1000)
        rows += table.num_rows
        tables.append(table)
    return pa.concat_tables(tables)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_arrow_column_round_trips_through_poll_columns(cluster, topic, compression):
    values = pa.array([b"v%06d" % i if i % 11 else None for i in range(20_000)], pa.binary())
    producer = cluster.producer(compression=compression, batch_size=64 * 1024)
    result = producer.send_batch(topic, values).result(timeout=60)
    producer.close()
    assert result.records == 20_000
    assert sum(last - first + 1 for first, last in result.ranges[0]) == 20_000
    table = read_columns(cluster, topic, 1, 20_000)
    assert table.column("offset").to_pylist() == list(range(20_000))
    assert table.column("value").to_pylist() == values.to_pylist()
    assert table.column("key").null_count == 20_000


def test_bulk_keys_land_where_send_puts_them(cluster, make_topic):
    topic = make_topic(partitions=4)
    keys = [b"key-%d" % (i % 97) for i in range(5_000)]
    values = [b"%d" % i for i in range(5_000)]
    producer = cluster.producer()
    producer.send_batch(topic, values, keys=keys).result(timeout=60)
    producer.close()
    records = consume_all(cluster, topic, 4, 5_000)  # the per-record consumer reads it
    assert len(records) == 5_000
    for r in records:
        assert r.partition == default_partition(r.key, 4)
        assert r.key == b"key-%d" % (int(r.value) % 97)
    for p in range(4):  # per-partition order is the column's order
        in_p = [int(r.value) for r in records if r.partition == p]
        assert in_p == sorted(in_p)


def test_numpy_rows_and_string_columns_are_accepted(cluster, topic):
    rows = np.arange(3 * 8, dtype=np.uint8).reshape(3, 8)
    producer = cluster.producer()
    producer.send_batch(topic, rows).result(timeout=30)
    producer.send_batch(topic, pa.array(["a", "bc"])).result(timeout=30)
    producer.close()
    values = [r.value for r in consume_all(cluster, topic, 1, 5)]
    assert values == [bytes(row) for row in rows] + [b"a", b"bc"]


def test_per_record_batches_read_as_columns(cluster, topic):
    producer = cluster.producer()
    for i in range(100):
        producer.send(topic, value=b"r%d" % i, key=b"k" if i % 2 else None)
    producer.close()
    table = read_columns(cluster, topic, 1, 100)
    assert table.column("value").to_pylist() == [b"r%d" % i for i in range(100)]
    assert table.column("key").to_pylist() == [b"k" if i % 2 else None for i in range(100)]


def test_bad_columns_raise_type_errors(cluster, topic):
    producer = cluster.producer()
    with pytest.raises(TypeError, match="bytes or None"):
        producer.send_batch(topic, [1, 2, 3])
    with pytest.raises(TypeError, match="2-D uint8"):
        producer.send_batch(topic, np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="one key per value"):
        producer.send_batch(topic, [b"a", b"b"], keys=[b"k"])
