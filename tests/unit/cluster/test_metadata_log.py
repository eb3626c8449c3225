"""The controller's durable metadata: records survive a restart, snapshots bound the replay,
and a damaged snapshot is reported, not silently loaded."""

from __future__ import annotations

import copy
import os

import msgpack
import pytest

from rafka.cluster import controller
from rafka.cluster.metadata_log import LOG_DIR, SNAPSHOT_FILE, MetadataLog
from rafka.errors import CorruptRecord, InvalidRecord, KafkaStorageError

BROKERS = [0, 1, 2]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture
def open_mlog(tmp_path):
    """Open (or reopen) the test's metadata directory; closes whatever is left open."""
    opened: list[MetadataLog] = []

    def _open(snapshot_every: int = 10_000) -> MetadataLog:
        mlog = MetadataLog(str(tmp_path), snapshot_every=snapshot_every, clock=Clock())
        opened.append(mlog)
        return mlog

    yield _open
    for mlog in opened:
        try:
            mlog.close()
        except Exception:  # already closed
            pass


def content(mlog: MetadataLog):
    image = mlog.image
    return copy.deepcopy(
        (image.topics, image.topic_ids, image.brokers, image.next_producer_id, image.offset)
    )


def build_cluster(mlog: MetadataLog, topics: int = 3) -> None:
    """A few brokers, topics, a config change, a deletion and producer ids, one append each
    (as the Controller actor appends them)."""
    for disk in ("/a", "/b", "/c"):
        mlog.append(controller.register_broker(mlog.image, disk, None)[1])
    for i in range(topics):
        mlog.append(controller.create_topic(mlog.image, f"t{i}", 2, 2, None, BROKERS)[1])
    mlog.append(controller.alter_config(mlog.image, "t0", {"retention.ms": 60_000}))
    mlog.append(controller.create_partitions(mlog.image, "t1", 4, BROKERS))
    mlog.append(controller.delete_topic(mlog.image, f"t{topics - 1}")[1])
    mlog.append(controller.allocate_producer_ids(mlog.image)[1])


def test_a_new_metadata_log_is_empty(open_mlog):
    """Opening an empty directory gives an empty image at offset -1."""
    mlog = open_mlog()
    assert mlog.image.offset == -1
    assert mlog.image.topics == {} and mlog.image.brokers == {}


def test_append_applies_records_at_consecutive_log_offsets(open_mlog):
    """Each record gets the next log offset; the image's offset is the last one."""
    mlog = open_mlog()
    mlog.append([{"type": "broker", "broker_id": 0, "disk": "/a"},
                 {"type": "broker", "broker_id": 1, "disk": "/b"}])  # fmt: skip
    assert mlog.image.offset == 1 and mlog.log.log_end_offset == 2
    mlog.append([{"type": "producer_ids", "next": 1000}])
    assert mlog.image.offset == 2 and mlog.log.log_end_offset == 3


def test_appending_no_records_writes_nothing(open_mlog):
    """An empty append leaves the log and the image alone."""
    mlog = open_mlog()
    mlog.append([])
    assert mlog.log.log_end_offset == 0 and mlog.image.offset == -1


def test_records_survive_close_and_reopen(open_mlog):
    """After a close, reopening replays the log into the same image."""
    mlog = open_mlog()
    build_cluster(mlog)
    before = content(mlog)
    mlog.close()
    again = open_mlog()
    assert content(again) == before
    assert again.image.topic("t0").config == {"retention.ms": 60_000}
    assert len(again.image.topic("t1").partitions) == 4
    assert "t2" not in again.image.topic_ids


def test_records_survive_reopen_without_a_clean_close(open_mlog, tmp_path):
    """Appends are flushed before they are applied: reopening after the log was abandoned
    without a clean shutdown (as after a crash) sees every record."""
    mlog = open_mlog()
    build_cluster(mlog)
    before = content(mlog)
    mlog.abandon()
    assert content(open_mlog()) == before


def test_snapshot_every_n_records_moves_the_log_start_and_reopen_gives_the_same_image(
    open_mlog, tmp_path
):
    """With a small snapshot_every a snapshot file appears, the log below it is deleted
    (the log start moves up to the snapshot) and a reopen rebuilds the same image."""
    mlog = open_mlog(snapshot_every=4)
    build_cluster(mlog)
    assert os.path.exists(tmp_path / SNAPSHOT_FILE)
    start = mlog.log.log_start_offset
    assert start > 0
    before = content(mlog)
    mlog.close()
    again = open_mlog(snapshot_every=4)
    assert again.log.log_start_offset == start
    assert content(again) == before


def test_explicit_snapshot_then_reopen_replays_nothing(open_mlog, tmp_path):
    """A snapshot at the log end moves the log start to the log end; reopening loads the
    snapshot alone, at the same image offset."""
    mlog = open_mlog()
    build_cluster(mlog)
    mlog.snapshot()
    end = mlog.log.log_end_offset
    assert mlog.log.log_start_offset == end
    before = content(mlog)
    mlog.close()
    again = open_mlog()
    assert again.log.log_start_offset == end
    assert content(again) == before
    assert again.image.offset == end - 1


def test_reopen_after_a_snapshot_plus_more_records_replays_only_the_rest(open_mlog):
    """Records appended after a snapshot are replayed on top of it."""
    mlog = open_mlog()
    build_cluster(mlog)
    mlog.snapshot()
    mlog.append(controller.create_topic(mlog.image, "later", 3, 1, None, BROKERS)[1])
    mlog.append(controller.alter_config(mlog.image, "t0", {"retention.ms": None}))
    mlog.append(controller.allocate_producer_ids(mlog.image)[1])
    before = content(mlog)
    mlog.close()
    again = open_mlog()
    assert content(again) == before
    assert len(again.image.topic("later").partitions) == 3
    assert again.image.topic("t0").config == {}
    assert again.image.next_producer_id == 2 * controller.PRODUCER_ID_BLOCK


def test_appending_after_reopen_from_a_crash_snapshots_as_usual(open_mlog):
    """After an unclean shutdown the next appends (and the snapshots they trigger) work."""
    mlog = open_mlog(snapshot_every=3)
    build_cluster(mlog)
    mlog.abandon()
    mlog = open_mlog(snapshot_every=3)
    start = mlog.log.log_start_offset
    mlog.append(controller.create_topic(mlog.image, "after", 1, 1, None, BROKERS)[1])
    mlog.append(controller.allocate_producer_ids(mlog.image)[1])
    mlog.append(controller.allocate_producer_ids(mlog.image)[1])
    assert mlog.log.log_start_offset > start  # a snapshot was taken
    before = content(mlog)
    mlog.close()
    assert content(open_mlog()) == before


def test_snapshot_right_after_reopening_from_a_crash_works(open_mlog):
    """snapshot() directly after an unclean reopen captures the replayed image."""
    mlog = open_mlog()
    build_cluster(mlog)
    mlog.abandon()
    mlog = open_mlog()
    before = content(mlog)
    mlog.snapshot()
    mlog.close()
    assert content(open_mlog()) == before


def test_many_snapshots_and_reopens_keep_the_image(open_mlog):
    """Alternating appends, automatic snapshots and reopens never lose or repeat a change."""
    mlog = open_mlog(snapshot_every=3)
    for round_ in range(6):
        mlog.append(controller.create_topic(mlog.image, f"r{round_}", 1, 1, None, BROKERS)[1])
        mlog.append(controller.allocate_producer_ids(mlog.image)[1])
        before = content(mlog)
        mlog.close()
        mlog = open_mlog(snapshot_every=3)
        assert content(mlog) == before
    assert sorted(mlog.image.topic_ids) == [f"r{i}" for i in range(6)]
    assert mlog.image.next_producer_id == 6 * controller.PRODUCER_ID_BLOCK


def test_producer_ids_are_not_reused_after_a_restart(open_mlog):
    """A block allocated before a restart (with or without snapshot) is never handed out
    again."""
    mlog = open_mlog(snapshot_every=2)
    handed_out: set[int] = set()
    for _ in range(5):
        block, records = controller.allocate_producer_ids(mlog.image)
        assert handed_out.isdisjoint(block)
        handed_out.update(block)
        mlog.append(records)
        mlog.close()
        mlog = open_mlog(snapshot_every=2)


def test_the_metadata_log_lives_in_its_own_partition_directory(open_mlog, tmp_path):
    """Records go to __cluster_metadata-0 under the controller's directory."""
    mlog = open_mlog()
    mlog.append([{"type": "broker", "broker_id": 0, "disk": "/a"}])
    assert os.path.isdir(tmp_path / LOG_DIR)


def _snapshotted(open_mlog, tmp_path):
    mlog = open_mlog()
    build_cluster(mlog)
    mlog.snapshot()
    mlog.close()
    return tmp_path / SNAPSHOT_FILE


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda blob: b"", id="empty"),
        pytest.param(lambda blob: blob[: len(blob) // 2], id="truncated"),
        pytest.param(lambda blob: b"\xc1" + blob[1:], id="bad-first-byte"),
        pytest.param(lambda blob: msgpack.packb([1, 2, 3]), id="not-a-map"),
        pytest.param(lambda blob: msgpack.packb({"records": []}), id="no-next-offset"),
        pytest.param(lambda blob: blob + b"\x00", id="trailing-byte"),
    ],
)
def test_an_unreadable_snapshot_raises_corrupt_record_naming_the_file(
    open_mlog, tmp_path, damage
):
    """A snapshot that does not decode into {next_offset, records} raises CorruptRecord
    whose message names the snapshot's path."""
    path = _snapshotted(open_mlog, tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptRecord, match=str(path)):
        open_mlog()


@pytest.mark.parametrize(
    "records",
    [
        pytest.param([{"type": "bogus"}], id="unknown-type"),
        pytest.param([{"type": "broker"}], id="missing-field"),
        pytest.param([{"type": "delete", "topic_id": "nope"}], id="dangling-delete"),
    ],
)
def test_a_snapshot_with_malformed_records_raises_corrupt_record_naming_the_file(
    open_mlog, tmp_path, records
):
    """A snapshot whose records do not make an image (a flipped type, a missing field, a
    delete of a topic it never created) is corrupt, and says which file."""
    path = _snapshotted(open_mlog, tmp_path)
    path.write_bytes(msgpack.packb({"next_offset": 1, "records": records}))
    with pytest.raises(CorruptRecord, match=str(path)):
        open_mlog()


def test_a_missing_snapshot_with_a_log_start_past_zero_is_refused_as_corrupt(open_mlog, tmp_path):
    """The records below the log start live only in the snapshot: without it the image would
    lack topics, and replicas checking in would be told to delete their data."""
    mlog = open_mlog(snapshot_every=3)
    build_cluster(mlog)
    assert mlog.log.log_start_offset > 0
    mlog.close()
    os.remove(os.path.join(tmp_path, SNAPSHOT_FILE))
    with pytest.raises(CorruptRecord, match="missing"):
        open_mlog()


def test_a_second_process_cannot_open_a_metadata_directory_in_use(open_mlog, tmp_path):
    """Two controllers appending to one log would each lose the other's records on replay:
    the directory lock refuses the second until the first is gone."""
    first = open_mlog()
    with pytest.raises(KafkaStorageError, match="locked by process"):
        MetadataLog(str(tmp_path), lock_timeout_s=0.3)
    first.abandon()  # the holder dies
    second = MetadataLog(str(tmp_path), lock_timeout_s=0.3)
    second.close()


def test_a_record_that_could_not_be_applied_is_refused_before_it_is_written(open_mlog):
    """A state for a partition of a deleted topic (a decision made on a stale copy) raises
    InvalidRecord and leaves the log and the image as they were, so the log still replays."""
    mlog = open_mlog()
    build_cluster(mlog)
    stale = mlog.image.topic("t1")
    state = stale.partitions[0]
    mlog.append(controller.delete_topic(mlog.image, "t1")[1])
    end, before = mlog.log.log_end_offset, content(mlog)
    with pytest.raises(InvalidRecord, match="does not exist"):
        mlog.append([state.to_record(stale.topic_id)])
    with pytest.raises(InvalidRecord, match="does not exist"):
        mlog.append(controller.start_replica(mlog.image, stale.topic_id, 0, 1)[1])
    assert (mlog.log.log_end_offset, content(mlog)) == (end, before)
    mlog.close()
    assert content(open_mlog()) == before


def test_a_failed_snapshot_is_retried_and_does_not_fail_the_append(open_mlog, monkeypatch):
    """The records a snapshot follows are already durable: its failure is logged, the append
    succeeds, and the next append snapshots again."""
    mlog = open_mlog(snapshot_every=2)
    real = MetadataLog.snapshot
    calls = []

    def failing(self):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        real(self)

    monkeypatch.setattr(MetadataLog, "snapshot", failing)
    build_cluster(mlog)
    assert len(calls) >= 2 and mlog.log.log_start_offset > 0
    before = content(mlog)
    mlog.close()
    assert content(open_mlog()) == before
