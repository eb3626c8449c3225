"""Batch header: the fixed 61-byte front of every batch, its checks and its patches. No I/O.

A batch is a fixed 61-byte header carrying Kafka v2's fields, followed by the records
section. All integers are big-endian.

    offset  size  field                   notes
    0       8     base_offset             int64; written by the leader on append (outside the CRC)
    8       4     batch_length            int32; bytes after this field (total size - 12)
    12      4     partition_leader_epoch  int32; written by the leader on append (outside the CRC)
    16      1     magic                   int8; always 2
    17      4     crc                     uint32; CRC32C of every byte from `attributes` to the end
    21      2     attributes              int16; bits 0-2 codec, 3 timestamp type,
                                          4 transactional, 5 control, 7 Kafka format
    23      4     last_offset_delta       int32; offset of the last record minus base_offset
    27      8     first_timestamp         int64; ms since the epoch
    35      8     max_timestamp           int64; ms since the epoch
    43      8     producer_id             int64; -1 when not idempotent
    51      2     producer_epoch          int16; -1 when not idempotent
    53      4     base_sequence           int32; -1 when not idempotent
    57      4     record_count            int32
    61      ...   records section         compressed as a whole with the batch codec

Because the base offset and the leader epoch sit before the CRC'd range, the leader assigns
offsets by patching 12 bytes of the header; the records are never decoded or re-encoded on the
append path.

The records section comes in two formats, told apart by attributes bit 7 (KAFKA_FORMAT_BIT,
a bit Kafka leaves unused; its bit 6 is hasDeleteHorizonMs): clear, rafka's msgpack columns
(``record_columns``); set, Kafka's varint records exactly as a Kafka client sent them
(``kafka_records``), which may also use Kafka's codec 2 (snappy). The bit is inside the
CRC'd range, so marking or unmarking a batch recomputes its CRC (``kafka_batches``).
"""

from __future__ import annotations

import enum
import struct
from typing import Iterator, NamedTuple

import crc32c as _crc32c

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

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
KAFKA_FORMAT_BIT = 0x80


class Codec(enum.IntEnum):
    """Compression codec of a batch's records section (Kafka's numbering). The members, and
    iteration, are the codecs rafka writes; Kafka's snappy (2), which rafka only reads from
    Kafka clients' batches, is ``SNAPPY = Codec(2)``, outside the iteration."""

    NONE = 0
    GZIP = 1
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def _missing_(cls, value):
        if value != 2:
            return None
        # One pseudo-member, made once and cached as Enum caches its members, so that
        # ``Codec(2) is SNAPPY`` and ``header.codec`` works for a snappy batch.
        member = int.__new__(cls, 2)
        member._name_ = "SNAPPY"
        member._value_ = 2
        return cls._value2member_map_.setdefault(2, member)

    @classmethod
    def from_name(cls, name: str) -> "Codec":
        """Map Kafka's codec names ('none', 'gzip', 'lz4', 'zstd'; 'uncompressed' = none) to
        a codec rafka writes (so not snappy)."""
        key = {"uncompressed": "none"}.get(name, name)
        try:
            return cls[key.upper()]
        except (KeyError, AttributeError):
            raise UnsupportedCompressionType(
                f"unknown compression codec {name!r}; use one of none, gzip, lz4, zstd"
            ) from None


SNAPPY = Codec(2)
# The codecs a batch may name: rafka's own, and with KAFKA_FORMAT_BIT also snappy.
_KNOWN_CODECS = frozenset(int(c) for c in Codec)
KAFKA_CODECS = _KNOWN_CODECS | {int(SNAPPY)}


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
        return Codec(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_kafka_format(self) -> bool:
        """Whether the records section is Kafka's varint records (see the module docstring)."""
        return bool(self.attributes & KAFKA_FORMAT_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from 2**31 - 1 to 0, as in Kafka."""
    return (sequence + increment) % (1 << 31)


def crc32c(data) -> int:
    return _crc32c.crc32c(data)


# ---------------------------------------------------------------------------------------------
# building and patching (the append path: no decoding)


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
    ATTRIBUTES.pack_into(header, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    set_max_timestamp(header, records_section, timestamp)


def set_max_timestamp(header: bytearray, records_section, timestamp: int) -> None:
    """Set the max timestamp of a batch, given a copy of its 61-byte header and its records
    section; the CRC is recomputed (the section is read once, not decoded)."""
    TIMESTAMP.pack_into(header, MAX_TIMESTAMP_POS, timestamp)
    crc = _crc32c.crc32c(records_section, _crc32c.crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    CRC.pack_into(header, CRC_POS, crc)



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
    if check_codec and header.attributes & CODEC_MASK not in (
        KAFKA_CODECS if header.attributes & KAFKA_FORMAT_BIT else _KNOWN_CODECS
    ):
        raise UnsupportedCompressionType(
            f"batch at byte {pos} names compression codec {header.attributes & CODEC_MASK}; "
            "rafka knows 0 (none), 1 (gzip), 3 (lz4) and 4 (zstd), and 2 (snappy) in "
            "batches written by Kafka clients"
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
