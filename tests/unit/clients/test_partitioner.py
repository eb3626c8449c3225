"""Producer partitioners: Kafka-exact murmur2, its vectorized form, and the partition policies."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.clients.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    default_partition,
    make_partitioner,
    murmur2,
    murmur2_many,
    partitions_for_keys,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2: input -> the signed int Java returns.
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def java_murmur2(data: bytes) -> int:
    """A line-by-line transliteration of Kafka's Utils.murmur2, signed ints and all."""
    length = len(data)
    seed, m, r = _int32(0x9747B28C), 0x5BD1E995, 24
    h = _int32(seed ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = (data[i4] & 0xFF) + ((data[i4 + 1] & 0xFF) << 8) \
            + ((data[i4 + 2] & 0xFF) << 16) + ((data[i4 + 3] & 0xFF) << 24)
        k = _int32(k * m)
        k = _int32(k ^ ((k & 0xFFFFFFFF) >> r))  # >>> is Java's unsigned shift
        k = _int32(k * m)
        h = _int32(h * m)
        h = _int32(h ^ k)
    rem = length % 4
    base = length & ~3
    if rem == 3:
        h = _int32(h ^ ((data[base + 2] & 0xFF) << 16))
    if rem >= 2:  # the switch falls through
        h = _int32(h ^ ((data[base + 1] & 0xFF) << 8))
    if rem >= 1:
        h = _int32(h ^ (data[base] & 0xFF))
        h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = _int32(h * m)
    h = _int32(h ^ ((h & 0xFFFFFFFF) >> 15))
    return h


# --- murmur2 -----------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_utils_test_vectors(data, expected):
    assert murmur2(data) == expected


def test_murmur2_of_the_byte_array_abc_matches_kafka():
    assert murmur2(bytes([ord("a"), ord("b"), ord("c")])) == 479470107


def test_murmur2_accepts_any_bytes_like():
    assert murmur2(bytearray(b"foobar")) == -790332482
    assert murmur2(memoryview(b"xxfoobar")[2:]) == -790332482


@pytest.mark.parametrize("length", range(0, 13))
def test_murmur2_every_tail_length_matches_the_java_transliteration(length):
    rng = random.Random(length)
    for _ in range(50):
        data = bytes(rng.randrange(256) for _ in range(length))
        assert murmur2(data) == java_murmur2(data)


@given(st.binary(max_size=64))
def test_murmur2_matches_the_java_transliteration_on_any_bytes(data):
    assert murmur2(data) == java_murmur2(data)


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_the_java_transliteration_itself_matches_kafka(data, expected):
    assert java_murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_rather_than_negating():
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 7, 12, 100, 2**31 - 1])
def test_default_partition_is_positive_murmur2_modulo_partition_count(num_partitions):
    for key, _ in KAFKA_VECTORS:
        expected = (murmur2(key) & 0x7FFFFFFF) % num_partitions
        assert default_partition(key, num_partitions) == expected


def test_default_partition_of_known_keys():
    # (-973932308 & 0x7fffffff) == 1173551340, (-790332482 & 0x7fffffff) == 1357151166
    assert default_partition(b"21", 10) == 0
    assert default_partition(b"foobar", 10) == 6
    assert default_partition(b"abc", 7) == 479470107 % 7


# --- murmur2_many ------------------------------------------------------------------------

keys_st = st.lists(st.binary(max_size=40), max_size=60)


@given(keys_st)
def test_murmur2_many_equals_murmur2_for_keys_laid_end_to_end(keys):
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    hashes = murmur2_many(lengths, b"".join(keys))
    assert hashes.dtype == np.int32
    assert hashes.tolist() == [murmur2(k) for k in keys]


@given(st.lists(st.tuples(st.binary(max_size=7), st.binary(max_size=40)), max_size=60),
       st.randoms(use_true_random=False))
def test_murmur2_many_equals_murmur2_at_arbitrary_offsets(gaps_and_keys, rnd):
    data = bytearray()
    offsets, lengths, keys = [], [], []
    for gap, key in gaps_and_keys:
        data += gap
        offsets.append(len(data))
        lengths.append(len(key))
        keys.append(key)
        data += key
    # Keys need not appear in the buffer in order.
    order = list(range(len(keys)))
    rnd.shuffle(order)
    hashes = murmur2_many(np.array([lengths[i] for i in order], dtype=np.int64), bytes(data),
                          np.array([offsets[i] for i in order], dtype=np.int64))
    assert hashes.tolist() == [murmur2(keys[i]) for i in order]


def test_murmur2_many_of_kafka_vectors():
    keys = [k for k, _ in KAFKA_VECTORS]
    hashes = murmur2_many(np.array([len(k) for k in keys]), b"".join(keys))
    assert hashes.tolist() == [expected for _, expected in KAFKA_VECTORS]


def test_murmur2_many_on_equal_length_keys_and_empty_keys():
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 16 * 1000, dtype=np.uint8).tobytes()
    hashes = murmur2_many(np.full(1000, 16), data)
    assert hashes.tolist() == [murmur2(data[i * 16:(i + 1) * 16]) for i in range(1000)]
    assert murmur2_many(np.zeros(3, dtype=np.int64), b"").tolist() == [murmur2(b"")] * 3


def test_murmur2_many_reads_a_numpy_byte_buffer():
    buf = np.frombuffer(b"21foobar", dtype=np.uint8)
    assert murmur2_many(np.array([2, 6]), buf).tolist() == [-973932308, -790332482]


def test_murmur2_many_of_no_keys_is_empty():
    hashes = murmur2_many(np.array([], dtype=np.int64), b"")
    assert hashes.dtype == np.int32 and hashes.size == 0


@pytest.mark.parametrize(
    ("lengths", "data", "offsets", "message"),
    [
        ([3, 4], b"abcdef", None, "past the end"),
        ([2], b"abcdef", [5], "past the end"),
        ([-1], b"abc", None, "non-negative"),
        ([1], b"abc", [-1], "non-negative"),
        ([1, 1], b"abc", [0], "offsets has 1 entries"),
        ([[1]], b"abc", None, "one-dimensional"),
        ([1.5], b"abc", None, "integers"),
    ],
)
def test_murmur2_many_rejects_keys_outside_the_buffer_and_bad_arrays(
    lengths, data, offsets, message
):
    with pytest.raises(ValueError, match=message):
        murmur2_many(np.array(lengths), data, None if offsets is None else np.array(offsets))


@given(keys_st, st.integers(1, 1000))
def test_partitions_for_keys_equals_default_partition(keys, num_partitions):
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    parts = partitions_for_keys(lengths, b"".join(keys), num_partitions)
    assert parts.tolist() == [default_partition(k, num_partitions) for k in keys]


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60),
       st.integers(1, 1000))  # fmt: skip
def test_partitions_for_keys_hashes_the_non_null_keys_and_marks_null_keys_minus_one(
    keys, num_partitions
):
    """Null keys (length -1, zero bytes in the data) leave the other keys' partitions as
    murmur2 gives them, laid end to end or at given offsets."""
    lengths = np.array([-1 if k is None else len(k) for k in keys], dtype=np.int64)
    data = b"".join(k for k in keys if k is not None)
    expected = [-1 if k is None else default_partition(k, num_partitions) for k in keys]
    assert partitions_for_keys(lengths, data, num_partitions).tolist() == expected
    sizes = np.maximum(lengths, 0)
    offsets = np.cumsum(sizes) - sizes
    assert partitions_for_keys(lengths, data, num_partitions, offsets).tolist() == expected


def test_partitions_for_keys_rejects_zero_partitions():
    with pytest.raises(ValueError, match="at least 1"):
        partitions_for_keys(np.array([1]), b"a", 0)


# --- DefaultPartitioner ------------------------------------------------------------------


def test_default_partitioner_hashes_keyed_records():
    p = DefaultPartitioner()
    for key, _ in KAFKA_VECTORS:
        assert p.partition("t", key, 12) == default_partition(key, 12)


def test_null_keys_stick_to_one_partition_until_its_batch_is_sealed():
    p = DefaultPartitioner(random.Random(7))
    first = p.partition("t", None, 10)
    assert all(p.partition("t", None, 10) == first for _ in range(100))
    p.on_new_batch("t", 10, first)
    second = p.partition("t", None, 10)
    assert second != first
    assert all(p.partition("t", None, 10) == second for _ in range(100))


def test_sealing_always_moves_to_a_different_partition_and_reaches_them_all():
    p = DefaultPartitioner(random.Random(3))
    seen = set()
    current = p.partition("t", None, 5)
    for _ in range(200):
        seen.add(current)
        p.on_new_batch("t", 5, current)
        nxt = p.partition("t", None, 5)
        assert nxt != current and 0 <= nxt < 5
        current = nxt
    assert seen == set(range(5))


def test_a_stale_seal_report_does_not_move_the_sticky_partition():
    p = DefaultPartitioner(random.Random(11))
    first = p.partition("t", None, 8)
    p.on_new_batch("t", 8, first)
    second = p.partition("t", None, 8)
    p.on_new_batch("t", 8, first)  # the old batch reported again
    assert p.partition("t", None, 8) == second


def test_sticky_partition_of_a_single_partition_topic_is_zero():
    p = DefaultPartitioner()
    assert p.partition("t", None, 1) == 0
    p.on_new_batch("t", 1, 0)
    assert p.partition("t", None, 1) == 0


def test_sticky_partitions_are_per_topic():
    p = DefaultPartitioner(random.Random(5))
    a, b = p.partition("a", None, 1000), p.partition("b", None, 1000)
    p.on_new_batch("a", 1000, a)
    assert p.partition("b", None, 1000) == b
    assert p.partition("a", None, 1000) != a


def test_sticky_partition_is_rechosen_when_the_topic_shrinks():
    p = DefaultPartitioner(random.Random(2))
    while p.partition("t", None, 100) < 10:
        p.on_new_batch("t", 100, p.partition("t", None, 100))
    assert 0 <= p.partition("t", None, 10) < 10


def test_partitioners_reject_a_topic_without_partitions():
    with pytest.raises(ValueError, match="at least 1"):
        DefaultPartitioner().partition("t", None, 0)
    with pytest.raises(ValueError, match="at least 1"):
        RoundRobinPartitioner().partition("t", b"k", 0)


# --- RoundRobinPartitioner ---------------------------------------------------------------


def test_round_robin_cycles_through_partitions_ignoring_keys():
    p = RoundRobinPartitioner()
    keys = [None, b"a", b"a", b"b", None, b"a", b"c"]
    assert [p.partition("t", k, 3) for k in keys] == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_counts_each_topic_separately():
    p = RoundRobinPartitioner()
    assert [p.partition("a", None, 4) for _ in range(3)] == [0, 1, 2]
    assert [p.partition("b", None, 4) for _ in range(2)] == [0, 1]
    assert p.partition("a", None, 4) == 3
    p.on_new_batch("a", 4, 3)
    assert p.partition("a", None, 4) == 0


# --- CallablePartitioner -----------------------------------------------------------------


def test_callable_partitioner_returns_what_the_function_chooses():
    p = CallablePartitioner(lambda topic, key, n: len(key or b"") % n)
    assert p.partition("t", b"abcd", 3) == 1
    assert p.partition("t", None, 3) == 0
    assert type(CallablePartitioner(lambda t, k, n: np.int64(2)).partition("t", None, 3)) is int


@pytest.mark.parametrize("bad", [3, -1, 1.0, "1", None, True])
def test_callable_partitioner_names_the_function_the_value_and_the_range(bad):
    def pick_partition(topic, key, n):
        return bad

    p = CallablePartitioner(pick_partition)
    with pytest.raises(ValueError) as excinfo:
        p.partition("orders", b"k", 3)
    message = str(excinfo.value)
    assert "pick_partition" in message
    assert repr(bad) in message
    assert "[0, 3)" in message


def test_callable_partitioner_requires_a_callable():
    with pytest.raises(TypeError, match="callable"):
        CallablePartitioner(42)


# --- make_partitioner --------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "default", "murmur2"])
def test_make_partitioner_default_names(spec):
    assert type(make_partitioner(spec)) is DefaultPartitioner


def test_make_partitioner_round_robin():
    assert type(make_partitioner("round_robin")) is RoundRobinPartitioner


def test_make_partitioner_passes_an_instance_through_and_wraps_a_callable():
    instance = RoundRobinPartitioner()
    assert make_partitioner(instance) is instance

    def fn(topic, key, n):
        return n - 1

    wrapped = make_partitioner(fn)
    assert isinstance(wrapped, CallablePartitioner)
    assert wrapped.partition("t", b"k", 5) == 4


def test_make_partitioner_instantiates_a_partitioner_class():
    assert type(make_partitioner(RoundRobinPartitioner)) is RoundRobinPartitioner


@pytest.mark.parametrize("spec", ["roundrobin", "", 3, b"default", object()])
def test_make_partitioner_rejects_anything_else_listing_accepted_values(spec):
    with pytest.raises(ValueError) as excinfo:
        make_partitioner(spec)
    message = str(excinfo.value)
    for accepted in ('"default"', '"murmur2"', '"round_robin"', "Partitioner", "callable"):
        assert accepted in message


def test_every_partitioner_shares_one_interface():
    for p in (DefaultPartitioner(), RoundRobinPartitioner(),
              CallablePartitioner(lambda t, k, n: 0)):
        assert isinstance(p, Partitioner)
        assert 0 <= p.partition("t", b"key", 4) < 4
        p.on_new_batch("t", 4, 0)
