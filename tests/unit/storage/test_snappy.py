"""The pure-Python snappy decompressor reads raw and xerial-framed snappy as Kafka clients write."""

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.errors import CorruptRecord
from rafka.storage import snappy


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def literal_only(data: bytes, chunk: int = 70_000) -> bytes:
    """A valid raw snappy stream of ``data`` made of literals only (every length form)."""
    out = [_uvarint(len(data))]
    for i in range(0, len(data), chunk):
        piece = data[i : i + chunk]
        n = len(piece) - 1
        if n < 60:
            out.append(bytes([n << 2]))
        else:
            extra = (n.bit_length() + 7) // 8
            out.append(bytes([(59 + extra) << 2]) + n.to_bytes(extra, "little"))
        out.append(piece)
    return b"".join(out)


def xerial(blocks: list[bytes]) -> bytes:
    """xerial framing around raw snappy blocks, as the Java client and kafka-python write it."""
    out = [snappy.XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for block in blocks:
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


def real_snappy(data: bytes) -> bytes:
    """Raw snappy from a real compressor (Arrow's bundled libsnappy)."""
    return pa.compress(data, codec="snappy", asbytes=True)


@pytest.mark.parametrize("size", [0, 1, 59, 60, 61, 255, 256, 257, 65_535, 65_536, 70_001])
def test_literal_streams_of_every_length_form_decompress(size):
    """Literals with their length in the tag and in 1, 2 and 3 extra bytes come back whole."""
    data = bytes(i * 7 % 251 for i in range(size))
    assert snappy.decompress(literal_only(data, chunk=max(size, 1))) == data
    assert snappy.decompress(literal_only(data, chunk=61)) == data


def test_a_hand_checked_stream_with_every_copy_form_decompresses():
    """A stream written by hand: a literal, then copies with 1-, 2- and 4-byte offsets, each
    overlapping what it writes (a run)."""
    stream = (
        b"\x1a"  # 26 bytes in all
        + b"\x08abc"  # literal of 3: tag (3 - 1) << 2
        + b"\x11\x03"  # 1-byte offset: tag 01, length 4 + 4, offset 3 -> "abcabcab"
        + b"\x16\x05\x00"  # 2-byte offset: tag 10, length 1 + 5, offset 5 -> "abcaba"
        + b"\x00z"  # literal "z"
        + b"\x1f\x01\x00\x00\x00"  # 4-byte offset: tag 11, length 1 + 7, offset 1 -> "z" * 8
    )
    assert snappy.decompress_raw(stream) == b"abc" + b"abcabcab" + b"abcaba" + b"z" + b"z" * 8


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"a",
        b"Wikipedia is a free, web-based, collaborative, multilingual encyclopedia project.",
        b"abcd" * 10_000,
        bytes(range(256)) * 600,
        b"".join(b"record-%06d:" % i + b"x" * (i % 40) for i in range(3000)),
    ],
)
def test_streams_of_a_real_compressor_decompress(data):
    """Raw snappy from libsnappy (copies of every offset size on the large inputs) round-trips,
    and so does the same data framed as xerial blocks of 32 KiB."""
    raw = real_snappy(data)
    assert snappy.decompress(raw) == data
    blocks = [real_snappy(data[i : i + 32768]) for i in range(0, len(data), 32768)]
    assert snappy.decompress(xerial(blocks)) == data


@given(st.binary(max_size=3000), st.integers(1, 200))
@settings(max_examples=60)
def test_any_bytes_round_trip_through_real_and_literal_streams(data, chunk):
    """Whatever the content, both stream kinds decompress to it."""
    assert snappy.decompress(real_snappy(data)) == data
    assert snappy.decompress(literal_only(data, chunk)) == data


@pytest.mark.parametrize(
    "stream, problem",
    [
        (b"\x05\x10abc", "runs past"),  # literal of 5 with 3 bytes
        (b"\x04\x00a\x05\x05", "reaches 5 bytes back"),  # copy before enough output
        (b"\x09\x00a\x01", "ends in the middle"),  # copy tag without its offset byte
        (b"\x03\x00a", "declares 3 bytes"),  # output shorter than declared
        (b"\x80\x80\x80\x80\x80\x80", "longer than 5 bytes"),
        (b"\x20\xf0", "ends in the middle"),  # literal length byte missing
    ],
)
def test_malformed_raw_streams_raise_corrupt_record(stream, problem):
    """Each kind of damage is a CorruptRecord saying what was wrong."""
    with pytest.raises(CorruptRecord, match=problem):
        snappy.decompress_raw(stream)


def test_a_xerial_block_longer_than_its_frame_is_corrupt():
    """A block length past the end of the framed data is a CorruptRecord."""
    framed = xerial([real_snappy(b"hello")])[:-1]
    with pytest.raises(CorruptRecord, match="declares"):
        snappy.decompress(framed)
