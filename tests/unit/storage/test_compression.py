"""Decompression of a batch's records section is bounded: a small compressed batch that
would expand past ``compression.MAX_DECOMPRESSED_BYTES`` is refused before it is expanded,
whatever its codec. The cap is lowered here so each case costs a few kilobytes."""

from __future__ import annotations

import zlib

import pytest
import zstandard

from rafka.errors import CorruptRecord
from rafka.storage import compression
from rafka.storage.batch_header import SNAPPY, Codec

from .test_snappy import literal_only, real_snappy, xerial

CAP = 4096


@pytest.fixture(autouse=True)
def small_cap(monkeypatch):
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", CAP)


def _zstd_streamed(data: bytes) -> bytes:
    """A zstd frame that does not state its content size (as Kafka's Java client writes)."""
    c = zstandard.ZstdCompressor().compressobj()
    return c.compress(data) + c.flush()


def _gzip_members(data: bytes) -> bytes:
    return compression.compress(Codec.GZIP, data)


ENCODERS = {
    "gzip": (Codec.GZIP, _gzip_members),
    "lz4": (Codec.LZ4, lambda d: compression.compress(Codec.LZ4, d)),
    "zstd": (Codec.ZSTD, lambda d: compression.compress(Codec.ZSTD, d)),
    "zstd-streamed": (Codec.ZSTD, _zstd_streamed),
    "snappy-raw": (SNAPPY, real_snappy),
    "snappy-xerial": (SNAPPY, lambda d: xerial([real_snappy(d[: len(d) // 2]),
                                                real_snappy(d[len(d) // 2 :])])),  # fmt: skip
}


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_section_up_to_the_cap_decompresses(name):
    """Exactly the cap is allowed, for every codec."""
    codec, encode = ENCODERS[name]
    data = bytes(i % 251 for i in range(CAP))
    assert compression.decompress(codec, memoryview(encode(data))) == data


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_section_past_the_cap_is_refused_naming_the_cap(name):
    """One byte more than the cap (a run: a few bytes compressed) is refused."""
    codec, encode = ENCODERS[name]
    data = b"\x00" * (CAP + 1)
    compressed = encode(data)
    assert len(compressed) < CAP // 4
    with pytest.raises(CorruptRecord, match=f"{CAP} bytes"):
        compression.decompress(codec, memoryview(compressed))


def test_a_zstd_frame_declaring_more_than_the_cap_is_refused_before_decompressing():
    """The content size in the frame header is checked first."""
    with pytest.raises(CorruptRecord, match=f"{CAP} bytes"):
        compression.decompress(Codec.ZSTD, compression.compress(Codec.ZSTD, b"x" * 100_000))


def test_a_snappy_stream_declaring_more_than_the_cap_is_refused_before_decompressing():
    """Raw snappy states its length up front: a huge declared length with little input is
    refused at once, and a stream whose elements run past what it declared is refused
    where they do."""
    declares_4gib = b"\xff\xff\xff\xff\x0f" + b"\x00a"
    with pytest.raises(CorruptRecord, match=f"{CAP} bytes"):
        compression.decompress(SNAPPY, declares_4gib)
    lying = bytearray(literal_only(b"ab"))
    lying[0] = 2  # declares 2 bytes ...
    lying += b"\xfe\x02\x00"  # ... then copies 64 more
    with pytest.raises(CorruptRecord, match="declares 2 bytes"):
        compression.decompress(SNAPPY, bytes(lying))


def test_truncated_sections_are_still_corrupt():
    """Bounding the codecs keeps a section cut short a CorruptRecord."""
    data = bytes(range(256)) * 8
    for codec in (Codec.GZIP, Codec.LZ4):
        with pytest.raises(CorruptRecord):
            compression.decompress(codec, compression.compress(codec, data)[:-8])


def test_gzip_output_is_the_first_member_as_before():
    """Trailing bytes after the gzip member are ignored, as zlib.decompress ignores them."""
    data = b"hello" * 10
    assert compression.decompress(Codec.GZIP, _gzip_members(data) + b"junk") == data
    assert zlib.decompress(_gzip_members(data) + b"junk", 31) == data
