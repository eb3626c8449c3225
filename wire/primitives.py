"""Kafka's primitive wire types: a reader and a writer for each.

Contract:
- A reader is ``read(buf: memoryview, pos: int) -> (value, new_pos)``. ``len(buf)`` is the
  bound: a reader never looks past it. Fixed-size reads lean on ``struct.unpack_from``, which
  raises ``struct.error`` on a short buffer; the frame layer turns that into InvalidRequest.
  Every length is checked here (negative, or past the end) and raises InvalidRequest.
- A writer is ``write(out: bytearray, value) -> None`` and appends the encoding to ``out``.
- "Compact" variants are the flexible-version forms (KIP-482): unsigned-varint lengths stored
  as length + 1, so 0 means null.

Strings decode to ``str`` (UTF-8, bad UTF-8 -> InvalidRequest), ``bytes`` fields to ``bytes``
(a copy: they are small, e.g. SASL tokens and group member metadata), ``records`` fields to a
zero-copy ``memoryview`` slice of the frame, ``uuid`` fields to 16-byte ``bytes``.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from rafka.errors import InvalidRequest

Reader = Callable[[memoryview, int], "tuple[Any, int]"]
Writer = Callable[[bytearray, Any], None]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

ZERO_UUID = bytes(16)


def _fixed(st: struct.Struct) -> tuple[Reader, Writer]:
    unpack_from, pack, size = st.unpack_from, st.pack, st.size

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return read, write


read_int8, write_int8 = _fixed(_I8)
read_int16, write_int16 = _fixed(_I16)
read_int32, write_int32 = _fixed(_I32)
read_int64, write_int64 = _fixed(_I64)
read_uint16, write_uint16 = _fixed(_U16)
read_uint32, write_uint32 = _fixed(_U32)
read_float64, write_float64 = _fixed(_F64)


def read_bool(buf: memoryview, pos: int) -> tuple[bool, int]:
    return _I8.unpack_from(buf, pos)[0] != 0, pos + 1


def write_bool(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned 32-bit varint (at most 5 bytes)."""
    end = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise InvalidRequest("truncated varint: the frame ended inside a length field")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise InvalidRequest("varint longer than 5 bytes: not a valid 32-bit length")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint must be >= 0, got {value}")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _bad_length(what: str, n: int, pos: int, buf: memoryview) -> InvalidRequest:
    return InvalidRequest(
        f"{what} length {n} at byte {pos} is invalid: {len(buf) - pos} bytes remain in the frame"
    )


def _utf8(buf: memoryview, start: int, end: int) -> str:
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"string at byte {start} is not valid UTF-8: {e.reason}") from None


# -- strings -------------------------------------------------------------------------------

def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = _I16.unpack_from(buf, pos)[0]
    pos += 2
    end = pos + n
    if n < 0 or end > len(buf):
        raise _bad_length("string", n, pos, buf)
    return _utf8(buf, pos, end), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = _I16.unpack_from(buf, pos)[0]
    pos += 2
    if n == -1:
        return None, pos
    end = pos + n
    if n < 0 or end > len(buf):
        raise _bad_length("string", n, pos, buf)
    return _utf8(buf, pos, end), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos)
    n -= 1
    end = pos + n
    if n < 0 or end > len(buf):
        raise _bad_length("compact string", n, pos, buf)
    return _utf8(buf, pos, end), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    end = pos + n
    if end > len(buf):
        raise _bad_length("compact string", n, pos, buf)
    return _utf8(buf, pos, end), end


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    out += _I16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    write_uvarint(out, len(data) + 1)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


# -- bytes and records ----------------------------------------------------------------------
# Both share one layout; they differ in what decoding returns: bytes copies, records is a
# zero-copy view of the frame (a produce request's batches go to the log untouched).

def _blob_readers(copy: bool) -> tuple[Reader, Reader, Reader, Reader]:
    def make(value: memoryview) -> Any:
        return value.tobytes() if copy else value

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
        end = pos + n
        if n < 0 or end > len(buf):
            raise _bad_length("bytes", n, pos, buf)
        return make(buf[pos:end]), end

    def read_nullable(buf: memoryview, pos: int) -> tuple[Any, int]:
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if n == -1:
            return None, pos
        end = pos + n
        if n < 0 or end > len(buf):
            raise _bad_length("bytes", n, pos, buf)
        return make(buf[pos:end]), end

    def read_compact(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_uvarint(buf, pos)
        n -= 1
        end = pos + n
        if n < 0 or end > len(buf):
            raise _bad_length("compact bytes", n, pos, buf)
        return make(buf[pos:end]), end

    def read_compact_nullable(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        n -= 1
        end = pos + n
        if end > len(buf):
            raise _bad_length("compact bytes", n, pos, buf)
        return make(buf[pos:end]), end

    return read, read_nullable, read_compact, read_compact_nullable


(read_bytes, read_nullable_bytes,
 read_compact_bytes, read_compact_nullable_bytes) = _blob_readers(copy=True)
(read_records, read_nullable_records,
 read_compact_records, read_compact_nullable_records) = _blob_readers(copy=False)


def _nbytes(value: Any) -> int:
    return value.nbytes if isinstance(value, memoryview) else len(value)


def write_bytes(out: bytearray, value: bytes | bytearray | memoryview) -> None:
    out += _I32.pack(_nbytes(value))
    out += value


def write_nullable_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: bytes | bytearray | memoryview) -> None:
    write_uvarint(out, _nbytes(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_bytes(out, value)


# -- uuid -------------------------------------------------------------------------------------

def read_uuid(buf: memoryview, pos: int) -> tuple[bytes, int]:
    end = pos + 16
    if end > len(buf):
        raise InvalidRequest(f"uuid at byte {pos} is truncated")
    return buf[pos:end].tobytes(), end


def write_uuid(out: bytearray, value: Any) -> None:
    """Accepts 16 bytes or a ``uuid.UUID``."""
    data = value if isinstance(value, (bytes, bytearray)) else value.bytes
    if len(data) != 16:
        raise ValueError(f"uuid must be 16 bytes, got {len(data)}")
    out += data


# -- arrays -----------------------------------------------------------------------------------

def array_reader(elem: Reader, min_elem_size: int, nullable: bool, compact: bool) -> Reader:
    """Reads a count then ``count`` elements. The count is checked against the bytes left
    (each element takes at least ``min_elem_size`` >= 1 bytes) before anything is allocated,
    so a forged count of 2**31 costs nothing."""
    min_size = max(1, min_elem_size)
    unpack_from = _I32.unpack_from

    def read(buf: memoryview, pos: int) -> tuple[list | None, int]:
        if compact:
            n, pos = read_uvarint(buf, pos)
            n -= 1
        else:
            n = unpack_from(buf, pos)[0]
            pos += 4
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise _bad_length("array", n, pos, buf)
        if n * min_size > len(buf) - pos:
            raise _bad_length("array", n, pos, buf)
        items = []
        append = items.append
        for _ in range(n):
            value, pos = elem(buf, pos)
            append(value)
        return items, pos

    return read


def array_writer(elem: Writer, nullable: bool, compact: bool) -> Writer:
    pack = _I32.pack

    def write(out: bytearray, value: list | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError("array is not nullable in this version; pass [] instead")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
            return
        if compact:
            write_uvarint(out, len(value) + 1)
        else:
            out += pack(len(value))
        for item in value:
            elem(out, item)

    return write
