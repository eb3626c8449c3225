"""Writing a Spark DataFrame into a topic: each Spark task opens a producer in its Python
worker (which joins the Ray cluster once) and sends its rows, column-wise when it can.

The column checks run on the driver, before any task starts, so a wrong column type is a
TypeError naming the column rather than a failed Spark job.
"""

from __future__ import annotations

from typing import Any

from rafka.clients.producer_config import make_config

#: Spark type names each sink column accepts.
_ACCEPTED = {
    "value": ("binary", "string"),
    "key": ("binary", "string"),
    "partition": ("int", "bigint", "smallint", "tinyint"),
    "headers": ("array<struct<key:string,value:binary>>",),
}


def sink_columns(df) -> list[str]:
    """The sink columns ``df`` has, checked: TypeError for a missing value column or a
    column of the wrong type."""
    types = dict(df.dtypes)
    if "value" not in types:
        raise TypeError(
            f"the DataFrame has no 'value' column (it has {sorted(types)}); select or alias "
            "one, e.g. df.selectExpr('CAST(x AS BINARY) AS value')"
        )
    present = []
    for column, accepted in _ACCEPTED.items():
        if column not in types:
            continue
        if types[column] not in accepted:
            raise TypeError(
                f"column {column!r} is {types[column]}; a topic sink takes "
                f"{' or '.join(accepted)} (cast it first)"
            )
        present.append(column)
    return present


def write(df, cluster, topic: str, producer_settings: dict[str, Any]) -> int:
    import ray

    settings = {"acks": "all", "enable_idempotence": True, **producer_settings}
    make_config(**settings)  # a bad setting fails here, on the driver
    cluster.metadata.topic(topic)  # so does a missing topic
    columns = sink_columns(df)
    address = ray.get_runtime_context().gcs_address
    namespace = cluster.namespace

    def produce(batches):
        import pyarrow as pa

        producer = _producer(address, namespace, settings)
        written = 0
        try:
            futures = []
            for batch in batches:
                written += send_arrow_batch(producer, topic, batch, futures)
            producer.flush()
            for future in futures:
                future.result()  # raises the first send that failed: the task fails
        finally:
            producer.close()
        yield pa.RecordBatch.from_pydict({"records": [written]})

    counts = df.select(*columns).mapInArrow(produce, "records long").collect()
    return sum(row["records"] for row in counts)


def _producer(address: str, namespace: str, settings: dict[str, Any]):
    """A producer in a Spark Python worker, which joins the Ray cluster on first use."""
    import logging

    import ray

    from rafka.connection import Cluster

    if not ray.is_initialized():
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING,
                 log_to_driver=False)  # fmt: skip
    return Cluster(namespace, address).producer(**settings)


def send_arrow_batch(producer, topic: str, batch, futures: list) -> int:
    """Queue the rows of one Arrow batch; returns how many."""
    import numpy as np

    from rafka.clients.columnar import group_rows

    names = batch.schema.names
    values = batch.column(names.index("value"))
    keys = batch.column(names.index("key")) if "key" in names else None
    headers = batch.column(names.index("headers")) if "headers" in names else None
    if headers is not None and headers.null_count < len(headers):
        return _send_records(producer, topic, batch, futures)
    partitions = batch.column(names.index("partition")) if "partition" in names else None
    if partitions is None or partitions.null_count == len(partitions):
        futures.append(producer.send_batch(topic, values, keys))
        return len(values)
    if partitions.null_count:
        return _send_records(producer, topic, batch, futures)
    numbers = partitions.to_numpy(zero_copy_only=False).astype(np.int64)
    for partition, rows in group_rows(numbers).items():
        take = rows.astype(np.int64)
        futures.append(producer.send_batch(
            topic, values.take(take), None if keys is None else keys.take(take),
            partition=partition,
        ))  # fmt: skip
    return len(values)


def _send_records(producer, topic: str, batch, futures: list) -> int:
    """One ``send`` per row: rows with headers or a partition only some rows give."""
    for row in batch.to_pylist():
        value, key = row["value"], row.get("key")
        headers = row.get("headers")
        futures.append(producer.send(
            topic,
            value=value.encode() if isinstance(value, str) else value,
            key=key.encode() if isinstance(key, str) else key,
            headers=[(h["key"], h["value"]) for h in headers] if headers else None,
            partition=row.get("partition"),
        ))  # fmt: skip
    return batch.num_rows
