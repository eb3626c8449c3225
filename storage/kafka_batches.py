"""Batches between Kafka clients and rafka's log: in as they come, out in Kafka's v2 form.

A Kafka client's batch has the same 61-byte header as rafka's (``batch_header``) and Kafka's
varint records after it. ``accept_kafka_records`` checks the batches of one partition of a
ProduceRequest and stores them as they are, only marked with KAFKA_FORMAT_BIT (attributes
bit 7), so their records are never decoded on the produce path (the leader's LogValidator
then walks every field of every record, ``kafka_record_walk.walk_records``, building none of
them). ``to_kafka_wire`` turns
what a replica fetch returns back into Kafka's form: a marked batch loses the bit and gets
the CRC the client wrote back; a batch in rafka's format (from rafka's own producers, the
cleaner, or a transaction marker) is translated record by record.

Both compute CRC32C over each batch (several GB/s); only a translation does per-record work.
No I/O; the wire listener calls these.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c

from rafka.errors import (
    CorruptRecord,
    InvalidRecord,
    UnsupportedCompressionType,
    UnsupportedForMessageFormat,
)
from rafka.storage import kafka_records
from rafka.storage.batch_header import (
    ATTRIBUTES,
    ATTRIBUTES_POS,
    CODEC_MASK,
    CONTROL_BIT,
    CRC,
    CRC_POS,
    HEADER,
    HEADER_SIZE,
    KAFKA_CODECS,
    KAFKA_FORMAT_BIT,
    LENGTH_PREFIX_SIZE,
    MAGIC,
    BatchHeader,
)
from rafka.storage.record_columns import section_columns

_UP_TO_MAGIC = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
_MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_PREFIX_SIZE  # 49: a header and no records


def accept_kafka_records(records: bytes | bytearray | memoryview) -> bytes:
    """The ``records`` field of one partition of a Kafka ProduceRequest -> the same batches,
    back to back, checked and marked with KAFKA_FORMAT_BIT (CRC recomputed), in the form
    ``PartitionReplica.produce`` takes.

    Raises UnsupportedForMessageFormat for a magic other than 2; CorruptRecord for a length
    that does not fit (a partial trailing batch included) or a CRC32C mismatch;
    UnsupportedCompressionType for a codec outside Kafka's 0-4; InvalidRecord for a batch
    that is not a producer's (no records, last offset delta not record count - 1, a
    control batch, or bit 7 already set)."""
    view = memoryview(records).cast("B")
    end = len(view)
    if end == 0:
        raise InvalidRecord("the produce request holds no record batch for this partition")
    out: list = []
    pos = 0
    while pos < end:
        if end - pos < _UP_TO_MAGIC.size:
            raise CorruptRecord(
                f"{end - pos} bytes at byte {pos} are too few for a record batch header; "
                "send whole batches"
            )
        _, length, _, magic = _UP_TO_MAGIC.unpack_from(view, pos)
        if magic != MAGIC:
            raise UnsupportedForMessageFormat(
                f"batch at byte {pos} has magic {magic}; rafka takes only record batch v2 "
                "(magic 2, Kafka 0.11+): configure the client for it"
            )
        if length < _MIN_BATCH_LENGTH or length > end - pos - LENGTH_PREFIX_SIZE:
            raise CorruptRecord(
                f"batch at byte {pos} declares length {length}, but {end - pos - 12} bytes "
                f"follow its length field and a batch needs at least {_MIN_BATCH_LENGTH}"
            )
        size = length + LENGTH_PREFIX_SIZE
        header = BatchHeader._make(HEADER.unpack_from(view, pos))
        actual = _crc32c.crc32c(view[pos + ATTRIBUTES_POS : pos + size])
        if actual != header.crc:
            raise CorruptRecord(
                f"CRC32C mismatch in batch at byte {pos}: it states {header.crc:#010x}, its "
                f"bytes give {actual:#010x}"
            )
        _check_producer_batch(header, pos)
        head = bytearray(view[pos : pos + HEADER_SIZE])
        section = view[pos + HEADER_SIZE : pos + size]
        ATTRIBUTES.pack_into(head, ATTRIBUTES_POS, header.attributes | KAFKA_FORMAT_BIT)
        _set_crc(head, section)
        out.append(head)
        out.append(section)
        pos += size
    return b"".join(out)


def _check_producer_batch(header: BatchHeader, pos: int) -> None:
    attributes = header.attributes
    if attributes & CODEC_MASK not in KAFKA_CODECS:
        raise UnsupportedCompressionType(
            f"batch at byte {pos} names compression codec {attributes & CODEC_MASK}; Kafka's "
            "are 0 (none), 1 (gzip), 2 (snappy), 3 (lz4) and 4 (zstd)"
        )
    if attributes & CONTROL_BIT:
        raise InvalidRecord(
            f"batch at byte {pos} is a control batch; only a transaction coordinator writes "
            "those, a producer never sends them"
        )
    if attributes & KAFKA_FORMAT_BIT:
        raise InvalidRecord(
            f"batch at byte {pos} sets attributes bit 7, which Kafka leaves unused; clear it"
        )
    if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(
            f"batch at byte {pos} declares {header.record_count} records and last offset "
            f"delta {header.last_offset_delta}; a producer's batch holds at least one record "
            "at offset deltas 0..n-1"
        )


def _set_crc(head: bytearray, section) -> None:
    """Write the CRC32C of ``head``'s CRC'd part followed by ``section`` into ``head``."""
    crc = _crc32c.crc32c(section, _crc32c.crc32c(memoryview(head)[ATTRIBUTES_POS:]))
    CRC.pack_into(head, CRC_POS, crc)


def to_kafka_wire(stored) -> bytes:
    """Batches as a replica fetch returns them (bytes, memoryview or a uint8 numpy array of
    whole batches, the last one possibly cut short) -> the same batches in Kafka's v2 form.

    A Kafka-format batch is copied with bit 7 cleared and the client's CRC restored (also
    when its stored bytes were damaged since, so the client still detects the damage). A rafka-format batch is translated: every header field kept
    (offsets, leader epoch, producer id/epoch/sequence, transactional and control bits,
    timestamps, codec), its records written as Kafka records compressed with the batch's
    codec, the CRC computed; a transaction marker becomes Kafka's control record (rafka's
    marker key and value already have Kafka's layout). A partial trailing batch is dropped."""
    view = memoryview(stored).cast("B")
    end = len(view)
    out: list = []
    pos = 0
    while end - pos >= HEADER_SIZE:
        header = BatchHeader._make(HEADER.unpack_from(view, pos))
        size = header.size
        if header.batch_length < _MIN_BATCH_LENGTH or size > end - pos:
            break  # the fetch cut the last batch short (or the rest is not a batch)
        batch = view[pos : pos + size]
        if header.attributes & KAFKA_FORMAT_BIT:
            out.append(_unmark(batch, header))
            out.append(batch[HEADER_SIZE:])
        else:
            out.append(translate(batch, header))
        pos += size
    return b"".join(out)


def _unmark(batch: memoryview, header: BatchHeader) -> bytearray:
    """The header of a stored Kafka-format ``batch`` with bit 7 cleared and the CRC it had
    before it was marked.

    CRC32C is affine: two inputs of one length that differ by the same bits have CRCs that
    differ by the same value. The CRC of the unmarked bytes, XORed with the difference
    between the stored CRC and the marked bytes' actual CRC, is therefore the client's
    original CRC even if the bytes were damaged on disk, so the client sees the damage
    instead of a CRC recomputed over it."""
    head = bytearray(batch[:HEADER_SIZE])
    ATTRIBUTES.pack_into(head, ATTRIBUTES_POS, header.attributes & ~KAFKA_FORMAT_BIT)
    section = batch[HEADER_SIZE:]
    _set_crc(head, section)
    stored = _crc32c.crc32c(batch[ATTRIBUTES_POS:])
    if stored != header.crc:
        (crc,) = CRC.unpack_from(head, CRC_POS)
        CRC.pack_into(head, CRC_POS, crc ^ stored ^ header.crc)
    return head


def translate(batch: memoryview, header: BatchHeader | None = None) -> bytes:
    """One rafka-format batch -> the same batch in Kafka's v2 format (see ``to_kafka_wire``)."""
    if header is None:
        header = BatchHeader._make(HEADER.unpack_from(batch))
    offset_deltas, ts_deltas, keys, values, headers = section_columns(
        header, batch[HEADER_SIZE:]
    )
    section = kafka_records.encode_records(offset_deltas, ts_deltas, keys, values, headers)
    body = kafka_records.compress_for_kafka(header.codec, section)
    head = bytearray(batch[:HEADER_SIZE])
    HEADER.pack_into(
        head, 0,
        header.base_offset, _MIN_BATCH_LENGTH + len(body), header.partition_leader_epoch,
        MAGIC, 0, header.attributes & ~KAFKA_FORMAT_BIT, header.last_offset_delta,
        header.first_timestamp, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, header.record_count,
    )  # fmt: skip
    _set_crc(head, body)
    return bytes(head) + body
