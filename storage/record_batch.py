"""Record-batch codec: bytes in, bytes out, no I/O. The one name callers import.

A batch is a 61-byte header carrying Kafka v2's fields followed by a records section. The
codec lives in three modules, re-exported here so that ``from rafka.storage import
record_batch as rb`` reaches all of it:

    batch_header    the header layout, its checks (length, magic, codec, CRC32C), walking a
                    buffer of batches, and the append path's patches (no decoding)
    compression     the records section's codecs (none, gzip, lz4, zstd; Kafka's numbering)
    record_columns  rafka's records section (msgpack columns): building, re-encoding, and
                    reading either format into columns
    kafka_records   Kafka's records section (varint records), for batches of Kafka clients
                    (attributes bit 7); kafka_batches converts to and from Kafka's wire form
"""

from rafka.storage.batch_header import (
    ATTRIBUTES,
    ATTRIBUTES_POS,
    BASE_OFFSET,
    CODEC_MASK,
    CONTROL_BIT,
    CRC,
    CRC_POS,
    HEADER,
    HEADER_SIZE,
    KAFKA_CODECS,
    KAFKA_FORMAT_BIT,
    LENGTH_PREFIX,
    LENGTH_PREFIX_SIZE,
    MAGIC,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH,
    PARTITION_LEADER_EPOCH_POS,
    SNAPPY,
    TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Codec,
    ControlType,
    TimestampType,
    assemble_batch,
    crc32c,
    increment_sequence,
    iter_batches,
    next_offset,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    verify_batch,
)
from rafka.storage.compression import compress, decompress
from rafka.storage.record_columns import (
    PACKED_COLUMN_EXT,
    PackedColumn,
    Records,
    decode_records,
    encode_batch,
    encode_control_batch,
    packed_column,
    parse_control_record,
    parse_packed_column,
    reencode,
    section_columns,
    unpack_section,
)

__all__ = [
    # header layout
    "ATTRIBUTES", "ATTRIBUTES_POS", "BASE_OFFSET", "CODEC_MASK", "CONTROL_BIT", "CRC",
    "CRC_POS", "HEADER", "HEADER_SIZE", "KAFKA_CODECS", "KAFKA_FORMAT_BIT", "LENGTH_PREFIX", "LENGTH_PREFIX_SIZE", "MAGIC",
    "MAGIC_POS", "MAX_TIMESTAMP_POS", "PARTITION_LEADER_EPOCH", "PARTITION_LEADER_EPOCH_POS",
    "TIMESTAMP", "TIMESTAMP_TYPE_BIT", "TRANSACTIONAL_BIT",
    # sentinels
    "NO_PARTITION_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE",
    "NO_TIMESTAMP", "SNAPPY",
    # header types and functions
    "BatchHeader", "Codec", "ControlType", "TimestampType", "assemble_batch", "crc32c",
    "increment_sequence", "iter_batches", "next_offset", "read_header", "set_base_offset",
    "set_log_append_time", "set_max_timestamp", "set_partition_leader_epoch", "verify_batch",
    # compression
    "compress", "decompress",
    # rafka's records section
    "PACKED_COLUMN_EXT", "PackedColumn", "Records", "decode_records", "encode_batch",
    "encode_control_batch", "packed_column", "parse_control_record", "parse_packed_column",
    "reencode", "section_columns", "unpack_section",
]  # fmt: skip
