"""Compression codecs of a batch's records section (Kafka's numbering). No I/O.

Decompression is bounded by ``MAX_DECOMPRESSED_BYTES`` for every codec: a batch of a few
hundred kilobytes can otherwise expand to gigabytes (a decompression bomb) in the memory
of the replica that validates it. Past the cap the section is a CorruptRecord, which the
append path answers as InvalidRecord (not retriable: the same bytes fail the same way).
"""

from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from rafka.errors import CorruptRecord, UnsupportedCompressionType
from rafka.storage import snappy
from rafka.storage.batch_header import SNAPPY, Codec

#: The most bytes one records section may decompress to. A batch is at most
#: max.message.bytes compressed (1 MiB by default, a topic may raise it); real records
#: compress 2-20x, so 256 MiB leaves room for large, very compressible batches while one
#: request cannot make a replica allocate more than this per batch. A topic whose batches
#: legitimately expand past it would need it raised.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
#: Output asked of a streaming decompressor at a time: asking for the whole cap at once
#: would allocate it whole (lz4, zstd); 1 MiB steps cost about what one-shot calls did
#: for sections of a few MiB.
_STEP = 1024 * 1024


def compress(codec: Codec, data: bytes) -> bytes:
    if codec is Codec.NONE:
        return data
    if codec is Codec.LZ4:
        return lz4.frame.compress(data)
    if codec is Codec.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    if codec is Codec.GZIP:
        # wbits=31: the gzip container, as Kafka writes it.
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    raise UnsupportedCompressionType(
        f"rafka does not write codec {codec.name.lower()}; use none, gzip, lz4 or zstd"
    )


def decompress(codec: Codec, data) -> bytes:
    """The records section ``data`` compressed with ``codec``, expanded; CorruptRecord when
    it does not decompress or would exceed ``MAX_DECOMPRESSED_BYTES``."""
    cap = MAX_DECOMPRESSED_BYTES
    try:
        if codec is Codec.NONE:
            return data
        if codec is Codec.LZ4:
            return _lz4_decompress(data, cap)
        if codec is Codec.ZSTD:
            return _zstd_decompress(data, cap)
        if codec is Codec.GZIP:
            return _gzip_decompress(data, cap)
        if codec is SNAPPY:
            return snappy.decompress(data, max_bytes=cap)
    except (RuntimeError, zlib.error, zstandard.ZstdError) as e:
        raise CorruptRecord(f"records section does not decompress with {codec.name}: {e}") from e
    raise UnsupportedCompressionType(f"codec {codec!r} is not supported")


def _too_large(codec: str, cap: int) -> CorruptRecord:
    return CorruptRecord(
        f"records section compressed with {codec} decompresses to more than {cap} bytes, "
        "the most one batch may hold uncompressed (MAX_DECOMPRESSED_BYTES); send smaller "
        "batches (the producer's batch.size or linger)"
    )


def _gzip_decompress(data, cap: int) -> bytes:
    # wbits=31: the gzip container. As zlib.decompress, one member; bytes after it ignored.
    d = zlib.decompressobj(31)
    out = d.decompress(data, cap + 1)
    if len(out) > cap:
        raise _too_large("gzip", cap)
    if not d.eof:
        raise CorruptRecord("records section does not decompress with GZIP: the stream is "
                            "truncated")  # fmt: skip
    return out


def _lz4_decompress(data, cap: int) -> bytes:
    # As lz4.frame.decompress: one frame, bytes after it ignored.
    d = lz4.frame.LZ4FrameDecompressor()
    chunks = [d.decompress(data, max_length=min(_STEP, cap + 1))]
    size = len(chunks[0])
    while not d.eof and size <= cap:
        chunk = d.decompress(b"", max_length=min(_STEP, cap + 1 - size))
        if not chunk:
            break  # it needs input there is no more of
        chunks.append(chunk)
        size += len(chunk)
    if size > cap:
        raise _too_large("lz4", cap)
    if not d.eof:
        raise CorruptRecord("records section does not decompress with LZ4: the frame is "
                            "incomplete")  # fmt: skip
    return b"".join(chunks)


def _zstd_decompress(data, cap: int) -> bytes:
    # A frame from a streaming compressor (Kafka's Java client) may not state its content
    # size, which one-shot decompression needs; the streaming reader does not, and stops
    # at the cap.
    frame = zstandard.get_frame_parameters(data)
    if frame.content_size != zstandard.CONTENTSIZE_UNKNOWN:
        if frame.content_size > cap:
            raise _too_large("zstd", cap)
        return zstandard.ZstdDecompressor().decompress(data)
    chunks = []
    size = 0
    with zstandard.ZstdDecompressor().stream_reader(data) as reader:
        while size <= cap:
            chunk = reader.read(min(_STEP, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size > cap:
        raise _too_large("zstd", cap)
    return b"".join(chunks)
