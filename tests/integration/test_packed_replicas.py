"""Replicas packed many to a host actor (``replicas.per.actor``): a thousand partitions on the
embedded default, each one written and read back, a consumer group over them, the hosts
they fill; bad settings and topics too big for the node refused before anything starts; and
(slow, in its own process) three disk nodes with a packed RF=3 topic and a host actor
killed under acks=all writes."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
import ray

import rafka
from rafka import TopicPartition
from rafka.actors.placement import CONTROLLER_NAME
from rafka.errors import InvalidConfig, PolicyViolation
from tests.integration.conftest import GROUP_SETTINGS
from tests.integration.script_report import run_script

PACKED_NAMESPACE = "rafka-tests-packed"
PER_ACTOR = 100
PARTITIONS = 1000
SCENARIO = os.path.join(os.path.dirname(__file__), "packed_scenario.py")


@pytest.fixture(scope="module")
def packed(ray_session, tmp_path_factory):
    """Services of their own (another namespace, another data directory) in the session's
    Ray instance, packing ``PER_ACTOR`` replicas per host actor."""
    cluster = rafka.connect(
        data_dir=str(tmp_path_factory.mktemp("packed")), namespace=PACKED_NAMESPACE,
        settings={**GROUP_SETTINGS, "replicas.per.actor": PER_ACTOR},
    )  # fmt: skip
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def thousand(packed):
    """A topic of PARTITIONS partitions, one record (its partition number) in each."""
    name = f"wide-{uuid.uuid4().hex[:8]}"
    packed.admin().create_topic(name, partitions=PARTITIONS)
    producer = packed.producer(acks="all", linger_ms=5, delivery_timeout_ms=300_000,
                               max_block_ms=300_000)  # fmt: skip
    futures = [producer.send(name, value=b"%d" % p, partition=p) for p in range(PARTITIONS)]
    acked = [f.result(timeout=300) for f in futures]
    producer.close()
    yield name, acked
    packed.admin().delete_topic(name)


def _controller(cluster):
    return ray.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)


def test_a_thousand_packed_partitions_each_take_a_write_in_ten_hosts(packed, thousand):
    name, acked = thousand
    assert [(m.partition, m.offset) for m in acked] == [(p, 0) for p in range(PARTITIONS)]
    (described,) = ray.get(_controller(packed).describe_topics.remote([name]))
    hosts = {p["hosts"][0] for p in described["partitions"]}
    assert len(hosts) == PARTITIONS // PER_ACTOR
    assert not any(p["starting"] for p in described["partitions"])
    status = packed.status()
    assert status["fencings"] == 0  # starting them never starved the broker's heartbeats
    (broker,) = status["brokers"]
    assert broker["hosted_replicas"] >= PARTITIONS
    assert broker["host_actors"] <= 1 + broker["hosted_replicas"] // PER_ACTOR + 2


def test_every_packed_partition_reads_back_what_it_took(packed, thousand):
    name, _ = thousand
    consumer = packed.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 120
    while len(got) < PARTITIONS and time.monotonic() < deadline:
        for record in consumer.poll(timeout_ms=1000):
            assert record.partition not in got, f"partition {record.partition} read twice"
            got[record.partition] = record.value
    consumer.close()
    assert got == {p: b"%d" % p for p in range(PARTITIONS)}


def test_a_consumer_group_over_a_thousand_partitions_reads_each_record_once(packed, thousand):
    """The group starts at the end of every partition (committed up front); three members
    share the thousand partitions; once they hold them all, 3,000 records go in, and each is
    read by exactly one member, once."""
    name, _ = thousand
    group = f"g-{uuid.uuid4().hex[:8]}"
    start = packed.consumer(group_id=group)
    start.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
    start.commit({TopicPartition(name, p): 1 for p in range(PARTITIONS)})  # past offset 0
    start.close()
    members = [packed.consumer(group_id=group, enable_auto_commit=False) for _ in range(3)]
    reads: list[list] = [[] for _ in members]
    stop = threading.Event()

    def run(i: int) -> None:
        member = members[i]
        member.subscribe([name])
        while not stop.is_set():
            records = member.poll(timeout_ms=200)
            reads[i].extend(r.value for r in records)
            if records:
                member.commit()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            owned = [len(m.assignment()) for m in members]
            if sum(owned) == PARTITIONS and all(owned):
                break
            time.sleep(0.2)
        assert sum(len(m.assignment()) for m in members) == PARTITIONS
        producer = packed.producer(acks="all", linger_ms=5)
        futures = [producer.send(name, value=b"rec-%d" % i, partition=i % PARTITIONS)
                   for i in range(3000)]  # fmt: skip
        for future in futures:
            future.result(timeout=120)
        producer.close()
        deadline = time.monotonic() + 120
        while sum(len(r) for r in reads) < 3000 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # a duplicate would show up now
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for m in members:
            m.close()
    values = [v for member in reads for v in member]
    assert sorted(values) == sorted(b"rec-%d" % i for i in range(3000))
    assert all(reads), "every member read some"


def test_replicas_per_actor_out_of_range_is_refused_before_anything_starts(ray_session,
                                                                           tmp_path):  # fmt: skip
    for bad in (0, 100_000):
        with pytest.raises(InvalidConfig, match="replicas.per.actor"):
            rafka.connect(data_dir=str(tmp_path), namespace="rafka-tests-refused",
                          settings={"replicas.per.actor": bad})  # fmt: skip
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == "rafka-tests-refused"]  # fmt: skip


def test_a_topic_too_big_for_the_nodes_memory_is_refused_saying_what_fits(cluster):
    """One process per replica (the session cluster's setting): 980 replicas, about 57 GiB,
    do not fit in the memory of a node with less than 70 GiB available; the refusal says
    how many do and what to set, and no topic is created."""
    name = f"huge-{uuid.uuid4().hex[:8]}"
    with pytest.raises(PolicyViolation, match="replicas.per.actor") as refused:
        cluster.admin().create_topic(name, partitions=980)
    assert "fit" in str(refused.value)
    assert name not in cluster.admin().list_topics()


@pytest.mark.slow
def test_three_nodes_packed_rf3_survive_a_host_actor_killed_under_writes(tmp_path):
    """300 partitions, RF=3, packed 100 per host on three disk nodes: every partition takes
    acks=all writes; one host actor is killed (``ray.kill``); every partition it led gets
    a leader from its ISR; the host comes back, its replicas catch up and rejoin; every
    acknowledged record is read back, once."""
    report = run_script(SCENARIO, str(tmp_path / "data"), timeout_s=900)
    print(report["summary"])
    assert report["partitions"] == 300 and report["writable_s"] > 0
    assert report["fencings"] == 0
    assert report["killed_host_led"] > 0
    assert report["leaders_moved"] == report["killed_host_led"]
    assert report["acked"] > 0 and report["lost"] == 0 and report["duplicated"] == 0
    assert report["rejoined"] is True
