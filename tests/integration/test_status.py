"""``rafka status`` against the session's cluster, run in-process through ``main`` as in
test_cli.py: a topic's partitions show up on their broker and a group that committed
everything it read shows with lag 0."""

from __future__ import annotations

import json
import time
import uuid

from rafka import TopicPartition
from rafka.cli import main
from tests.cli_output import table_rows


def run(capsys, cluster, *argv: str) -> tuple[int, str, str]:
    status = main([*argv, "--namespace", cluster.namespace])
    out, err = capsys.readouterr()
    return status, out, err




def test_status_shows_the_topic_per_broker_and_the_group_with_lag_0(cluster, make_topic, capsys):
    """After 20 records produced to a 2-partition topic and consumed by a group that
    commits, status lists the topic with both partitions led and held by broker 0, and the
    group with lag 0; --json says the same."""
    topic = make_topic(partitions=2)
    producer = cluster.producer(acks="all")
    for i in range(20):
        producer.send(topic, value=b"%d" % i, partition=i % 2)
    producer.close()

    group = f"status-{uuid.uuid4().hex[:8]}"
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)  # fmt: skip
    try:
        consumer.subscribe([topic])
        read, deadline = 0, time.monotonic() + 60
        while read < 20 and time.monotonic() < deadline:
            read += len(consumer.poll(timeout_ms=1000))
        assert read == 20
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 1)).offset == 10
    finally:
        consumer.close()

    status, out, err = run(capsys, cluster, "status", "--all", "--groups-detail")
    assert status == 0, err
    broker = next(r for r in table_rows(out, "brokers:") if r[0] == "0")
    assert broker[1] == "local" and "yes" in broker  # broker 0, disk 'local', alive
    (row,) = [r for r in table_rows(out, "topics:") if r[0] == topic]
    assert row == [topic, "2", "1", "0:2/2", "0", "0"]  # partitions, RF, per broker, health
    (group_row,) = [r for r in table_rows(out, "consumer groups:") if r[0] == group]
    assert group_row == [group, "Empty", "0", "2", "0"]  # no members after close, lag 0
    per_partition = [r for r in table_rows(out, "lag per partition:") if r[0] == group]
    assert per_partition == [[group, topic, "0", "10", "10", "0", "-"],
                             [group, topic, "1", "10", "10", "0", "-"]]  # fmt: skip

    status, out, err = run(capsys, cluster, "status", "--json")
    assert status == 0, err
    overview = json.loads(out)
    (described,) = [t for t in overview["topic_list"] if t["name"] == topic]
    assert described["placement"] == [{"broker_id": 0, "replicas": [0, 1], "leaders": [0, 1]}]
    (listed,) = [g for g in overview["groups"] if g["group_id"] == group]
    assert (listed["total_lag"], listed["error"]) == (0, None)
    assert overview["internal_topics"] >= 1  # __consumer_offsets, counted apart
