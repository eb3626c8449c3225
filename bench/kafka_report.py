"""The kafka workload's figures (bench/kafka_wire.py) as numbers and tables: latency
percentiles, CPU per million records, the best of the rounds, the harness's rows, and the
text and Markdown tables. Pure functions of the report's dictionaries: no Ray, no broker.

Units: seconds; ms for latencies; records/s; MB/s with MB = 10**6 value bytes; ``cpu_s_per_m``
CPU seconds per million records; ``cores`` CPU seconds per wall second of the phase.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

SIDES = ("rafka", "tansu")
PHASES = ("produce", "consume")
#: The client's main thread (the Python loop); the rest of ``client`` is librdkafka's threads.
CLIENT_THREAD = "client Python thread"
#: Process labels in the order the CPU table shows them; ``machine`` is the whole machine.
PROCESSES = ("client", CLIENT_THREAD, "listener", "partition host", "controller",
             "other rafka actors", "ray system", "tansu broker")  # fmt: skip


# -- arithmetic ------------------------------------------------------------------------------


def latency_figures(samples_s: list[float]) -> dict[str, float]:
    """p50/p99/max of latency samples given in seconds, in ms; ``{"samples": 0}`` if none."""
    if not samples_s:
        return {"samples": 0}
    ordered = sorted(samples_s)

    def pct(q: float) -> float:  # linear interpolation between closest ranks (numpy's default)
        k = (len(ordered) - 1) * q
        lo = int(k)
        hi = min(lo + 1, len(ordered) - 1)
        return (ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)) * 1e3

    return {"samples": len(ordered), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": ordered[-1] * 1e3}  # fmt: skip


def cpu_figures(before: dict[str, float], after: dict[str, float], records: int,
                wall_s: float) -> dict[str, dict[str, float]]:  # fmt: skip
    """label -> CPU seconds spent between two snapshots, per million records, and cores
    (CPU s / wall s). A label missing from either snapshot (its process was gone) is left
    out."""
    out = {}
    for label, end in after.items():
        if label not in before:
            continue
        cpu = max(0.0, end - before[label])
        out[label] = {"cpu_s": cpu, "cpu_s_per_m": cpu / records * 1e6 if records else 0.0,
                      "cores": cpu / wall_s if wall_s > 0 else 0.0}  # fmt: skip
    return out


def summarise(rounds: list[dict]) -> dict[str, Any]:
    """Per side and phase: best and median records/s; the best round's figures (MB/s, wall,
    CPU per process, latency); for produce the lowest p50/p99 over the rounds."""
    out: dict[str, Any] = {}
    for side in SIDES:
        for phase in PHASES:
            runs = [r[side][phase] for r in rounds if side in r and phase in r[side]]
            if not runs:
                continue
            best = max(runs, key=lambda f: f["records_per_s"])
            entry = {
                "records_per_s": best["records_per_s"], "mb_per_s": best["mb_per_s"],
                "seconds": best["seconds"],
                "median_records_per_s": statistics.median(f["records_per_s"] for f in runs),
                "cpu": best.get("cpu", {}),
            }  # fmt: skip
            for q in ("p50_ms", "p99_ms"):
                values = [f["latency"][q] for f in runs if q in f.get("latency", {})]
                if values:
                    entry[q] = min(values)
            out[f"{side}.{phase}"] = entry
    return out


def ratio(summary: dict, phase: str, key: str = "records_per_s") -> float | None:
    """rafka / Tansu for a rate (above 1: rafka faster), or None when a side is missing."""
    r, t = summary.get(f"rafka.{phase}", {}).get(key), summary.get(f"tansu.{phase}", {}).get(key)
    return r / t if r and t else None


def summary_rows(summary: dict, row: Callable[..., dict]) -> list[dict]:
    """The harness's rows (``bench.harness.row``): rafka's figure beside Tansu's."""

    def fig(side: str, phase: str, key: str) -> float | None:
        return summary.get(f"{side}.{phase}", {}).get(key)

    out = []
    for phase, label in (("produce", "produce acks=all idempotent"),
                         ("consume", "consume from offset 0")):  # fmt: skip
        for key, unit in (("records_per_s", "records/s"), ("mb_per_s", "MB/s")):
            out.append(row(label, unit, fig("rafka", phase, key), peer=fig("tansu", phase, key)))
    for key in ("p50_ms", "p99_ms"):
        out.append(row(f"produce {key[:3]} latency", "ms", fig("rafka", "produce", key),
                       peer=fig("tansu", "produce", key), higher_is_better=False))  # fmt: skip
    return out


def _num(value: Any, digits: int = 2) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def throughput_table(report: dict) -> list[list[str]]:
    """Header and one row per phase and broker: rates, wall time, latency, rafka/Tansu."""
    summary = report["summary"]
    rows = [["phase", "broker", "records/s", "MB/s", "wall s", "p50 ms", "p99 ms",
             "rafka/Tansu"]]  # fmt: skip
    for phase in PHASES:
        for side in SIDES:
            f = summary.get(f"{side}.{phase}")
            if f is None:
                continue
            vs = ratio(summary, phase) if side == "rafka" else None
            rows.append([phase, side, _num(f["records_per_s"]), _num(f["mb_per_s"]),
                         _num(f["seconds"]), _num(f.get("p50_ms")), _num(f.get("p99_ms")),
                         f"{vs:.3f}x" if vs else ""])  # fmt: skip
    return rows


def cpu_table(report: dict) -> list[list[str]]:
    """Header, one row per process (CPU-s per million records and cores in each side's
    phases), ``rest of machine`` (the machine's busy time not in the listed processes:
    other programs) and the phases' wall seconds."""
    summary = report["summary"]
    columns = [(s, p) for s in SIDES for p in PHASES if f"{s}.{p}" in summary]
    header = ["process"]
    for side, phase in columns:
        header += [f"{side} {phase} CPU-s/M", "cores"]
    rows = [header]
    for label in (*PROCESSES, "rest of machine", "machine"):
        cells = [label]
        for side, phase in columns:
            cpu = summary[f"{side}.{phase}"]["cpu"]
            figures = cpu.get(label) if label != "rest of machine" else _rest(cpu)
            cells += (["-", "-"] if figures is None else
                      [_num(figures["cpu_s_per_m"]), f"{figures['cores']:.2f}"])  # fmt: skip
        if any(c != "-" for c in cells[1:]):
            rows.append(cells)
    walls = ["wall s"]
    for side, phase in columns:
        walls += [_num(summary[f"{side}.{phase}"]["seconds"]), ""]
    rows.append(walls)
    return rows


def _rest(cpu: dict) -> dict[str, float] | None:
    if "machine" not in cpu:
        return None
    listed = [f for label, f in cpu.items() if label not in ("machine", CLIENT_THREAD)]
    return {key: max(0.0, cpu["machine"][key] - sum(f[key] for f in listed))
            for key in ("cpu_s_per_m", "cores")}  # fmt: skip


def title(report: dict) -> str:
    return (f"kafka: confluent-kafka, {report['records']:,} records of {report['value_size']} "
            f"bytes, one partition, acks=all, idempotent, linger.ms={report['linger_ms']} "
            f"(best of {len(report['rounds'])} rounds)")  # fmt: skip


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def _markdown(rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    return [lines[0], "|" + "|".join("---" if i == 0 else "---:" for i in range(len(rows[0])))
            + "|", *lines[1:]]  # fmt: skip


CPU_NOTE = "where the time goes (CPU-seconds per million records; cores = CPU-s / wall-s):"


def render(report: dict) -> str:
    """The text the workload prints: throughput and latency, then CPU per process."""
    return "\n".join(["", title(report), *_aligned(throughput_table(report)), CPU_NOTE,
                      *_aligned(cpu_table(report))])  # fmt: skip


def markdown(report: dict) -> str:
    """The same two tables in Markdown, for the README."""
    return "\n".join([f"*{title(report)}*", "", *_markdown(throughput_table(report)), "",
                      CPU_NOTE[0].upper() + CPU_NOTE[1:], "", *_markdown(cpu_table(report))])
