"""The benchmark's charts, drawn with matplotlib on its Agg canvas (PNG files, no screen).

A run writes, next to ``summary.json``:

- ``summary.png``: a bar per figure of every workload, rafka's advantage on a log scale
  centred on 1x (``ratio_chart``);
- ``latency_cdf.png``: the latency workload's CDFs, rafka and the peer (or every series the
  report lists) on one plot (``latency_cdf_chart``);
- ``failover_timeline.png``: acknowledged acks=all writes per second around each leader kill
  (``failover_timeline_chart``);
- ``group_timeline.png``: what a consumer group reads per second and the partitions each
  member owns, with the join and the kill marked (``group_timeline_chart``).

``write_charts(summary, results_dir)`` draws each chart whose workload ran and succeeded,
from the ``<workload>.json`` files the harness wrote. matplotlib is a benchmark dependency
only, so it is imported inside the functions that draw.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DPI = 110
BETTER = "#2e8b57"  # rafka better: green
WORSE = "#d1603d"  # the other side better: red-orange
GREY = "#6e6e6e"
THOUSANDS = "{x:,.0f}"  # an axis formatter: 20,000 rather than 20000
#: chart file -> the workload whose report it draws (summary.png draws summary.json).
WORKLOAD_CHARTS = {"latency_cdf.png": "latency", "latency_all_cdf.png": "latency-all",
                   "failover_timeline.png": "failover", "group_timeline.png": "group"}  # fmt: skip


def _figure(width_in: float, height_in: float):
    """A matplotlib Figure on its own Agg canvas: no pyplot, so no global state and no screen."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path | str) -> None:
    figure.savefig(path, format="png")


def _titles(figure, title: str, note: str) -> None:
    """The title on top and the note (what was run, where) at the bottom; constrained
    layout keeps room for both."""
    if title:
        figure.suptitle(title, fontsize=13)
    if note:
        figure.supxlabel(note, fontsize=8, color=GREY)


# -- summary.png: the ratio bars --------------------------------------------------------------


def summary_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A bar per figure of ``summary["workloads"]``: ``label`` (workload: figure), ``ratio``
    (None: no bar), ``detail`` (the absolute figures) and ``failed`` (the workload's error)."""
    from bench.harness import fmt

    out = []
    for name, entry in summary["workloads"].items():
        if entry["status"] != "ok":
            out.append({"label": f"{name}: FAILED", "ratio": None, "detail": "",
                        "failed": str(entry.get("error") or "error")})  # fmt: skip
        for r in entry["rows"]:
            other = r["peer"] if r["peer"] is not None else r["baseline"]
            detail = f"rafka {fmt(r['rafka'])}"
            if other is not None:
                detail += f" vs {r['against']} {fmt(other)}"
            out.append({"label": f"{name}: {r['metric']}", "ratio": r["ratio"],
                        "detail": f"{detail} {r['unit']}", "failed": None})  # fmt: skip
    return out


def _ratio_ticks(span: int) -> tuple[list[float], list[str]]:
    """Tick positions and labels of a ratio axis from 1/base**span to base**span: powers of
    two up to 64x, powers of ten past it (the labels would run into each other)."""
    if span <= 6:
        powers, base = range(-span, span + 1), 2
    else:
        decades = math.ceil(span * math.log10(2))
        powers, base = range(-decades, decades + 1), 10
    ticks = [float(base) ** p for p in powers]
    labels = [f"{base**p:g}×" if p >= 0 else f"1/{base**-p:g}×" for p in powers]
    return ticks, labels


def ratio_chart(rows: Sequence[Mapping[str, Any]], path: Path | str, title: str = "",
                note: str = ""):  # fmt: skip
    """Draw a horizontal bar per row from 1x to its ratio (log scale; right of 1x: rafka
    better) into the PNG at ``path``; a row: ``label``, ``ratio`` (float or None),
    ``detail`` (written in a column on the right) and ``failed`` (an error: no bar).
    Answers the Figure."""
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    figure = _figure(14.0, 2.6 + 0.36 * max(1, len(rows)))
    ax, side = figure.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [2.2, 1.0]})
    ratios = [r["ratio"] for r in rows if r.get("ratio") and r["ratio"] > 0]
    widest = max((abs(math.log2(r)) for r in ratios), default=0.0)
    span = max(1, math.ceil(widest - 1e-9))
    pad = 2.0 ** max(0.5, 0.3 * span)  # room for the value written past a bar's end
    ax.set_xscale("log")
    ax.set_xlim(2.0**-span / pad, 2.0**span * pad)
    ticks, labels = _ratio_ticks(span)
    ax.set_xticks(ticks, labels)
    ax.minorticks_off()
    ax.grid(axis="x", color="#dddddd", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.axvline(1.0, color="black", linewidth=1.4)
    column = blended_transform_factory(side.transAxes, side.transData)
    side.axis("off")
    for y, row in enumerate(rows):
        ratio = row.get("ratio")
        if row.get("failed"):
            ax.text(1.0, y, f"  failed: {row['failed'][:80]}", color=WORSE, va="center",
                    fontsize=8)  # fmt: skip
        elif ratio and ratio > 0:
            color = BETTER if ratio >= 1 else WORSE
            ax.barh(y, ratio - 1.0, left=1.0, height=0.62, color=color)
            value = (f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.2f}×" if ratio >= 0.01
                     else f"1/{1 / ratio:,.0f}×")  # fmt: skip
            ax.text(ratio, y, f" {value} ", va="center", ha="left" if ratio >= 1 else "right",
                    fontsize=8)  # fmt: skip
        else:
            ax.text(1.0, y, "  no ratio (nothing to compare with)", color=GREY, va="center",
                    fontsize=8)  # fmt: skip
        if row.get("detail"):
            side.text(0.0, y, row["detail"], transform=column, va="center", fontsize=8,
                      color=GREY)  # fmt: skip
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=9)
    ax.set_ylim(max(1, len(rows)) - 0.5, -0.5)  # the first row on top
    if not rows:
        ax.text(1.0, 0, "  no figures", color=GREY, va="center", fontsize=9)
    ax.set_xlabel("rafka's advantage (×, log scale): rafka/other for rates, other/rafka for "
                  "times and latencies; right of 1× = rafka better")  # fmt: skip
    ax.legend(handles=[Patch(color=BETTER, label="rafka better (> 1×)"),
                       Patch(color=WORSE, label="other side better (< 1×)")],
              loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=8,
              frameon=False)  # fmt: skip
    _titles(figure, title, note)
    _save(figure, path)
    return figure


def summary_chart(summary: Mapping[str, Any], path: Path | str):
    """Draw ``summary.png`` from the harness's summary (``summary.json``'s dict)."""
    m = summary["machine"]
    note = (f"{m.get('cpus', '?')} CPUs, {m.get('time', '')}"
            + (" -- tiny sizes: the figures only show that the harness works"
               if summary.get("tiny") else ""))  # fmt: skip
    title = "rafka vs the peer (confluent-kafka + Tansu) and baselines"
    return ratio_chart(summary_rows(summary), path, title, note)


# -- latency_cdf.png ---------------------------------------------------------------------------


def latency_series(report: Mapping[str, Any]) -> dict[str, list]:
    """label -> ``[[ms, fraction], ...]`` of the latency report: its ``series`` when it has
    them, else rafka's and the peer's ``cdf_ms`` (either may be missing)."""
    if report.get("series"):
        return {s["label"]: s["cdf_ms"] for s in report["series"] if s.get("cdf_ms")}
    out = {}
    for side in ("rafka", "peer"):
        cdf = (report.get(side) or {}).get("cdf_ms")
        if cdf:
            label = side
            if side == "peer" and report.get("peer_incomplete"):
                label = "peer (incomplete: only the records that arrived)"
            out[label] = cdf
    return out


def latency_cdf_chart(series: Mapping[str, Sequence[Sequence[float]]], path: Path | str,
                      title: str = "End-to-end latency", note: str = ""):  # fmt: skip
    """Draw each series' CDF (``[[ms, fraction at or below], ...]``) on one log-ms axis, and
    beside it the tail (the fraction slower than x, log scale) into the PNG at ``path``.
    Answers the Figure."""
    figure = _figure(12.0, 5.0)
    cdf_ax, tail_ax = figure.subplots(1, 2, sharex=True)
    for label, points in series.items():
        # A log axis has no zero: a latency the clock could not resolve is left out.
        points = [(ms, f) for ms, f in points if ms > 0]
        if not points:
            continue
        ms = [p[0] for p in points]
        line, = cdf_ax.plot(ms, [p[1] for p in points], label=label, linewidth=1.8)
        tail = [(x, 1.0 - f) for x, f in points if f < 1.0]
        tail_ax.plot([t[0] for t in tail], [t[1] for t in tail], color=line.get_color(),
                     linewidth=1.8, label=label)  # fmt: skip
    cdf_ax.set_xscale("log")
    cdf_ax.set_ylim(0.0, 1.02)
    for fraction, name in ((0.5, "p50"), (0.99, "p99")):
        cdf_ax.axhline(fraction, color=GREY, linewidth=0.7, linestyle=":")
        cdf_ax.annotate(name, (0.0, fraction), xycoords=("axes fraction", "data"),
                        xytext=(3, 2), textcoords="offset points", fontsize=8, color=GREY)
    cdf_ax.set_xlabel("end-to-end latency (ms, log scale)")
    cdf_ax.set_ylabel("fraction of records at or below")
    cdf_ax.set_title("CDF", fontsize=10)
    tail_ax.set_yscale("log")
    for fraction, name in ((0.01, "p99"), (0.001, "p99.9")):
        tail_ax.axhline(fraction, color=GREY, linewidth=0.7, linestyle=":")
        tail_ax.annotate(name, (0.0, fraction), xycoords=("axes fraction", "data"),
                         xytext=(3, 2), textcoords="offset points", fontsize=8, color=GREY)
    tail_ax.set_xlabel("end-to-end latency (ms, log scale)")
    tail_ax.set_ylabel("fraction of records slower (log scale)")
    tail_ax.set_title("the tail", fontsize=10)
    for ax in (cdf_ax, tail_ax):
        ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
    if len(series) > 4:  # many series (rates, settings): the legend beside the plots
        tail_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    elif series:
        cdf_ax.legend(loc="lower right", fontsize=9)
    _titles(figure, title, note)
    _save(figure, path)
    return figure


def _latency_from_report(report: Mapping[str, Any], path: Path) -> None:
    title = "End-to-end latency, send() to poll()"
    if not report.get("series") and report.get("rate"):
        title += (f": {report['rate']:,.0f} records/s offered, acks={report.get('acks', 1)}, "
                  f"{report.get('value_size', '?')}-byte values")  # fmt: skip
    latency_cdf_chart(latency_series(report), path, title)


# -- failover_timeline.png -------------------------------------------------------------------


def failover_timeline_chart(runs: Sequence[Mapping[str, Any]], path: Path | str,
                            title: str = "acks=all writes around a leader kill",
                            note: str = ""):  # fmt: skip
    """Draw each run's acknowledged records per second against the time since the leader's
    node was killed into the PNG at ``path``. A run: ``timeline`` (``bucket_s``, ``start_s``
    and ``acks``: records acknowledged per bucket), ``elected_s`` and ``failover_s`` (seconds
    from the kill; None if unknown). Answers the Figure."""
    figure = _figure(11.0, 5.0)
    ax = figure.add_subplot()
    ax.axvline(0.0, color="black", linewidth=1.6, label="leader's node killed")
    several = len(runs) > 1
    for n, run in enumerate(runs, 1):
        timeline = run["timeline"]
        bucket = timeline["bucket_s"]
        times = [timeline["start_s"] + i * bucket for i in range(len(timeline["acks"]))]
        rates = [count / bucket for count in timeline["acks"]]
        name = f"run {n}: " if several else ""
        line, = ax.step(times + [times[-1] + bucket] if times else [], rates + rates[-1:],
                        where="post", linewidth=1.5,
                        label=f"{name}acknowledged records/s")  # fmt: skip
        color = line.get_color()
        if run.get("elected_s") is not None:
            ax.axvline(run["elected_s"], color=color, linestyle="--", linewidth=1.2,
                       label=f"{name}new leader seen ({run['elected_s']:.2f} s)")  # fmt: skip
        if run.get("failover_s") is not None:
            ax.axvline(run["failover_s"], color=color, linestyle=":", linewidth=1.4,
                       label=f"{name}first ack after the kill ({run['failover_s']:.2f} s)")
    ax.set_xlabel("time since the leader's node was killed (s)")
    buckets = sorted({run["timeline"]["bucket_s"] * 1000 for run in runs})
    ax.set_ylabel(f"records acknowledged (records/s, per {'/'.join(f'{b:g}' for b in buckets)} ms)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(THOUSANDS)
    ax.grid(True, color="#dddddd", linewidth=0.8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _titles(figure, title, note)
    _save(figure, path)
    return figure


def _failover_from_report(report: Mapping[str, Any], path: Path) -> None:
    runs = [r for r in report.get("runs", []) if r.get("timeline") and r["timeline"]["acks"]]
    if not runs:
        raise ValueError("the failover report has no timeline")
    settings, every = report.get("settings") or {}, report.get("send_interval_s")
    note = ("one idempotent acks=all producer"
            + (f", a record every {every * 1000:g} ms" if every else "")
            + f", RF=3, min.insync.replicas=2; {report.get('disks', '?')} disk nodes, "
            f"broker.session.timeout.ms={settings.get('broker.session.timeout.ms', '?')}")
    failover_timeline_chart(runs, path, note=note)


# -- group_timeline.png ----------------------------------------------------------------------


def _dense(points: Sequence[Sequence[float]], bucket: float, start: float, length: int):
    """Records per second in ``length`` buckets from ``start`` of sparse [[t, count], ...]."""
    rates = [0.0] * length
    for t, count in points:
        i = round((t - start) / bucket)
        if 0 <= i < length:
            rates[i] += count / bucket
    return rates


MEMBER_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
EVENT_STYLES = {"starts": ("black", "--"), "killed": ("#d62728", "--"),
                "settled": ("#555555", ":")}  # fmt: skip


def _group_reads(ax, timeline: Mapping[str, Any]) -> tuple[float, float] | None:
    """The read rate, stacked by member, over the read only; answers its (start, end) s."""
    bucket, members = timeline["bucket_s"], timeline["members"]
    times = [t for m in members for t, _ in m["reads"]]
    if not times:
        return None
    start = min(times)
    length = round((max(times) - start) / bucket) + 1
    xs = [start + i * bucket for i in range(length + 1)]
    # Each bucket is drawn from its start to the next's: the last one repeated.
    rates = [r + r[-1:] for r in (_dense(m["reads"], bucket, start, length) for m in members)]
    ax.stackplot(xs, rates, step="post", colors=MEMBER_COLORS[: len(members)],
                 labels=[f"member {m.get('member', n)}" for n, m in enumerate(members, 1)])
    ax.set_xlim(start - bucket, xs[-1] + bucket)
    ax.legend(loc="best", fontsize=8)
    return start, xs[-1]


def _group_owned(ax, timeline: Mapping[str, Any], read: tuple[float, float] | None) -> None:
    """Partitions owned per member over the whole run, the events as vertical lines."""
    members, events = timeline["members"], timeline.get("events", [])
    ends = [t for m in members for t, _ in m["owned"]] + [e["at_s"] for e in events]
    end = max(ends + ([read[1]] if read else []), default=0.0) + 1.0
    if read:
        ax.axvspan(*read, color="#eeeeee", label="the read (above)")
    for n, member in enumerate(members):
        owned = member["owned"]
        if not owned:
            continue
        # Members owning the same count would hide each other: a small vertical offset.
        lift = 0.06 * (n - (len(members) - 1) / 2)
        until = member.get("killed_s", end)
        ts = [t for t, _ in owned if t <= until] + [until]
        counts = [c + lift for _, c in owned][: len(ts) - 1]
        ax.step(ts, counts + counts[-1:], where="post", color=MEMBER_COLORS[n % 6],
                linewidth=1.6, label=f"member {member.get('member', n + 1)}")  # fmt: skip
        if "killed_s" in member:
            ax.plot([until], counts[-1:], marker="x", color=MEMBER_COLORS[n % 6], markersize=8)
    for event in events:
        kind = next((k for k in EVENT_STYLES if k in event["what"]), "settled")
        color, style = EVENT_STYLES[kind]
        ax.axvline(event["at_s"], color=color, linestyle=style, linewidth=1.2)
        # A rebalance settles close to the next event (the kill follows the join's end):
        # "settled" is written left of its line, the others right of theirs.
        left = kind == "settled"
        ax.annotate(event["what"], (event["at_s"], 1.0), xycoords=("data", "axes fraction"),
                    xytext=(-2 if left else 2, -3), textcoords="offset points", rotation=90,
                    va="top", ha="right" if left else "left", fontsize=7,
                    color=color)  # fmt: skip
    # From a second before the first member showed up (starting its process can take a while).
    ax.set_xlim(max(0.0, min(ends + ([read[0]] if read else []), default=0.0) - 1.0), end)
    ax.set_ylim(-0.5, max([c for m in members for _, c in m["owned"]] + [1]) + 1.0)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="lower right", fontsize=7, ncols=2)


def group_timeline_chart(sides: Mapping[str, Mapping[str, Any]], path: Path | str,
                         title: str = "A consumer group over time", note: str = ""):  # fmt: skip
    """Draw, per side (a column), the group's read rate stacked by member (the read only,
    zoomed) above the partitions each member owns over the whole run, with the join, the
    kill and the rebalances marked, into the PNG at ``path``. A side's timeline:
    ``bucket_s``, ``members`` (each ``member``, ``reads`` [[s, records], ...], ``owned``
    [[s, partitions], ...] and, if killed, ``killed_s``) and ``events`` (``at_s``, ``what``),
    in seconds since the first member started. Answers the Figure."""
    columns = max(1, len(sides))
    figure = _figure(5.5 * columns + 1.0, 7.5)
    axes = figure.subplots(2, columns, squeeze=False, gridspec_kw={"height_ratios": [3, 2]})
    for column, (label, timeline) in enumerate(sides.items()):
        rate_ax, owned_ax = axes[0][column], axes[1][column]
        read = _group_reads(rate_ax, timeline)
        _group_owned(owned_ax, timeline, read)
        rate_ax.set_title(f"{label}: the read", fontsize=10)
        rate_ax.set_ylabel("records read (records/s)")
        rate_ax.set_ylim(bottom=0)
        rate_ax.yaxis.set_major_formatter(THOUSANDS)
        owned_ax.set_title(f"{label}: membership", fontsize=10)
        owned_ax.set_ylabel("partitions owned")
        for ax in (rate_ax, owned_ax):
            ax.set_xlabel("time since the first member started (s)")
            ax.grid(True, color="#dddddd", linewidth=0.8)
    _titles(figure, title, note)
    _save(figure, path)
    return figure


def group_timelines(report: Mapping[str, Any]) -> dict[str, dict]:
    """label -> timeline of every side of the group report that recorded one."""
    sides = (("rafka", "per_record", "rafka, poll()"),
             ("rafka", "bulk", "rafka, poll_columns()"),
             ("peer", None, "peer (confluent-kafka + Tansu), consume()"))  # fmt: skip
    out = {}
    for side, path, label in sides:
        figures = report.get(side) or {}
        if path is not None:
            figures = figures.get(path) or {}
        if figures.get("timeline"):
            out[label] = figures["timeline"]
    return out


def _group_from_report(report: Mapping[str, Any], path: Path) -> None:
    sides = group_timelines(report)
    if not sides:
        raise ValueError("the group report has no timeline")
    note = (f"{report.get('members', 3)} members over {report.get('partitions', '?')} "
            f"partitions, {report.get('records', 0):,} records; session "
            f"{report.get('session_timeout_ms', '?')} ms, heartbeat "
            f"{report.get('heartbeat_interval_ms', '?')} ms")  # fmt: skip
    group_timeline_chart(sides, path, note=note)


# -- every chart of a run --------------------------------------------------------------------

_FROM_REPORT = {"latency_cdf.png": _latency_from_report,
                "latency_all_cdf.png": _latency_from_report,
                "failover_timeline.png": _failover_from_report,
                "group_timeline.png": _group_from_report}  # fmt: skip


def write_charts(summary: Mapping[str, Any], results_dir: Path | str) -> list[Path]:
    """Draw summary.png and the chart of every workload in ``summary`` that ran and succeeded
    (its report read from ``<results_dir>/<workload>.json``) into ``results_dir``; answers
    the paths written. A workload chart that cannot be drawn is reported on stderr and
    skipped: the figures are in the JSON already, and the other charts still count."""
    results = Path(results_dir)
    written = [results / "summary.png"]
    summary_chart(summary, written[0])
    for name, workload in WORKLOAD_CHARTS.items():
        entry = summary["workloads"].get(workload)
        source = results / f"{workload}.json"
        if entry is None or entry["status"] != "ok" or not source.exists():
            continue
        try:
            report = json.loads(source.read_text()).get("report")
            if report:
                _FROM_REPORT[name](report, results / name)
                written.append(results / name)
        except Exception:  # named on stderr; the run goes on
            print(f"could not draw {name} from {source}:", file=sys.stderr)
            traceback.print_exc()
    return written
