"""Producer partitioners: which partition a record goes to.

Keyed records use Kafka's murmur2 hash exactly as the Java client does, so a key lands on
the same partition it would under a Kafka producer. ``murmur2_many`` hashes a whole column
of keys with numpy. Null-key records are spread by a sticky (KIP-480) or round-robin policy.
"""

from __future__ import annotations

import random
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from numbers import Integral

import numpy as np

__all__ = [
    "CallablePartitioner",
    "DefaultPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "default_partition",
    "make_partitioner",
    "murmur2",
    "murmur2_many",
    "partitions_for_keys",
    "to_positive",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF

# One compiled Struct per block count: building the format string per call costs as much
# as hashing a short key.
_block_structs: dict[int, struct.Struct] = {}


def _blocks(nblocks: int) -> struct.Struct:
    s = _block_structs.get(nblocks)
    if s is None:
        s = _block_structs[nblocks] = struct.Struct(f"<{nblocks}I")
    return s


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the signed 32-bit int Java returns."""
    length = len(data)
    h = _SEED ^ length
    nblocks = length >> 2
    m = _M
    mask = _MASK
    if nblocks:
        for k in _blocks(nblocks).unpack_from(data):
            k = (k * m) & mask
            k = ((k ^ (k >> _R)) * m) & mask
            # k < 2**32, so masking after the xor equals masking h * m first.
            h = ((h * m) ^ k) & mask
    if length & 3:
        # Java's switch falls through case 3 -> 2 -> 1: the tail bytes read little-endian.
        h = ((h ^ int.from_bytes(data[nblocks << 2:], "little")) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails on MIN_VALUE)."""
    return n & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def _as_index_array(name: str, values: object) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def murmur2_many(
    lengths: np.ndarray,
    data: bytes | bytearray | memoryview | np.ndarray,
    offsets: np.ndarray | None = None,
) -> np.ndarray:
    """murmur2 of many keys at once, elementwise equal to :func:`murmur2`.

    Key ``i`` is ``data[offsets[i] : offsets[i] + lengths[i]]``; ``offsets`` defaults to the
    keys laid end to end from 0. Returns an int32 array with one hash per key.
    """
    lens = _as_index_array("lengths", lengths)
    n = lens.size
    buf = np.frombuffer(data, dtype=np.uint8)
    if offsets is None:
        offs = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(lens[:-1], out=offs[1:])
    else:
        offs = _as_index_array("offsets", offsets)
        if offs.size != n:
            raise ValueError(f"offsets has {offs.size} entries but lengths has {n}")
    out = np.empty(n, dtype=np.int32)
    if n == 0:
        return out
    if lens.min() < 0 or offs.min() < 0:
        raise ValueError("lengths and offsets must be non-negative")
    if int((offs + lens).max()) > buf.size:
        raise ValueError(f"a key runs past the end of data ({buf.size} bytes)")

    # Every byte position viewed as the start of a little-endian uint32, so a key's blocks
    # are gathered as whole words instead of four bytes each.
    words = None
    if buf.size >= 4:
        words = np.ndarray((buf.size - 3,), dtype="<u4", buffer=buf, strides=(1,))

    lo, hi = int(lens.min()), int(lens.max())
    if lo == hi:
        out[:] = _murmur2_same_length(lo, offs, buf, words).view(np.int32)
        return out
    # Group keys by length; a uint16 sort key lets numpy use its O(n) radix sort.
    sort_key = lens.astype(np.uint16) if hi < 1 << 16 else lens
    order = np.argsort(sort_key, kind="stable")
    sorted_lens = lens[order]
    starts = np.flatnonzero(np.diff(sorted_lens)) + 1
    bounds = np.concatenate(([0], starts, [n]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        length = int(sorted_lens[a])
        out[idx] = _murmur2_same_length(length, offs[idx], buf, words).view(np.int32)
    return out


def _murmur2_same_length(
    length: int, starts: np.ndarray, buf: np.ndarray, words: np.ndarray | None
) -> np.ndarray:
    """murmur2 (as uint32) of the keys of one ``length`` beginning at ``starts``."""
    m = np.uint32(_M)
    h = np.full(starts.size, _SEED ^ length, dtype=np.uint32)
    tmp = np.empty_like(h)
    nblocks = length >> 2
    for j in range(nblocks):
        # Fancy indexing, not np.take: take copies unaligned words several times slower.
        k = words[starts + 4 * j]
        # uint32 array arithmetic wraps silently, which is Java int arithmetic.
        k *= m
        np.right_shift(k, _R, out=tmp)
        k ^= tmp
        k *= m
        h *= m
        h ^= k
    rem = length & 3
    if rem:
        base = starts + (nblocks << 2)
        for t in range(rem):
            tmp[:] = buf[base + t]
            if t:
                tmp <<= 8 * t
            h ^= tmp
        h *= m
    np.right_shift(h, 13, out=tmp)
    h ^= tmp
    h *= m
    np.right_shift(h, 15, out=tmp)
    h ^= tmp
    return h


def partitions_for_keys(
    lengths: np.ndarray,
    data: bytes | bytearray | memoryview | np.ndarray,
    num_partitions: int,
    offsets: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`default_partition` of many keys at once (see :func:`murmur2_many`); int32.

    A null key (length -1, as ``BinaryColumn.lengths`` marks it) has no hash partition: its
    entry is -1, and the caller places it (the default partitioner puts it on the sticky
    partition)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    lens = _as_index_array("lengths", lengths)
    keyed = lens >= 0
    if keyed.all():
        hashes = murmur2_many(lens, data, offsets)
        return (hashes & 0x7FFFFFFF) % num_partitions
    if offsets is None:
        offsets = np.zeros(lens.size, dtype=np.int64)
        if lens.size > 1:
            np.cumsum(np.maximum(lens[:-1], 0), out=offsets[1:])
    offs = _as_index_array("offsets", offsets)
    if offs.size != lens.size:
        raise ValueError(f"offsets has {offs.size} entries but lengths has {lens.size}")
    out = np.full(lens.size, -1, dtype=np.int32)
    hashes = murmur2_many(lens[keyed], data, offs[keyed])
    out[keyed] = (hashes & 0x7FFFFFFF) % num_partitions
    return out


class Partitioner(ABC):
    """Chooses a partition for each record the producer sends.

    Not thread-safe: the producer calls ``partition`` and ``on_new_batch`` from many
    threads but always under its own lock, so implementations need no locking of their own.
    """

    @abstractmethod
    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        """The partition in ``[0, num_partitions)`` for a record with ``key`` on ``topic``."""

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """Called when the producer seals the batch it was filling on ``previous``.

        Only sticky policies care; the default does nothing.
        """
        return None


class DefaultPartitioner(Partitioner):
    """Kafka's default: murmur2 for keyed records, a sticky partition for null keys.

    Null-key records stay on one partition per topic until ``on_new_batch`` reports that
    partition's batch sealed, then move to a different random partition (KIP-480), so
    batches fill up instead of every partition getting a tiny one.
    Not thread-safe; the producer serialises calls under its own lock.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        _check_num_partitions(num_partitions)
        if key is not None:
            return default_partition(key, num_partitions)
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            current = self._sticky[topic] = self._rng.randrange(num_partitions)
        return current

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        _check_num_partitions(num_partitions)
        current = self._sticky.get(topic)
        # As in Kafka's StickyPartitionCache: if the sticky partition already moved on from
        # `previous`, a second seal report for the old batch must not move it again.
        if current is not None and current != previous and current < num_partitions:
            return
        if num_partitions == 1:
            self._sticky[topic] = 0
        elif 0 <= previous < num_partitions:
            choice = self._rng.randrange(num_partitions - 1)
            self._sticky[topic] = choice + 1 if choice >= previous else choice
        else:
            self._sticky[topic] = self._rng.randrange(num_partitions)


class RoundRobinPartitioner(Partitioner):
    """Kafka's ``RoundRobinPartitioner``: each topic cycles 0, 1, 2, ... ignoring keys.

    Not thread-safe; the producer serialises calls under its own lock.
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        _check_num_partitions(num_partitions)
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        return n % num_partitions


class CallablePartitioner(Partitioner):
    """Wraps ``fn(topic, key, num_partitions) -> int`` and checks what it returns.

    Not thread-safe beyond what ``fn`` is; the producer serialises calls under its own lock.
    """

    def __init__(self, fn: Callable[[str, bytes | None, int], int]) -> None:
        if not callable(fn):
            raise TypeError(f"partitioner function must be callable, got {fn!r}")
        self.fn = fn

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        result = self.fn(topic, key, num_partitions)
        # bool is an int subclass, but True/False as a partition is surely a bug.
        if (
            not isinstance(result, Integral)
            or isinstance(result, bool)
            or not 0 <= result < num_partitions
        ):
            name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
            raise ValueError(
                f"partitioner {name} returned {result!r} for topic {topic!r}; "
                f"expected an int in [0, {num_partitions})"
            )
        return int(result)


def _check_num_partitions(num_partitions: int) -> None:
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")


_ACCEPTED = (
    'None, "default", "murmur2", "round_robin", a Partitioner instance, '
    "or a callable fn(topic, key, num_partitions) -> int"
)
_BY_NAME: dict[str, type[Partitioner]] = {
    "default": DefaultPartitioner,
    "murmur2": DefaultPartitioner,
    "round_robin": RoundRobinPartitioner,
}


def make_partitioner(
    spec: str | Partitioner | Callable[[str, bytes | None, int], int] | None,
) -> Partitioner:
    """The partitioner a producer setting names.

    Accepts None, "default" or "murmur2" (:class:`DefaultPartitioner`), "round_robin"
    (:class:`RoundRobinPartitioner`), a :class:`Partitioner` instance (used as is) or a
    callable ``fn(topic, key, num_partitions) -> int`` (wrapped in
    :class:`CallablePartitioner`); anything else raises ``ValueError``.
    """
    if spec is None:
        return DefaultPartitioner()
    if isinstance(spec, str):
        cls = _BY_NAME.get(spec)
        if cls is None:
            raise ValueError(f"unknown partitioner {spec!r}; expected {_ACCEPTED}")
        return cls()
    if isinstance(spec, Partitioner):
        return spec
    if isinstance(spec, type) and issubclass(spec, Partitioner):
        # A Partitioner class is callable too, but wrapping it would call the constructor
        # with (topic, key, n) on the first send; instantiate it instead.
        return spec()
    if callable(spec):
        return CallablePartitioner(spec)
    raise ValueError(f"unknown partitioner {spec!r}; expected {_ACCEPTED}")
