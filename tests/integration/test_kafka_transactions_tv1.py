"""Kafka clients of transaction version 1 (EndTxn below v5: librdkafka, kafka-python) keep
their producer epoch across transactions: several transactions in a row on one producer, with
aborts between commits, and only the committed records read committed."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
import kafka as kp

from tests.integration.test_produce_consume import consume_all

TIMEOUT_S = 60
ROUNDS = [True, False, True, True, False, True]  # commit or abort, in order


def _expected(topic_values) -> list[bytes]:
    return [v for commit, vs in topic_values for v in vs if commit]


def test_librdkafka_runs_transactions_in_a_row_on_one_epoch(cluster, topic, kafka_bootstrap):
    producer = ck.Producer({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"],
                            "transactional.id": f"tv1-ck-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(TIMEOUT_S)
    sent = []
    for n, commit in enumerate(ROUNDS):
        values = [b"ck-%d-%d" % (n, i) for i in range(5)]
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v)
        producer.flush(TIMEOUT_S)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
        sent.append((commit, values))
    expected = _expected(sent)
    records = consume_all(cluster, topic, 1, len(expected), isolation_level="read_committed")
    assert [r.value for r in records] == expected


def test_kafka_python_runs_transactions_in_a_row_on_one_epoch(cluster, topic, kafka_bootstrap):
    producer = kp.KafkaProducer(bootstrap_servers=kafka_bootstrap["PLAINTEXT"],
                                transactional_id=f"tv1-kp-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    sent = []
    for n, commit in enumerate(ROUNDS):
        values = [b"kp-%d-%d" % (n, i) for i in range(5)]
        producer.begin_transaction()
        for v in values:
            producer.send(topic, value=v)
        producer.flush(TIMEOUT_S)
        (producer.commit_transaction if commit else producer.abort_transaction)()
        sent.append((commit, values))
    producer.close(TIMEOUT_S)
    expected = _expected(sent)
    records = consume_all(cluster, topic, 1, len(expected), isolation_level="read_committed")
    assert [r.value for r in records] == expected
