"""Run by test_transactions.py in a process of its own: consume-transform-produce, exactly
once. Reads ``source`` (read_committed, offsets of group ``group``), writes ``out:<value>``
to ``sink`` and sends the consumed offsets in the same transaction, ``batch`` records per
transaction, until it has read ``total`` records; prints ``COMMITTED <n>`` after each commit.

argv: gcs address, namespace, source, sink, group, transactional id, total, batch
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import rafka  # noqa: E402
from rafka import OffsetAndMetadata, TopicPartition  # noqa: E402


def main() -> None:
    address, namespace, source, sink, group, transactional_id, total, batch = sys.argv[1:]
    total, batch = int(total), int(batch)
    cluster = rafka.connect(address=address, namespace=namespace)
    partitions = len(cluster.admin().describe_topic(source).partitions)
    consumer = cluster.consumer(group_id=group, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=50, max_poll_records=batch)  # fmt: skip
    consumer.assign([TopicPartition(source, p) for p in range(partitions)])
    producer = cluster.producer(transactional_id=transactional_id)
    producer.init_transactions()
    done = sum((consumer.committed(TopicPartition(source, p)) or OffsetAndMetadata(0)).offset
               for p in range(partitions))  # fmt: skip
    while done < total:
        records = consumer.poll(timeout_ms=200)
        if not records:
            continue
        producer.begin_transaction()
        offsets = {}
        for r in records:
            producer.send(sink, value=b"out:" + r.value, partition=r.partition)
            offsets[TopicPartition(r.topic, r.partition)] = OffsetAndMetadata(r.offset + 1)
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()
        done += len(records)
        print(f"COMMITTED {done}", flush=True)
    producer.close()
    consumer.close()


if __name__ == "__main__":
    main()
