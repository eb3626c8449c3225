"""Kafka's records section (record batch v2): varint records. Bytes in, bytes out, no I/O.

A batch whose attributes carry KAFKA_FORMAT_BIT holds, after its 61-byte header, exactly
what a Kafka client sent: ``record_count`` records back to back (compressed as a whole with
the batch codec), each

    length            varint   bytes of the record after this field
    attributes        int8     unused, 0
    timestamp_delta   varlong  relative to the batch's first_timestamp
    offset_delta      varint   relative to the batch's base_offset
    key_length        varint   -1 for a null key
    key               bytes
    value_length      varint   -1 for a null value (a tombstone)
    value             bytes
    header_count      varint
    headers           each: key_length varint, key (UTF-8), value_length varint (-1 null),
                      value

Every varint is zigzag-encoded (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...), 7 bits a byte, low
bits first, the top bit set on every byte but the last.

Readers take the section as the five columns of rafka's own format (``record_columns``):
offset deltas, timestamp deltas, keys, values, headers, where a column that is all default
(0..n-1, all zero, no keys, no headers) comes back as None, so every reader of rafka's
columns reads Kafka batches unchanged.

Cost: one pass of Python per record, with single-byte varints (every field of a record of
up to 63 bytes, and the delta fields of most records) read by one table lookup; no objects
per record beyond the key and value bytes and the column entries. The produce path does not
decode: ``kafka_record_walk.walk_records`` checks every field of every record, as Kafka's
LogValidator does, in about half the time and without building any of them.
"""

from __future__ import annotations

import lz4.frame

from rafka.errors import CorruptRecord
from rafka.storage.batch_header import BatchHeader, Codec
from rafka.storage.compression import compress

# Zigzag decoding of a one-byte varint (top bit clear).
ONE_BYTE_VARINTS = tuple((b >> 1) ^ -(b & 1) for b in range(128))

# Zigzag encodings of the small integers: lengths, deltas and counts are nearly always here,
# so encoding a record is a few dict lookups. 16384 entries cover 1..2-byte varints' range
# of lengths (up to 8191) and cost about 1 MB once.
_ENCODED: dict[int, bytes] = {}


def encode_varint(value: int) -> bytes:
    """Zigzag varint (int64 range) of ``value``."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


for _n in range(-8192, 8192):
    _ENCODED[_n] = encode_varint(_n)
del _n


def read_varint(data: bytes, pos: int, bits: int = 64) -> tuple[int, int]:
    """Zigzag varint of a ``bits``-bit field at ``pos`` -> (value, position after it).
    CorruptRecord when it runs past the bytes such a field may take (10 for 64 bits, 5 for
    32) or its value past ``bits``."""
    result = shift = 0
    size = -(-bits // 7)  # the bytes such a field may take
    last = 7 * (size - 1)  # the shift of its last byte
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> bits:
                raise CorruptRecord(f"varint at byte {pos} of a records section exceeds {bits} bits")
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > last:
            raise CorruptRecord(f"varint at byte {pos} of a records section exceeds {size} bytes")


def read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    """A 32-bit field's varint, as Kafka reads every record field but the timestamp delta
    (ByteUtils.readVarint): at most 5 bytes."""
    return read_varint(data, pos, 32)


def decode_columns(header: BatchHeader, section: bytes | memoryview) -> list:
    """The decompressed Kafka records ``section`` of the batch with ``header`` as rafka's five
    columns ``[offset_deltas, timestamp_deltas, keys, values, headers]`` (see the module
    docstring); CorruptRecord when it does not hold exactly ``record_count`` well-formed
    records."""
    data = bytes(section)
    count = header.record_count
    one = ONE_BYTE_VARINTS
    varint = read_varint
    offset_deltas: list[int] = []
    ts_deltas: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list = []
    add_offset = offset_deltas.append
    add_ts = ts_deltas.append
    add_key = keys.append
    add_value = values.append
    add_headers = headers.append
    any_headers = False
    pos = 0
    try:
        for _ in range(count):
            b = data[pos]
            if b < 128:
                length = one[b]
                pos += 1
            else:
                length, pos = varint(data, pos)
            end = pos + length
            p = pos + 1  # the record's attributes byte is unused
            b = data[p]
            if b < 128:
                add_ts(one[b])
                p += 1
            else:
                t, p = varint(data, p)
                add_ts(t)
            b = data[p]
            if b < 128:
                add_offset(one[b])
                p += 1
            else:
                o, p = varint(data, p)
                add_offset(o)
            b = data[p]
            if b < 128:
                n = one[b]
                p += 1
            else:
                n, p = varint(data, p)
            if n >= 0:
                add_key(data[p : p + n])
                p += n
            elif n == -1:
                add_key(None)
            else:
                raise CorruptRecord(f"record key length {n}")
            b = data[p]
            if b < 128:
                n = one[b]
                p += 1
            else:
                n, p = varint(data, p)
            if n >= 0:
                add_value(data[p : p + n])
                p += n
            elif n == -1:
                add_value(None)
            else:
                raise CorruptRecord(f"record value length {n}")
            if data[p] == 0:  # no headers, the usual case
                add_headers(None)
                p += 1
            else:
                record_headers, p = read_headers(data, p, end)
                add_headers(record_headers)
                any_headers = True
            if p != end or length < 0:
                raise CorruptRecord(f"a record declares {length} bytes but holds {p - pos}")
            pos = end
    except IndexError:
        raise CorruptRecord(
            f"Kafka records section of batch at base offset {header.base_offset} ends inside "
            f"record {len(values)} of {count}"
        ) from None
    except CorruptRecord as e:
        raise CorruptRecord(
            f"Kafka records section of batch at base offset {header.base_offset} is malformed "
            f"at record {len(values)} of {count}: {e}"
        ) from None
    if pos != len(data):
        raise CorruptRecord(
            f"Kafka records section of batch at base offset {header.base_offset} holds "
            f"{len(data) - pos} bytes after its {count} records"
        )
    return [
        None if offset_deltas == list(range(count)) else offset_deltas,
        ts_deltas if any(ts_deltas) else None,
        keys if keys.count(None) != count else None,
        values,
        headers if any_headers else None,
    ]


def read_headers(
    data: bytes, p: int, end: int | None = None
) -> tuple[list[tuple[str, bytes | None]], int]:
    """The headers of a record at ``p`` (its header count) -> ([(key, value or None)], the
    position after them). CorruptRecord when they do not fit before ``end`` (the record's
    end; the data's by default), a key is not UTF-8, or a length is negative (a value's may
    be -1, null); counts and lengths are 32-bit varints, as Kafka reads them."""
    if end is None:
        end = len(data)
    one = ONE_BYTE_VARINTS  # most counts and lengths are one byte: a lookup, not a call
    b = data[p]
    count, p = (one[b], p + 1) if b < 128 else read_varint32(data, p)
    if count < 0 or count > (end - p) >> 1:  # a header takes at least 2 bytes
        raise CorruptRecord(f"record header count {count} does not fit its record")
    out = []
    for _ in range(count):
        b = data[p]
        n, p = (one[b], p + 1) if b < 128 else read_varint32(data, p)
        if n < 0 or p + n > end:
            raise CorruptRecord(f"record header key length {n}")
        try:
            key = data[p : p + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecord(f"record header key is not UTF-8: {e}") from None
        p += n
        b = data[p]
        n, p = (one[b], p + 1) if b < 128 else read_varint32(data, p)
        if n >= 0:
            if p + n > end:
                raise CorruptRecord(f"record header value length {n}")
            out.append((key, data[p : p + n]))
            p += n
        elif n == -1:
            out.append((key, None))
        else:
            raise CorruptRecord(f"record header value length {n}")
    return out, p


def encode_records(
    offset_deltas, timestamp_deltas, keys, values, headers
) -> bytes:
    """rafka's columns (as ``decode_columns`` returns them, packed columns already turned into
    lists) -> an uncompressed Kafka records section."""
    n = len(values)
    if offset_deltas is None:
        offset_deltas = range(n)
    if timestamp_deltas is None:
        timestamp_deltas = (0,) * n
    if keys is None:
        keys = (None,) * n
    if headers is None:
        headers = (None,) * n
    table = _ENCODED.get
    slow = encode_varint
    pieces: list = []
    extend = pieces.extend
    for od, td, key, value, record_headers in zip(
        offset_deltas, timestamp_deltas, keys, values, headers
    ):
        tv = table(td) or slow(td)
        ov = table(od) or slow(od)
        if key is None:
            kv = b"\x01"
            key = b""
        else:
            kl = len(key)
            kv = table(kl) or slow(kl)
        if value is None:
            vv = b"\x01"
            value = b""
        else:
            vl = len(value)
            vv = table(vl) or slow(vl)
        hv = _encode_headers(record_headers) if record_headers else b"\x00"
        size = 1 + len(tv) + len(ov) + len(kv) + len(key) + len(vv) + len(value) + len(hv)
        extend((table(size) or slow(size), b"\x00", tv, ov, kv, key, vv, value, hv))
    return b"".join(pieces)


def _encode_headers(record_headers) -> bytes:
    out = [encode_varint(len(record_headers))]
    for key, value in record_headers:
        raw = key.encode("utf-8")
        out.append(encode_varint(len(raw)))
        out.append(raw)
        if value is None:
            out.append(b"\x01")
        else:
            out.append(encode_varint(len(value)))
            out.append(value)
    return b"".join(out)


def compress_for_kafka(codec: Codec, section: bytes) -> bytes:
    """Compress a Kafka records section the way Kafka's own client does: LZ4 frames with
    independent 64 KiB blocks and no content size (what every Kafka reader accepts); the
    other codecs as rafka compresses them."""
    if codec is Codec.LZ4:
        return lz4.frame.compress(
            section,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            store_size=False,
        )
    return compress(codec, section)
