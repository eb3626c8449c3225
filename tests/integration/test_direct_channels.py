"""Produce and fetch over the replica hosts' direct channels on a real cluster: the calls go
there once a channel is up, and a host that restarts gets a new one without losing what was
acknowledged."""

from __future__ import annotations

import time

import ray

from rafka import TopicPartition
from rafka.actors import host_channels


def _leader_host(cluster, topic: str):
    meta = cluster.metadata.refresh([topic])[topic]
    return cluster.metadata.replica(meta, 0).host


def _read(cluster, topic: str, expected: int) -> list[bytes]:
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(r.value for r in consumer.poll(timeout_ms=500))
    consumer.close()
    return out


def test_produce_and_fetch_calls_go_over_the_leaders_channel(cluster, topic):
    producer = cluster.producer(linger_ms=0)
    for i in range(200):
        producer.send(topic, b"%d" % i).result(30)  # one request each: many calls
    producer.close()
    channel = host_channels.shared().channel(_leader_host(cluster, topic))
    assert channel is not None and not channel.closed
    produced = channel.calls
    assert produced > 150  # the first few may go as actor calls while it comes up
    assert _read(cluster, topic, 200) == [b"%d" % i for i in range(200)]
    assert channel.calls > produced  # the consumer's fetches too


def test_a_restarted_host_gets_a_new_channel_and_keeps_every_acknowledged_record(
    cluster, topic
):
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=0)
    acknowledged = [producer.send(topic, b"before-%d" % i) for i in range(50)]
    for future in acknowledged:
        future.result(30)
    host = _leader_host(cluster, topic)
    before = host_channels.shared().channel(host)
    assert before is not None
    ray.kill(host, no_restart=False)  # Ray starts the host again; it reopens its replicas
    deadline = time.monotonic() + 30
    while not before.closed:  # the process is gone: its connection ended
        assert time.monotonic() < deadline, "the killed host's channel is still open"
        time.sleep(0.05)
    after_kill = [producer.send(topic, b"after-%d" % i) for i in range(50)]
    for future in after_kill:
        future.result(60)
    producer.close()
    values = _read(cluster, topic, 100)
    assert values[:50] == [b"before-%d" % i for i in range(50)]
    assert values[50:] == [b"after-%d" % i for i in range(50)]  # once each, in order
    deadline = time.monotonic() + 10
    while (now := host_channels.shared().channel(_leader_host(cluster, topic))) is None:
        assert time.monotonic() < deadline, "no channel to the restarted host"
        time.sleep(0.1)
    assert now is not before and now.address != before.address
