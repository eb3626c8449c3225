"""Hostile bytes into read_request: only UnsupportedVersion or InvalidRequest may come out."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.errors import InvalidRequest, UnsupportedVersion
from rafka.wire.frames import RequestHeader, encode_request, read_request

from ._samples import every_api_version, sample_body

_SETTINGS = settings(max_examples=400, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])

# One valid request frame (no size prefix) per served api key and version.
VALID = [encode_request(RequestHeader(k, v, 1, "fuzz"), sample_body(k, v, request=True))[4:]
         for k, v in every_api_version()]


def _decode(frame: bytes) -> None:
    try:
        read_request(frame)
    except (UnsupportedVersion, InvalidRequest):
        pass


@_SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_typed_errors(data):
    """Random bytes decode or raise UnsupportedVersion/InvalidRequest, nothing else."""
    _decode(data)


@_SETTINGS
@given(st.sampled_from(list(range(len(VALID)))), st.binary(max_size=120))
def test_valid_header_with_random_body_raises_only_typed_errors(index, tail):
    """A served api key and version followed by random bytes never escapes the typed errors."""
    frame = VALID[index]
    key, version = struct.unpack_from(">hh", frame)
    _decode(struct.pack(">hhih", key, version, 1, -1) + tail)


@_SETTINGS
@given(st.data())
def test_mutated_valid_frames_raise_only_typed_errors(data):
    """Valid frames truncated, with bytes flipped, or with huge lengths spliced in."""
    frame = bytearray(data.draw(st.sampled_from(VALID)))
    mutation = data.draw(st.sampled_from(["truncate", "flip", "splice"]))
    if mutation == "truncate":
        del frame[data.draw(st.integers(0, len(frame))):]
    elif mutation == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(frame) - 1))
            frame[i] = data.draw(st.integers(0, 255))
    else:
        i = data.draw(st.integers(8, len(frame)))
        size = data.draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00",
                                          b"\xff\xff\xff\xff\x0f", b"\x7f\xff"]))
        frame[i:i + len(size)] = size
    _decode(bytes(frame))


@pytest.mark.parametrize("frame", VALID[::7])
def test_every_prefix_of_a_valid_frame_raises_only_typed_errors(frame):
    """Every truncation point of a sample of valid frames is handled."""
    for cut in range(len(frame)):
        _decode(frame[:cut])
