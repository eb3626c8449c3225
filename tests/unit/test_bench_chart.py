"""The benchmark's charts (bench/chart.py, matplotlib): each is drawn from a small synthetic
report into a PNG of a sensible size with what it must show (series, scales, marks), the
latency glue prefers a report's ``series``, and the harness writes the charts of the
workloads that ran; plus the timelines the failover and group workloads record."""

from __future__ import annotations

import json
import struct

import pytest

from bench import chart


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG file, after checking its signature and header chunk."""
    data = path.read_bytes()
    assert data[:8] == chart.PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def sensible(path, min_width: int = 600, min_height: int = 300) -> bool:
    width, height = png_size(path)
    return min_width <= width <= 4000 and min_height <= height <= 4000


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def vertical_lines(ax) -> list[float]:
    """Where the axes has full-height vertical lines (axvline: two equal x)."""
    return [line.get_xdata()[0] for line in ax.get_lines()
            if len(line.get_xdata()) == 2 and len(set(line.get_xdata())) == 1]  # fmt: skip


def cdf(scale: float) -> list[list[float]]:
    return [[scale * (1 + 9 * f) ** 2, f] for f in (0.0, 0.25, 0.5, 0.75, 0.99, 0.999, 1.0)]


# -- summary.png -------------------------------------------------------------------------------


def summary_of(workloads: dict) -> dict:
    return {"machine": {"cpus": 2, "time": "2026-01-01T00:00:00Z"}, "tiny": True,
            "workloads": workloads}  # fmt: skip


def test_the_summary_chart_has_a_bar_each_way_from_one_and_a_label_per_figure(tmp_path):
    """A ratio above 1 is a bar to the right of the 1x line, below 1 to its left; a failed
    workload and a figure with nothing to compare keep a labelled row with no bar."""
    from bench import harness

    better = harness.row("per record", "records/s", 2.0e6, peer=1.0e6)
    slower = harness.row("p99", "ms", 4.0, peer=2.0, higher_is_better=False)
    alone = harness.row("first ack", "s", 1.7)
    assert better["ratio"] == 2.0 and slower["ratio"] == 0.5 and alone["ratio"] is None
    summary = summary_of({
        "produce": {"status": "ok", "rows": [better]},
        "latency": {"status": "ok", "rows": [slower]},
        "failover": {"status": "ok", "rows": [alone]},
        "group": {"status": "error", "error": "boom", "rows": []},
    })  # fmt: skip
    path = tmp_path / "summary.png"
    figure = chart.summary_chart(summary, path)
    assert sensible(path)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "produce: per record", "latency: p99", "failover: first ack", "group: FAILED"]
    bars = [(p.get_x(), p.get_x() + p.get_width()) for p in ax.patches]
    assert sorted(sorted(b) for b in bars) == [[0.5, 1.0], [1.0, 2.0]]
    texts = " ".join(t.get_text() for a in figure.axes for t in a.texts)
    assert "2.00×" in texts and "0.50×" in texts and "failed: boom" in texts
    assert "rafka 2,000,000 vs peer 1,000,000 records/s" in texts
    assert any(line.get_xdata()[0] == 1.0 for line in ax.get_lines())  # the 1x reference
    assert len(legend_texts(ax)) == 2


def test_the_harness_writes_summary_png_through_write_chart(tmp_path):
    """``harness.write_chart(summary, path)`` (the harness's call) makes the PNG, also with
    no figure at all and with ratios a thousand times apart."""
    from bench import harness

    path = tmp_path / "summary.png"
    harness.write_chart(summary_of({}), path)
    assert sensible(path, min_height=150)
    wide = summary_of({"x": {"status": "ok", "rows": [
        harness.row("fast", "records/s", 1000.0, peer=1.0),
        harness.row("slow", "s", 1000.0, peer=1.0, higher_is_better=False)]}})  # fmt: skip
    harness.write_chart(wide, path)
    assert sensible(path)


# -- latency_cdf.png ---------------------------------------------------------------------------


def test_latency_series_prefer_the_reports_series():
    """With ``series`` the chart draws those; without, rafka's and the peer's CDFs, either
    of which may be missing; an incomplete peer run says so in its label."""
    sides = {"rafka": {"cdf_ms": cdf(1.0)}, "peer": {"cdf_ms": cdf(2.0)}}
    series = [{"label": "rafka acks=1 RF=1 @ 10,000/s", "cdf_ms": cdf(1.0)},
              {"label": "rafka acks=all RF=3 @ 10,000/s", "cdf_ms": cdf(3.0)}]  # fmt: skip
    assert list(chart.latency_series({**sides, "series": series})) == [
        "rafka acks=1 RF=1 @ 10,000/s", "rafka acks=all RF=3 @ 10,000/s"]
    assert chart.latency_series(sides) == {"rafka": cdf(1.0), "peer": cdf(2.0)}
    assert chart.latency_series({"rafka": sides["rafka"]}) == {"rafka": cdf(1.0)}
    assert chart.latency_series({"peer": sides["peer"], "rafka": {"received": 0}}) == {
        "peer": cdf(2.0)}
    incomplete = chart.latency_series({**sides, "peer_incomplete": "only 10 of 20"})
    assert list(incomplete)[1].startswith("peer (incomplete")


def test_the_latency_chart_draws_every_series_on_a_log_ms_axis(tmp_path):
    """One line per series in the CDF and in the tail, both on a log ms axis; a zero
    latency (the clock's resolution) is left out rather than breaking the log scale."""
    series = {"rafka": [[0.0, 0.0]] + cdf(1.0), "peer": cdf(2.0)}
    path = tmp_path / "latency_cdf.png"
    figure = chart.latency_cdf_chart(series, path)
    assert sensible(path)
    cdf_ax, tail_ax = figure.axes
    assert cdf_ax.get_xscale() == "log" and tail_ax.get_yscale() == "log"
    assert legend_texts(cdf_ax) == ["rafka", "peer"]
    drawn = [line for line in cdf_ax.get_lines() if line.get_label() in series]
    assert [len(line.get_xdata()) for line in drawn] == [7, 7]
    assert min(drawn[0].get_xdata()) > 0
    assert "ms" in cdf_ax.get_xlabel()


# -- failover_timeline.png ---------------------------------------------------------------------


def test_the_failover_timeline_marks_the_kill_and_the_new_leader(tmp_path):
    """Acknowledged records/s per run against the time since the kill, with a line at the
    kill (0 s), at the new leader's appearance and at the first acknowledgement."""
    from bench.failover import timeline

    # Acks every 2 ms from 1 s before the kill, none for 1.5 s after it, then again.
    acks = [100.0 + (k + 0.5) / 500 for k in (*range(-500, 0), *range(750, 1250))]
    run = {"timeline": timeline(acks, 100.0), "elected_s": 1.2, "failover_s": 1.5}
    assert run["timeline"]["start_s"] == -1.0 and run["timeline"]["bucket_s"] == 0.1
    assert sum(run["timeline"]["acks"]) == 1000 and run["timeline"]["acks"][12] == 0
    assert len(json.dumps(run["timeline"])) < 400  # small enough for the report
    path = tmp_path / "failover_timeline.png"
    figure = chart.failover_timeline_chart([run], path)
    assert sensible(path)
    ax = figure.axes[0]
    marks = sorted(vertical_lines(ax))
    assert marks == [0.0, 1.2, 1.5]
    assert max(ax.get_lines()[1].get_ydata()) == pytest.approx(500.0)  # records/s
    labels = legend_texts(ax)
    assert "leader's node killed" in labels and any("new leader" in t for t in labels)
    assert "s" in ax.get_xlabel() and "records/s" in ax.get_ylabel()


def test_failover_timeline_of_no_acks_is_empty():
    from bench.failover import timeline

    assert timeline([], 5.0)["acks"] == []


# -- group_timeline.png ------------------------------------------------------------------------


def test_group_stamps_count_records_per_bucket_and_the_timeline_is_relative():
    """Each member counts what it reads per 100 ms; the timeline puts those counts, its
    assignments and the events in seconds since the group started."""
    from bench import groups

    bucket = groups.TIMELINE_BUCKET_S
    now = [1000.0]
    stamps = groups.Stamps(clock=lambda: now[0])
    stamps.owned(0)
    # Two polls inside the first bucket, one six buckets on (times off the bucket edges).
    for offset, n in ((0.2, 5), (0.6, 7), (6.2, 3)):
        now[0] = 1000.0 + offset * bucket
        stamps.owned(2)
        stamps.got(n, began=None if n == 5 else now[0])
    report = stamps.report()
    first = int(1000.0 / bucket)
    assert report["buckets"] == [(first, 12), (first + 6, 3)]
    assert report["read"] == 15 and report["timed"] == 10
    line = groups.timeline(999.5, {1: report}, [(1001.0, "member 4 starts")], {1: 1002.0})
    member = line["members"][0]
    assert member["member"] == 1
    assert member["reads"] == [[0.5, 12], [round(0.5 + 6 * bucket, 3), 3]]
    assert member["owned"] == [[0.5, 0], [round(0.5 + 0.2 * bucket, 3), 2]]
    assert member["killed_s"] == 2.5
    assert line["events"] == [{"at_s": 1.5, "what": "member 4 starts"}]


def group_report() -> dict:
    def member(n, reads, owned):
        return {"member": n, "reads": reads, "owned": owned}

    line = {
        "bucket_s": 0.1,
        "members": [
            {**member(1, [[3.0, 900], [3.1, 1000]], [[0.1, 0], [3.0, 2]]), "killed_s": 7.0},
            member(2, [[3.0, 800], [3.2, 500]], [[0.1, 0], [3.0, 2], [6.4, 1]]),
            member(3, [[3.1, 1200]], [[0.2, 0], [3.0, 2], [6.4, 1], [13.0, 2]]),
            member(4, [], [[5.0, 0], [6.4, 2], [13.0, 2]]),
        ],
        "events": [{"at_s": 5.0, "what": "member 4 starts"},
                   {"at_s": 6.4, "what": "4 members settled"},
                   {"at_s": 7.0, "what": "member 1 killed"},
                   {"at_s": 13.0, "what": "3 survivors settled"}],
    }  # fmt: skip
    return {"records": 6000, "partitions": 6, "members": 3, "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "rafka": {"per_record": {"records_per_s": 1.0, "timeline": line},
                      "bulk": {"records_per_s": 2.0}},
            "peer": {"records_per_s": 1.0, "timeline": line}}  # fmt: skip


def test_the_group_timeline_shows_reads_ownership_and_rebalances(tmp_path):
    """A column per side that recorded a timeline: the read rate stacked by member above
    the partitions each owns, with a vertical line at every event."""
    sides = chart.group_timelines(group_report())
    assert list(sides) == ["rafka, poll()", "peer (confluent-kafka + Tansu), consume()"]
    path = tmp_path / "group_timeline.png"
    figure = chart.group_timeline_chart(sides, path)
    assert sensible(path)
    rate_ax, owned_ax = figure.axes[0], figure.axes[2]
    assert legend_texts(rate_ax) == ["member 1", "member 2", "member 3", "member 4"]
    assert len(rate_ax.collections) == 4  # one stacked band per member
    assert sorted(vertical_lines(owned_ax)) == [5.0, 6.4, 7.0, 13.0]
    first = next(line for line in owned_ax.get_lines() if line.get_label() == "member 1")
    assert max(first.get_xdata()) == 7.0  # the killed member's line ends at the kill
    assert "records/s" in rate_ax.get_ylabel() and "(s)" in owned_ax.get_xlabel()
    assert "member 1 killed" in [t.get_text() for t in owned_ax.texts]


# -- the harness's charts ----------------------------------------------------------------------


def test_write_charts_draws_the_chart_of_each_workload_that_ran(tmp_path):
    """summary.png always; a workload chart only for a workload that ran and succeeded; a
    latency report with ``series`` is drawn from them."""
    from bench import harness

    latency = {"rate": 1000, "rafka": {"cdf_ms": cdf(1.0)}, "peer": {"cdf_ms": cdf(2.0)},
               "series": [{"label": "rafka acks=all RF=3", "cdf_ms": cdf(3.0)}]}  # fmt: skip
    (tmp_path / "latency.json").write_text(json.dumps({"report": latency}))
    (tmp_path / "group.json").write_text(json.dumps({"report": group_report()}))
    summary = summary_of({
        "latency": {"status": "ok", "rows": []},
        "group": {"status": "ok", "rows": []},
        "failover": {"status": "error", "error": "boom", "rows": []},
    })  # fmt: skip
    written = harness.write_charts(summary, tmp_path)
    assert [p.name for p in written] == ["summary.png", "latency_cdf.png", "group_timeline.png"]
    assert all(sensible(p) for p in written)
    assert not (tmp_path / "failover_timeline.png").exists()


def test_the_harness_resolves_names_and_aliases_in_its_order():
    from bench import harness

    assert harness.resolve(["failover", "produce"]) == ["produce", "failover"]
    assert harness.resolve(["clients", "groups"]) == ["produce", "consume", "group"]
    assert harness.resolve([]) == list(harness.WORKLOADS)
    with pytest.raises(ValueError):
        harness.resolve(["nope"])
