"""rafka's records section: msgpack columns. Bytes in, bytes out, no I/O.

The records section is one msgpack array of five columns (Kafka's per-record fields, stored
column-wise so that a batch is built and read with one msgpack call instead of one per record):

    [offset_deltas, timestamp_deltas, keys, values, headers]

    offset_deltas     array of int, or nil meaning 0, 1, ..., record_count - 1
                      (compaction leaves gaps, so the deltas are explicit after cleaning)
    timestamp_deltas  array of int relative to first_timestamp, or nil meaning all zero
    keys              array of (bin | nil), or nil meaning every key is null
    values            array of (bin | nil); nil is a tombstone
    headers           array of (nil | array of [str, bin | nil]), or nil meaning none

``keys`` and ``values`` may instead be a *packed column*: msgpack ext type 1 whose payload is
the record count (uint32 LE), one int32 LE length per record (-1 for null) and then every
non-null value's bytes back to back. The bulk producer writes this form (a column is copied
in, not packed value by value) and the columnar consumer reads it without per-record work;
both consumers read both forms.

Columns are also how every reader sees a batch in Kafka's format (attributes bit 7, see
``batch_header``): ``section_columns`` and ``decode_records`` read either format into these
five columns (``kafka_records`` decodes Kafka's), so a consumer never asks which it has.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

import msgpack
import numpy as np

from rafka.errors import CorruptRecord
from rafka.storage.batch_header import (
    CONTROL_BIT,
    HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    SNAPPY,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Codec,
    ControlType,
    TimestampType,
    assemble_batch,
    read_header,
    verify_batch,
)
from rafka.storage import kafka_records
from rafka.storage.compression import compress, decompress

# ---------------------------------------------------------------------------------------------
# building


def encode_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | int = 0,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    *,
    offset_deltas: Sequence[int] | None = None,
    base_offset: int = 0,
    codec: Codec = Codec.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    last_offset_delta: int | None = None,
    count: int | None = None,
) -> bytes:
    """Encode one batch from columns.

    ``values`` (and ``keys``/``headers`` when given) have one entry per record. ``timestamps`` is
    either one timestamp (ms) for every record or one per record. ``offset_deltas`` defaults to
    0..n-1; ``last_offset_delta`` defaults to the last offset delta and may be larger (a
    compacted batch keeps its original last offset). Work per record is one msgpack element.
    ``values`` and ``keys`` may also be packed columns (:func:`packed_column`); then ``count``
    gives the record count.
    """
    packed = isinstance(values, msgpack.ExtType)
    if packed:
        if count is None:
            raise ValueError("a packed values column needs count=")
    else:
        count = len(values)
    if isinstance(keys, msgpack.ExtType):
        if not packed:
            raise ValueError("packed keys need packed values")
    elif keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values: give one key per value")
    if headers is not None and len(headers) != count:
        raise ValueError(f"{len(headers)} header lists for {count} values: give one per value")
    if isinstance(timestamps, int):
        first_timestamp = max_timestamp = timestamps
        timestamp_deltas = None
    else:
        if len(timestamps) != count:
            raise ValueError(f"{len(timestamps)} timestamps for {count} values")
        first_timestamp = timestamps[0] if count else NO_TIMESTAMP
        max_timestamp = max(timestamps) if count else NO_TIMESTAMP
        timestamp_deltas = [t - first_timestamp for t in timestamps]
        if not any(timestamp_deltas):
            timestamp_deltas = None
    if offset_deltas is not None:
        offset_deltas = list(offset_deltas)
        if offset_deltas == list(range(count)):
            offset_deltas = None
    if last_offset_delta is None:
        if offset_deltas is not None:
            last_offset_delta = offset_deltas[-1] if offset_deltas else 0
        else:
            last_offset_delta = max(count - 1, 0)
    if keys is not None and not isinstance(keys, msgpack.ExtType) and not any(
        k is not None for k in keys
    ):
        keys = None
    if headers is not None and not any(headers):
        headers = None
    section = msgpack.packb(
        [offset_deltas, timestamp_deltas, keys, values, headers], use_bin_type=True
    )
    attributes = int(codec)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    return assemble_batch(
        compress(codec, section),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
    )


def encode_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: one control record whose key is (version, type) and whose value
    is (version, coordinator epoch), packed as Kafka packs them."""
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch(
        [value], [key], timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True, is_control=True,
    )  # fmt: skip


def parse_control_record(key: bytes, value: bytes) -> tuple[ControlType, int]:
    """Return (type, coordinator epoch) of a control record."""
    try:
        _version, kind = struct.unpack(">hh", key)
        _version, coordinator_epoch = struct.unpack(">hi", value)
        return ControlType(kind), coordinator_epoch
    except (struct.error, ValueError, TypeError) as e:
        raise CorruptRecord(f"malformed control record key={key!r} value={value!r}") from e


def reencode(
    records: "Records", keep: Sequence[int] | None = None, codec: Codec | None = None
) -> bytes:
    """Encode decoded ``records`` again (only the indices in ``keep``, when given; with
    ``codec``, when given), keeping every header field, the records' offsets and the batch's
    last offset. Used by compaction and by a topic whose compression.type differs from the
    producer's; never on the ordinary append path. The result is in rafka's format whatever
    the input's (a Kafka-format batch comes out unmarked)."""
    h = records.header
    rows = range(len(records)) if keep is None else keep
    codec = h.codec if codec is None else codec
    if codec is SNAPPY:
        codec = Codec.LZ4  # rafka does not write snappy; lz4 is the nearest codec it writes

    def pick(column):
        return None if column is None else [column[i] for i in rows]

    return encode_batch(
        pick(records.values),
        pick(records.keys),
        pick(records.timestamps),
        pick(records.headers),
        offset_deltas=[records.offsets[i] - h.base_offset for i in rows],
        last_offset_delta=h.last_offset_delta,
        base_offset=h.base_offset,
        codec=codec,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        timestamp_type=h.timestamp_type,
    )



# ---------------------------------------------------------------------------------------------
# reading


PACKED_COLUMN_EXT = 1
_COUNT = struct.Struct("<I")


class PackedColumn(NamedTuple):
    """A binary column as lengths plus one data buffer (see the module docstring)."""

    lengths: memoryview  # int32 per record, -1 for null
    data: memoryview  # the non-null values back to back

    def to_list(self) -> list[bytes | None]:
        data = self.data
        out: list[bytes | None] = []
        append = out.append
        pos = 0
        for n in self.lengths:
            if n < 0:
                append(None)
            else:
                append(data[pos : pos + n].tobytes())
                pos += n
        return out


def packed_column(lengths, data) -> msgpack.ExtType:
    """The msgpack form of a packed column: ``lengths`` is a bytes-like of int32 LE (-1 for
    null), ``data`` the non-null values back to back."""
    lengths = memoryview(lengths).cast("B")
    count = len(lengths) // 4
    return msgpack.ExtType(PACKED_COLUMN_EXT, b"".join((_COUNT.pack(count), lengths, data)))


def parse_packed_column(payload) -> PackedColumn:
    view = memoryview(payload)
    if len(view) < 4:
        raise CorruptRecord("packed column shorter than its count")
    (count,) = _COUNT.unpack_from(view)
    end = 4 + 4 * count
    if len(view) < end:
        raise CorruptRecord(f"packed column declares {count} lengths but holds fewer")
    lengths = view[4:end].cast("i")
    data = view[end:]
    if int(np.frombuffer(lengths, dtype=np.int32).clip(min=0).sum()) != len(data):
        raise CorruptRecord("packed column's lengths do not add up to its data")
    return PackedColumn(lengths, data)


def _ext_as_list(code: int, payload: bytes):
    if code != PACKED_COLUMN_EXT:
        raise CorruptRecord(f"unknown msgpack extension {code} in a records section")
    return parse_packed_column(payload).to_list()


def _ext_as_packed(code: int, payload: bytes):
    if code != PACKED_COLUMN_EXT:
        raise CorruptRecord(f"unknown msgpack extension {code} in a records section")
    return parse_packed_column(payload)


def unpack_section(header: BatchHeader, section, packed: bool = False) -> list:
    """The five columns of a decompressed records section. Packed columns come back as
    lists, or as PackedColumn when ``packed`` is true (the columnar reader)."""
    try:
        columns = msgpack.unpackb(
            section, use_list=True, ext_hook=_ext_as_packed if packed else _ext_as_list
        )
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CorruptRecord(
            f"records section of batch at base offset {header.base_offset} is malformed: {e}"
        ) from e
    if not isinstance(columns, list) or len(columns) != 5:
        raise CorruptRecord(
            f"records section of batch at base offset {header.base_offset} is not 5 columns"
        )
    return columns


class Records(NamedTuple):
    """The decoded records of one batch, column-wise. ``offsets`` and ``timestamps`` are
    absolute; ``keys`` and ``headers`` are None when every record has none."""

    header: BatchHeader
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None] | None
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]] | None] | None

    def __len__(self) -> int:
        return len(self.values)


def section_columns(header: BatchHeader, raw, packed: bool = False) -> list:
    """The five columns of a batch's (compressed) records section ``raw``, in either format;
    packed columns come back as PackedColumn when ``packed`` is true (Kafka's format has none:
    its keys and values always come back as lists)."""
    section = decompress(header.codec, raw)
    if header.is_kafka_format:
        return kafka_records.decode_columns(header, section)
    return unpack_section(header, section, packed)


def decode_records(buf, pos: int = 0, verify: bool = True) -> Records:
    """Decode the batch at ``pos``, in either records format, into columns (the consumer's
    side; never on the append path)."""
    header = verify_batch(buf, pos) if verify else read_header(buf, pos)
    raw = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    offset_deltas, ts_deltas, keys, values, headers = section_columns(header, raw)
    try:
        count = len(values)
        base = header.base_offset
        offsets = (
            list(range(base, base + count))
            if offset_deltas is None
            else [base + d for d in offset_deltas]
        )
        first = header.first_timestamp
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            timestamps = [header.max_timestamp] * count
        elif ts_deltas is None:
            timestamps = [first] * count
        else:
            timestamps = [first + d for d in ts_deltas]
        if headers is not None and not header.is_kafka_format:
            headers = [None if h is None else [tuple(kv) for kv in h] for h in headers]
        columns = [c for c in (offsets, timestamps, keys, headers) if c is not None]
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CorruptRecord(
            f"records section of batch at base offset {header.base_offset} is malformed: {e}"
        ) from e
    if count != header.record_count or any(len(c) != count for c in columns):
        raise CorruptRecord(
            f"batch at base offset {header.base_offset} declares {header.record_count} records "
            f"and its columns hold {[len(c) for c in columns]} and {count} values"
        )
    return Records(header, offsets, timestamps, keys, values, headers)
