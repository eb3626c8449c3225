"""Columns in and out: the bulk producer's input and the columnar consumer's output.

Binary columns are pyarrow arrays underneath, so a column handed in as Arrow is sliced and
regrouped without touching its records one by one, and a batch written in packed form (see
``rafka.storage.record_batch``) comes back as an Arrow array over the batch's own bytes.
Imported lazily: only the bulk paths pay for pyarrow.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb


class BinaryColumn:
    """One binary column (no chunks). ``lengths`` is int32 with -1 for null; ``offsets`` is
    each value's start in ``data``."""

    def __init__(self, array: pa.Array) -> None:
        if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
            array = array.cast(pa.binary())
        elif pa.types.is_string(array.type):
            array = array.view(pa.binary())
        if array.null_count and _nulls_hold_bytes(array):
            # Arrow lets a null slot keep bytes; the packed form must not carry them.
            array = pa.array(array.to_pylist(), type=pa.binary())
        self.array = array
        self.null_count = array.null_count
        _validity, offsets_buf, data_buf = array.buffers()
        n = len(array)
        offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=4 * array.offset)
        first = int(offsets[0]) if n else 0
        self.offsets = (offsets[:-1] - first).astype(np.int64)
        self.lengths = np.diff(offsets).astype(np.int32)
        if self.null_count:
            self.lengths[array.is_null().to_numpy(zero_copy_only=False)] = -1
        end = int(offsets[-1]) if n else 0
        self.data = memoryview(data_buf)[first:end] if data_buf is not None else memoryview(b"")

    def __len__(self) -> int:
        return len(self.array)

    def size_of(self, start: int, stop: int) -> int:
        return int(np.maximum(self.lengths[start:stop], 0).sum())

    def take(self, rows: np.ndarray) -> "BinaryColumn":
        return BinaryColumn(self.array.take(pa.array(rows)))

    def slice(self, start: int, stop: int) -> "BinaryColumn":
        return BinaryColumn(self.array.slice(start, stop - start))

    def to_msgpack(self):
        """The packed-column form that goes into a records section."""
        lengths = self.lengths.astype("<i4", copy=False)
        return rb.packed_column(lengths.tobytes(), self.data)


def _nulls_hold_bytes(array: pa.Array) -> bool:
    offsets = np.frombuffer(
        array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=4 * array.offset
    )
    nulls = array.is_null().to_numpy(zero_copy_only=False)
    return bool(np.diff(offsets)[nulls].any())


def binary_column(values, what: str) -> BinaryColumn:
    """A BinaryColumn from a pyarrow binary/string array (or chunked array), a 2-D uint8 numpy
    array (one row per record) or a sequence of bytes/None."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        kind = values.type
        if not (
            pa.types.is_binary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
        ):  # fmt: skip
            raise TypeError(f"{what} must be a binary or string Arrow array, got {kind}")
        return BinaryColumn(values)
    if isinstance(values, np.ndarray):
        if values.ndim != 2 or values.dtype != np.uint8:
            raise TypeError(
                f"{what} as a numpy array must be 2-D uint8 (one row per record), got "
                f"{values.ndim}-D {values.dtype}"
            )
        n, width = values.shape
        data = np.ascontiguousarray(values).reshape(-1)
        offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * width)
        buffers = [None, offsets, pa.py_buffer(data)]
        return BinaryColumn(pa.Array.from_buffers(pa.binary(), n, buffers))
    if isinstance(values, (bytes, str)):
        raise TypeError(
            f"{what} must be a column (one entry per record), not one {type(values).__name__}"
        )
    try:
        return BinaryColumn(pa.array(values, type=pa.binary()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        raise TypeError(
            f"{what} must hold bytes or None per record (encode str first): {e}"
        ) from None


def group_rows(partitions: np.ndarray) -> dict[int, np.ndarray]:
    """Row numbers per partition, each in the original order."""
    order = np.argsort(partitions, kind="stable")
    ordered = partitions[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate(([0], bounds))
    return {
        int(ordered[s]): rows for s, rows in zip(starts, np.split(order, bounds))
    } if len(partitions) else {}


def record_sizes(values: BinaryColumn, keys: BinaryColumn | None, overhead: int) -> np.ndarray:
    """Bytes per record as the producer counts them: value, key (a null one is 0) and
    ``overhead``; int64."""
    sizes = np.maximum(values.lengths, 0).astype(np.int64) + overhead
    if keys is not None:
        sizes += np.maximum(keys.lengths, 0)
    return sizes


def chunks(
    values: BinaryColumn, keys: BinaryColumn | None, limit: int, overhead: int
) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges whose bytes stay within ``limit`` (at least one row each)."""
    return size_chunks(record_sizes(values, keys, overhead), limit)


def size_chunks(sizes: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of consecutive ``sizes`` whose sum stays within ``limit`` (at
    least one entry each)."""
    n = len(sizes)
    ends = np.cumsum(sizes)
    start = 0
    while start < n:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        stop = max(stop, start + 1)
        yield start, stop
        start = stop


# ---------------------------------------------------------------------------------------------
# reading


def binary_array(column, count: int) -> pa.Array:
    if column is None:
        return pa.nulls(count, pa.binary())
    if isinstance(column, rb.PackedColumn):
        lengths = np.frombuffer(column.lengths, dtype=np.int32)
        if len(lengths) != count:
            raise CorruptRecord(f"packed column holds {len(lengths)} values, the batch {count}")
        valid = lengths >= 0
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(np.where(valid, lengths, 0), out=offsets[1:])
        validity = None
        if not valid.all():
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(
            pa.binary(), count, [validity, pa.py_buffer(offsets), pa.py_buffer(column.data)]
        )
    return pa.array(column, type=pa.binary())


SCHEMA = pa.schema([
    ("topic", pa.dictionary(pa.int32(), pa.string())),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
])  # fmt: skip


def batch_to_arrow(topic: str, partition: int, buf, pos: int, from_offset: int) -> pa.RecordBatch:
    """The records of the batch at ``pos`` with offset >= ``from_offset``, as Arrow columns
    (topic, partition, offset, timestamp ms, key, value). Packed columns are not copied
    record by record; record headers are not included."""
    header = rb.verify_batch(buf, pos)
    raw = memoryview(buf)[pos + rb.HEADER_SIZE : pos + header.size]
    offset_deltas, ts_deltas, keys, values, _headers = rb.section_columns(header, raw, True)
    count = header.record_count
    if offset_deltas is None:
        offsets = np.arange(header.base_offset, header.base_offset + count, dtype=np.int64)
    else:
        offsets = np.asarray(offset_deltas, dtype=np.int64) + header.base_offset
    if header.timestamp_type is rb.TimestampType.LOG_APPEND_TIME:
        timestamps = np.full(count, header.max_timestamp, dtype=np.int64)
    elif ts_deltas is None:
        timestamps = np.full(count, header.first_timestamp, dtype=np.int64)
    else:
        timestamps = np.asarray(ts_deltas, dtype=np.int64) + header.first_timestamp
    value_array = binary_array(values, count)
    key_array = binary_array(keys, count)
    if len(value_array) != count or len(key_array) != count or len(offsets) != count:
        raise CorruptRecord(
            f"batch at base offset {header.base_offset} declares {count} records but its "
            "columns disagree"
        )
    topic_array = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(count, dtype=np.int32)), pa.array([topic])
    )
    batch = pa.RecordBatch.from_arrays(
        [topic_array, pa.array(np.full(count, partition, dtype=np.int32)), pa.array(offsets),
         pa.array(timestamps), key_array, value_array],
        schema=SCHEMA,
    )  # fmt: skip
    skip = int(np.searchsorted(offsets, from_offset))
    return batch.slice(skip) if skip else batch
