"""The admin tooling of transactions (KIP-664) on the session cluster: transactions listed and
described at their coordinators, the producers a partition's leader holds, and an admin abort
that ends an open transaction so read_committed readers get past it.

No test here makes a hanging transaction, because this cluster gives clients no way to make
one. Kafka's hangs came from two paths. In the first, a produce request was delayed past the
coordinator's timeout abort and opened a transaction after the abort marker. Here that
marker carries a bumped epoch, so the late batch is refused as fenced. Also, the leader asks
the coordinator before a transaction's first write to a partition (KIP-890), so no
transaction can open in a partition the coordinator does not hold. In the second, the
coordinator lost its record of the transaction (an unclean election of a
``__transaction_state`` partition, say). Reproducing that would mean destroying
``__transaction_state`` of the cluster every integration test shares. So the hanging
decision (which open transactions no coordinator holds) is proven in
``tests/unit/clients/test_admin_transactions.py`` with fake coordinators. Here
``find_hanging_transactions`` is shown not to report a live transaction, and
``abort_transaction`` ends a real open transaction in its partition, the same way it would
end a hanging one.
"""

from __future__ import annotations

import time
import uuid

import pytest

from rafka import TopicPartition
from rafka.errors import InvalidTxnState, TransactionalIdNotFound
from rafka.types import TransactionListing


def _id(prefix: str = "txn-admin") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_committed(cluster, topic: str, expect: int, wait_s: float = 3.0) -> list[bytes]:
    """The values a fresh read_committed consumer reads from the start of partition 0
    (waiting up to ``wait_s`` for ``expect`` of them)."""
    consumer = cluster.consumer(isolation_level="read_committed", auto_offset_reset="earliest",
                                fetch_max_wait_ms=50)  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0)])
        out: list = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and len(out) < expect:
            out += consumer.poll(timeout_ms=100)
        out += consumer.poll(timeout_ms=100)  # anything more would show now
        return [r.value for r in out]
    finally:
        consumer.close()


def ended(admin, transactional_id: str, wait_s: float = 10.0):
    """The id's description once its transaction has ended: the producer's commit or abort
    returns when the coordinator has decided (Prepare*), and the markers follow."""
    deadline = time.monotonic() + wait_s
    while True:
        described = admin.describe_transactions([transactional_id])[transactional_id]
        if not described.state.startswith("Prepare") or time.monotonic() >= deadline:
            return described
        time.sleep(0.05)


def last_stable_offset(cluster, topic: str) -> int:
    """Partition 0's last stable offset (the end a read_committed consumer sees)."""
    consumer = cluster.consumer(isolation_level="read_committed")
    try:
        return consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        consumer.close()


def test_an_ongoing_transaction_is_listed_and_described_at_its_coordinator(cluster, make_topic):
    """While open: Ongoing with its partition, start time and timeout, listed under its
    producer id; once committed: CompleteCommit, no partitions, the epoch bumped."""
    topic = make_topic(partitions=2)
    transactional_id = _id()
    admin = cluster.admin()
    producer = cluster.producer(transactional_id=transactional_id, transaction_timeout_ms=45_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        began = int(time.time() * 1000)
        producer.send(topic, value=b"open", partition=1)
        producer.flush()
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert (described.state, described.timeout_ms) == ("Ongoing", 45_000)
        assert described.partitions == [TopicPartition(topic, 1)]
        assert began - 5_000 <= described.start_ms <= int(time.time() * 1000)
        listing = TransactionListing(transactional_id, described.producer_id, "Ongoing")
        assert listing in admin.list_transactions()
        assert admin.list_transactions(states=["Ongoing"],
                                       producer_ids=[described.producer_id]) == [listing]
        assert listing not in admin.list_transactions(states=["Empty", "CompleteCommit"])
        with pytest.raises(TransactionalIdNotFound, match="never used"):
            admin.describe_transactions([transactional_id, _id("never")])
        producer.commit_transaction()
        committed = ended(admin, transactional_id)
        assert (committed.state, committed.partitions, committed.start_ms) == (
            "CompleteCommit", [], -1)
        assert (committed.producer_id, committed.producer_epoch) == (
            described.producer_id, described.producer_epoch + 1)
    finally:
        producer.close()


def test_describe_producers_shows_the_open_transaction_of_a_partition(cluster, make_topic):
    """The leader lists the transactional producer with its epoch and the first offset of its
    open transaction (after a plain record at 0); once aborted, nothing is open and the
    producer is at the bumped epoch. The other partition has no producers."""
    topic = make_topic(partitions=2)
    transactional_id = _id()
    admin = cluster.admin()
    plain = cluster.producer()
    producer = cluster.producer(transactional_id=transactional_id)
    try:
        assert plain.send(topic, value=b"plain", partition=0).result(timeout=30).offset == 0
        producer.init_transactions()
        producer.begin_transaction()
        for value in (b"a", b"b"):
            producer.send(topic, value=value, partition=0)
        producer.flush()
        described = admin.describe_transactions([transactional_id])[transactional_id]
        states = admin.describe_producers(topic)
        assert states[1] == []
        ours = [s for s in states[0] if s.producer_id == described.producer_id]
        assert len(ours) == 1
        assert ours[0].producer_epoch == described.producer_epoch
        assert ours[0].current_transaction_start_offset == 1
        assert ours[0].last_sequence == 1  # two batches of one record, sequences 0 and 1
        producer.abort_transaction()
        assert ended(admin, transactional_id).state == "CompleteAbort"
        after = [s for s in admin.describe_producers(topic, [0])[0]
                 if s.producer_id == described.producer_id]  # fmt: skip
        assert after[0].current_transaction_start_offset == -1
        assert after[0].producer_epoch == described.producer_epoch + 1
    finally:
        producer.close()
        plain.close()


def test_the_admin_abort_ends_an_open_transaction_and_read_committed_readers_pass_it(
    cluster, make_topic
):
    """A live open transaction stands in for a hanging one (see the module docstring).
    find_hanging_transactions does not report it, even with no minimum silence, because its
    coordinator holds the partition. The admin abort, named as describe_producers reports
    it, ends it in the partition: the last stable offset moves past it and a read_committed
    reader reads the record written after it, not the aborted one. A second abort finds
    nothing open. The producer's commit then succeeds: its coordinator's marker is refused
    as written already, and its record in that partition stays aborted. Its next transaction
    writes at the epoch the admin's marker set, and commits."""
    topic = make_topic()
    admin = cluster.admin()
    plain = cluster.producer()
    producer = cluster.producer(transactional_id=_id())
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"stuck", partition=0)
        producer.flush()
        assert plain.send(topic, value=b"after", partition=0).result(timeout=30).offset == 1
        assert last_stable_offset(cluster, topic) == 0
        assert read_committed(cluster, topic, expect=1, wait_s=1.0) == []
        time.sleep(0.01)  # some silence, however little: max_transaction_timeout_ms is 0
        assert admin.find_hanging_transactions(topic=topic, max_transaction_timeout_ms=0) == []

        open_ = [s for s in admin.describe_producers(topic)[0]
                 if s.current_transaction_start_offset >= 0]  # fmt: skip
        assert [s.current_transaction_start_offset for s in open_] == [0]
        s = open_[0]
        admin.abort_transaction(topic, 0, s.producer_id, s.producer_epoch, s.coordinator_epoch)
        assert last_stable_offset(cluster, topic) == 3  # stuck, after, the admin's marker
        assert read_committed(cluster, topic, expect=1) == [b"after"]
        with pytest.raises(InvalidTxnState, match="no open transaction"):
            admin.abort_transaction(topic, 0, s.producer_id, s.producer_epoch,
                                    s.coordinator_epoch)  # fmt: skip

        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, value=b"next", partition=0)
        producer.commit_transaction()
        assert read_committed(cluster, topic, expect=2) == [b"after", b"next"]
    finally:
        producer.close()
        plain.close()
