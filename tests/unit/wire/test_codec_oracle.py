"""Every served api key and version against kafka-python's own message classes: kafka-python
encodes a request that rafka decodes, and rafka encodes a response that kafka-python decodes."""

from __future__ import annotations

import pytest

from rafka.wire.frames import (
    RequestHeader,
    decode_response,
    encode_request,
    encode_response,
    read_request,
)

from ._samples import every_api_version, kp_class, plain, sample_body, to_kp, undo_kp_quirks


# kafka-python loads its JSON schemas with a deprecated importlib.resources call.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = every_api_version()
IDS = [f"key{k}-v{v}" for k, v in CASES]


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_request_encoded_by_kafka_python_decodes_to_the_same_values(api_key, version):
    """A request kafka-python encodes decodes, header and body, to the values it was given."""
    body = sample_body(api_key, version, request=True)
    msg = to_kp(kp_class(api_key, request=True), body, version)
    msg.with_header(correlation_id=12345, client_id="oracle-client")
    frame = msg.encode(header=True)
    header, decoded = read_request(frame)
    assert header == RequestHeader(api_key, version, 12345, "oracle-client")
    assert plain(decoded) == body


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_response_encoded_by_rafka_decodes_in_kafka_python_to_the_same_values(api_key, version):
    """A response rafka encodes decodes in kafka-python (header included) to the same values."""
    body = sample_body(api_key, version, request=False)
    if api_key == 18:
        body["error_code"] = 0  # kafka-python reads an ApiVersions error body as v0
    frame = encode_response(RequestHeader(api_key, version, 777, "c"), body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded = kp_class(api_key, request=False).decode(frame[4:], version=version, header=True)
    assert decoded.header.correlation_id == 777
    assert undo_kp_quirks(api_key, plain(decoded.to_dict(json=False))) == body


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_request_encoded_by_rafka_equals_kafka_pythons_bytes(api_key, version):
    """rafka's request encoding is byte-for-byte kafka-python's for the same values."""
    body = sample_body(api_key, version, request=True)
    msg = to_kp(kp_class(api_key, request=True), body, version)
    msg.with_header(correlation_id=5, client_id=None)
    ours = encode_request(RequestHeader(api_key, version, 5, None), body)
    assert ours[4:] == msg.encode(header=True)


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_response_round_trips_through_rafka(api_key, version):
    """decode_response inverts encode_response for every served version."""
    body = sample_body(api_key, version, request=False)
    frame = encode_response(RequestHeader(api_key, version, 9, None), body)
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 9
    assert plain(decoded) == body


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
def test_empty_body_encodes_defaults_that_kafka_python_reads(api_key, version):
    """An empty dict encodes every field's default, readable by kafka-python and by rafka."""
    frame = encode_response(RequestHeader(api_key, version, 1, None), {})
    kp_class(api_key, request=False).decode(frame[4:], version=version, header=True)
    _, decoded = decode_response(api_key, version, frame[4:])
    again = encode_response(RequestHeader(api_key, version, 1, None), decoded)
    assert again == frame
    request = encode_request(RequestHeader(api_key, version, 1, "c"), {})
    _, body = read_request(request[4:])
    assert encode_request(RequestHeader(api_key, version, 1, "c"), body) == request
