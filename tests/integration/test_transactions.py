"""Transactions end to end on the session cluster: atomic commits across topics, aborts,
the last stable offset holding read_committed readers, zombie fencing, the context manager
and the coordinator's timeout abort."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import ray

from rafka import OffsetAndMetadata, TopicPartition
from rafka.errors import IllegalState, ProducerFenced, TransactionAbortable


def _id(prefix: str = "txn") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_all(cluster, topics: list[str], isolation: str, expect: int | None = None,
             wait_s: float = 15.0) -> list:  # fmt: skip
    """Every record a fresh consumer of ``isolation`` reads from the start of ``topics``
    (waiting up to ``wait_s`` for ``expect`` records when given)."""
    consumer = cluster.consumer(isolation_level=isolation, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50)  # fmt: skip
    try:
        parts = []
        for topic in topics:
            count = len(cluster.admin().describe_topic(topic).partitions)
            parts += [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(parts)
        out: list = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            out += consumer.poll(timeout_ms=100)
            if expect is not None and len(out) >= expect:
                time.sleep(0.2)  # anything more would show now
                out += consumer.poll(timeout_ms=100)
                break
        return out
    finally:
        consumer.close()


def values(records) -> list[bytes]:
    return sorted(r.value for r in records)


def test_a_commit_across_partitions_of_two_topics_is_read_whole(cluster, make_topic):
    orders, audit = make_topic(partitions=2), make_topic()
    producer = cluster.producer(transactional_id=_id())
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(orders, value=b"order-%d" % i, partition=i % 2)
        producer.send(audit, value=b"audit")
        producer.commit_transaction()
    finally:
        producer.close()
    expected = sorted([b"order-%d" % i for i in range(4)] + [b"audit"])
    assert values(read_all(cluster, [orders, audit], "read_committed", 5)) == expected
    assert values(read_all(cluster, [orders, audit], "read_uncommitted", 5)) == expected


def test_the_partitions_written_are_added_by_their_leaders_not_by_send(cluster, make_topic):
    """Transaction version 2: send() asks the coordinator nothing; each partition's leader
    adds it to the transaction before appending the first batch, so once the records are
    written the coordinator holds every partition the commit must mark."""
    topic = make_topic(partitions=3)
    transactional_id = _id()
    admin = cluster.admin()
    producer = cluster.producer(transactional_id=transactional_id, linger_ms=60_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(3):
            producer.send(topic, value=b"v%d" % p, partition=p)  # held: linger
        assert admin.describe_transactions([transactional_id])[transactional_id].state == "Empty"
        producer.flush()
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state == "Ongoing"
        assert sorted(described.partitions) == [TopicPartition(topic, p) for p in range(3)]
        producer.commit_transaction()
    finally:
        producer.close()
    assert values(read_all(cluster, [topic], "read_committed", 3)) == [b"v0", b"v1", b"v2"]


def test_an_abort_is_invisible_to_read_committed_and_visible_to_read_uncommitted(
    cluster, make_topic
):
    topic = make_topic(partitions=2)
    producer = cluster.producer(transactional_id=_id())
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"aborted-0", partition=0)
        producer.send(topic, value=b"aborted-1", partition=1)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"committed", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    assert values(read_all(cluster, [topic], "read_committed", 1)) == [b"committed"]
    assert values(read_all(cluster, [topic], "read_uncommitted", 3)) == [
        b"aborted-0", b"aborted-1", b"committed"
    ]


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset(
    cluster, make_topic
):
    topic = make_topic()
    txn = cluster.producer(transactional_id=_id())
    plain = cluster.producer()
    try:
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(topic, value=b"in-txn", partition=0)
        txn.flush()
        plain.send(topic, value=b"after", partition=0).result(timeout=30)
        assert values(read_all(cluster, [topic], "read_committed", wait_s=1.0)) == []
        assert values(read_all(cluster, [topic], "read_uncommitted", 2)) == [b"after", b"in-txn"]
        txn.commit_transaction()
        assert values(read_all(cluster, [topic], "read_committed", 2)) == [b"after", b"in-txn"]
    finally:
        txn.close()
        plain.close()


def test_a_new_producer_with_the_same_id_fences_the_old_one_and_aborts_its_transaction(
    cluster, make_topic
):
    topic = make_topic()
    transactional_id = _id()
    zombie = cluster.producer(transactional_id=transactional_id)
    successor = cluster.producer(transactional_id=transactional_id)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, value=b"zombie", partition=0)
        zombie.flush()
        successor.init_transactions()  # aborts the zombie's open transaction
        with pytest.raises(ProducerFenced):
            zombie.commit_transaction()
        with pytest.raises(ProducerFenced):
            zombie.begin_transaction()
        successor.begin_transaction()
        successor.send(topic, value=b"successor", partition=0)
        successor.commit_transaction()
    finally:
        zombie.close()
        successor.close()
    assert values(read_all(cluster, [topic], "read_committed", 1)) == [b"successor"]


def test_the_context_manager_commits_on_a_clean_exit_and_aborts_on_an_exception(
    cluster, make_topic
):
    topic = make_topic()
    producer = cluster.producer(transactional_id=_id())
    try:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, value=b"kept", partition=0)
        with pytest.raises(RuntimeError, match="the application failed"):
            with producer.transaction():
                producer.send(topic, value=b"dropped", partition=0)
                producer.flush()
                raise RuntimeError("the application failed")
        with producer.transaction():  # usable again after the abort
            producer.send(topic, value=b"kept-too", partition=0)
    finally:
        producer.close()
    assert values(read_all(cluster, [topic], "read_committed", 2)) == [b"kept", b"kept-too"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_can_begin_again(
    cluster, make_topic
):
    topic = make_topic()
    producer = cluster.producer(transactional_id=_id(), transaction_timeout_ms=500)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"too-late", partition=0)
        producer.flush()
        time.sleep(2.0)  # the coordinator aborts it meanwhile (checked every 200 ms here)
        with pytest.raises(TransactionAbortable):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"on-time", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()
    assert values(read_all(cluster, [topic], "read_committed", 1)) == [b"on-time"]


def test_a_transactional_producer_refuses_to_send_outside_a_transaction(cluster, make_topic):
    topic = make_topic()
    producer = cluster.producer(transactional_id=_id())
    try:
        with pytest.raises(IllegalState, match="init_transactions"):
            producer.send(topic, value=b"x")
        producer.init_transactions()
        with pytest.raises(IllegalState, match="begin_transaction"):
            producer.send(topic, value=b"x")
    finally:
        producer.close()


def test_offsets_sent_in_a_transaction_are_committed_if_and_only_if_it_commits(
    cluster, make_topic
):
    source, sink = make_topic(), make_topic()
    plain = cluster.producer()
    for i in range(10):
        plain.send(source, value=b"in-%d" % i, partition=0)
    plain.flush()
    plain.close()
    tp = TopicPartition(source, 0)
    group = _id("group")
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, isolation_level="read_committed",
                                fetch_max_wait_ms=50)  # fmt: skip
    producer = cluster.producer(transactional_id=_id())
    try:
        consumer.assign([tp])
        consumed: list = []
        deadline = time.monotonic() + 30
        while len(consumed) < 10 and time.monotonic() < deadline:
            consumed += consumer.poll(timeout_ms=100)
        assert [r.value for r in consumed] == [b"in-%d" % i for i in range(10)]
        producer.init_transactions()
        producer.begin_transaction()
        for r in consumed[:5]:
            producer.send(sink, value=r.value.replace(b"in", b"out"), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(5)},
                                             consumer.group_metadata())  # fmt: skip
        producer.abort_transaction()
        assert consumer.committed(tp) is None
        producer.begin_transaction()
        for r in consumed:
            producer.send(sink, value=r.value.replace(b"in", b"out"), partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(10)},
                                             consumer.group_metadata())  # fmt: skip
        producer.commit_transaction()
        assert consumer.committed(tp).offset == 10
    finally:
        producer.close()
        consumer.close()
    assert values(read_all(cluster, [sink], "read_committed", 10)) == sorted(
        b"out-%d" % i for i in range(10)
    )


PIPELINE = os.path.join(os.path.dirname(__file__), "txn_pipeline.py")


def test_a_pipeline_killed_with_sigkill_and_restarted_writes_each_output_once(
    cluster, make_topic
):
    """consume-transform-produce with the offsets in each transaction: the process is
    killed (SIGKILL) in the middle of its work and started again with the same
    transactional id and group; read_committed readers of its output see every input's
    output exactly once."""
    total = 300
    source, sink = make_topic(partitions=2), make_topic(partitions=2)
    plain = cluster.producer()
    for i in range(total):
        plain.send(source, value=b"in-%03d" % i, partition=i % 2)
    plain.flush()
    plain.close()
    args = [sys.executable, PIPELINE, ray.get_runtime_context().gcs_address, cluster.namespace,
            source, sink, _id("group"), _id("pipeline"), str(total), "10"]  # fmt: skip
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        committed = 0
        for line in first.stdout:  # kill it once a third of the work is committed
            if line.startswith("COMMITTED"):
                committed = int(line.split()[1])
                if committed >= total // 3:
                    break
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert total // 3 <= committed < total, "the first run was killed before it finished"
    second = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    out = read_all(cluster, [sink], "read_committed", total, wait_s=30)
    assert sorted(r.value for r in out) == sorted(b"out:in-%03d" % i for i in range(total))
