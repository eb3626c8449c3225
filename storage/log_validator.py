"""Checking batches before they enter a log, stamping a leader's offsets into them, and the
outcome an append reports.

A pure stage (Kafka's LogValidator): bytes and a config in, checked headers or patched batch
buffers out; nothing here touches a file. The log calls ``validate_batches`` on every append,
``prepare_leader_batches`` on a leader's and ``check_follower_offsets`` on a follower's, then
writes what comes back and answers with ``appended``.

A leader also checks each batch's records section (``check_records``): a batch that passes
reads back with ``decode_records`` and the columnar reader, so no consumer ever meets a
batch it cannot read. A follower does not: it copies batches the leader already checked, and
compaction may have left gaps in their offsets. A batch in Kafka's records format (from a
Kafka client, checked by ``kafka_batches.accept_kafka_records``) has every field of every
record walked, as Kafka's LogValidator does (``kafka_record_walk.walk_records``), without
decoding the records into Python objects.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rafka.errors import CorruptRecord, InvalidRecord, RecordTooLarge
from rafka.storage import kafka_record_walk, kafka_records
from rafka.storage import record_batch as rb
from rafka.storage.config import LogConfig

# A leader-prepared batch: the buffers whose concatenation is its bytes, and its final header.
PreparedBatch = tuple[list, rb.BatchHeader]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INTS = frozenset({int})  # exact types: msgpack gives bool and float for true and 1.0
_BINARY_CELLS = frozenset({bytes, type(None)})
_HEADER_CELLS = frozenset({list, type(None)})
_CODEC_BITS = 0x07  # attributes bits 0-2 (record_batch's header layout)


class ValidatedBatches(list):
    """(position, header) of each checked batch of a request, in order. ``sections`` maps
    the position of each batch the topic will re-encode (its codec differs from
    compression.type) to its decompressed records section, so that section is decompressed
    once per append. ``max_timestamps`` maps the position of each Kafka client's CreateTime
    batch whose header does not carry its records' largest timestamp to that timestamp,
    which the append writes into the header (its header here already carries it)."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[int, bytes | memoryview] = {}
        self.max_timestamps: dict[int, int] = {}


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
) -> ValidatedBatches:
    """(position, header) of every batch in ``view``, each checked for length, magic, CRC
    and size limits, and for a leader (not ``as_follower``) its records section too (see
    ``check_records``). A follower's batches skip max.message.bytes (the leader already took
    them) and may have compacted-away records. ``where`` names the log in errors."""
    if len(view) == 0:
        raise InvalidRecord("an append needs at least one batch, got 0 bytes")
    limit = config.max_message_bytes
    codec = None if as_follower else target_codec(config)
    batches = ValidatedBatches()
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
        if not as_follower:
            _check_transactional_header(header)
        if not as_follower and header.record_count != header.last_offset_delta + 1:
            raise InvalidRecord(
                f"batch declares {header.record_count} records but last offset delta "
                f"{header.last_offset_delta}; a producer's batch has offsets 0..n-1"
            )
        if not as_follower:
            batch = view[position : position + header.size]
            if header.is_kafka_format:
                section, largest = _check_kafka(batch, header, position, config.compact)
                if largest is not None:
                    batches.max_timestamps[position] = largest
                    header = header._replace(max_timestamp=largest)
            else:
                section = check_records(batch, header, position, config.compact)
            if codec is not None and header.codec is not codec:
                batches.sections[position] = section
        batches.append((position, header))
    return batches


def _check_transactional_header(header: rb.BatchHeader) -> None:
    """Producer state reads a transaction from these header fields alone: a transactional
    batch names its producer, and a control batch is a marker (transactional, one record)."""
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecord(
            "a transactional batch needs the producer id and epoch that InitProducerId gave "
            "its producer; set them in the batch header"
        )
    if header.is_control and not (header.is_transactional and header.record_count == 1):
        raise InvalidRecord(
            "a control batch must be a transaction marker: transactional, with a producer id "
            f"and exactly one record (got {header.record_count}); encode it with "
            "encode_control_batch"
        )


def check_records(
    batch: memoryview, header: rb.BatchHeader, position: int = 0, keys_required: bool = False
) -> bytes:
    """Check that the records section of a client's rafka-format ``batch`` (whose header
    was checked) holds exactly ``record_count`` records a consumer can read, at offset
    deltas 0..n-1; return the decompressed section. Raises InvalidRecord naming the batch by
    its byte ``position`` in the request. (A Kafka-format batch goes to ``_check_kafka``.)

    Cost: one decompression, one msgpack unpacking (packed columns stay views) and a
    type scan per column; no per-record Python work beyond that, except for record headers
    and control records."""
    try:
        section = rb.decompress(header.codec, batch[rb.HEADER_SIZE :])
        columns = rb.unpack_section(header, section, packed=True)
    except CorruptRecord as e:
        raise _unreadable(
            position, f"{e}; encode the records section as record_batch.py describes (one "
            "msgpack array of five columns, compressed with the batch's codec)",
        ) from e  # fmt: skip
    problem = _columns_problem(columns, header)
    if problem is None and keys_required and not header.is_control:
        problem = _keyless_problem(columns[2])
    if problem is None and header.is_control:
        problem = _control_problem(columns)
    if problem is not None:
        raise _unreadable(position, problem)
    return section


def _check_kafka(
    batch: memoryview, header: rb.BatchHeader, position: int, keys_required: bool
) -> tuple[bytes, int | None]:
    """check_records for Kafka's varint records, as Kafka's LogValidator checks them: every
    field of every record (``kafka_record_walk.walk_records``: lengths that fit, offset deltas
    0..n-1, exactly ``record_count`` records), timestamps within int64, and on a compacted
    topic a key on every record. The same walk serves every cleanup.policy, so a compacted
    topic checks every field too. Returns (the decompressed section, the records' largest
    timestamp when this is a CreateTime batch whose header's max timestamp differs, else
    None): as Kafka's LogValidator overwrites a wrong max timestamp (sarama always sends -1),
    the append writes it into the header, and its CRC with it.

    Cost: about 0.6 us a record of 100 bytes (1.4 us with a header), against 0.3 us for
    the walk of length prefixes alone that this replaced, which let a record whose key
    length pointed past its end reach the log and stall every consumer at its offset."""
    try:
        section = rb.decompress(header.codec, batch[rb.HEADER_SIZE :])
        facts = kafka_record_walk.walk_records(section, header.record_count)
    except CorruptRecord as e:
        raise _unreadable(position, f"{e}; encode the records as Kafka's record batch v2") from e
    first = header.first_timestamp
    problem = _timestamps_range_problem(
        first + facts.min_timestamp_delta, first + facts.max_timestamp_delta
    )
    if problem is None and keys_required and facts.keyless:
        problem = _KEYLESS
    if problem is not None:
        raise _unreadable(position, problem)
    largest = first + facts.max_timestamp_delta
    if header.timestamp_type is rb.TimestampType.CREATE_TIME and header.max_timestamp != largest:
        return section, largest
    return section, None


def _unreadable(position: int, problem: str) -> InvalidRecord:
    # Not CorruptRecord: that one is retriable, and the CRC matched, so the same bytes sent
    # again would fail the same way.
    return InvalidRecord(f"batch at byte {position} of the request: {problem}")


def _columns_problem(columns: list, header: rb.BatchHeader) -> str | None:
    """What makes these five unpacked columns unreadable as ``header.record_count`` records,
    or None when nothing does."""
    offset_deltas, timestamp_deltas, keys, values, headers = columns
    n = header.record_count
    if offset_deltas is not None and not (
        type(offset_deltas) is list
        and _INTS.issuperset(map(type, offset_deltas))
        and offset_deltas == list(range(n))
    ):
        return (
            f"offset deltas must be 0..{n - 1} (or nil) for a producer's batch of {n} records, "
            f"got {_describe_offsets(offset_deltas, n)}; number the records consecutively from 0"
        )
    if timestamp_deltas is not None and not (
        _is_column(timestamp_deltas, n) and _INTS.issuperset(map(type, timestamp_deltas))
    ):
        return _bad_column("timestamp deltas", "integer (ms)", timestamp_deltas, n)
    if n:
        deltas = timestamp_deltas or (0,)
        problem = _timestamps_problem(header, min(deltas), max(deltas))
        if problem is not None:
            return problem
    if keys is not None and not _is_binary_column(keys, n):
        return _bad_column("keys", "bin or nil", keys, n)
    if not _is_binary_column(values, n):
        return _bad_column("values", "bin or nil", values, n)
    if headers is not None:
        if not _is_column(headers, n) or not _HEADER_CELLS.issuperset(map(type, headers)):
            return _bad_column("headers", "nil or array of [str, bin or nil]", headers, n)
        for record_headers in headers:
            # Only records that carry headers cost a loop here.
            for pair in record_headers or ():
                if not (
                    type(pair) is list
                    and len(pair) == 2
                    and type(pair[0]) is str
                    and type(pair[1]) in _BINARY_CELLS
                ):
                    return (
                        f"a record header must be a [str, bin or nil] pair, got "
                        f"{_describe(pair)}"
                    )
    return None


def _timestamps_problem(header: rb.BatchHeader, smallest: int, largest: int) -> str | None:
    """What is wrong with the record timestamps of a non-empty batch whose timestamp deltas
    range from ``smallest`` to ``largest``, or None: each must be int64 milliseconds, and
    a CreateTime batch's header must carry the largest as its max timestamp, since the time
    index, timestamp lookups and retention all go by the header's value. (Kafka's
    LogValidator overwrites a wrong max timestamp instead; rafka keeps the client's bytes,
    and its CRC, as they came, so it refuses the batch.)"""
    first = header.first_timestamp
    problem = _timestamps_range_problem(first + smallest, first + largest)
    if problem is not None:
        return problem
    if (
        header.timestamp_type is rb.TimestampType.CREATE_TIME
        and header.max_timestamp != first + largest
    ):
        return (
            f"the header's max timestamp {header.max_timestamp} is not the largest record "
            f"timestamp {first + largest}; set it to the maximum of the records' timestamps"
        )
    return None


def _timestamps_range_problem(smallest: int, largest: int) -> str | None:
    if not (_INT64_MIN <= smallest and largest <= _INT64_MAX):
        return "timestamp deltas take record timestamps outside int64 milliseconds"
    return None


# A compacted topic takes only records with a key, as Kafka's does: compaction keeps the
# latest record per key, so a record without one could never be cleaned.
_KEYLESS = (
    "a compacted topic (cleanup.policy=compact) refuses records without a key; give every "
    "record a key"
)


def _keyless_problem(keys) -> str | None:
    """_KEYLESS when the keys column (rafka's format) holds a null, else None."""
    if keys is None:
        missing = True
    elif type(keys) is rb.PackedColumn:
        missing = bool(len(keys.lengths)) and int(np.frombuffer(keys.lengths, np.int32).min()) < 0
    else:
        missing = None in keys
    return _KEYLESS if missing else None


def _is_column(column, n: int) -> bool:
    return type(column) is list and len(column) == n


def _is_binary_column(column, n: int) -> bool:
    if type(column) is rb.PackedColumn:
        return len(column.lengths) == n  # its lengths and data were checked when unpacked
    return _is_column(column, n) and _BINARY_CELLS.issuperset(map(type, column))


def _bad_column(name: str, cells: str, column, n: int) -> str:
    return (
        f"the {name} column must be an array holding one {cells} per record ({n}, the "
        f"header's record_count), got {_describe(column)}"
    )


def _describe(value) -> str:
    """A value's shape for an error message: its type, and for an array its length and the
    types of its cells."""
    if type(value) is rb.PackedColumn:
        return f"a packed column of {len(value.lengths)}"
    if type(value) is list:
        kinds = sorted({"nil" if v is None else type(v).__name__ for v in value})
        return f"an array of {len(value)}" + (f" of {', '.join(kinds)}" if kinds else "")
    return f"a {type(value).__name__}"


def _describe_offsets(deltas, n: int) -> str:
    if type(deltas) is list and len(deltas) == n:
        for i, delta in enumerate(deltas):
            if type(delta) is not int or delta != i:
                return f"{delta!r} for record {i} in {_describe(deltas)}"
    return _describe(deltas)


def _control_problem(columns: list) -> str | None:
    """Every record of a control batch must be a transaction marker. A coordinator writes one
    marker per batch, so the per-record work here is negligible."""
    _, _, keys, values, _ = columns
    if keys is None:
        return "a control record needs a key (version, type); encode it with encode_control_batch"
    keys = keys.to_list() if type(keys) is rb.PackedColumn else keys
    values = values.to_list() if type(values) is rb.PackedColumn else values
    for key, value in zip(keys, values):
        try:
            rb.parse_control_record(key, value)
        except CorruptRecord as e:
            return f"{e}; encode control records with encode_control_batch"
    return None


def check_follower_offsets(
    batches: list[tuple[int, rb.BatchHeader]], log_end_offset: int
) -> bool:
    """A follower's batches keep the leader's offsets: they must start at or after the log
    end and never go backwards. Returns whether they leave a gap (the leader's log was
    compacted)."""
    expected = log_end_offset
    gap = False
    for _, header in batches:
        if header.base_offset < expected:
            raise InvalidRecord(
                f"follower append at offset {header.base_offset} is below the log end "
                f"offset {expected}; truncate the log to the leader's answer first"
            )
        gap = gap or header.base_offset != expected
        expected = header.next_offset
    return gap


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
    are recompressed only when the topic's compression.type differs from the batch's codec,
    from the section ``validate_batches`` decompressed when it kept it."""
    codec = target_codec(config)
    sections = getattr(batches, "sections", {})
    max_timestamps = getattr(batches, "max_timestamps", {})
    prepared: list[PreparedBatch] = []
    for position, header in batches:
        batch = view[position : position + header.size]
        largest = max_timestamps.get(position)
        if codec is not None and header.codec is not codec:
            section = sections.get(position)
            if section is None:
                section = rb.decompress(header.codec, batch[rb.HEADER_SIZE :])
            batch = memoryview(recompress(header, section, codec))  # header's max timestamp
            header = rb.read_header(batch)
            largest = None
        head = bytearray(batch[: rb.HEADER_SIZE])
        body = batch[rb.HEADER_SIZE :]
        rb.set_base_offset(head, next_offset)
        rb.set_partition_leader_epoch(head, leader_epoch)
        if append_time >= 0:
            rb.set_log_append_time(head, body, append_time)
        elif largest is not None:
            rb.set_max_timestamp(head, body, largest)
        prepared.append(([head, body], rb.BatchHeader._make(rb.HEADER.unpack_from(head))))
        next_offset += header.last_offset_delta + 1
    return prepared


def recompress(header: rb.BatchHeader, section, codec: rb.Codec) -> bytes:
    """The batch with this ``header`` and decompressed records ``section``, compressed with
    ``codec`` instead. The section's format does not depend on the codec, so every record
    and header field stays as it was (packed columns stay packed); only the codec bits, the
    length and the CRC change. A Kafka-format section is compressed as Kafka's clients do,
    since Kafka clients will read it as it is."""
    compress = kafka_records.compress_for_kafka if header.is_kafka_format else rb.compress
    return rb.assemble_batch(
        compress(codec, section),
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & ~_CODEC_BITS | int(codec),
        last_offset_delta=header.last_offset_delta,
        first_timestamp=header.first_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=header.record_count,
    )
