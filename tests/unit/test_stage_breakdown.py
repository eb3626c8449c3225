"""The stage trace (marks written only while switched on, read back in time order) and the
breakdown built from it: each segment of a record's path, for the follower that committed
it."""

from __future__ import annotations

import pytest

from bench import latency_all
from rafka.actors import stage_trace

MS = 1_000_000


@pytest.fixture
def tracing(tmp_path, monkeypatch):
    """This process traces into a fresh directory; the module is left as it was."""
    monkeypatch.setattr(stage_trace, "_file", None)
    monkeypatch.setattr(stage_trace, "_switch_checked_ns", -stage_trace.SWITCH_CHECK_NS)
    monkeypatch.setattr(stage_trace, "SWITCH_CHECK_NS", 0)  # look at the switch every mark
    monkeypatch.setenv(stage_trace.ENV, "")
    stage_trace.enable(str(tmp_path))
    yield str(tmp_path)
    if stage_trace._file is not None:
        stage_trace._file.close()
    monkeypatch.setattr(stage_trace, "ENABLED", False)
    monkeypatch.setattr(stage_trace, "_directory", None)


def test_marks_are_written_only_while_the_switch_is_on_and_read_back_in_time_order(tracing):
    stage_trace.mark("leader.appended", 10, at_ns=5)
    stage_trace.switch(tracing, True)
    stage_trace.mark("leader.appended", 20, at_ns=9)
    stage_trace.mark("leader.appended", 11, at_ns=7, peer=2)
    stage_trace.switch(tracing, False)
    stage_trace.mark("leader.appended", 30, at_ns=11)
    assert stage_trace.read(tracing) == {"leader.appended": [(11, 7, 2), (20, 9, -1)]}


def test_a_line_cut_short_by_a_killed_process_is_skipped(tracing):
    with open(f"{tracing}/123.trace", "w") as f:
        f.write("client.call 5 100 -1\nclient.ans")
    assert stage_trace.read(tracing) == {"client.call": [(5, 100, -1)]}


def _acks_all_record(end: int, t0: int, slow_follower: int, fast_follower: int) -> dict:
    """Marks of one acks=all record, 1 ms per stage, the slow follower 5 ms behind."""
    at = {"client.encode": t0, "client.call": t0 + 1 * MS, "leader.received": t0 + 2 * MS,
          "leader.appended": t0 + 3 * MS}
    marks: dict[str, list] = {stage: [(end, t, -1)] for stage, t in at.items()}
    for follower, lag in ((fast_follower, 0), (slow_follower, 5 * MS)):
        marks.setdefault("leader.sent", []).append((end, t0 + 4 * MS + lag, follower))
        marks.setdefault("follower.received", []).append((end, t0 + 5 * MS + lag, follower))
        marks.setdefault("follower.appended", []).append((end, t0 + 6 * MS + lag, follower))
        marks.setdefault("leader.fetched", []).append((end, t0 + 7 * MS + lag, follower))
    marks["leader.committed"] = [(end, t0 + 12 * MS, -1)]
    marks["leader.answered"] = [(end, t0 + 13 * MS, -1)]
    marks["client.answered"] = [(end, t0 + 14 * MS, -1)]
    marks["client.completed"] = [(end, t0 + 15 * MS, -1)]
    for found in marks.values():
        found.sort(key=lambda m: m[1])
    return marks


def test_the_breakdown_follows_the_follower_whose_report_committed_the_record():
    marks = latency_all.Marks(_acks_all_record(end=8, t0=100 * MS, slow_follower=3,
                                               fast_follower=2))  # fmt: skip
    segments = latency_all.record_segments(marks, 8, acks_all=True)
    assert segments["leader: wakes the follower's fetch"] == pytest.approx(6.0)  # 3 -> 9 ms
    assert segments["follower: append"] == pytest.approx(1.0)
    assert segments["leader: high watermark moves"] == pytest.approx(0.0)  # 12 -> 12 ms
    assert segments["total"] == pytest.approx(15.0)
    assert sum(v for k, v in segments.items() if k != "total") == pytest.approx(15.0)


def test_a_mark_of_a_later_record_answers_for_an_earlier_end_offset():
    """A fetch that carried records up to offset 12 also carried the record ending at 8."""
    marks = _acks_all_record(end=12, t0=100 * MS, slow_follower=3, fast_follower=2)
    marks["client.encode"] = [(8, 100 * MS, -1)]
    segments = latency_all.record_segments(latency_all.Marks(marks), 8, acks_all=True)
    assert segments is not None and segments["total"] == pytest.approx(15.0)


def test_a_record_with_a_missing_stage_is_left_out():
    marks = _acks_all_record(end=8, t0=100 * MS, slow_follower=3, fast_follower=2)
    del marks["leader.committed"]
    assert latency_all.record_segments(latency_all.Marks(marks), 8, acks_all=True) is None


def test_acks_1_skips_the_followers_and_the_summary_keeps_path_order():
    at = {"client.encode": 0, "client.call": 1, "leader.received": 2, "leader.appended": 3,
          "leader.answered": 5, "client.answered": 6, "client.completed": 8}
    marks = latency_all.Marks({stage: [(4, t * MS, -1)] for stage, t in at.items()})
    one = latency_all.record_segments(marks, 4, acks_all=False)
    assert one["leader: answers"] == pytest.approx(2.0) and one["total"] == pytest.approx(8.0)
    summary = latency_all.summarise([one, {**one, "total": 10.0}], acks_all=False)
    assert [s["segment"] for s in summary["segments"]] == [
        s[0] for s in latency_all.ACKS_ONE_SEGMENTS] + ["total"]  # fmt: skip
    assert summary["segments"][-1]["p50_ms"] == pytest.approx(9.0)


def test_a_run_switched_on_after_its_files_were_removed_writes_fresh_ones(tracing):
    import os

    stage_trace.switch(tracing, True)
    stage_trace.mark("client.call", 1, at_ns=1)
    stage_trace.switch(tracing, False)
    for name in os.listdir(tracing):
        if name.endswith(".trace"):
            os.remove(os.path.join(tracing, name))
    stage_trace.switch(tracing, True)
    stage_trace.mark("client.call", 3, at_ns=3)
    assert stage_trace.read(tracing) == {"client.call": [(3, 3, -1)]}


def test_a_trace_that_cannot_be_written_turns_itself_off_and_never_raises(tracing, monkeypatch):
    stage_trace.switch(tracing, True)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    stage_trace.mark("client.call", 1)  # no exception reaches the caller
    assert stage_trace.ENABLED is False
