"""SASL (PLAIN, SCRAM-SHA-256/512), TLS and ACLs at the Kafka listener, with real clients."""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck
import kafka as kp
import pytest

from rafka import AclBinding, AclBindingFilter, TopicPartition
from tests.integration.test_produce_consume import consume_all

TIMEOUT_S = 30
#: How long a change of users or ACLs may take to reach the listeners (they poll each second).
PROPAGATION_S = 3.0


@pytest.fixture
def user(cluster):
    """A user with SCRAM-SHA-256 and -512 credentials; removed after the test."""
    name, password = f"user-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    admin = cluster.admin()
    admin.add_user(name, password)
    time.sleep(PROPAGATION_S)
    yield name, password
    admin.remove_user(name)


def _produce(config: dict, topic: str, count: int = 20) -> list:
    """Produce ``count`` values; returns the delivery errors (empty: all acknowledged)."""
    producer = ck.Producer({"linger.ms": 1, "message.timeout.ms": 10_000, **config})
    errors: list = []
    for i in range(count):
        producer.produce(topic, value=b"%d" % i,
                         on_delivery=lambda e, m: errors.append(e) if e else None)
    producer.flush(TIMEOUT_S)
    return errors


def _tls(tls_files) -> dict:
    return {"ssl.ca.location": tls_files["ca"], "ssl.endpoint.identification.algorithm": "none"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_clients_with_the_right_password_produce(cluster, topic, kafka_bootstrap, user,
                                                      mechanism):  # fmt: skip
    name, password = user
    config = {"bootstrap.servers": kafka_bootstrap["SASL_PLAINTEXT"],
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
              "sasl.username": name, "sasl.password": password}  # fmt: skip
    assert _produce(config, topic) == []
    assert len(consume_all(cluster, topic, 1, 20)) == 20


def test_a_wrong_password_is_refused_and_nothing_is_written(cluster, topic, kafka_bootstrap,
                                                            user):  # fmt: skip
    name, _ = user
    failures: list = []
    producer = ck.Producer({
        "bootstrap.servers": kafka_bootstrap["SASL_PLAINTEXT"],
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": name, "sasl.password": "wrong", "message.timeout.ms": 5000,
        "error_cb": lambda e: failures.append(e),
    })  # fmt: skip
    errors: list = []
    producer.produce(topic, value=b"x", on_delivery=lambda e, m: errors.append(e))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert any(f.code() == ck.KafkaError._AUTHENTICATION for f in failures)
    consumer = cluster.consumer()
    ends = consumer.end_offsets([TopicPartition(topic, 0)])
    consumer.close()
    assert ends == {TopicPartition(topic, 0): 0}


def test_tls_and_sasl_over_tls_connect_with_the_clusters_ca(cluster, topic, kafka_bootstrap,
                                                            tls_files, user):  # fmt: skip
    name, password = user
    assert _produce({"bootstrap.servers": kafka_bootstrap["SSL"], "security.protocol": "SSL",
                     **_tls(tls_files)}, topic, 10) == []  # fmt: skip
    assert _produce({"bootstrap.servers": kafka_bootstrap["SASL_SSL"],
                     "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": name, "sasl.password": password, **_tls(tls_files)},
                    topic, 10) == []  # fmt: skip
    consumer = kp.KafkaConsumer(bootstrap_servers=kafka_bootstrap["SSL"], security_protocol="SSL",
                                ssl_cafile=tls_files["ca"], ssl_check_hostname=False,
                                auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    consumer.assign([kp.TopicPartition(topic, 0)])
    got = [m.value for _, m in zip(range(20), consumer)]
    consumer.close()
    assert sorted(got) == sorted([b"%d" % i for i in range(10)] * 2)


def test_acls_allow_the_named_user_and_deny_everyone_else(cluster, topic, kafka_bootstrap,
                                                          user):  # fmt: skip
    name, password = user
    admin = cluster.admin()
    allow = AclBinding.of("topic", topic, "literal", f"User:{name}", "*", "write", "allow")
    admin.create_acls([allow])
    time.sleep(PROPAGATION_S)
    try:
        sasl = {"bootstrap.servers": kafka_bootstrap["SASL_PLAINTEXT"],
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": name, "sasl.password": password}  # fmt: skip
        assert _produce(sasl, topic, 5) == []
        # The topic now has an ACL, so an anonymous PLAINTEXT client gets no write.
        denied = _produce({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"]}, topic, 5)
        assert denied and all(e.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
                              for e in denied)  # fmt: skip
        deny = AclBinding.of("topic", topic, "literal", f"User:{name}", "*", "write", "deny")
        admin.create_acls([deny])
        time.sleep(PROPAGATION_S)
        refused = _produce(sasl, topic, 5)
        assert refused and refused[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert len(consume_all(cluster, topic, 1, 5)) == 5  # only the allowed writes
    finally:
        admin.delete_acls([AclBindingFilter.of("topic", topic, "literal", None, None, "any",
                                               "any")])  # fmt: skip


def test_the_acl_apis_work_from_a_kafka_admin_client(cluster, kafka_bootstrap):
    admin = ck.admin.AdminClient({"bootstrap.servers": kafka_bootstrap["PLAINTEXT"]})
    resource = f"acl-{uuid.uuid4().hex[:6]}"
    binding = ck.admin.AclBinding(ck.admin.ResourceType.TOPIC, resource,
                                  ck.admin.ResourcePatternType.PREFIXED, "User:carol", "*",
                                  ck.admin.AclOperation.READ,
                                  ck.admin.AclPermissionType.ALLOW)  # fmt: skip
    admin.create_acls([binding])[binding].result(TIMEOUT_S)
    found = cluster.admin().describe_acls(AclBindingFilter.of(
        "topic", resource, "prefixed", None, None, "any", "any"))
    assert [(b.principal, b.operation.name) for b in found] == [("User:carol", "READ")]
    pattern = ck.admin.AclBindingFilter(ck.admin.ResourceType.TOPIC, resource,
                                        ck.admin.ResourcePatternType.ANY, None, None,
                                        ck.admin.AclOperation.ANY,
                                        ck.admin.AclPermissionType.ANY)  # fmt: skip
    described = admin.describe_acls(pattern).result(TIMEOUT_S)
    assert [b.principal for b in described] == ["User:carol"]
    deleted = admin.delete_acls([pattern])[pattern].result(TIMEOUT_S)
    assert len(deleted) == 1
    assert cluster.admin().describe_acls(AclBindingFilter.of(
        "topic", resource, "any", None, None, "any", "any")) == []
