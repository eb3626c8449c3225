"""Kafka request and response frames: headers, bodies, and the versions rafka serves.

A request frame on the socket is ``int32 size`` + header + body. ``read_request`` takes one
frame WITHOUT its size prefix (the listener has already read it); ``encode_response`` and
``encode_request`` return whole frames WITH the size prefix, ready to write.

Headers (Kafka's RequestHeader/ResponseHeader):
- request header v1: int16 api_key, int16 api_version, int32 correlation_id, nullable string
  client_id (always the classic int16-length form, even in v2); v2 adds tagged fields. v2 is
  used exactly when the API's version is flexible.
- response header v0: int32 correlation_id; v1 adds tagged fields, for flexible versions, except
  ApiVersions, whose response header is always v0 (a client must be able to read the answer
  before it knows which versions the broker speaks).

Errors: ``read_request`` raises only ``UnsupportedVersion`` (an api key not served, or a version
outside ``SUPPORTED``; ``.header`` holds the parsed header so the listener can answer) or
``InvalidRequest`` (anything malformed; ``.header`` holds the header when it was readable,
else None). Trailing bytes after the body are ignored, as Kafka does.

Body dicts are described in ``rafka.wire.schema`` (fields of other versions are absent;
omitted fields encode as their defaults). UUIDs decode to 16-byte ``bytes`` and encode from
bytes or ``uuid.UUID``; ``records`` decode to memoryview slices of the frame.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from rafka.errors import InvalidRequest, UnsupportedVersion
from rafka.wire import primitives as p
from rafka.wire.messages import API_VERSIONS_KEY, APIS, SUPPORTED
from rafka.wire.schema import Api

__all__ = [
    "RequestHeader", "SUPPORTED", "read_request", "encode_response", "encode_request",
    "decode_response", "api_versions_fallback",
]

_HEAD = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_UNSUPPORTED_VERSION = 35

# What a fixed-layout decode can raise on hostile input besides InvalidRequest: a short
# buffer (struct.error), and the defensive rest. Turned into InvalidRequest at the boundary.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, MemoryError,
                  RecursionError)


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _with_header(error: Exception, header: RequestHeader | None) -> Exception:
    error.header = header  # type: ignore[attr-defined]
    return error


def _api(header: RequestHeader) -> Api:
    """The served API of ``header``, or UnsupportedVersion carrying it."""
    api = APIS.get(header.api_key)
    if api is None:
        raise _with_header(UnsupportedVersion(
            f"api key {header.api_key} is not served by this listener"), header)
    if not api.supports(header.api_version):
        raise _with_header(UnsupportedVersion(
            f"{api.name} v{header.api_version} is not served; this listener serves "
            f"v{api.min_version}-v{api.max_version}"), header)
    return api


def read_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict]:
    """Decodes one request frame (no size prefix) into its header and body dict."""
    header = None
    try:
        buf = frame if isinstance(frame, memoryview) else memoryview(frame)
        if buf.ndim != 1 or buf.itemsize != 1:
            buf = buf.cast("B")
        api_key, api_version, correlation_id = _HEAD.unpack_from(buf, 0)
        client_id, pos = p.read_nullable_string(buf, 8)
        header = RequestHeader(api_key, api_version, correlation_id, client_id)
        api = _api(header)
        reader = api.request_codec(api_version).read
        if api.is_flexible(api_version):
            pos = _skip_tagged_fields(buf, pos)
        body, _ = reader(buf, pos)
        return header, body
    except (UnsupportedVersion, InvalidRequest) as e:
        if getattr(e, "header", None) is None:
            e.header = header  # type: ignore[attr-defined]
        raise
    except _DECODE_ERRORS as e:
        what = "request header" if header is None else (
            f"api key {header.api_key} v{header.api_version} request")
        raise _with_header(InvalidRequest(
            f"malformed {what}: {type(e).__name__}: {e}; the frame is truncated or "
            f"corrupt"), header) from None


def _skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skips a header's tagged fields (none are defined that rafka uses)."""
    n, pos = p.read_uvarint(buf, pos)
    for _ in range(n):
        _, pos = p.read_uvarint(buf, pos)
        size, pos = p.read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise InvalidRequest(f"header tagged field of {size} bytes exceeds the frame")
    return pos


def _framed(out: bytearray) -> bytes:
    """``out`` began with 4 placeholder bytes; fills them with the size."""
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(header: RequestHeader, body: dict) -> bytes:
    """The whole response frame (size prefix included) answering ``header``."""
    api = APIS.get(header.api_key)
    if api is None:
        raise ValueError(f"api key {header.api_key} has no schema")
    write = api.response_codec(header.api_version).write
    out = bytearray(4)
    out += _I32.pack(header.correlation_id)
    if api.is_flexible(header.api_version) and header.api_key != API_VERSIONS_KEY:
        out.append(0)  # response header v1: no tagged fields
    _write_body(write, out, body, api, header.api_version, "response")
    return _framed(out)


_ENCODE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, struct.error, OverflowError)


def _write_body(write, out: bytearray, body: dict, api: Api, version: int, kind: str) -> None:
    """Runs ``write``; a body that does not fit the schema (None in a non-nullable field, a
    value out of its integer range, a str where bytes go) raises ValueError naming the API."""
    try:
        write(out, body)
    except _ENCODE_ERRORS as e:
        raise ValueError(f"{api.name} v{version} {kind} body does not fit the schema: "
                         f"{type(e).__name__}: {e}") from e


def encode_request(header: RequestHeader, body: dict) -> bytes:
    """The whole request frame (size prefix included); for tests and fuzzing."""
    api = APIS.get(header.api_key)
    if api is None:
        raise ValueError(f"api key {header.api_key} has no schema")
    write = api.request_codec(header.api_version).write
    out = bytearray(4)
    out += _HEAD.pack(header.api_key, header.api_version, header.correlation_id)
    p.write_nullable_string(out, header.client_id)
    if api.is_flexible(header.api_version):
        out.append(0)  # request header v2: no tagged fields
    _write_body(write, out, body, api, header.api_version, "request")
    return _framed(out)


def decode_response(api_key: int, api_version: int,
                    frame: bytes | bytearray | memoryview) -> tuple[int, dict]:
    """Decodes a response frame WITHOUT its size prefix into (correlation_id, body); for tests.
    Raises InvalidRequest on malformed input."""
    api = APIS.get(api_key)
    if api is None:
        raise ValueError(f"api key {api_key} has no schema")
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        correlation_id = _I32.unpack_from(buf, 0)[0]
        pos = 4
        if api.is_flexible(api_version) and api_key != API_VERSIONS_KEY:
            pos = _skip_tagged_fields(buf, pos)
        body, _ = api.response_codec(api_version).read(buf, pos)
    except _DECODE_ERRORS as e:
        raise InvalidRequest(f"malformed response: {type(e).__name__}: {e}") from None
    return correlation_id, body


def _api_versions_v0_body() -> bytes:
    out = bytearray()
    out += _I16.pack(_UNSUPPORTED_VERSION)
    out += _I32.pack(len(SUPPORTED))
    for key, (low, high) in sorted(SUPPORTED.items()):
        out += struct.pack(">hhh", key, low, high)
    return bytes(out)


_FALLBACK_BODY = _api_versions_v0_body()


def api_versions_fallback(header: RequestHeader) -> bytes:
    """The answer to an ApiVersions request of a version rafka does not serve: response header
    v0 and a v0 body (error_code 35 UNSUPPORTED_VERSION, then every served api key with its
    range), so the client can retry with a version in range."""
    out = bytearray(4)
    out += _I32.pack(header.correlation_id)
    out += _FALLBACK_BODY
    return _framed(out)
