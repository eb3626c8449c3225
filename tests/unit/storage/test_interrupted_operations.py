"""Operations cut short (by an error, a kill or a crash) leave a log that reopens right.

Each test stops one storage operation at a chosen step, the way a process kill or a full disk
would, then checks what the log serves afterwards: every offset once, the right timestamps,
producer state that belongs to the log it describes.
"""

from __future__ import annotations

import os

import pytest

from rafka.errors import KafkaStorageError
from rafka.storage import record_batch as rb
from rafka.storage.compaction import compact
from rafka.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, Segment

from .support import ABORT, batch, marker, read_all, txn_batch

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 50}


def _keyed_log(open_log, clock, config=COMPACT, count=40):
    """A compacted-topic log of ``count`` single-record batches over 4 keys, all committed and
    below a rolled active segment, with increasing timestamps."""
    log = open_log(config)
    for i in range(count):
        log.append_as_leader(
            batch([b"v%d" % i], [b"k%d" % (i % 4)], timestamp=clock.now + i), leader_epoch=0
        )
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def _names(log, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(log.directory) if n.endswith(suffix))


class Interrupted(Exception):
    """Stands for the process dying at this point."""


def test_a_failed_compaction_pass_leaves_no_output_and_the_retry_serves_each_offset_once(
    open_log, clock, monkeypatch
):
    """A full disk part way through writing the cleaned output: the output is removed, and the
    next pass starts from scratch instead of appending after the stale partial output."""
    log = _keyed_log(open_log, clock)
    real_append = Segment.append
    cleaned_appends = 0

    def append_until_the_disk_fills(self, parts, headers):
        nonlocal cleaned_appends
        if self.suffix == CLEANED_SUFFIX:
            cleaned_appends += 1
            if cleaned_appends == 3:
                raise KafkaStorageError("cannot append: No space left on device")
        return real_append(self, parts, headers)

    monkeypatch.setattr(Segment, "append", append_until_the_disk_fills)
    with pytest.raises(KafkaStorageError):
        compact(log, clock.now + 1000, force=True)
    assert _names(log, CLEANED_SUFFIX) == []
    monkeypatch.setattr(Segment, "append", real_append)

    compact(log, clock.now + 1000, force=True)
    assert [(o, k, v) for o, k, v, _ in read_all(log)] == [
        (36 + k, b"k%d" % k, b"v%d" % (36 + k)) for k in range(4)
    ]


def test_a_stale_cleaned_output_is_not_appended_to(open_log, clock):
    """A ``.cleaned`` file left by an earlier pass (killed mid-write) is started afresh."""
    log = _keyed_log(open_log, clock)
    stale = os.path.join(log.directory, f"{0:020d}.log{CLEANED_SUFFIX}")
    with open(stale, "wb") as f:
        f.write(log.segments[0].read_at(0, log.segments[0].size))
    compact(log, clock.now + 1000, force=True)
    assert [(o, k, v) for o, k, v, _ in read_all(log)] == [
        (36 + k, b"k%d" % k, b"v%d" % (36 + k)) for k in range(4)
    ]


def test_a_roll_at_the_base_of_a_half_deleted_segment_starts_with_empty_indexes(
    open_log, clock
):
    """Index files left by a deletion that a kill cut short (the ``.log`` gone, its indexes
    not) are not adopted by a new segment at the same base offset."""
    log = open_log({"segment.bytes": 400, "index.interval.bytes": 50})
    for i in range(12):
        log.append_as_leader(batch([b"x" * 40], timestamp=clock.now + i), leader_epoch=0)
    end = log.log_end_offset
    stem = os.path.join(log.directory, f"{end:020d}")
    # What the segment at `end` would have left: entries pointing far into a log it lost.
    with open(stem + ".index", "wb") as f:
        f.write(b"".join(rb_struct(">II", i, 100 * (i + 1)) for i in range(5)))
    with open(stem + ".timeindex", "wb") as f:
        f.write(b"".join(rb_struct(">qI", 10**13 + i, i) for i in range(5)))
    log.roll()
    for i in range(12):
        log.append_as_leader(batch([b"y" * 40], timestamp=clock.now + 100 + i), leader_epoch=0)
    assert [r[0] for r in read_all(log)] == list(range(24))
    log.close()
    again = open_log({"segment.bytes": 400, "index.interval.bytes": 50})
    assert [r[0] for r in read_all(again)] == list(range(24))
    assert again.offset_for_timestamp(clock.now + 105)[0] == 17


def rb_struct(fmt: str, *values) -> bytes:
    import struct

    return struct.pack(fmt, *values)


def test_index_files_without_a_log_are_deleted_on_open(open_log, clock):
    log = open_log({"segment.bytes": 400})
    log.append_as_leader(batch([b"a"], timestamp=clock.now), leader_epoch=0)
    log.close()
    orphan = os.path.join(log.directory, f"{77:020d}")
    for suffix in (".index", ".timeindex"):
        with open(orphan + suffix, "wb") as f:
            f.write(b"\0" * 24)
    open_log({"segment.bytes": 400})
    assert not os.path.exists(orphan + ".index")
    assert not os.path.exists(orphan + ".timeindex")


@pytest.mark.parametrize("renames_before_the_crash", [0, 1, 2])
def test_a_crash_between_the_renames_of_a_swap_is_redone_on_open(
    open_log, clock, monkeypatch, renames_before_the_crash
):
    """The cleaned segment's three files are renamed one by one from ``.swap`` into place; a
    crash after any of them reopens with every index in place: timestamp lookups work and the
    segment's largest timestamp is its own (retention goes by it)."""
    log = _keyed_log(open_log, clock)
    largest = max(r[3] for r in read_all(log))
    real_rename_suffix = Segment.rename_suffix

    def rename_then_crash(self, suffix):
        if suffix != "":
            return real_rename_suffix(self, suffix)
        real_rename = os.replace
        done = 0

        def counted(source, target):
            nonlocal done
            if done == renames_before_the_crash:
                raise Interrupted()
            done += 1
            real_rename(source, target)

        monkeypatch.setattr(os, "replace", counted)
        try:
            real_rename_suffix(self, suffix)
        finally:
            monkeypatch.setattr(os, "replace", real_rename)

    monkeypatch.setattr(Segment, "rename_suffix", rename_then_crash)
    with pytest.raises(Interrupted):
        compact(log, clock.now + 1000, force=True)
    monkeypatch.setattr(Segment, "rename_suffix", real_rename_suffix)
    log.abandon()

    again = open_log(COMPACT)
    assert _names(again, SWAP_SUFFIX) == []
    for segment in again.segments[:-1]:
        assert os.path.exists(segment.time_index.path)
    assert max(s.max_timestamp for s in again.segments) == largest
    assert again.offset_for_timestamp(largest) == (39, largest)
    offsets = [r[0] for r in read_all(again)]
    assert offsets == sorted(set(offsets))


def test_a_missing_time_index_is_rebuilt_on_a_clean_open(open_log, clock):
    """Without its time index a segment's largest timestamp would come from its tail alone,
    and retention could delete it early."""
    config = {"segment.bytes": 400, "index.interval.bytes": 50}
    log = open_log(config)
    for i in range(20):
        # The largest timestamp sits early in the first segment.
        ts = clock.now + (10_000 if i == 1 else i)
        log.append_as_leader(batch([b"x" * 30], timestamp=ts), leader_epoch=0)
    first = log.segments[0]
    log.close()
    os.unlink(first.time_index.path)
    again = open_log(config)
    assert again.segments[0].max_timestamp == clock.now + 10_000
    assert again.offset_for_timestamp(clock.now + 10_000)[0] == 1


def test_truncating_fully_forgets_the_producers_of_the_discarded_log(open_log, clock):
    """After the whole log is dropped (a follower far behind), a snapshot of the discarded log
    must not answer for the new one: the producer's sequence 0 is accepted, not refused as out
    of order or answered as a duplicate at an old offset."""
    log = open_log({"segment.bytes": 10_000})
    for seq in range(0, 10, 2):
        log.append_as_leader(
            batch([b"a", b"b"], timestamp=clock.now, producer_id=7, producer_epoch=0,
                  base_sequence=seq),
            leader_epoch=0,
        )  # fmt: skip
    log.roll()  # snapshot of producer 7 at offset 10
    log.truncate_fully_and_start_at(30)
    assert log.producer_state.snapshot_offsets() == []
    info = log.append_as_leader(
        batch([b"new"], timestamp=clock.now, producer_id=7, producer_epoch=0, base_sequence=0),
        leader_epoch=1,
    )
    assert (info.first_offset, info.duplicate) == (30, False)


def test_recovery_of_a_compacted_log_now_under_the_delete_policy_keeps_its_gaps(
    open_log, clock
):
    """Switching cleanup.policy from compact to delete: the gaps compaction left between
    batches are not damage, so an unclean reopen keeps every segment whole."""
    log = open_log(COMPACT)
    for i in range(40):
        key = b"u%d" % i if i % 2 == 0 else b"dup"  # every odd record but the last goes
        log.append_as_leader(batch([b"v%d" % i], [key], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now + 1000, force=True)
    kept = read_all(log)
    assert [o for o, *_ in kept] == list(range(0, 40, 2)) + [39]
    log.abandon()
    # Recovery re-reads every segment from the recovery point on.
    os.unlink(os.path.join(log.directory, "recovery-point"))
    again = open_log({**COMPACT, "cleanup.policy": "delete"})
    assert read_all(again) == kept
    assert not again.recovery_report.dropped_data, again.recovery_report.summary()


def test_recovery_still_cuts_a_batch_whose_base_offset_goes_backwards(open_log, clock):
    log = open_log({"segment.bytes": 10_000})
    for i in range(5):
        log.append_as_leader(batch([b"a", b"b"], timestamp=clock.now), leader_epoch=0)
    path = log.active_segment.log_path
    log.abandon()
    data = bytearray(open(path, "rb").read())
    header = rb.read_header(data, 0)
    rb.set_base_offset(data, 1, pos=3 * header.size)  # the fourth batch claims offset 1
    open(path, "wb").write(bytes(data))
    os.unlink(os.path.join(os.path.dirname(path), "recovery-point"))
    again = open_log({"segment.bytes": 10_000})
    assert again.log_end_offset == 6
    assert again.recovery_report.dropped_data



def test_an_index_rebuild_cut_short_leaves_the_old_index_not_a_half_built_one(
    open_log, clock, monkeypatch
):
    """Indexes are rebuilt under temporary names and renamed over the old ones, so a kill
    part way through leaves the files the next open checks again, never a half-built index
    that a later clean open would trust (with a wrong largest timestamp, say)."""
    from rafka.storage import files

    config = {"segment.bytes": 4000, "index.interval.bytes": 50}
    log = open_log(config)
    for i in range(30):
        log.append_as_leader(batch([b"x" * 30], timestamp=clock.now + (5000 if i == 3 else i)),
                             leader_epoch=0)  # fmt: skip
    segment = log.segments[0]
    index_path, time_index_path = segment.offset_index.path, segment.time_index.path
    log.close()
    damaged = b"\xff" * 16  # entries pointing past the log: the next open rebuilds them
    with open(index_path, "wb") as f:
        f.write(damaged)
    time_index_before = open(time_index_path, "rb").read()
    real_write, writes = files.write, 0

    def write_then_die(fd, data):
        nonlocal writes
        writes += 1
        if writes == 4:
            raise Interrupted()
        return real_write(fd, data)

    monkeypatch.setattr(files, "write", write_then_die)
    with pytest.raises(Interrupted):
        open_log(config)
    monkeypatch.setattr(files, "write", real_write)
    assert open(index_path, "rb").read() == damaged
    assert open(time_index_path, "rb").read() == time_index_before
    again = open_log(config)
    assert again.segments[0].max_timestamp == clock.now + 5000
    assert not [n for n in os.listdir(again.directory) if n.endswith(".tmp")]


def _log_with_an_abort(open_log, clock):
    """A compacted-topic log whose first segments hold an aborted transaction and its marker,
    all rolled and committed; compaction keeps the marker and the index entry."""
    log = open_log(COMPACT)
    log.append_as_leader(txn_batch([b"aborted"], pid=1, seq=0, keys=[b"k"],
                                   timestamp=clock.now), leader_epoch=0)  # fmt: skip
    for i in range(12):
        log.append_as_leader(batch([b"v%d" % i], [b"k%d" % (i % 3)], timestamp=clock.now + i),
                             leader_epoch=0)  # fmt: skip
    log.append_as_leader(marker(ABORT, pid=1, epoch=1, timestamp=clock.now), leader_epoch=0,
                         allow_control=True)  # fmt: skip
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


@pytest.mark.parametrize("renames_before_the_crash", [0, 1, 2, 3])
def test_a_crash_between_the_renames_of_a_swap_keeps_its_transaction_index(
    open_log, clock, monkeypatch, renames_before_the_crash
):
    """The cleaned segment's transaction index cannot be rebuilt from its batches (the
    aborted records are gone): a crash after any of the renames into place keeps it."""
    log = _log_with_an_abort(open_log, clock)
    real_rename_suffix = Segment.rename_suffix

    def rename_then_crash(self, suffix):
        if suffix != "":
            return real_rename_suffix(self, suffix)
        real_rename = os.replace
        done = 0

        def counted(source, target):
            nonlocal done
            if done == renames_before_the_crash:
                raise Interrupted()
            done += 1
            real_rename(source, target)

        monkeypatch.setattr(os, "replace", counted)
        try:
            real_rename_suffix(self, suffix)
        finally:
            monkeypatch.setattr(os, "replace", real_rename)

    monkeypatch.setattr(Segment, "rename_suffix", rename_then_crash)
    with pytest.raises(Interrupted):
        compact(log, clock.now + 1000, force=True)
    monkeypatch.setattr(Segment, "rename_suffix", real_rename_suffix)
    log.abandon()

    again = open_log(COMPACT)
    assert _names(again, SWAP_SUFFIX) == []
    assert again.aborted_transactions(0, again.log_end_offset) == [(1, 0)]
    assert b"aborted" not in [r[2] for r in read_all(again)]


@pytest.mark.parametrize("left_as", [CLEANED_SUFFIX, ""])
def test_a_swap_whose_transaction_index_rename_was_lost_takes_it_under_its_other_name(
    open_log, clock, left_as
):
    """A file system may persist the ``.log``'s rename and not the index's: the index is
    found under its earlier name (``.cleaned``), or under its final one when its rename into
    place persisted and the deletion of the input at the same base did not."""
    log = _log_with_an_abort(open_log, clock)
    real_replace = log.replace_segments
    log.replace_segments = lambda old, new: None
    compact(log, clock.now + 1000, force=True)
    log.replace_segments = real_replace
    log.abandon()
    [swap] = _names(log, ".txnindex" + SWAP_SUFFIX)
    stem = os.path.join(log.directory, swap[: -len(".txnindex" + SWAP_SUFFIX)])
    os.replace(stem + ".txnindex" + SWAP_SUFFIX, stem + ".txnindex" + left_as)

    again = open_log(COMPACT)
    assert again.aborted_transactions(0, again.log_end_offset) == [(1, 0)]
    assert _names(again, CLEANED_SUFFIX) == _names(again, SWAP_SUFFIX) == []
