"""The cluster as a whole: admin, typed errors for bad input, the picklable handle, idempotent
retries, and surviving a controller restart and a full stop and start."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
from rafka.actors.handles import Gateway
from rafka.actors.placement import CONTROLLER_NAME
from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer

import rafka
from rafka import TopicPartition
from rafka.errors import (
    BrokerNotAvailable,
    FencedLeaderEpoch,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    NotLeaderOrFollower,
    RecordTooLarge,
    TopicAlreadyExists,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
)
from tests.integration.conftest import GROUP_SETTINGS

from .test_produce_consume import consume_all


def test_admin_creates_describes_lists_and_deletes_topics(cluster, make_topic):
    admin = cluster.admin()
    name = make_topic(partitions=2, config={"retention.ms": 3_600_000, "cleanup.policy": "compact"})
    described = admin.describe_topic(name)
    assert [p.partition for p in described.partitions] == [0, 1]
    assert all(p.leader == p.replicas[0] and p.isr == p.replicas for p in described.partitions)
    assert described.config["retention.ms"] == 3_600_000
    assert described.config["cleanup.policy"] == "compact"
    assert described.config["segment.bytes"] == 1073741824  # Kafka's default
    assert name in admin.list_topics()
    admin.delete_topic(name)
    assert name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartition, match="does not exist"):
        admin.describe_topic(name)


@pytest.mark.parametrize(
    "name, rule",
    [("", "empty"), (".", "cannot be"), ("..", "cannot be"), ("a" * 250, "limit is 249"),
     ("bad name", "legal characters"), ("ü", "legal characters")],
)  # fmt: skip
def test_topic_names_follow_kafka_rules(cluster, name, rule):
    with pytest.raises(InvalidTopic, match=rule):
        cluster.admin().create_topic(name)


def test_internal_topics_are_protected(cluster):
    admin = cluster.admin()
    with pytest.raises(InvalidTopic, match="internal"):
        admin.create_topic("__consumer_offsets")


def test_names_differing_only_in_dot_and_underscore_collide(cluster, make_topic):
    name = make_topic(prefix="a.b")
    with pytest.raises(InvalidTopic, match="collides"):
        cluster.admin().create_topic(name.replace(".", "_"))


def test_bad_topic_config_names_the_config_and_rule(cluster):
    admin = cluster.admin()
    with pytest.raises(InvalidConfig, match="retention.ms"):
        admin.create_topic("cfg-bad", config={"retention.ms": "soon"})
    with pytest.raises(InvalidConfig, match="unknown topic config 'retention.msec'"):
        admin.create_topic("cfg-bad", config={"retention.msec": 1})
    with pytest.raises(InvalidPartitions):
        admin.create_topic("cfg-bad", partitions=0)
    assert "cfg-bad" not in admin.list_topics()


def test_creating_an_existing_topic_fails(cluster, topic):
    with pytest.raises(TopicAlreadyExists):
        cluster.admin().create_topic(topic)


def test_partitions_can_be_added_never_removed(cluster, topic):
    admin = cluster.admin()
    assert len(admin.create_partitions(topic, 3).partitions) == 3
    with pytest.raises(InvalidPartitions, match="never removed"):
        admin.create_partitions(topic, 2)
    producer = cluster.producer()
    assert producer.send(topic, value=b"x", partition=2).result(timeout=30).partition == 2


def test_unknown_topic_raises_from_send(cluster):
    producer = cluster.producer()
    with pytest.raises(UnknownTopicOrPartition, match="does not exist"):
        producer.send("no-such-topic", value=b"x")
    with pytest.raises(UnknownTopicOrPartition):
        cluster.consumer().assign([TopicPartition("no-such-topic", 0)])


def test_str_value_without_serializer_is_a_type_error_saying_what_to_pass(cluster, topic):
    producer = cluster.producer()
    with pytest.raises(TypeError, match="value_serializer"):
        producer.send(topic, value="text")
    with pytest.raises(TypeError, match="key_serializer"):
        producer.send(topic, value=b"x", key=42)


def test_record_over_max_request_size_fails_alone(cluster, topic):
    producer = cluster.producer(max_request_size=10_000, linger_ms=20)
    before = producer.send(topic, value=b"before")
    with pytest.raises(RecordTooLarge, match="max_request_size"):
        producer.send(topic, value=bytes(20_000))
    after = producer.send(topic, value=b"after")
    producer.flush()
    assert (before.result().offset, after.result().offset) == (0, 1)
    assert [r.value for r in consume_all(cluster, topic, 1, 2)] == [b"before", b"after"]


def test_batch_over_max_message_bytes_is_refused_and_the_log_goes_on(cluster, make_topic):
    topic = make_topic(config={"max.message.bytes": 2000})
    producer = cluster.producer(linger_ms=0)
    assert producer.send(topic, value=b"small").result(timeout=30).offset == 0
    with pytest.raises(RecordTooLarge):
        producer.send(topic, value=bytes(5000)).result(timeout=30)
    assert producer.send(topic, value=b"next").result(timeout=30).offset == 1
    assert [r.value for r in consume_all(cluster, topic, 1, 2)] == [b"small", b"next"]


def test_altered_config_reaches_the_replicas(cluster, topic):
    admin = cluster.admin()
    admin.alter_topic_config(topic, {"max.message.bytes": 1000})
    assert admin.describe_topic(topic).config["max.message.bytes"] == 1000
    producer = cluster.producer(linger_ms=0)
    with pytest.raises(RecordTooLarge):
        producer.send(topic, value=bytes(3000)).result(timeout=30)
    admin.alter_topic_config(topic, {"max.message.bytes": None})  # back to the default
    assert producer.send(topic, value=bytes(3000)).result(timeout=30).offset == 0


def test_auto_creation_is_off_by_default(cluster):
    with pytest.raises(UnknownTopicOrPartition):
        cluster.producer().send("auto-created-topic", value=b"x")
    assert "auto-created-topic" not in cluster.admin().list_topics()


class LosesReplies(Gateway):
    """Delivers produce requests but reports the first ``count`` answers as lost."""

    def __init__(self, namespace: str, count: int) -> None:
        super().__init__(namespace)
        self.to_lose = count

    def future(self, ref):
        real = super().future(ref)
        if self.to_lose <= 0:
            return real
        self.to_lose -= 1
        lost: concurrent.futures.Future = concurrent.futures.Future()
        real.add_done_callback(
            lambda _: lost.set_exception(BrokerNotAvailable("reply lost (injected)"))
        )
        return lost


def test_idempotent_retry_after_a_lost_reply_writes_once(cluster, topic):
    gateway = LosesReplies(cluster.namespace, count=2)
    producer = Producer(gateway, MetadataCache(gateway), acks="all", retry_backoff_ms=10)
    assert producer.config.enable_idempotence
    futures = [producer.send(topic, value=b"only-once-%d" % i) for i in range(3)]
    producer.close()
    assert [f.result().offset for f in futures] == [0, 1, 2]
    assert gateway.to_lose == 0
    records = consume_all(cluster, topic, 1, 3)
    assert [r.value for r in records] == [b"only-once-%d" % i for i in range(3)]
    tp = TopicPartition(topic, 0)
    assert cluster.consumer().end_offsets([tp]) == {tp: 3}


def test_without_idempotence_a_lost_reply_duplicates(cluster, topic):
    """The contrast that shows the test above can fail: acks=1 retries write twice."""
    gateway = LosesReplies(cluster.namespace, count=1)
    producer = Producer(gateway, MetadataCache(gateway), acks=1, retry_backoff_ms=10)
    producer.send(topic, value=b"twice").result(timeout=30)
    producer.close()
    tp = TopicPartition(topic, 0)
    assert cluster.consumer().end_offsets([tp]) == {tp: 2}


def test_cluster_handle_pickles_into_ray_tasks(cluster, ray_session, topic):
    @ray_session.remote(num_cpus=0)
    def produce_then_read(handle: rafka.Cluster, topic: str, n: int) -> list:
        producer = handle.producer()
        for i in range(n):
            producer.send(topic, value=b"task-%d" % i)
        producer.close()
        consumer = handle.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 2 * n and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=500)
        return sorted(r.value for r in got)

    refs = [produce_then_read.remote(cluster, topic, 5) for _ in range(2)]
    results = ray_session.get(refs, timeout=120)
    assert results[0] == results[1] == sorted([b"task-%d" % i for i in range(5)] * 2)


def test_follower_fetch_from_a_broker_outside_the_replica_set_is_refused(cluster, topic):
    meta = cluster.metadata.refresh([topic])[topic]
    replica = cluster.metadata.replica(meta, 0)
    epoch = meta.partitions[0].leader_epoch
    answer = cluster.gateway.get(replica.replicate.remote(99, epoch, 0, -1, 1024, 0))
    assert answer[0] == NotLeaderOrFollower.errno and "not a replica" in answer[1]


def test_follower_fetch_with_a_stale_leader_epoch_is_fenced(cluster, topic):
    """A follower still on an older leader epoch is refused, so it cannot count toward
    the high watermark of a leader it does not know."""
    meta = cluster.metadata.refresh([topic])[topic]
    replica = cluster.metadata.replica(meta, 0)
    epoch = meta.partitions[0].leader_epoch
    stale = cluster.gateway.get(replica.replicate.remote(99, epoch - 1, 0, -1, 1024, 0))
    newer = cluster.gateway.get(replica.replicate.remote(99, epoch + 1, 0, -1, 1024, 0))
    assert stale[0] == FencedLeaderEpoch.errno
    assert newer[0] == UnknownLeaderEpoch.errno


def test_killed_controller_comes_back_with_all_metadata(cluster, ray_session, make_topic):
    admin = cluster.admin()
    topic = make_topic(partitions=2, config={"retention.bytes": 12345})
    before = admin.describe_topic(topic)
    controller = ray_session.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)
    old_pid = ray_session.get(controller.ping.remote())["pid"]
    ray_session.kill(controller, no_restart=False)
    deadline = time.monotonic() + 60
    new_pid = old_pid
    while new_pid == old_pid:  # ray.kill is asynchronous: the old process may answer once
        try:
            new_pid = ray_session.get(controller.ping.remote(), timeout=10)["pid"]
        except Exception:
            if time.monotonic() > deadline:
                raise
        if new_pid == old_pid:
            assert time.monotonic() < deadline, "the controller was not restarted"
            time.sleep(0.2)
    assert admin.describe_topic(topic) == before
    assert topic in admin.list_topics()
    assert cluster.producer().send(topic, value=b"after restart").result(timeout=30).offset == 0


def test_full_stop_and_start_keeps_topics_and_acknowledged_records(cluster, data_dir, make_topic):
    topic = make_topic(partitions=2)
    producer = cluster.producer(acks="all")
    futures = [producer.send(topic, value=b"%d" % i, key=b"%d" % i) for i in range(500)]
    producer.close()
    acknowledged = {(f.result().partition, f.result().offset) for f in futures}
    stopped = cluster.shutdown()
    assert stopped["controller"] == 1 and stopped["replicas"] >= 2
    with pytest.raises(BrokerNotAvailable):
        cluster.admin().list_topics()
    again = rafka.connect(data_dir=data_dir, namespace=cluster.namespace, settings=GROUP_SETTINGS)
    assert topic in again.admin().list_topics()
    records = consume_all(again, topic, 2, 500)
    assert {(r.partition, r.offset) for r in records} == acknowledged
    assert sorted(int(r.value) for r in records) == list(range(500))


def test_an_interrupted_stop_is_finished_by_the_next_start_which_keeps_the_settings(
    cluster, ray_session, data_dir, make_topic
):
    """`rafka down` stopped the replicas but was interrupted before it stopped the
    controller: the next connect replaces that controller (it no longer watches brokers),
    runs with the settings the metadata log kept, brings every acknowledged record back,
    and refuses settings that differ from the running ones."""
    from rafka.actors import service

    topic = make_topic(partitions=1)
    producer = cluster.producer(acks="all")
    acked = [producer.send(topic, value=b"%d" % i).result(timeout=30).offset for i in range(20)]
    producer.close()
    controller = ray_session.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)
    ray_session.get(controller.stop_coordinators.remote(), timeout=60)
    ray_session.get(controller.stop_replicas.remote(), timeout=120)
    again = rafka.connect(data_dir=data_dir, namespace=cluster.namespace)  # no settings given
    running = service.running_settings(cluster.namespace)
    assert {k: running.get(k) for k in GROUP_SETTINGS} == GROUP_SETTINGS
    assert not ray_session.get(
        ray_session.get_actor(CONTROLLER_NAME, namespace=cluster.namespace).ping.remote()
    )["stopping"]
    assert [r.offset for r in consume_all(again, topic, 1, 20)] == acked
    with pytest.raises(InvalidConfig, match="num.partitions=7"):
        rafka.connect(data_dir=data_dir, namespace=cluster.namespace,
                      settings={"num.partitions": 7})  # fmt: skip


def test_a_new_topic_retires_a_running_replica_of_an_older_topic_of_its_name(
    cluster, ray_session, data_dir
):
    """A replica of an older topic of the same name still runs on the disk (its broker was
    away when that topic was deleted): creating the new topic deletes it before the new
    replica opens the directory, so the old one never writes into the new topic's files."""
    import os

    from rafka.actors.placement import DEFAULT_DISK, agent_name
    from tests.integration.replica_lookup import find_replica

    name = "retire-older"
    admin = cluster.admin()
    broker = admin.brokers()[0].broker_id
    agent = ray_session.get_actor(agent_name(DEFAULT_DISK), namespace=cluster.namespace)
    old_state = {
        "topic": name, "topic_id": "0ld0ld0ld", "partition": 0, "broker_id": broker,
        "replicas": [broker], "isr": [broker], "leader": broker, "leader_epoch": 0,
        "partition_epoch": 0, "config": {}, "topic_created_at": -1, "replica_epoch": 1,
        "host": 1_000_000,  # a host slot of its own, which the controller never hands out
    }  # fmt: skip
    ray_session.get(agent.ensure_replicas.remote([old_state]), timeout=60)
    assert find_replica(ray_session, cluster.namespace, "0ld0ld0ld", 0, broker)  # runs
    admin.create_topic(name, 1, 1)
    try:
        admin.wait_for_topic(name)
        assert find_replica(ray_session, cluster.namespace, "0ld0ld0ld", 0, broker) is None
        producer = cluster.producer(acks="all")
        assert producer.send(name, value=b"new").result(timeout=30).offset == 0
        producer.close()
        assert [r.value for r in consume_all(cluster, name, 1, 1)] == [b"new"]
        leftovers = [d for d in os.listdir(os.path.join(data_dir, DEFAULT_DISK))
                     if d.startswith(f"{name}-0")]  # fmt: skip
        assert leftovers == [f"{name}-0"]
    finally:
        admin.delete_topic(name)
