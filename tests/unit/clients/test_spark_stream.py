"""TopicStream without Ray or Spark: a fake cluster answers the partitions' bounds and keeps
the group's committed offsets; a batch's "DataFrame" is its ranges. Covers where a new
stream starts (its starting offsets recorded once) and that one stream runs one loop."""

from __future__ import annotations

import threading

import pytest

from rafka.clients import spark_stream
from rafka.clients.spark_offsets import parse_progress
from rafka.clients.spark_stream import TopicStream
from rafka.errors import IllegalState
from rafka.types import OffsetAndMetadata, TopicPartition

TOPIC = "events"


class FakeAdmin:
    """The admin calls a stream makes: partition bounds from ``cluster.high_watermarks``,
    the group's offsets in ``cluster.committed``."""

    def __init__(self, cluster: "FakeCluster") -> None:
        self.cluster = cluster

    def partition_offsets(self, topic: str, timeout_s: float = 60.0) -> list[dict]:
        return [
            {"partition": p, "log_start_offset": 0, "high_watermark": hw, "role": "leader"}
            for p, hw in enumerate(self.cluster.high_watermarks)
        ]

    def list_group_offsets(self, group_id, partitions, require_stable=False) -> dict:
        with self.cluster.lock:
            return {tp: self.cluster.committed[tp] for tp in partitions
                    if tp in self.cluster.committed}  # fmt: skip

    def alter_group_offsets(self, group_id, offsets) -> None:
        with self.cluster.lock:
            self.cluster.committed.update(offsets)
            self.cluster.commits.append(dict(offsets))


class FakeMetadata:
    def topic(self, name: str):
        return name

    def invalidate(self, name: str) -> None:
        pass


class FakeCluster:
    def __init__(self, high_watermarks: list[int]) -> None:
        self.high_watermarks = list(high_watermarks)
        self.committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self.commits: list[dict] = []
        self.lock = threading.Lock()
        self.metadata = FakeMetadata()

    def admin(self) -> FakeAdmin:
        return FakeAdmin(self)

    def offsets(self) -> dict[int, int]:
        return {tp.partition: o.offset for tp, o in self.committed.items()}


@pytest.fixture(autouse=True)
def ranges_as_dataframes(monkeypatch):
    """A batch's DataFrame is its {partition: (start, end)}; nothing is read."""

    def read(stream, ranges):
        return dict(ranges), sum(end - start for start, end in ranges.values())

    monkeypatch.setattr(spark_stream, "read_batch", read)
    monkeypatch.setattr(spark_stream, "release_batch", lambda df: None)


def collecting(seen: list):
    def fn(df, batch_id):
        seen.append((batch_id, df))

    return fn


# -- where a stream starts ---------------------------------------------------------------------


def test_a_stream_from_latest_processes_what_arrives_after_its_first_plan():
    cluster = FakeCluster([20, 7])
    seen: list = []
    stream = TopicStream(None, cluster, TOPIC, "g", collecting(seen), starting_offsets="latest")
    assert stream.process_available() == 0
    cluster.high_watermarks = [25, 7]
    assert stream.process_available() == 1
    assert seen == [(0, {0: (20, 25), 1: (7, 7)})]
    assert cluster.offsets() == {0: 25, 1: 7}


def test_a_stream_records_its_resolved_starting_offsets_before_its_first_batch():
    """As Spark writes batch 0's start to its offset log once: a new stream object (a
    restarted program) starts where the first one resolved 'latest', not at the new end."""
    cluster = FakeCluster([20])
    assert TopicStream(None, cluster, TOPIC, "g", collecting([]),
                       starting_offsets="latest").run_once() is None  # fmt: skip
    first = cluster.committed[TopicPartition(TOPIC, 0)]
    assert first.offset == 20 and parse_progress(first.metadata) == (-1, None)
    cluster.high_watermarks = [30]
    seen: list = []
    restarted = TopicStream(None, cluster, TOPIC, "g", collecting(seen), starting_offsets="latest")
    assert restarted.process_available() == 1
    assert seen == [(0, {0: (20, 30)})]


def test_starting_offsets_are_recorded_once_and_not_moved_by_later_plans():
    cluster = FakeCluster([20])
    stream = TopicStream(None, cluster, TOPIC, "g", collecting([]), starting_offsets="latest")
    for hw in (20, 20, 20):
        cluster.high_watermarks = [hw]
        stream.run_once()
    assert len(cluster.commits) == 1


def test_a_partition_added_after_the_start_is_read_from_its_log_start():
    """Spark's source reads a partition that appears after the stream started from
    earliest: its records all came after the start."""
    cluster = FakeCluster([20])
    seen: list = []
    stream = TopicStream(None, cluster, TOPIC, "g", collecting(seen), starting_offsets="latest")
    assert stream.process_available() == 0
    cluster.high_watermarks = [22, 5]
    assert stream.process_available() == 1
    assert seen == [(0, {0: (20, 22), 1: (0, 5)})]


# -- one loop per stream -----------------------------------------------------------------------


def test_start_after_a_stop_that_timed_out_is_refused_while_the_first_loop_runs():
    cluster = FakeCluster([10])
    entered, release = threading.Event(), threading.Event()
    seen: list = []

    def slow(df, batch_id):
        seen.append(batch_id)
        entered.set()
        release.wait(10)

    stream = TopicStream(None, cluster, TOPIC, "g", slow, trigger_interval_s=0.0)
    stream.start()
    assert entered.wait(10)
    stream.stop(timeout_s=0.05)  # the batch is still in fn
    assert stream.is_active
    with pytest.raises(IllegalState, match="still running batch 0"):
        stream.start()
    cluster.high_watermarks = [15]
    release.set()
    assert stream.await_termination(10)
    assert not stream.is_active
    stream.start()  # the first loop has ended: a new one may run
    try:
        stream.await_termination(0.3)
    finally:
        stream.stop(10)
    assert seen == [0, 1]
    assert cluster.offsets() == {0: 15}


def test_run_once_beside_a_running_loop_never_repeats_a_batch_id():
    cluster = FakeCluster([10])
    entered, release = threading.Event(), threading.Event()
    seen: list = []

    def slow(df, batch_id):
        seen.append(batch_id)
        entered.set()
        release.wait(10)

    stream = TopicStream(None, cluster, TOPIC, "g", slow, trigger_interval_s=0.0)
    stream.start()
    assert entered.wait(10)
    beside = threading.Thread(target=stream.run_once)
    beside.start()
    release.set()
    beside.join(10)
    stream.stop(10)
    assert seen == [0]


def test_process_available_after_a_stopped_loop_processes_the_backlog():
    cluster = FakeCluster([0, 0])
    seen: list = []
    stream = TopicStream(None, cluster, TOPIC, "g", collecting(seen), starting_offsets="earliest")
    stream.start()
    stream.stop()
    cluster.high_watermarks = [3, 2]
    assert stream.process_available() >= 1
    assert cluster.offsets() == {0: 3, 1: 2}
