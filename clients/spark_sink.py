"""A micro-batch stream's output written to a topic exactly once.

Spark's own Kafka sink is at least once: a batch that fails after some tasks wrote is written
again. Here a stream's output and its progress commit together, in one transaction: the
batch's output rows are collected (as Arrow) on the driver and sent by one transactional
producer, the batch's end offsets are sent to the same transaction as the stream group's
committed offsets, and the transaction commits. Either both are there or neither:

- a batch that fails before the commit (an exception in the transform, a lost executor, the
  driver dying) leaves its writes in an open or aborted transaction; the stream plans the
  same batch again, and a restarted stream's producer, which has the stream's transactional
  id, fences the dead one and aborts what it left open;
- a batch whose commit returned is done: its offsets are the group's committed offsets, so
  it is never planned again (the plan asks for stable offsets, which wait for a transaction
  that is still completing).

So each input record's output appears once to read_committed readers, whatever fails.

Why not Flink's two-phase commit (a transaction per task, pre-committed by the tasks and
committed by the driver after its checkpoint)? It keeps the writes parallel, but a driver
that dies between its checkpoint and the commits must commit the tasks' transactions later,
and loses them if ``transaction.timeout.ms`` runs out first; it also needs the driver to
take over transactions it did not open. One transaction per batch, from the driver, has no
such window; its cost is that the output passes through the driver, which suits the
micro-batch sizes a stream of records is run with (use ``write_topic`` for bulk loads).
"""

from __future__ import annotations

from typing import Any

from rafka.types import OffsetAndMetadata, TopicPartition


class TransactionalSink:
    """Writes batches of one stream (group ``group_id``) to ``topic``; the producer's
    transactional id is the stream's, so a later run of the stream fences this one."""

    def __init__(self, cluster, topic: str, group_id: str,
                 producer_settings: dict[str, Any] | None = None) -> None:  # fmt: skip
        cluster.metadata.topic(topic)  # UnknownTopicOrPartition now, not at the first batch
        self.topic = topic
        self.group_id = group_id
        self.transactional_id = f"rafka-stream-{group_id}"
        self.producer = cluster.producer(transactional_id=self.transactional_id,
                                         **(producer_settings or {}))  # fmt: skip
        self.producer.init_transactions()

    def commit_batch(self, output, progress: dict[TopicPartition, OffsetAndMetadata]) -> int:
        """Write the rows of DataFrame ``output`` (a value column; key, partition, headers
        optional, as ``write_topic`` takes) and commit ``progress`` (the batch's end
        offsets) in one transaction; returns how many rows were written."""
        from rafka.clients.spark_writer import send_arrow_batch, sink_columns

        columns = sink_columns(output)
        batches = output.select(*columns)._collect_as_arrow()
        producer = self.producer
        producer.begin_transaction()
        try:
            futures: list = []
            written = sum(send_arrow_batch(producer, self.topic, b, futures) for b in batches)
            producer.send_offsets_to_transaction(progress, self.group_id)
            producer.commit_transaction()
        except Exception:
            # The batch is planned again; its writes so far go with this abort. (A dying
            # process aborts nothing: the next run's producer fences it and aborts.)
            try:
                producer.abort_transaction()
            except Exception:  # noqa: BLE001 - the next run's init_transactions aborts it
                pass
            raise
        return written

    def close(self) -> None:
        self.producer.close()
