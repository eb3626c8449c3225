"""Compaction keeps the latest record per key, keeps offsets and drops old tombstones."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb
from rafka.storage.compaction import compact, dirty_ratio
from rafka.storage.segment import SWAP_SUFFIX

from .support import ABORT, COMMIT, FakeClock, batch, marker, read_all, txn_batch

DAY = 86_400_000
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 600}


@given(st.lists(st.tuples(st.integers(0, 8), st.one_of(st.none(), st.binary(max_size=30))),
                min_size=1, max_size=80),
       st.sampled_from(list(rb.Codec)))
@settings(max_examples=40)
def test_compaction_keeps_exactly_the_latest_value_per_key_in_offset_order(
        tmp_path_factory, writes, codec):
    """After a pass, the cleaned range holds one record per key, its latest, at its offset."""
    clock = FakeClock()
    log = Log(str(tmp_path_factory.mktemp("c") / "t-0"), LogConfig.from_dict(
        {**COMPACT, "delete.retention.ms": DAY}), clock)
    for i in range(0, len(writes), 3):
        chunk = writes[i:i + 3]
        log.append_as_leader(batch([v for _, v in chunk], [k for k, _ in chunk],
                                   timestamp=clock.now, codec=codec), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    before = read_all(log)
    compact(log, clock.now, force=True)
    after = read_all(log)
    latest = {}
    for offset, key, value, _ in before:
        latest[key] = (offset, key, value)
    assert [(o, k, v) for o, k, v, _ in after] == sorted(latest.values())
    assert log.log_end_offset == len(writes)
    log.close()


def test_tombstones_stay_for_delete_retention_ms_then_go(open_log, clock):
    """A tombstone hides its key's older values and is itself removed after delete.retention.ms."""
    log = open_log({**COMPACT, "delete.retention.ms": DAY})
    log.append_as_leader(batch([b"v1", b"w1"], [b"k", b"j"], timestamp=clock.now), leader_epoch=0)
    log.append_as_leader(batch([None], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now, force=True)
    assert [(k, v) for _, k, v, _ in read_all(log)] == [(b"j", b"w1"), (b"k", None)]
    clock.advance(DAY + 1)
    result = compact(log, clock.now, force=True)
    assert result.tombstones_dropped == 1
    assert [(k, v) for _, k, v, _ in read_all(log)] == [(b"j", b"w1")]


def test_active_segment_and_recent_records_are_not_compacted(open_log, clock):
    """Records in the active segment and younger than min.compaction.lag.ms stay."""
    log = open_log({**COMPACT, "min.compaction.lag.ms": 1000})
    log.append_as_leader(batch([b"a", b"b"], [b"k", b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.append_as_leader(batch([b"c", b"d"], [b"k", b"k"], timestamp=clock.now), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now, force=True)
    assert len(read_all(log)) == 4
    clock.advance(1000)
    compact(log, clock.now, force=True)
    assert [v for _, _, v, _ in read_all(log)] == [b"b", b"c", b"d"]


def test_compacted_log_reopens_and_appends_after_its_end(open_log, clock):
    """A compacted log keeps its end offset through a restart and appends continue from it."""
    log = open_log(COMPACT)
    for i in range(20):
        log.append_as_leader(batch([str(i)], [str(i % 3)], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now, force=True)
    log.close()
    again = open_log(COMPACT)
    assert [k for _, k, _, _ in read_all(again)] == [b"2", b"0", b"1"]
    assert again.append_as_leader(batch([b"x"], [b"0"]), leader_epoch=0).first_offset == 20


def test_dirty_ratio_gates_compaction(open_log, clock):
    """Without force, a pass runs only when the uncleaned share reaches the configured ratio."""
    log = open_log({**COMPACT, "min.cleanable.dirty.ratio": 0.9})
    for i in range(20):
        log.append_as_leader(batch([str(i)], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    assert dirty_ratio(log) == 0.0  # nothing committed yet: nothing cleanable
    log.update_high_watermark(log.log_end_offset)
    assert dirty_ratio(log) == 1.0
    assert compact(log, clock.now).segments_in > 0
    assert dirty_ratio(log) == 0.0
    assert compact(log, clock.now).segments_in == 0


def test_crash_after_swap_is_finished_on_open(open_log, clock):
    """A finished .swap segment left by a crash replaces its inputs when the log reopens."""
    log = open_log(COMPACT)
    for i in range(12):
        log.append_as_leader(batch([str(i)], [str(i % 2)], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    expected = None
    # Build the compacted output by hand and stop before the inputs are replaced.
    from rafka.storage import compaction
    real_replace = log.replace_segments
    log.replace_segments = lambda old, new: None
    compaction.compact(log, clock.now, force=True)
    log.replace_segments = real_replace
    assert any(n.endswith(".log" + SWAP_SUFFIX) for n in os.listdir(log.directory))
    log.abandon()
    again = open_log(COMPACT)
    expected = [(b"0", b"10"), (b"1", b"11")]
    assert [(k, v) for _, k, v, _ in read_all(again)] == expected
    assert not any(n.endswith(SWAP_SUFFIX) for n in os.listdir(again.directory))


def test_compaction_keeps_a_committed_value_whose_newer_value_is_not_committed(open_log, clock):
    """A newer value above the high watermark does not supersede the committed one: after a
    follower truncates the uncommitted tail, the committed value is still there."""
    log = open_log(COMPACT)
    log.append_as_leader(batch([b"committed"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.update_high_watermark(1)
    log.roll()
    log.append_as_leader(batch([b"uncommitted"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()  # the uncommitted value now sits in a rolled, non-active segment
    compact(log, clock.now, force=True)
    assert log.truncate_to(1) == 1
    assert [(o, k, v) for o, k, v, _ in read_all(log)] == [(0, b"k", b"committed")]


def test_cleanable_end_offset_is_the_high_watermark_or_the_active_segment_base(open_log, clock):
    """The cleaner stops at the lower of the high watermark and the active segment's base."""
    log = open_log(COMPACT)
    for i in range(3):
        log.append_as_leader(batch([str(i)], [b"k"], timestamp=clock.now), leader_epoch=0)
        log.roll()
    assert log.cleanable_end_offset == 0
    log.update_high_watermark(2)
    assert log.cleanable_end_offset == 2
    log.append_as_leader(batch([b"3"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.update_high_watermark(4)
    assert log.cleanable_end_offset == log.active_segment.base_offset == 3


def test_truncating_to_a_segment_base_after_compaction_keeps_the_log_end_there(open_log, clock):
    """When compaction emptied the tail of a segment (an expired tombstone), truncating to the
    next segment's base leaves the log end at that base: no offset is handed out twice."""
    log = open_log({**COMPACT, "delete.retention.ms": DAY})
    log.append_as_leader(batch([b"a"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.append_as_leader(batch([None], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(2)
    log.append_as_leader(batch([b"uncommitted"], [b"j"], timestamp=clock.now), leader_epoch=0)
    clock.advance(DAY + 1)
    assert compact(log, clock.now, force=True).tombstones_dropped == 1
    assert log.truncate_to(2) == 2
    assert (log.high_watermark, log.log_end_offset) == (2, 2)
    assert log.append_as_leader(batch([b"next"], [b"j"]), leader_epoch=0).first_offset == 2


def log_with_a_deleted_key(open_log, clock):
    """Offsets 0 (key j), 1 and 2 (key k, then its tombstone) in a rolled segment, and 3
    (key m) in the active one: compaction past the tombstone horizon leaves a gap at 1-2."""
    log = open_log({**COMPACT, "delete.retention.ms": DAY})
    log.append_as_leader(batch([b"x"], [b"j"], timestamp=clock.now), leader_epoch=0)
    log.append_as_leader(batch([b"a"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.append_as_leader(batch([None], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.append_as_leader(batch([b"y"], [b"m"], timestamp=clock.now), leader_epoch=0)
    return log


def test_truncating_into_a_compacted_gap_keeps_the_log_end_across_a_reopen(open_log, clock):
    """A truncation to an offset whose records compaction removed (below the high watermark,
    as after an unclean election) ends the log at that offset, and a reopen agrees."""
    log = log_with_a_deleted_key(open_log, clock)
    log.update_high_watermark(4)
    clock.advance(DAY + 1)
    compact(log, clock.now, force=True)  # offsets 1 and 2 are gone
    assert log.truncate_to(2) == 2
    log.close()
    again = open_log({**COMPACT, "delete.retention.ms": DAY})
    assert again.log_end_offset == 2
    assert again.append_as_leader(batch([b"z"], [b"m"]), leader_epoch=0).first_offset == 2
    assert [(o, v) for o, _, v, _ in read_all(again)] == [(0, b"x"), (2, b"z")]


def test_delete_records_into_a_compacted_gap_keeps_the_segment_that_holds_the_gap(
        open_log, clock):
    """Deleting records up to an offset that compaction already removed keeps the segment
    whose range holds it, so the log start stays where asked, at or below the high watermark."""
    log = log_with_a_deleted_key(open_log, clock)
    log.update_high_watermark(2)
    log.checkpoint_high_watermark()  # the checkpoint lags the high watermark used below
    log.update_high_watermark(4)
    clock.advance(DAY + 1)
    compact(log, clock.now, force=True)  # offsets 1 and 2 are gone
    log.flush()
    log.abandon()  # a crash: the reopened log starts from the lagging checkpoint
    again = open_log({**COMPACT, "delete.retention.ms": DAY})
    assert again.high_watermark == 2
    assert again.delete_records(2) == 2
    assert (again.log_start_offset, again.high_watermark) == (2, 2)
    assert [(o, v) for o, _, v, _ in read_all(again)] == [(3, b"y")]


def test_truncating_inside_a_compacted_batch_ends_at_its_base_and_fetches_it_again(
    open_log, clock
):
    """A batch that lost its last records to compaction still spans them; truncating to an
    offset inside it removes it whole, so the log ends at its base (not at the target, which
    would leave a hole of records this replica never gets back), and the same batch from the
    leader is taken again, across a reopen too."""
    leader = open_log({**COMPACT, "segment.bytes": 10_000})
    keys = [b"k%d" % i for i in range(10)]
    leader.append_as_leader(batch([b"old"] * 10, keys, timestamp=clock.now), leader_epoch=0)
    leader.append_as_leader(batch([b"new"] * 5, keys[5:], timestamp=clock.now), leader_epoch=0)
    leader.roll()
    leader.update_high_watermark(leader.log_end_offset)
    compact(leader, clock.now, force=True)
    assert [o for o, *_ in read_all(leader)] == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    follower = open_log({**COMPACT, "segment.bytes": 10_000}, leader.directory + "-follower")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    follower.update_high_watermark(7)
    assert follower.truncate_to(7) == 0
    assert (follower.log_end_offset, follower.high_watermark) == (0, 0)
    follower.close()
    again = open_log({**COMPACT, "segment.bytes": 10_000}, leader.directory + "-follower")
    assert again.log_end_offset == 0
    again.append_as_follower(leader.read(0, 1 << 20).records)
    assert read_all(again) == read_all(leader)


# -- transactions ------------------------------------------------------------------------------


def txn_log(open_log, clock):
    """Key k: committed "v1", then an aborted transaction's "v2" (an idempotent plain batch
    between), then a committed transaction's j="w"; all in rolled segments, committed."""
    log = open_log({**COMPACT, "segment.bytes": 400})
    log.append_as_leader(batch([b"v1"], [b"k"], timestamp=clock.now), leader_epoch=0)  # 0
    log.append_as_leader(txn_batch([b"v2", b"x2"], pid=1, seq=0, keys=[b"k", b"x"],
                                   timestamp=clock.now), leader_epoch=0)  # 1-2  # fmt: skip
    log.roll()
    log.append_as_leader(txn_batch([b"w"], pid=2, seq=0, keys=[b"j"], timestamp=clock.now),
                         leader_epoch=0)  # 3  # fmt: skip
    log.append_as_leader(marker(ABORT, pid=1, epoch=1, timestamp=clock.now), leader_epoch=0,
                         allow_control=True)  # 4  # fmt: skip
    log.append_as_leader(marker(COMMIT, pid=2, epoch=1, timestamp=clock.now), leader_epoch=0,
                         allow_control=True)  # 5  # fmt: skip
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_an_aborted_value_never_makes_compaction_drop_a_committed_one(open_log, clock):
    """The offset map ignores aborted records: k keeps its committed value; the aborted
    batch goes whole and both markers stay."""
    log = txn_log(open_log, clock)
    result = compact(log, clock.now, force=True)
    assert result.aborted_records_dropped == 2
    held = [(o, k, v) for o, k, v, _ in read_all(log)]
    assert [(o, k, v) for o, k, v in held if o not in (4, 5)] == [(0, b"k", b"v1"), (3, b"j", b"w")]
    markers = [h for s in log.segments for _, h in s.iter_headers(0) if h.is_control]
    assert [h.base_offset for h in markers] == [4, 5]


def test_a_cleaned_segment_keeps_the_transaction_index_of_the_segments_it_replaces(
    open_log, clock
):
    """The abort stays listed for consumers, across a reopen, and a second pass over the
    cleaned segment still knows it."""
    log = txn_log(open_log, clock)
    compact(log, clock.now, force=True)
    assert len(log.segments) == 2
    assert log.aborted_transactions(0, 6) == [(1, 1)]
    assert os.path.exists(log.segments[0].txn_index.path)
    log.close()
    again = open_log({**COMPACT, "segment.bytes": 400})
    assert again.aborted_transactions(0, 6) == [(1, 1)]
    compact(again, clock.now, force=True)
    assert again.aborted_transactions(0, 6) == [(1, 1)]
    assert [v for _, _, v, _ in read_all(again) if v in (b"v1", b"w")] == [b"v1", b"w"]


def test_compaction_never_passes_the_last_stable_offset(open_log, clock):
    """Segments holding records of a transaction still open are not cleaned, though they lie
    below the high watermark: its records may yet abort."""
    log = open_log(COMPACT)
    log.append_as_leader(batch([b"old"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.append_as_leader(txn_batch([b"new"], pid=1, seq=0, keys=[b"k"], timestamp=clock.now),
                         leader_epoch=0)  # fmt: skip
    log.roll()
    log.append_as_leader(batch([b"newer"], [b"k"], timestamp=clock.now), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.cleanable_end_offset == 1
    compact(log, clock.now, force=True)
    assert [v for _, _, v, _ in read_all(log)] == [b"old", b"new", b"newer"]
    abort_at = log.append_as_leader(marker(ABORT, pid=1, epoch=1, timestamp=clock.now),
                                    leader_epoch=0, allow_control=True).first_offset  # fmt: skip
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now, force=True)
    assert [v for o, _, v, _ in read_all(log) if o != abort_at] == [b"newer"]
