"""The leader-epoch cache survives a lost or damaged checkpoint: it is rebuilt from the log."""

import os

import pytest

from rafka.storage.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache

from .support import batch

CONFIG = {"segment.bytes": 300}
# (leader epoch, records per batch): several epochs spread over several segments.
HISTORY = [(0, 2), (0, 1), (2, 3), (2, 1), (2, 2), (5, 1), (7, 2), (7, 1)]
EXPECTED_ENTRIES = [(0, 0), (2, 3), (5, 9), (7, 10)]

DAMAGES = {
    "missing": None,
    "empty": b"",
    "garbage": b"not a checkpoint\n\x00\xff",
    "truncated": b"0\n4\n0 0\n2 3\n",
    "unknown version": b"1\n1\n0 0\n",
    "epochs out of order": b"0\n2\n2 3\n0 0\n",
    "start offsets out of order": b"0\n2\n0 5\n2 3\n",
    "negative entry": b"0\n1\n-3 0\n",
}


def write_history(log) -> None:
    for epoch, count in HISTORY:
        log.append_as_leader(batch([b"v" * 40] * count), leader_epoch=epoch)


def damage(directory: str, how: str) -> None:
    path = os.path.join(directory, CHECKPOINT_FILE)
    os.unlink(path)
    if DAMAGES[how] is not None:
        with open(path, "wb") as f:
            f.write(DAMAGES[how])


@pytest.mark.parametrize("how", sorted(DAMAGES))
@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_lost_or_damaged_checkpoint_is_rebuilt_from_batch_headers(open_log, how, shutdown):
    """Whether the checkpoint is missing or malformed, after a clean or an unclean shutdown,
    the reopened log knows every epoch's start offset and answers followers as before."""
    log = open_log(CONFIG)
    write_history(log)
    assert len(log.segments) > 2
    answers = {epoch: log.end_offset_for_epoch(epoch) for epoch in range(9)}
    assert [tuple(e) for e in log.epoch_cache.entries] == EXPECTED_ENTRIES
    if shutdown == "clean":
        log.close()
    else:
        log.flush()
        log.abandon()
    damage(log.directory, how)
    again = open_log(CONFIG)
    assert [tuple(e) for e in again.epoch_cache.entries] == EXPECTED_ENTRIES
    assert {epoch: again.end_offset_for_epoch(epoch) for epoch in range(9)} == answers
    # The rebuilt cache was written back: a plain reload reads the same entries.
    reloaded = LeaderEpochCache(os.path.join(again.directory, CHECKPOINT_FILE))
    assert [tuple(e) for e in reloaded.entries] == EXPECTED_ENTRIES


def test_rebuilt_cache_starts_at_the_log_start_offset(open_log):
    """After delete_records moved the log start inside an epoch, the rebuilt first entry
    starts there, as the checkpointed cache did."""
    log = open_log(CONFIG)
    write_history(log)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(4)
    before = [tuple(e) for e in log.epoch_cache.entries]
    assert before == [(2, 4), (5, 9), (7, 10)]
    log.close()
    damage(log.directory, "missing")
    assert [tuple(e) for e in open_log(CONFIG).epoch_cache.entries] == before


def test_an_empty_log_without_a_checkpoint_has_no_epochs(open_log):
    """A new log has nothing to rebuild from: the cache stays empty and no checkpoint is
    written until the first epoch is recorded."""
    log = open_log(CONFIG)
    checkpoint = os.path.join(log.directory, CHECKPOINT_FILE)
    assert log.epoch_cache.entries == []
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert not os.path.exists(checkpoint)
    log.append_as_leader(batch([b"v"]), leader_epoch=3)
    assert [tuple(e) for e in LeaderEpochCache(checkpoint).entries] == [(3, 0)]
