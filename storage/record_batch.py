"""Record-batch codec: bytes in, bytes out, no I/O.

A batch is a fixed 61-byte header carrying Kafka v2's fields, followed by the records
section. All integers are big-endian.

    offset  size  field                   notes
    0       8     base_offset             int64; written by the leader on append (outside the CRC)
    8       4     batch_length            int32; bytes after this field (total size - 12)
    12      4     partition_leader_epoch  int32; written by the leader on append (outside the CRC)
    16      1     magic                   int8; always 2
    17      4     crc                     uint32; CRC32C of every byte from `attributes` to the end
    21      2     attributes              int16; bits 0-2 codec, 3 timestamp type,
                                          4 transactional, 5 control
    23      4     last_offset_delta       int32; offset of the last record minus base_offset
    27      8     first_timestamp         int64; ms since the epoch
    35      8     max_timestamp           int64; ms since the epoch
    43      8     producer_id             int64; -1 when not idempotent
    51      2     producer_epoch          int16; -1 when not idempotent
    53      4     base_sequence           int32; -1 when not idempotent
    57      4     record_count            int32
    61      ...   records section         compressed as a whole with the batch codec

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

Because the base offset and the leader epoch sit before the CRC'd range, the leader assigns
offsets by patching 12 bytes of the header; the records are never decoded or re-encoded on the
append path.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Iterator, NamedTuple, Sequence

import crc32c as _crc32c
import lz4.frame
import msgpack
import numpy as np
import zstandard

from rafka.errors import CorruptRecord, UnsupportedCompressionType

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

# Byte positions of the fields the log patches or checks without unpacking the whole header.
BASE_OFFSET = struct.Struct(">q")
LENGTH_PREFIX = struct.Struct(">qi")  # base_offset, batch_length: enough to walk a file
LENGTH_PREFIX_SIZE = LENGTH_PREFIX.size  # 12
PARTITION_LEADER_EPOCH_POS = 12
PARTITION_LEADER_EPOCH = struct.Struct(">i")
MAGIC_POS = 16
CRC_POS = 17
CRC = struct.Struct(">I")
ATTRIBUTES_POS = 21  # the CRC covers [ATTRIBUTES_POS, end)
MAX_TIMESTAMP_POS = 35
ATTRIBUTES = struct.Struct(">h")
TIMESTAMP = struct.Struct(">q")

MAGIC = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class Codec(enum.IntEnum):
    """Compression codec of a batch's records section (Kafka's numbering)."""

    NONE = 0
    GZIP = 1
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> "Codec":
        """Map Kafka's codec names ('none', 'gzip', 'lz4', 'zstd'; 'uncompressed' = none)."""
        key = {"uncompressed": "none"}.get(name, name)
        try:
            return cls[key.upper()]
        except KeyError:
            raise UnsupportedCompressionType(
                f"unknown compression codec {name!r}; use one of none, gzip, lz4, zstd"
            ) from None


_KNOWN_CODECS = frozenset(int(c) for c in Codec)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    """Type of a control record (the transaction markers)."""

    ABORT = 0
    COMMIT = 1


class BatchHeader(NamedTuple):
    """The 61-byte header of a batch, unpacked. Field meanings are in the module docstring."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies: header plus records section."""
        return self.batch_length + LENGTH_PREFIX_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from 2**31 - 1 to 0, as in Kafka."""
    return (sequence + increment) % (1 << 31)


def crc32c(data) -> int:
    return _crc32c.crc32c(data)


# ---------------------------------------------------------------------------------------------
# compression


def compress(codec: Codec, data: bytes) -> bytes:
    if codec is Codec.NONE:
        return data
    if codec is Codec.LZ4:
        return lz4.frame.compress(data)
    if codec is Codec.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    if codec is Codec.GZIP:
        # wbits=31: the gzip container, as Kafka writes it.
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    raise UnsupportedCompressionType(f"codec {codec!r} is not supported")


def decompress(codec: Codec, data) -> bytes:
    try:
        if codec is Codec.NONE:
            return data
        if codec is Codec.LZ4:
            return lz4.frame.decompress(data)
        if codec is Codec.ZSTD:
            return zstandard.ZstdDecompressor().decompress(data)
        if codec is Codec.GZIP:
            return zlib.decompress(data, 31)
    except (RuntimeError, zlib.error, zstandard.ZstdError) as e:
        raise CorruptRecord(f"records section does not decompress with {codec.name}: {e}") from e
    raise UnsupportedCompressionType(f"codec {codec!r} is not supported")


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
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
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


def assemble_batch(
    records_section: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    """Put a header (with its CRC) in front of an already compressed records section."""
    header = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        header, 0,
        base_offset, HEADER_SIZE - LENGTH_PREFIX_SIZE + len(records_section),
        partition_leader_epoch, MAGIC, 0, attributes, last_offset_delta,
        first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count,
    )  # fmt: skip
    crc = _crc32c.crc32c(records_section, _crc32c.crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    CRC.pack_into(header, CRC_POS, crc)
    return bytes(header) + records_section


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


# ---------------------------------------------------------------------------------------------
# patching (the append path: no decoding)


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Write the base offset of the batch starting at ``pos``; the CRC stays valid."""
    BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Write the leader epoch of the batch starting at ``pos``; the CRC stays valid."""
    PARTITION_LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(header: bytearray, records_section, timestamp: int) -> None:
    """Mark a batch as LogAppendTime stamped ``timestamp``, given a copy of its 61-byte header
    and its records section. The CRC is recomputed (the section is read once, not decoded)."""
    (attributes,) = ATTRIBUTES.unpack_from(header, ATTRIBUTES_POS)
    ATTRIBUTES.pack_into(header, ATTRIBUTES_POS, attributes | _TIMESTAMP_TYPE_BIT)
    TIMESTAMP.pack_into(header, MAX_TIMESTAMP_POS, timestamp)
    crc = _crc32c.crc32c(records_section, _crc32c.crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    CRC.pack_into(header, CRC_POS, crc)


def reencode(
    records: "Records", keep: Sequence[int] | None = None, codec: Codec | None = None
) -> bytes:
    """Encode decoded ``records`` again (only the indices in ``keep``, when given; with
    ``codec``, when given), keeping every header field, the records' offsets and the batch's
    last offset. Used by compaction and by a topic whose compression.type differs from the
    producer's; never on the ordinary append path."""
    h = records.header
    rows = range(len(records)) if keep is None else keep

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
        codec=h.codec if codec is None else codec,
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


def read_header(buf, pos: int = 0, check_codec: bool = True) -> BatchHeader:
    """Unpack the header at ``pos`` and check that the buffer holds the whole batch, that the
    magic byte is right and (unless a diagnostic tool asks not to) that the codec is known.
    Does not check the CRC (see :func:`verify_batch`)."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptRecord(
            f"truncated batch at byte {pos}: {available} bytes left, a header needs {HEADER_SIZE}"
        )
    header = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecord(f"batch at byte {pos} has magic {header.magic}, expected {MAGIC}")
    if header.batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE:
        raise CorruptRecord(
            f"batch at byte {pos} declares length {header.batch_length}, "
            f"below the header's own {HEADER_SIZE - LENGTH_PREFIX_SIZE}"
        )
    if header.size > available:
        raise CorruptRecord(
            f"truncated batch at byte {pos}: it declares {header.size} bytes, {available} are left"
        )
    if check_codec and header.attributes & _CODEC_MASK not in _KNOWN_CODECS:
        raise UnsupportedCompressionType(
            f"batch at byte {pos} names compression codec {header.attributes & _CODEC_MASK}; "
            "rafka knows 0 (none), 1 (gzip), 3 (lz4) and 4 (zstd)"
        )
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecord(
            f"batch at byte {pos} has last_offset_delta {header.last_offset_delta} and "
            f"record_count {header.record_count}; neither may be negative"
        )
    return header


def verify_batch(buf, pos: int = 0, check_codec: bool = True) -> BatchHeader:
    """Check length, magic, codec and CRC32C of the batch at ``pos``; return its header."""
    header = read_header(buf, pos, check_codec)
    actual = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : pos + header.size])
    if actual != header.crc:
        raise CorruptRecord(
            f"CRC mismatch in batch at byte {pos} (base offset {header.base_offset}): "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


def iter_batches(buf, verify: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each batch in ``buf``; raise CorruptRecord on the first bad
    one (so a caller can keep the valid prefix: every position yielded before the error)."""
    pos = 0
    end = len(buf)
    check = verify_batch if verify else read_header
    while pos < end:
        header = check(buf, pos)
        yield pos, header
        pos += header.size


def next_offset(buf) -> int:
    """The offset after the last batch in ``buf``, which holds whole batches (at least one);
    only headers are read."""
    pos = 0
    end = len(buf)
    header = None
    while pos < end:
        header = read_header(buf, pos)
        pos += header.size
    if header is None:
        raise ValueError("no batch in an empty buffer")
    return header.next_offset


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


def decode_records(buf, pos: int = 0, verify: bool = True) -> Records:
    """Decode the batch at ``pos`` into columns (the consumer's side; never on the append path)."""
    header = verify_batch(buf, pos) if verify else read_header(buf, pos)
    raw = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    section = decompress(header.codec, raw)
    offset_deltas, ts_deltas, keys, values, headers = unpack_section(header, section)
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
        if headers is not None:
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
