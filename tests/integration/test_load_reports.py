"""Brokers' load reports on the integration tests' shared cluster: while a producer writes to
a partition and a consumer reads it, the balancer's status shows the leader's broker with its
disk and the partition's bytes in and out. Reports come every
``broker.load.report.interval.ms`` (5 s by default), so the check waits for them with a
deadline; nothing is timed."""

from __future__ import annotations

import time

from rafka import TopicPartition

DEADLINE_S = 120.0
VALUE = b"v" * 1_000


def test_the_leaders_broker_reports_its_disk_and_the_partitions_traffic(cluster, topic):
    admin = cluster.admin()
    leader = admin.describe_topic(topic).partitions[0].leader
    producer = cluster.producer(acks=1)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + DEADLINE_S
    try:
        # Traffic all along: a rate is measured over one report interval, so each report
        # sees some, whenever it comes.
        while True:
            for _ in range(20):
                producer.send(topic, value=VALUE)
            producer.flush()
            consumer.poll(timeout_ms=200)
            status = admin.describe_balancer()
            if (status.disk_capacity.get(leader, 0) > 0
                    and status.bytes_in_per_s.get(leader, 0.0) > 0
                    and status.bytes_out_per_s.get(leader, 0.0) > 0):  # fmt: skip
                break
            assert time.monotonic() < deadline, f"no load reported for broker {leader}: {status}"
    finally:
        consumer.close()
        producer.close()
    assert 0 < status.disk_used[leader] <= status.disk_capacity[leader]
