"""Recovery on open: torn or corrupt tails are cut to the last valid batch, nothing flushed is
lost, indexes that disagree with the log are rebuilt, and the log reports what it dropped."""

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.errors import CorruptRecord
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

from .support import FakeClock, batch, read_all

CONFIG = {"segment.bytes": 3000, "index.interval.bytes": 200}


def write_then_crash(directory, sizes, flushed_batches, seed):
    """Append one batch per entry of ``sizes``, flush after ``flushed_batches`` of them, then
    stop without closing (a crash). Returns (records of every batch, flushed record count)."""
    log = Log(directory, LogConfig.from_dict(CONFIG), FakeClock())
    rng = random.Random(seed)
    flushed_records = 0
    for i, n in enumerate(sizes):
        values = [rng.randbytes(rng.randint(0, 60)) for _ in range(n)]
        log.append_as_leader(batch(values, [b"k%d" % i] * n), leader_epoch=i // 4)
        if i + 1 == flushed_batches:
            log.flush()
            flushed_records = log.log_end_offset
    expected = read_all(log)
    log.abandon()
    return expected, flushed_records


def active_log_file(directory):
    logs = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return os.path.join(directory, logs[-1])


def batch_ends(path):
    """Byte position where each batch of a segment file ends, with its next offset."""
    data = open(path, "rb").read()
    return [(pos + h.size, h.next_offset) for pos, h in rb.iter_batches(data)]


damage_st = st.sampled_from(["truncate", "flip", "garbage", "zeros"])


@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=40),
    flushed_fraction=st.floats(0, 1),
    damage=damage_st,
    where=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=80)
def test_crash_damage_is_cut_to_a_valid_prefix_keeping_every_flushed_batch(
        tmp_path_factory, sizes, flushed_fraction, damage, where, seed):
    """Whatever a crash does to the unflushed tail (cut it, flip a bit, append garbage or zeros),
    reopening yields exactly the batches wholly before the damage, including all flushed ones."""
    directory = str(tmp_path_factory.mktemp("rec") / "t-0")
    flushed_batches = int(len(sizes) * flushed_fraction)
    expected, flushed_records = write_then_crash(directory, sizes, flushed_batches, seed)
    path = active_log_file(directory)
    # Everything up to the last flush was fsynced; a crash only damages what follows it.
    ends = batch_ends(path)
    flushed_end = max([e for e, nxt in ends if nxt <= flushed_records] or [0])
    size = os.path.getsize(path)
    rng = random.Random(seed)
    if damage == "truncate":
        cut = flushed_end + int((size - flushed_end) * where)
        os.truncate(path, cut)
        damaged_at = cut
    elif damage in ("garbage", "zeros"):
        length = rng.randint(1, 100)
        extra = rng.randbytes(length) if damage == "garbage" else bytes(length)
        with open(path, "ab") as f:
            f.write(extra)
        damaged_at = size
    else:
        if size == flushed_end:
            return
        pos = flushed_end + int((size - flushed_end - 1) * where)
        start_of_batch = max([e for e, _ in ends if e <= pos] or [0])
        if 12 <= pos - start_of_batch < 16:
            pos = start_of_batch + 16  # the leader epoch is outside the CRC, as in Kafka
            if pos >= size:
                return
        data = bytearray(open(path, "rb").read())
        data[pos] ^= 1 << rng.randint(0, 7)
        open(path, "wb").write(bytes(data))
        damaged_at = pos  # first damaged byte: batches ending at or before it survive
    damaged_size = os.path.getsize(path)

    log = Log(directory, LogConfig.from_dict(CONFIG), FakeClock())
    survivors = [nxt for e, nxt in ends if e <= damaged_at]
    survived_end = max(survivors) if survivors else log.active_segment.base_offset
    recovered = read_all(log)
    assert recovered == expected[: len(recovered)], "recovery left something that is not a prefix"
    assert log.log_end_offset == max(survived_end, log.active_segment.base_offset)
    assert log.log_end_offset >= flushed_records
    assert len(recovered) == log.log_end_offset
    valid_bytes = max([e for e, _ in ends if e <= damaged_at] or [0])
    # Detected: any byte left after the last whole valid batch is reported as dropped.
    assert log.recovery_report.dropped_data == (damaged_size > valid_bytes)
    # The recovered log takes appends and reopens cleanly.
    log.append_as_leader(batch([b"after"]), leader_epoch=99)
    log.close()
    again = Log(directory, LogConfig.from_dict(CONFIG), FakeClock())
    assert read_all(again)[-1][2] == b"after"
    again.close()


def test_report_names_the_file_and_the_reason(tmp_path):
    """A torn tail is reported with the segment file and what was wrong with it."""
    directory = str(tmp_path / "t-0")
    write_then_crash(directory, [5, 5, 5], flushed_batches=1, seed=1)
    path = active_log_file(directory)
    os.truncate(path, os.path.getsize(path) - 3)
    log = Log(directory, LogConfig.from_dict(CONFIG))
    report = log.recovery_report
    assert not report.clean_shutdown and report.bytes_truncated > 0
    assert "truncated batch" in report.summary() and path in report.summary()
    assert log.log_end_offset == 10


def test_corruption_in_an_earlier_unflushed_segment_drops_the_segments_after_it(tmp_path):
    """A corrupt batch cuts its segment there and deletes every later segment: a log has no
    holes."""
    directory = str(tmp_path / "t-0")
    log = Log(directory, LogConfig.from_dict({"segment.bytes": 400}))
    for i in range(20):
        log.append_as_leader(batch([b"x" * 50]), leader_epoch=0)
    log.abandon()
    os.unlink(os.path.join(directory, "recovery-point"))  # as if no roll was ever recorded
    first = os.path.join(directory, f"{0:020d}.log")
    data = bytearray(open(first, "rb").read())
    data[-5] ^= 0xFF
    open(first, "wb").write(bytes(data))
    again = Log(directory, LogConfig.from_dict({"segment.bytes": 400}))
    assert len(again.segments) == 1
    assert again.recovery_report.segments_deleted
    assert [r[0] for r in read_all(again)] == list(range(again.log_end_offset))


@pytest.mark.parametrize("damage", ["garbage", "missing", "behind"])
def test_indexes_that_do_not_match_the_log_are_rebuilt(tmp_path, damage):
    """Garbled, missing or stale index files are rebuilt on a clean open; reads stay right."""
    directory = str(tmp_path / "t-0")
    config = LogConfig.from_dict({"index.interval.bytes": 50, "segment.bytes": 2000})
    log = Log(directory, config)
    for i in range(30):
        log.append_as_leader(batch([b"v%d" % i]), leader_epoch=0)
    expected = read_all(log)
    log.close()
    index = os.path.join(directory, f"{log.segments[-1].base_offset:020d}.index")
    if damage == "garbage":
        open(index, "wb").write(os.urandom(64))
    elif damage == "missing":
        os.unlink(index)
    else:
        open(index, "ab").write((10**6).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    again = Log(directory, config)
    if damage != "missing":
        assert again.recovery_report.indexes_rebuilt
    assert read_all(again) == expected
    for offset in range(30):
        assert rb.decode_records(again.read(offset, 1).records).offsets[-1] >= offset


def test_bit_rot_below_the_recovery_point_is_caught_by_the_reader(tmp_path):
    """Flushed data is trusted on open (as in Kafka); a flipped bit there fails the CRC on read."""
    directory = str(tmp_path / "t-0")
    log = Log(directory)
    log.append_as_leader(batch([b"precious"]), leader_epoch=0)
    log.close()
    path = os.path.join(directory, f"{0:020d}.log")
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x10
    open(path, "wb").write(bytes(data))
    again = Log(directory)
    with pytest.raises(CorruptRecord, match="CRC mismatch"):
        rb.decode_records(again.read(0, 1000).records)


def test_torn_tail_after_a_clean_shutdown_is_cut_and_reported(tmp_path):
    """A segment damaged after a clean close is cut to its last whole batch, and the report
    says how many bytes went."""
    directory = str(tmp_path / "t-0")
    config = LogConfig.from_dict({"index.interval.bytes": 50})
    log = Log(directory, config)
    for i in range(10):
        log.append_as_leader(batch([b"v%d" % i]), leader_epoch=0)
    log.close()
    path = active_log_file(directory)
    os.truncate(path, os.path.getsize(path) - 7)
    open(os.path.join(directory, f"{0:020d}.index"), "wb").write(os.urandom(16))
    again = Log(directory, config)
    assert again.recovery_report.clean_shutdown
    assert again.recovery_report.bytes_truncated > 0 and again.recovery_report.problems
    assert [r[0] for r in read_all(again)] == list(range(9))


def test_index_entry_pointing_at_another_batch_is_rebuilt(tmp_path):
    """An offset-index entry that names a different batch than the one at its position is
    detected on a clean open and the index rebuilt."""
    directory = str(tmp_path / "t-0")
    config = LogConfig.from_dict({"index.interval.bytes": 50})
    log = Log(directory, config)
    for i in range(10):
        log.append_as_leader(batch([b"v%d" % i]), leader_epoch=0)
    expected = read_all(log)
    log.close()
    index = os.path.join(directory, f"{0:020d}.index")
    data = bytearray(open(index, "rb").read())
    data[-8:-4] = (int.from_bytes(data[-8:-4], "big") + 1).to_bytes(4, "big")
    open(index, "wb").write(bytes(data))
    again = Log(directory, config)
    assert again.recovery_report.indexes_rebuilt
    assert read_all(again) == expected


def test_a_tail_batch_whose_codec_bits_were_damaged_is_cut_as_corrupt(tmp_path):
    """Damage that turns a batch's codec into one rafka does not know fails the batch's CRC:
    recovery cuts it like any corrupt tail instead of refusing to load the log."""
    directory = str(tmp_path / "t-0")
    write_then_crash(directory, [3, 4], 0, seed=1)
    path = active_log_file(directory)
    (first_end, first_next), _ = batch_ends(path)
    with open(path, "r+b") as f:
        f.seek(first_end + rb.ATTRIBUTES_POS + 1)  # low byte of the attributes: the codec
        f.write(bytes([2]))  # snappy, which rafka does not support
    log = Log(directory, LogConfig.from_dict(CONFIG), FakeClock())
    assert log.log_end_offset == first_next
    log.close()
