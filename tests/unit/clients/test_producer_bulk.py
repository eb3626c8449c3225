"""The bulk path (``send_batch``) against a fake leader that appends to a real Log: keyed
rows land where murmur2 puts them whatever nulls share their column, records sent one by
one and in bulk to a partition are written in the order they were sent, and a column that
can not be sent whole is refused before any of it is queued."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.partitioner import default_partition
from rafka.clients.producer import Producer
from rafka.clients.spark_writer import send_arrow_batch
from rafka.errors import RecordTooLarge

from .fake_leader import FakeGateway

PARTITIONS = 4
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=PARTITIONS)
    yield g
    g.close()


@pytest.fixture
def make_producer(gateway):
    made = []

    def make(**settings) -> Producer:
        settings = {"acks": "all", "retry_backoff_ms": 1, **settings}
        producer = Producer(gateway, MetadataCache(gateway), **settings)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=10)


def written(gateway: FakeGateway) -> dict[int, list[bytes]]:
    """Values per partition, in log order."""
    return {p: [value for _, value in gateway.log_values(p)] for p in range(PARTITIONS)}


def key_of(i: int) -> bytes:
    return b"key-%d" % i


def test_keyed_rows_of_a_column_with_null_keys_land_on_their_murmur2_partitions(
    gateway, make_producer
):
    """Every third key is null: the keyed rows still go where Kafka's default partitioner
    puts them, the null rows are written once each, and each partition holds its rows in
    column order."""
    producer = make_producer(linger_ms=0)
    rows = 60
    keys = [None if i % 3 == 0 else key_of(i) for i in range(rows)]
    values = [b"v%03d" % i for i in range(rows)]
    result = producer.send_batch("t", values, keys).result(timeout=10)
    assert result.records == rows

    logs = written(gateway)
    for i, key in enumerate(keys):
        if key is not None:
            assert values[i] in logs[default_partition(key, PARTITIONS)], (i, key)
    assert sorted(v for vs in logs.values() for v in vs) == values  # each row once
    for partition_values in logs.values():
        assert partition_values == sorted(partition_values)  # column order


def test_the_null_rows_of_a_mixed_column_stay_on_one_sticky_partition_while_they_fit(
    gateway, make_producer
):
    """As with send(): null-key records share the sticky partition until a batch is full,
    they are not scattered one per partition."""
    producer = make_producer(linger_ms=0)
    keys = [None if i % 2 else key_of(i) for i in range(20)]
    values = [b"v%03d" % i for i in range(20)]
    producer.send_batch("t", values, keys).result(timeout=10)

    nulls = {values[i] for i, key in enumerate(keys) if key is None}
    holding = [p for p, vs in written(gateway).items() if nulls & set(vs)]
    assert len(holding) == 1


def test_a_nullable_arrow_key_column_from_a_sink_is_partitioned_by_key(gateway, make_producer):
    """The topic sink hands send_batch Spark's nullable key column as Arrow."""
    producer = make_producer(linger_ms=0)
    keys = pa.array(["k%d" % i if i % 4 else None for i in range(40)], pa.string())
    values = pa.array([b"v%03d" % i for i in range(40)], pa.binary())
    futures: list = []
    send_arrow_batch(producer, "t", pa.RecordBatch.from_arrays([values, keys], ["value", "key"]), futures)
    producer.flush(timeout=10)
    futures[0].result(timeout=0)

    logs = written(gateway)
    for i, key in enumerate(keys.to_pylist()):
        if key is not None:
            assert b"v%03d" % i in logs[default_partition(key.encode(), PARTITIONS)]


def test_records_sent_one_by_one_then_in_bulk_to_a_partition_are_written_in_send_order(
    gateway, make_producer
):
    """The send() batch is still lingering when the bulk batch is queued: it goes first."""
    producer = make_producer(linger_ms=60_000)
    first = producer.send("t", value=b"a", partition=0)
    bulk = producer.send_batch("t", [b"b", b"c"], partition=0)
    producer.flush(timeout=10)

    assert first.result(timeout=0).offset == 0
    assert bulk.result(timeout=0).ranges == {0: [(1, 2)]}
    assert written(gateway)[0] == [b"a", b"b", b"c"]


def test_null_key_records_then_a_keyed_column_keep_their_order_on_each_partition(
    gateway, make_producer
):
    """Sticky records lingering on some partition, then a column that sends rows there too."""
    producer = make_producer(linger_ms=60_000)
    early = [producer.send("t", value=b"early%d" % i) for i in range(3)]
    keys = [key_of(i) for i in range(40)]
    producer.send_batch("t", [b"late%02d" % i for i in range(40)], keys)
    producer.flush(timeout=10)

    sticky = early[0].result(timeout=0).partition
    log = written(gateway)[sticky]
    assert log[:3] == [b"early0", b"early1", b"early2"]
    assert all(v.startswith(b"late") for v in log[3:])


def test_sink_rows_with_headers_then_rows_without_keep_their_order_within_a_task(
    gateway, make_producer
):
    """A task's first Arrow batch has headers (sent record by record), its second has none
    (sent as a column): on every partition the first batch's rows come first."""
    producer = make_producer(linger_ms=60_000)
    futures: list = []
    first = pa.RecordBatch.from_arrays(
        [pa.array([b"h%02d" % i for i in range(8)]),
         pa.array([key_of(i) for i in range(8)]),
         pa.array([[{"key": "n", "value": b"x"}] if i % 2 else None for i in range(8)], HEADERS)],
        ["value", "key", "headers"],
    )  # fmt: skip
    second = pa.RecordBatch.from_arrays(
        [pa.array([b"p%02d" % i for i in range(8)]),
         pa.array([key_of(i) for i in range(8)]),
         pa.array([None] * 8, HEADERS)],
        ["value", "key", "headers"],
    )  # fmt: skip
    send_arrow_batch(producer, "t", first, futures)
    send_arrow_batch(producer, "t", second, futures)
    producer.flush(timeout=10)
    for future in futures:
        future.result(timeout=0)

    for p, values in written(gateway).items():
        # Every header row before every column row, each kind in its own order.
        assert values == sorted(values, key=lambda v: (v[:1] != b"h", v))


@pytest.mark.parametrize("keyed", [False, True])
def test_a_column_with_one_record_over_the_request_limit_is_refused_with_nothing_queued(
    gateway, make_producer, keyed
):
    producer = make_producer(linger_ms=0, max_request_size=4096, batch_size=512)
    values = [b"v%03d" % i for i in range(200)] + [b"x" * 5000] + [b"w"]
    keys = [key_of(i) for i in range(len(values))] if keyed else None
    with pytest.raises(RecordTooLarge, match="record 200 of the column"):
        producer.send_batch("t", values, keys)
    producer.flush(timeout=10)

    assert gateway.requests == []
    assert producer.metrics()["outstanding_batches"] == 0
    assert producer.metrics()["buffered_bytes"] == 0


def test_a_record_whose_key_and_value_together_pass_the_request_limit_is_refused(
    gateway, make_producer
):
    """As send() counts it: key, value and the record's framing."""
    producer = make_producer(linger_ms=0, max_request_size=4096)
    with pytest.raises(RecordTooLarge, match="record 1 of the column"):
        producer.send_batch("t", [b"a", b"v" * 3000], [b"k", b"k" * 2000])
    with pytest.raises(RecordTooLarge):
        producer.send("t", value=b"v" * 3000, key=b"k" * 2000)
    assert gateway.requests == []
