"""Record batches as Arrow tables in Spark's Kafka-source schema, and the Arrow IPC stream
bytes that carry them through Ray's object store to Spark's JVM executors.

The partition replica calls these (in a worker thread, off its event loop) when a Spark read
asks it for a range of its log; unit tests call them directly. No Ray and no Spark here.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

from rafka.clients.columnar import binary_array
from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)

#: Spark's Kafka source schema, column for column (timestamps in microseconds, UTC, which is
#: what Spark's TimestampType reads from Arrow).
KAFKA_SOURCE_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", HEADERS_TYPE),
])  # fmt: skip

#: Rows per Arrow record batch inside one block: big enough that the JVM's per-batch cost
#: vanishes, small enough that a reader never holds much more than one at a time.
ROWS_PER_ARROW_BATCH = 65_536
#: Log batches smaller than this on average are merged before they are written out.
MIN_ROWS_PER_ARROW_BATCH = 2_048


def _headers_array(headers: list | None, count: int) -> pa.Array:
    """Record headers as list<struct<key, value>>; a record without headers is null, as in
    Spark's Kafka source."""
    if headers is None:
        return pa.nulls(count, HEADERS_TYPE)
    if len(headers) != count:
        raise CorruptRecord(f"headers column holds {len(headers)} entries, the batch {count}")
    offsets = np.zeros(count + 1, dtype=np.int32)
    valid = np.ones(count, dtype=bool)
    keys: list = []
    values: list = []
    for i, record_headers in enumerate(headers):
        if not record_headers:
            valid[i] = False
        else:
            for key, value in record_headers:
                keys.append(key)
                values.append(value)
        offsets[i + 1] = len(keys)
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, type=pa.string()), pa.array(values, type=pa.binary())],
        fields=list(HEADER_TYPE),
    )
    mask = pa.array(~valid) if not valid.all() else None
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=HEADERS_TYPE, mask=mask)


def batch_rows(topic: str, partition: int, buf, pos: int) -> pa.RecordBatch | None:
    """The records of the batch at ``pos`` of ``buf`` as a Kafka-source record batch; None for
    a control batch (transaction markers are not records a reader sees)."""
    header = rb.verify_batch(buf, pos)
    if header.is_control:
        return None
    raw = memoryview(buf)[pos + rb.HEADER_SIZE : pos + header.size]
    offset_deltas, ts_deltas, keys, values, headers = rb.section_columns(header, raw, True)
    count = header.record_count
    base = header.base_offset
    if offset_deltas is None:
        offsets = np.arange(base, base + count, dtype=np.int64)
    else:
        offsets = np.asarray(offset_deltas, dtype=np.int64) + base
    if header.timestamp_type is rb.TimestampType.LOG_APPEND_TIME:
        millis = np.full(count, header.max_timestamp, dtype=np.int64)
    elif ts_deltas is None:
        millis = np.full(count, header.first_timestamp, dtype=np.int64)
    else:
        millis = np.asarray(ts_deltas, dtype=np.int64) + header.first_timestamp
    columns = [
        binary_array(keys, count),
        binary_array(values, count),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(millis * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(np.full(count, int(header.timestamp_type), dtype=np.int32)),
        _headers_array(headers, count),
    ]
    if any(len(column) != count for column in columns):
        raise CorruptRecord(
            f"batch at base offset {base} declares {count} records but its columns disagree"
        )
    return pa.RecordBatch.from_arrays(columns, schema=KAFKA_SOURCE_SCHEMA)


def records_table(
    topic: str, partition: int, chunks: Iterable, start: int, end: int
) -> pa.Table:
    """The records with offsets in [start, end) found in ``chunks`` (buffers of whole
    batches, in log order), as one table in KAFKA_SOURCE_SCHEMA."""
    parts: list[pa.RecordBatch] = []
    for chunk in chunks:
        for pos, _header in rb.iter_batches(chunk, verify=False):
            rows = batch_rows(topic, partition, chunk, pos)
            if rows is None or not rows.num_rows:
                continue
            offsets = rows.column(4).to_numpy()
            first = int(np.searchsorted(offsets, start))
            stop = int(np.searchsorted(offsets, end))
            if stop > first:
                parts.append(rows.slice(first, stop - first))
    table = pa.Table.from_batches(parts, schema=KAFKA_SOURCE_SCHEMA)
    if parts and table.num_rows / len(parts) < MIN_ROWS_PER_ARROW_BATCH:
        # Many small log batches (a per-record producer's): one copy into large columns
        # spares the JVM reader a per-batch cost on each of them.
        table = table.combine_chunks()
    return table


def to_ipc_stream(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes, the form Spark's ArrowConverters read. Sized
    first, then written once into a buffer of exactly that size."""
    batches = table.to_batches(max_chunksize=ROWS_PER_ARROW_BATCH)
    sizer = pa.MockOutputStream()
    _write_stream(sizer, table.schema, batches)
    buffer = pa.allocate_buffer(sizer.size())
    _write_stream(pa.FixedSizeBufferWriter(buffer), table.schema, batches)
    return buffer.to_pybytes()


def _write_stream(sink, schema: pa.Schema, batches: list) -> None:
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def from_ipc_stream(data) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()
