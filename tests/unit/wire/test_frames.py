"""Request/response framing: headers, version checks, the ApiVersions fallback, zero-copy
records, tagged fields, and the malformed inputs that must become InvalidRequest."""

from __future__ import annotations

import struct

import pytest

from rafka.errors import InvalidRequest, UnsupportedVersion
from rafka.wire.frames import (
    SUPPORTED,
    RequestHeader,
    api_versions_fallback,
    decode_response,
    encode_request,
    encode_response,
    read_request,
)

SERVED = {0: (0, 9), 1: (4, 11), 2: (1, 4), 3: (1, 8), 8: (2, 7), 9: (1, 7), 10: (0, 2),
          11: (0, 5), 12: (0, 3), 13: (0, 1), 14: (0, 3), 15: (0, 5), 16: (0, 4), 17: (0, 1),
          18: (0, 3), 19: (2, 4), 20: (1, 4), 22: (0, 4), 23: (2, 3), 24: (0, 3), 25: (0, 3),
          26: (0, 3), 28: (0, 3), 29: (1, 2), 30: (1, 2), 31: (1, 2), 32: (1, 2), 36: (0, 1),
          37: (0, 2), 42: (0, 1)}


def _produce(version: int = 9, records: bytes | None = b"batch-bytes") -> bytes:
    body = {"acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": records}]}]}
    return encode_request(RequestHeader(0, version, 42, "producer-1"), body)[4:]


def test_supported_table_is_the_advertised_ranges():
    """SUPPORTED advertises exactly the api keys and version ranges rafka serves."""
    assert SUPPORTED == SERVED


def test_api_versions_fallback_is_a_v0_body_with_error_35_and_every_range():
    """The fallback is header v0, error 35, then (key, min, max) for every served api."""
    frame = api_versions_fallback(RequestHeader(18, 7, 0x01020304, "new-client"))
    expected = struct.pack(">ihi", 0x01020304, 35, len(SERVED)) + b"".join(
        struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(SERVED.items()))
    assert frame == struct.pack(">i", len(expected)) + expected
    _, body = decode_response(18, 0, frame[4:])
    assert body["error_code"] == 35
    assert {a["api_key"]: (a["min_version"], a["max_version"]) for a in body["api_keys"]} == SERVED


def test_api_versions_v4_request_raises_unsupported_version_carrying_its_header():
    """An ApiVersions version above 3 raises UnsupportedVersion with the parsed header."""
    frame = struct.pack(">hhih", 18, 4, 99, 3) + b"cli" + b"\x00\x02x\x00\x00"
    with pytest.raises(UnsupportedVersion) as e:
        read_request(frame)
    assert e.value.header == RequestHeader(18, 4, 99, "cli")


@pytest.mark.parametrize(("api_key", "version"), [(1, 3), (1, 12), (3, 0), (3, 9), (99, 0),
                                                  (-1, 0), (21, 0)])
def test_unserved_keys_and_versions_raise_unsupported_version(api_key, version):
    """A key rafka does not serve, or a version outside its range, raises UnsupportedVersion."""
    frame = struct.pack(">hhih", api_key, version, 7, -1) + b"\x00" * 20
    with pytest.raises(UnsupportedVersion) as e:
        read_request(frame)
    assert e.value.header == RequestHeader(api_key, version, 7, None)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_versions_below_3_decode_for_the_handler_to_refuse(version):
    """Produce v0-2 decode (no transactional id) so the handler can answer them."""
    header, body = read_request(_produce(version))
    assert header.api_version == version
    assert "transactional_id" not in body
    assert body["topic_data"][0]["partition_data"][0]["index"] == 3


def test_records_decode_as_a_zero_copy_view_of_the_frame():
    """Records come back as a memoryview into the caller's buffer, not a copy."""
    frame = bytearray(_produce(records=b"R" * 1000))
    _, body = read_request(memoryview(frame))
    records = body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records.tobytes() == b"R" * 1000
    frame[frame.index(b"R")] = ord("Z")  # a write to the frame shows through the view
    assert records[0] == ord("Z")


def test_null_records_and_null_transactional_id_decode_to_none():
    """Nullable fields sent as null decode to None."""
    _, body = read_request(_produce(records=None))
    assert body["transactional_id"] is None
    assert body["topic_data"][0]["partition_data"][0]["records"] is None


def test_flexible_request_header_skips_tagged_fields_and_keeps_client_id_classic():
    """Header v2 keeps the int16-length client id, and header tagged fields are skipped."""
    frame = _produce(9)
    head = struct.pack(">hhih", 0, 9, 42, 10) + b"producer-1"
    assert frame.startswith(head + b"\x00")
    with_tag = head + b"\x01\x05\x02hi" + frame[len(head) + 1:]
    assert read_request(with_tag) == read_request(frame)


def test_unknown_tagged_fields_in_a_body_are_ignored():
    """A flexible body's unknown tags are skipped; known tags are decoded."""
    frame = encode_request(RequestHeader(18, 3, 1, "c"), {"client_software_name": "x",
                                                         "client_software_version": "1"})[4:]
    assert frame.endswith(b"\x00")
    tagged = frame[:-1] + b"\x02" + b"\x07\x03abc" + b"\x63\x00"
    _, body = read_request(tagged)
    assert body == {"client_software_name": "x", "client_software_version": "1"}


def test_tagged_response_fields_are_written_only_when_not_default():
    """ApiVersions v3 writes finalized_features_epoch as tag 1 only when it is not -1."""
    header = RequestHeader(18, 3, 5, None)
    plain = encode_response(header, {"api_keys": []})
    tagged = encode_response(header, {"api_keys": [], "finalized_features_epoch": 7})
    assert plain.endswith(b"\x00")
    assert tagged.endswith(b"\x01\x01\x08" + struct.pack(">q", 7))
    assert decode_response(18, 3, tagged[4:])[1]["finalized_features_epoch"] == 7
    assert decode_response(18, 3, plain[4:])[1]["finalized_features_epoch"] == -1


def test_api_versions_response_header_is_v0_even_when_flexible():
    """ApiVersions v3 responses have no header tagged-field byte; other flexible APIs do."""
    av = encode_response(RequestHeader(18, 3, 5, None), {})
    assert av[4:8] == struct.pack(">i", 5) and av[8:10] == b"\x00\x00"  # error_code follows
    hb = encode_response(RequestHeader(16, 3, 5, None), {})  # ListGroups v3 is flexible
    assert hb[4:9] == struct.pack(">i", 5) + b"\x00"


def test_trailing_bytes_after_the_body_are_ignored():
    """Bytes after a complete body do not change the decode."""
    frame = _produce()
    assert read_request(frame + b"garbage") == read_request(frame)


def test_omitted_fields_encode_schema_defaults():
    """Omitted response fields take the schema default (here -1 for log_append_time_ms)."""
    frame = encode_response(RequestHeader(0, 8, 1, None), {"responses": [
        {"name": "t", "partition_responses": [{"index": 0}]}]})
    _, body = decode_response(0, 8, frame[4:])
    part = body["responses"][0]["partition_responses"][0]
    assert part["log_append_time_ms"] == -1 and part["log_start_offset"] == -1
    assert part["error_message"] is None and part["record_errors"] == []


@pytest.mark.parametrize("cut", [1, 7, 9, 12, 20, 40])
def test_truncated_frames_raise_invalid_request(cut):
    """A frame cut anywhere raises InvalidRequest."""
    with pytest.raises(InvalidRequest):
        read_request(_produce()[:cut])


def test_negative_string_length_raises_invalid_request():
    """A string length below -1 (or -1 for a non-nullable string) is malformed."""
    head = struct.pack(">hhih", 12, 0, 1, -1)
    with pytest.raises(InvalidRequest) as e:
        read_request(head + struct.pack(">h", -1) + b"\x00" * 12)
    assert e.value.header == RequestHeader(12, 0, 1, None)
    with pytest.raises(InvalidRequest):
        read_request(head + struct.pack(">h", -5) + b"\x00" * 12)


def test_array_count_beyond_the_frame_raises_before_allocating():
    """An array count of 2**31-1 with a few bytes left is refused up front."""
    frame = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8
    with pytest.raises(InvalidRequest, match="array length"):
        read_request(frame)


def test_bad_utf8_raises_invalid_request():
    """A string that is not UTF-8 is malformed."""
    head = struct.pack(">hhih", 12, 0, 1, -1)
    with pytest.raises(InvalidRequest, match="UTF-8"):
        read_request(head + struct.pack(">h", 2) + b"\xff\xfe" + b"\x00" * 12)


def test_over_long_varint_raises_invalid_request():
    """A compact length of more than 5 varint bytes is malformed."""
    head = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00"
    with pytest.raises(InvalidRequest, match="varint"):
        read_request(head + b"\xff" * 6 + b"\x01")


def test_uuid_encodes_from_uuid_objects_and_decodes_to_bytes():
    """UUIDs (none in the served versions yet) encode from uuid.UUID or 16 bytes, decode to
    16 bytes."""
    import uuid

    from rafka.wire import primitives as p

    a, b = bytearray(), bytearray()
    p.write_uuid(a, uuid.UUID(int=5))
    p.write_uuid(b, uuid.UUID(int=5).bytes)
    assert a == b and p.read_uuid(memoryview(bytes(a)), 0) == (uuid.UUID(int=5).bytes, 16)
    with pytest.raises(InvalidRequest):
        p.read_uuid(memoryview(bytes(15)), 0)


def test_a_body_that_does_not_fit_the_schema_raises_value_error_naming_the_api():
    """None in a non-nullable field is a handler bug reported as ValueError with the API."""
    with pytest.raises(ValueError, match="Heartbeat v0 response"):
        encode_response(RequestHeader(12, 0, 1, None), {"error_code": None})
