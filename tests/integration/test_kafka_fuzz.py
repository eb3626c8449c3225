"""Arbitrary bytes at a live Kafka listener: it answers or closes that connection, never
crashes, and keeps serving everyone else (the decoder alone is fuzzed in
tests/unit/wire/test_fuzz.py; this drives the whole listener actor)."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.wire import frames

API_VERSIONS = 18
#: API keys and versions the listener serves, to aim the fuzz past the header check.
SERVED = sorted(frames.SUPPORTED.items())


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _exchange(address: tuple[str, int], data: bytes, timeout_s: float = 3.0) -> bytes:
    """Send ``data``; return what came back before the listener closed or went quiet."""
    with socket.create_connection(address, timeout=timeout_s) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except socket.timeout:
            pass
        return received


def _api_versions_answers(address: tuple[str, int]) -> bool:
    request = frames.encode_request(frames.RequestHeader(API_VERSIONS, 1, 42, "probe"), {})
    answer = _exchange(address, request)
    if len(answer) < 8:
        return False
    (size,) = struct.unpack(">i", answer[:4])
    return frames.decode_response(API_VERSIONS, 1, answer[4:4 + size])[0] == 42


@st.composite
def _frames(draw) -> bytes:
    """A size-prefixed frame: a served api key and version (or anything), a correlation id,
    a client id, then random body bytes; sometimes a lying size prefix."""
    if draw(st.booleans()):
        api_key, (low, high) = draw(st.sampled_from(SERVED))
        version = draw(st.integers(low - 1, high + 1))
    else:
        api_key, version = draw(st.integers(-5, 100)), draw(st.integers(-2, 20))
    client_id = draw(st.binary(max_size=8))
    body = draw(st.binary(max_size=300))
    payload = struct.pack(">hhih", api_key, version, draw(st.integers(0, 2**31 - 1)),
                          len(client_id)) + client_id + body  # fmt: skip
    size = len(payload) if draw(st.booleans()) else draw(st.integers(-(2**31), 2**31 - 1))
    return struct.pack(">i", size) + payload


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(_frames(), st.binary(max_size=200)))
def test_the_listener_survives_arbitrary_bytes(kafka_bootstrap, data):
    address = _address(kafka_bootstrap["PLAINTEXT"])
    _exchange(address, data, timeout_s=1.0)
    assert _api_versions_answers(address)
