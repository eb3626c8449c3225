"""Genuine Kafka v2 record batches for tests, built and read by kafka-python (a test oracle)."""

from __future__ import annotations

import pyarrow as pa
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

# Kafka's numbering, as kafka-python's builder takes it.
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


class _ArrowSnappy:
    """kafka-python's snappy hooks over Arrow's bundled libsnappy (python-snappy is not
    installed); kafka-python adds the xerial framing itself."""

    @staticmethod
    def compress(data) -> bytes:
        return pa.compress(bytes(data), codec="snappy", asbytes=True)

    @staticmethod
    def decompress(data) -> bytes:
        data = bytes(data)
        size = shift = pos = 0
        while True:  # the raw stream's leading varint: its uncompressed size
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        return pa.decompress(data, size, codec="snappy", asbytes=True)


def use_arrow_snappy(monkeypatch) -> None:
    monkeypatch.setattr(kafka_codec, "snappy", _ArrowSnappy)


def kafka_batch(
    rows,
    codec: int = NONE,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """A Kafka client's batch of ``rows`` (timestamp, key, value, headers) at offset deltas
    0..n-1, with ``producer`` = (producer id, epoch, base sequence)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 30,
    )  # fmt: skip
    for i, (timestamp, key, value, headers) in enumerate(rows):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


def read_kafka(data: bytes) -> list[tuple]:
    """Every batch of ``data`` read by kafka-python: (batch facts, its records), checking
    each batch's CRC."""
    out = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + 12
        batch = DefaultRecordBatch(bytes(data[pos : pos + size]))
        assert batch.validate_crc(), f"bad CRC in the batch at byte {pos}"
        facts = dict(
            base_offset=batch.base_offset, leader_epoch=batch.leader_epoch,
            attributes=batch.attributes, last_offset_delta=batch.last_offset_delta,
            first_timestamp=batch.first_timestamp, max_timestamp=batch.max_timestamp,
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence, is_control=batch.is_control_batch,
            is_transactional=batch.is_transactional,
        )  # fmt: skip
        records = list(batch)
        out.append((facts, records))
        pos += size
    return out


def rows_of(records) -> list[tuple]:
    """kafka-python records as (offset, timestamp, key, value, headers) tuples."""
    return [
        (r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
        for r in records
    ]
