"""Spark and transactions on the shared Ray cluster and Spark session: a read_committed read
stops at the last stable offset and drops aborted records; a stream writing to a topic
(``sink_topic``) writes each input's output exactly once across a batch that failed after
its output was sent, and a restart."""

from __future__ import annotations

import time
import uuid

import pytest

from rafka.clients import spark as rspark
from rafka.clients.spark_sink import TransactionalSink


def _values(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


def _committed_values(spark, cluster, topic: str, expected: list[bytes]) -> list[bytes]:
    """What a read_committed read of ``topic`` returns, read again (for up to 30 s) until it
    is ``expected``: a commit is answered at its commit point, and its markers, which let
    readers past it, follow. Never more than ``expected`` on the way."""
    deadline = time.monotonic() + 30
    while True:
        seen = _values(rspark.read_topic(spark, cluster, topic, isolation_level="read_committed"))
        if seen == expected or time.monotonic() > deadline:
            return seen
        assert set(seen) <= set(expected), seen
        time.sleep(0.2)


def test_a_read_committed_read_stops_at_the_open_transaction_and_drops_aborted_records(
    cluster, spark, make_topic
):
    topic = make_topic()
    producer = cluster.producer(transactional_id=f"spark-read-{uuid.uuid4().hex[:8]}")
    plain = cluster.producer()
    try:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, value=b"committed-1", partition=0)
        producer.begin_transaction()
        producer.send(topic, value=b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        plain.send(topic, value=b"plain", partition=0).result(timeout=30)
        producer.begin_transaction()
        producer.send(topic, value=b"open", partition=0)
        producer.flush()
        plain.send(topic, value=b"after-open", partition=0).result(timeout=30)
        assert _committed_values(spark, cluster, topic, [b"committed-1", b"plain"]) == [
            b"committed-1", b"plain"
        ]
        everything = rspark.read_topic(spark, cluster, topic,
                                       isolation_level="read_uncommitted")  # fmt: skip
        assert _values(everything) == sorted(
            [b"committed-1", b"aborted", b"plain", b"open", b"after-open"]
        )
        producer.commit_transaction()
        expected = sorted([b"committed-1", b"plain", b"open", b"after-open"])
        assert _committed_values(spark, cluster, topic, expected) == expected
    finally:
        producer.close()
        plain.close()


class _Crash(BaseException):
    """The driver dies (no exception handler of the stream runs its cleanup)."""


def test_a_stream_to_a_topic_writes_each_output_once_across_a_failed_batch_and_a_restart(
    cluster, spark, make_topic, monkeypatch
):
    source, sink_topic = make_topic(partitions=2), make_topic(partitions=2)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    plain = cluster.producer()
    for i in range(60):
        plain.send(source, value=b"in-%02d" % i, partition=i % 2)
    plain.flush()
    plain.close()

    def transform(df, batch_id):
        from pyspark.sql import functions as F

        return df.select(F.concat(F.lit(b"out-"), F.col("value")).alias("value"),
                         F.col("partition"))  # fmt: skip

    # Run 1: the first batch's output is sent, then the driver dies before the commit.
    commit = TransactionalSink.commit_batch

    def dies_before_commit(self, output, progress):
        producer = self.producer
        real = producer.commit_transaction

        def crash(*a, **k):
            producer.flush()
            raise _Crash("the driver died before the commit")

        producer.commit_transaction = crash
        try:
            return commit(self, output, progress)
        finally:
            producer.commit_transaction = real

    monkeypatch.setattr(TransactionalSink, "commit_batch", dies_before_commit)
    first = rspark.stream_topic(spark, cluster, source, group, transform, start=False,
                                sink_topic=sink_topic, max_records_per_batch=20)  # fmt: skip
    with pytest.raises(_Crash):
        first.process_available()
    monkeypatch.setattr(TransactionalSink, "commit_batch", commit)
    # Run 2, a new driver: the stream's producer fences the dead one (aborting its open
    # transaction) and the batch is planned again.
    second = rspark.stream_topic(spark, cluster, source, group, transform, start=False,
                                 sink_topic=sink_topic, max_records_per_batch=20)  # fmt: skip
    try:
        assert second.process_available() == 3
    finally:
        second.sink.close()
        first.sink.close()
    expected = sorted(b"out-in-%02d" % i for i in range(60))
    assert _committed_values(spark, cluster, sink_topic, expected) == expected
    everything = rspark.read_topic(spark, cluster, sink_topic,
                                   isolation_level="read_uncommitted")  # fmt: skip
    assert len(_values(everything)) == 60 + 20, "the dead run's batch was sent (and aborted)"
    offsets = cluster.admin().list_group_offsets(group)
    assert sorted(o.offset for o in offsets.values()) == [30, 30]
