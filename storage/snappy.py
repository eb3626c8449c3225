"""Snappy decompression, pure Python: raw snappy and Kafka's xerial framing. No I/O.

Kafka clients compress snappy batches one of two ways: librdkafka writes one raw snappy
stream; the Java client and kafka-python write xerial framing:

    8 bytes   magic b"\\x82SNAPPY\\x00"
    4 bytes   version (int32 BE), 4 bytes   compatible version (int32 BE)
    then, until the end: int32 BE length of a block, that many bytes of raw snappy

and the output is the blocks' outputs back to back. A raw stream is

    varint (7 bits a byte, little end first)   uncompressed length
    elements until the input ends, each led by a tag byte whose low 2 bits say:
      00 literal: length - 1 in the upper 6 bits; 60..63 there mean that 1..4 more bytes
         (little-endian) hold length - 1; the literal bytes follow
      01 copy: length 4 + bits 2-4, offset bits 5-7 (high) and one more byte (low)
      10 copy: length 1 + bits 2-7, offset in 2 more bytes (little-endian)
      11 copy: length 1 + bits 2-7, offset in 4 more bytes (little-endian)
    a copy repeats ``length`` bytes starting ``offset`` bytes back in the output; when
    offset < length the copy overlaps what it writes (a run).

Only decompression: rafka reads snappy batches from Kafka clients and never writes snappy.
Cost is one Python step per element (a literal or a copy, not a byte), fine for the rare
snappy batch; a native library could replace this behind ``decompress``.
"""

from __future__ import annotations

import struct

from rafka.errors import CorruptRecord

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_BLOCK_LENGTH = struct.Struct(">i")


def decompress(data: bytes | bytearray | memoryview, max_bytes: int | None = None) -> bytes:
    """Raw snappy or xerial-framed snappy (told apart by the xerial magic) -> the bytes;
    CorruptRecord if they would be more than ``max_bytes`` (None: no limit)."""
    data = bytes(data)
    if data[:8] == XERIAL_MAGIC and len(data) >= _XERIAL_HEADER.size:
        return decompress_xerial(data, max_bytes)
    return decompress_raw(data, max_bytes)


def decompress_xerial(data: bytes, max_bytes: int | None = None) -> bytes:
    """xerial framing (see the module docstring): the blocks' raw snappy outputs joined,
    at most ``max_bytes`` in all (each block is held to what is left)."""
    pos = _XERIAL_HEADER.size
    end = len(data)
    out = []
    left = max_bytes
    while pos < end:
        if end - pos < 4:
            raise CorruptRecord(f"xerial snappy block length cut short at byte {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecord(
                f"xerial snappy block at byte {pos - 4} declares {length} bytes, "
                f"{end - pos} are left"
            )
        block = decompress_raw(data[pos : pos + length], left, max_bytes)
        out.append(block)
        if left is not None:
            left -= len(block)
        pos += length
    return b"".join(out)


def decompress_raw(data: bytes, max_bytes: int | None = None,
                   cap: int | None = None) -> bytes:  # fmt: skip
    """One raw snappy stream -> its bytes; CorruptRecord when it is malformed, its output
    length differs from the length it declares, or that length is more than ``max_bytes``
    (None: no limit; ``cap``, when given, is the overall limit the message names)."""
    try:
        expected, pos = _uvarint(data, 0)
        if max_bytes is not None and expected > max_bytes:
            # The declared length is checked before anything is written, and no element
            # may write past it (below), so output never exceeds the limit.
            limit = max_bytes if cap is None else cap
            raise CorruptRecord(
                f"snappy data decompresses to more than {limit} bytes, the most a records "
                "section may hold uncompressed; send smaller batches"
            )
        out = bytearray()
        end = len(data)
        while pos < end:
            tag = data[pos]
            kind = tag & 3
            if kind == 0:
                length = tag >> 2
                if length >= 60:
                    extra = length - 59
                    if pos + 1 + extra > end:
                        raise IndexError
                    length = int.from_bytes(data[pos + 1 : pos + 1 + extra], "little")
                    pos += extra
                length += 1
                pos += 1
                if pos + length > end:
                    raise CorruptRecord(f"snappy literal of {length} bytes runs past the input")
                if len(out) + length > expected:
                    raise _past_declared(expected)
                out += data[pos : pos + length]
                pos += length
                continue
            if kind == 1:
                length = 4 + ((tag >> 2) & 7)
                offset = ((tag >> 5) << 8) | data[pos + 1]
                pos += 2
            elif kind == 2:
                length = 1 + (tag >> 2)
                offset = data[pos + 1] | (data[pos + 2] << 8)
                pos += 3
            else:
                length = 1 + (tag >> 2)
                offset = int.from_bytes(data[pos + 1 : pos + 5], "little")
                if pos + 5 > end:
                    raise IndexError
                pos += 5
            size = len(out)
            if offset == 0 or offset > size:
                raise CorruptRecord(
                    f"snappy copy reaches {offset} bytes back with {size} bytes written"
                )
            if size + length > expected:
                raise _past_declared(expected)
            start = size - offset
            if offset >= length:
                out += out[start : start + length]
            else:
                # An overlapping copy repeats the last ``offset`` bytes (a run).
                run = out[start:]
                out += (run * (length // offset + 1))[:length]
    except IndexError:
        raise CorruptRecord("snappy stream ends in the middle of an element") from None
    if len(out) != expected:
        raise CorruptRecord(
            f"snappy stream declares {expected} bytes but decompresses to {len(out)}"
        )
    return bytes(out)


def _past_declared(expected: int) -> CorruptRecord:
    return CorruptRecord(f"snappy stream declares {expected} bytes but writes more")


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned little-endian base-128 varint at ``pos`` -> (value, position after it)."""
    result = shift = 0
    while True:
        if shift > 28:
            raise CorruptRecord("snappy length varint is longer than 5 bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
