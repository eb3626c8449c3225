"""Checking batches before they enter a log, stamping a leader's offsets into them, and the
outcome an append reports.

A pure stage (Kafka's LogValidator): bytes and a config in, checked headers or patched batch
buffers out; nothing here touches a file. The log calls ``validate_batches`` on every append,
``prepare_leader_batches`` on a leader's and ``check_follower_offsets`` on a follower's, then
writes what comes back and answers with ``appended``.
"""

from __future__ import annotations

from typing import NamedTuple

from rafka.errors import InvalidRecord, RecordTooLarge
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig

# A leader-prepared batch: the buffers whose concatenation is its bytes, and its final header.
PreparedBatch = tuple[list, rb.BatchHeader]


class LogAppendInfo(NamedTuple):
    """Outcome of an append. ``duplicate`` marks a retried idempotent batch that was already in
    the log: nothing was written and the offsets are those of the original."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    log_start_offset: int
    duplicate: bool = False


def appended(
    headers: list[rb.BatchHeader], log_append_time: int, log_start_offset: int
) -> LogAppendInfo:
    """The outcome of appending the batches with these (final) headers."""
    return LogAppendInfo(
        headers[0].base_offset, headers[-1].last_offset,
        max(h.max_timestamp for h in headers), log_append_time,
        sum(h.record_count for h in headers), log_start_offset,
    )  # fmt: skip


def validate_batches(
    view: memoryview,
    config: LogConfig,
    where: str,
    allow_control: bool,
    as_follower: bool = False,
) -> list[tuple[int, rb.BatchHeader]]:
    """(position, header) of every batch in ``view``, each checked for length, magic, CRC
    and size limits. A follower's batches skip max.message.bytes (the leader already took
    them) and may have compacted-away records. ``where`` names the log in errors."""
    if len(view) == 0:
        raise InvalidRecord("an append needs at least one batch, got 0 bytes")
    limit = config.max_message_bytes
    batches = []
    for position, header in rb.iter_batches(view, verify=True):
        if header.size > limit and not as_follower:
            raise RecordTooLarge(
                f"batch of {header.size} bytes exceeds max.message.bytes={limit} of "
                f"{where}; send smaller batches (lower the producer's batch size) "
                "or raise the topic's max.message.bytes"
            )
        if header.size > config.segment_bytes:
            raise RecordTooLarge(
                f"batch of {header.size} bytes exceeds segment.bytes="
                f"{config.segment_bytes}; raise segment.bytes or send smaller batches"
            )
        if header.is_control and not allow_control:
            raise InvalidRecord("control batches are written only by a transaction coordinator")
        if not as_follower and header.record_count != header.last_offset_delta + 1:
            raise InvalidRecord(
                f"batch declares {header.record_count} records but last offset delta "
                f"{header.last_offset_delta}; a producer's batch has offsets 0..n-1"
            )
        batches.append((position, header))
    return batches


def check_follower_offsets(
    batches: list[tuple[int, rb.BatchHeader]], log_end_offset: int
) -> None:
    """A follower's batches keep the leader's offsets: they must start at or after the log
    end and never go backwards (compaction may leave gaps between them)."""
    expected = log_end_offset
    for _, header in batches:
        if header.base_offset < expected:
            raise InvalidRecord(
                f"follower append at offset {header.base_offset} is below the log end "
                f"offset {expected}; truncate the log to the leader's answer first"
            )
        expected = header.next_offset


def target_codec(config: LogConfig) -> rb.Codec | None:
    """The codec the topic stores batches in, or None to keep the producer's."""
    name = config.compression_type
    return None if name == "producer" else rb.Codec.from_name(name)


def prepare_leader_batches(
    view: memoryview,
    batches: list[tuple[int, rb.BatchHeader]],
    config: LogConfig,
    next_offset: int,
    leader_epoch: int,
    append_time: int,
) -> list[PreparedBatch]:
    """Give each validated batch its offsets (from ``next_offset``) and the leader epoch by
    patching its header, and stamp ``append_time`` when it is >= 0 (LogAppendTime). Records
    are re-encoded only when the topic's compression.type differs from the batch's codec."""
    codec = target_codec(config)
    prepared: list[PreparedBatch] = []
    for position, header in batches:
        batch = view[position : position + header.size]
        if codec is not None and header.codec is not codec:
            batch = memoryview(rb.reencode(rb.decode_records(batch), codec=codec))
            header = rb.read_header(batch)
        head = bytearray(batch[: rb.HEADER_SIZE])
        body = batch[rb.HEADER_SIZE :]
        rb.set_base_offset(head, next_offset)
        rb.set_partition_leader_epoch(head, leader_epoch)
        if append_time >= 0:
            rb.set_log_append_time(head, body, append_time)
        prepared.append(([head, body], rb.BatchHeader._make(rb.HEADER.unpack_from(head))))
        next_offset += header.last_offset_delta + 1
    return prepared
