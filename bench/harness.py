"""The benchmark harness: named workloads, rafka beside the peer in the same run, results as
JSON and PNG charts.

``python -m bench [workload ...] [--tiny] [--results-dir DIR] [--no-peer] [sizes ...]`` runs
the named workloads (all of them when none is named) in the order of ``WORKLOADS``:

  storage      log append / read next to the raw disk (baseline: raw write / read)
  scale        replicas one per actor and packed: time to writable, memory, idle CPU
  kafka        confluent-kafka through rafka's Kafka listener: acks=all idempotent produce,
               consume from offset 0, p50/p99, CPU per process              (with the peer)
  produce      one producer, one partition, 100-byte values, acks=1          (with the peer)
  consume      one consumer reading a one-partition topic from the beginning  (with the peer)
  latency      end-to-end p50/p99/p99.9 at a fixed offered rate, acks=1        (with the peer)
  group        a consumer group of three over six partitions                  (with the peer)
  transactions 1,000-record transactions over 3 partitions, acks=all: records/s, commit
               p50/p99, read_committed reads (baselines: idempotent, read_uncommitted)
  spark        Spark reading a topic and aggregating (baseline: the same rows from Parquet)
  produce-all  acks=all on RF=3 across three local nodes (baseline: acks=1, RF=1, same nodes)
  failover     time from killing a partition leader's node to the next acks=all write
  controller   the controller killed under a producer: the write gap, its restart, a reconcile
  balancer     a fourth disk node joins three: time to its share, copy rate, producer p99
               during the moves (baseline: before them), moves per minute

``clients`` (produce + consume) and ``groups`` (group) are accepted as the older names.

The peer is the confluent-kafka client (librdkafka) against a Tansu broker that the harness
starts on loopback when the first workload needs it and stops at the end (``bench/peer.py``).
It is an optional benchmark dependency (``pip install -e '.[bench]'``): without it the
workloads run for rafka alone and say so. Tansu keeps data in memory and has no replication,
so produce-all and failover have no peer figure; spark and storage are compared with their
baselines instead.

Workloads that run on one embedded Ray node (produce, consume, latency, group, transactions,
spark) share one rafka instance, each with topics of its own that it deletes; produce-all,
failover and controller share one ``LocalCluster`` of three disk nodes, started after the
embedded instance is shut down. balancer runs last, on a LocalCluster of its own (three disk
nodes and a fourth that joins: it changes the brokers), after the shared one is shut down.
scale and kafka start (and stop) rafka instances of their own, one after the other, before
the shared ones: their cluster settings differ from theirs (kafka's opens a Kafka listener).

Every workload writes ``<results-dir>/<workload>.json`` (the machine, the command line, every
argument, the summary rows and the workload's full report); the run writes
``summary.json`` (the rows of every workload run) and PNG charts (bench/chart.py):
``summary.png`` (their ratios as bars) and, for the workloads that ran, ``latency_cdf.png``,
``failover_timeline.png`` and ``group_timeline.png``.
A ratio is rafka's advantage over the other side: rafka / other for rates, other / rafka for
times and latencies, so above 1 always means rafka did better.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shlex
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.machine import describe

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DATA_DIR = Path(__file__).resolve().parent.parent / "bench-data"
NAMESPACE = "rafka-bench"
RATIO_MEANING = ("rafka's advantage over the other side: rafka/other for rates, other/rafka for "
                 "times and latencies; above 1 means rafka did better")  # fmt: skip
PEER_LABEL = "peer"


@dataclass(frozen=True)
class Workload:
    name: str
    module: str
    function: str
    about: str
    cluster: str  # "none", "embedded" or "local"
    peer: bool  # whether the peer runs it too

    def run(self, ctx: "Context", args: argparse.Namespace) -> dict[str, Any]:
        return getattr(importlib.import_module(self.module), self.function)(ctx, args)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("storage", "bench.storage", "workload",
                 "log append and read vs the raw disk", "none", False),
        Workload("scale", "bench.scale", "workload",
                 "replicas one per actor vs packed: writable, memory, idle CPU", "none", False),
        Workload("kafka", "bench.kafka_wire", "workload",
                 "confluent-kafka via rafka's Kafka listener: acks=all produce, consume",
                 "none", True),
        Workload("produce", "bench.clients", "produce_workload",
                 "one producer, one partition, acks=1", "embedded", True),
        Workload("consume", "bench.clients", "consume_workload",
                 "one consumer from the beginning of one partition", "embedded", True),
        Workload("latency", "bench.latency", "workload",
                 "end-to-end latency at a fixed offered rate, acks=1", "embedded", True),
        Workload("group", "bench.groups", "workload",
                 "a consumer group of three over six partitions", "embedded", True),
        Workload("transactions", "bench.transactions", "workload",
                 "1,000-record transactions vs the idempotent producer; read_committed",
                 "embedded", False),
        Workload("spark", "bench.spark", "workload",
                 "Spark read + aggregate vs the same rows from Parquet", "embedded", False),
        Workload("produce-all", "bench.failover", "produce_all_workload",
                 "acks=all, RF=3 on three local nodes vs acks=1, RF=1", "local", False),
        Workload("latency-all", "bench.latency_all", "workload",
                 "latency of acks=all RF=3 vs acks=1 RF=1; where an ack's time goes",
                 "local", False),
        Workload("failover", "bench.failover", "failover_workload",
                 "leader's node killed -> next acks=all write acknowledged", "local", False),
        Workload("controller", "bench.controller", "workload",
                 "controller killed under a producer: write gap, restart, reconcile", "local",
                 False),
        Workload("balancer", "bench.balancer", "workload",
                 "a disk node joins three: time to its share, producer p99, moves/min",
                 "local", False),
    )  # fmt: skip
}
ALIASES = {"clients": ("produce", "consume"), "groups": ("group",), "all": tuple(WORKLOADS)}
#: Modules with options (``add_arguments``) and tiny sizes (``TINY``), in the help's order.
OPTION_MODULES = ("bench.storage", "bench.scale", "bench.kafka_wire", "bench.clients",
                  "bench.latency", "bench.groups", "bench.transactions", "bench.spark", "bench.failover",
                  "bench.latency_all", "bench.controller", "bench.balancer")  # fmt: skip
OPTION_TITLES = {
    "bench.storage": "storage", "bench.scale": "scale", "bench.kafka_wire": "kafka",
    "bench.clients": "produce and consume",
    "bench.latency": "latency", "bench.groups": "group", "bench.transactions": "transactions",
    "bench.spark": "spark",
    "bench.failover": "produce-all and failover", "bench.latency_all": "latency-all",
    "bench.controller": "controller",
    "bench.balancer": "balancer",
}  # fmt: skip


# -- a summary row -----------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def row(
    metric: str,
    unit: str,
    rafka: float | None,
    *,
    peer: float | None = None,
    baseline: float | None = None,
    baseline_label: str | None = None,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """One figure of a workload: rafka's, the peer's or a baseline's, and the ratio (rafka's
    advantage, above 1 = rafka better)."""
    other = peer if peer is not None else baseline
    ratio = None
    if _number(rafka) and _number(other) and rafka > 0 and other > 0:
        ratio = rafka / other if higher_is_better else other / rafka
    return {
        "metric": metric, "unit": unit, "higher_is_better": higher_is_better,
        "rafka": rafka, "peer": peer, "baseline": baseline,
        "against": PEER_LABEL if peer is not None else baseline_label,
        "ratio": ratio,
    }  # fmt: skip


# -- what workloads share ----------------------------------------------------------------------


class Context:
    """The rafka instances and the peer broker of one run, started when first asked for and
    stopped by ``close()``. One process holds one Ray connection: the embedded instance is
    shut down before the LocalCluster starts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # Data of this run only: another run (a test, say) may be going on beside it.
        self.data_dir = DATA_DIR / f"run-{os.getpid()}"
        # The LocalCluster's processes trace into it when latency-all switches it on.
        self.stage_trace_dir = str(self.data_dir / "stage-trace")
        self._embedded = None
        self._local = None  # (LocalCluster, rafka Cluster)
        self._broker = None
        self.peer_error: str | None = "--no-peer" if args.no_peer else None
        self.peer_info: dict[str, Any] | None = None

    def embedded(self):
        """The rafka Cluster on one embedded Ray node with one disk."""
        if self._local is not None:
            raise RuntimeError("the embedded instance cannot start after the LocalCluster")
        if self._embedded is None:
            from bench.embedded import start_embedded

            began = time.monotonic()
            self._embedded = start_embedded(self.data_dir / "embedded", NAMESPACE)
            _log(f"embedded rafka started in {time.monotonic() - began:.1f} s")
        return self._embedded

    def stop_embedded(self) -> None:
        if self._embedded is None:
            return
        import ray

        cluster, self._embedded = self._embedded, None
        try:
            cluster.shutdown()
        finally:
            ray.shutdown()
            shutil.rmtree(self.data_dir / "embedded", ignore_errors=True)

    def local(self):
        """(LocalCluster, rafka Cluster): a head node and one node per disk (three)."""
        if self._local is None:
            from bench import failover
            from rafka.actors import stage_trace

            self.stop_embedded()
            stage_trace.enable(self.stage_trace_dir)  # inherited by the nodes it starts
            began = time.monotonic()
            self._local = failover.start_local(self.args.failover_disks,
                                               self.data_dir / "failover")  # fmt: skip
            _log(f"LocalCluster with {self.args.failover_disks} disk nodes started in "
                 f"{time.monotonic() - began:.1f} s")  # fmt: skip
        return self._local

    def stop_local(self) -> None:
        """Shut the shared LocalCluster down (a workload with a cluster of its own needs the
        process's Ray connection)."""
        if self._local is None:
            return
        from bench import failover

        local, self._local = self._local[0], None
        failover.stop_local(local)

    def peer(self):
        """The running Tansu broker (``bench.peer.TansuBroker``), or None when the peer is
        switched off or not installed (``peer_error`` says why)."""
        if self._broker is None and self.peer_error is None:
            from bench import peer

            try:
                broker = peer.TansuBroker()
                broker.__enter__()
            except (RuntimeError, OSError) as exc:  # not installed, or the broker would not run
                self.peer_error = str(exc)
                _log(f"the peer is not available, rafka runs alone: {exc}")
                return None
            self._broker = broker
            ck = peer._import_confluent_kafka()
            self.peer_info = {
                "client": f"confluent-kafka {ck.__version__}, librdkafka {ck.libversion()[0]}",
                "broker": f"{Path(broker.binary).name}, memory storage, loopback",
                "broker_startup_s": broker.startup_s,
            }
        return self._broker

    def close(self) -> None:
        try:
            if self._broker is not None:
                broker, self._broker = self._broker, None
                broker.__exit__(None, None, None)
        finally:
            try:
                self.stop_embedded()
            finally:
                self.stop_local()
                shutil.rmtree(self.data_dir, ignore_errors=True)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the command line --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    names = ", ".join(WORKLOADS)
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run rafka's benchmark workloads (all when none is named), rafka beside "
        "the peer (confluent-kafka against Tansu) in the same run.",
        epilog=f"workloads: {names}; aliases: clients = produce + consume, groups = group. "
        "Results: <results-dir>/<workload>.json, summary.json and PNG charts.",
    )
    # No `choices=`: with nargs="*", argparse before 3.12 rejects the empty default.
    parser.add_argument("names", nargs="*", metavar="workload",
                        help=f"workloads to run: {names}")
    parser.add_argument("--tiny", action="store_true",
                        help="every size at its tiny default (seconds per workload), for tests; "
                        "sizes given explicitly still count")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR),
                        help=f"where the JSON and PNG go (default {RESULTS_DIR})")
    parser.add_argument("--no-peer", action="store_true",
                        help="measure rafka only (no Tansu broker, no confluent-kafka)")
    parser.add_argument("--value-size", type=int, default=100,
                        help="bytes per record value, every workload but spark and storage "
                        "(default 100)")  # fmt: skip
    for name in OPTION_MODULES:
        module = importlib.import_module(name)
        module.add_arguments(parser.add_argument_group(OPTION_TITLES[name]))
    return parser


def tiny_defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in OPTION_MODULES:
        out.update(getattr(importlib.import_module(name), "TINY", {}))
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--tiny", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if known.tiny:
        parser.set_defaults(**tiny_defaults())
    args = parser.parse_args(argv)
    try:
        args.workloads = resolve(args.names)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def resolve(names: list[str]) -> list[str]:
    """The workloads ``names`` ask for (aliases expanded), in ``WORKLOADS`` order."""
    wanted: set[str] = set()
    for name in names or ["all"]:
        if name in WORKLOADS:
            wanted.add(name)
        elif name in ALIASES:
            wanted.update(ALIASES[name])
        else:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)} "
                             f"(or {', '.join(ALIASES)})")  # fmt: skip
    return [name for name in WORKLOADS if name in wanted]


# -- the run -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "bench", *argv])
    machine = describe()
    arguments = {k: v for k, v in vars(args).items() if k not in ("names",)}
    summary: dict[str, Any] = {
        "command": command, "machine": machine, "tiny": args.tiny, "ratio": RATIO_MEANING,
        "workloads": {},
    }  # fmt: skip
    ctx = Context(args)
    began = time.monotonic()
    try:
        for name in args.workloads:
            entry = run_one(WORKLOADS[name], ctx, args)
            summary["workloads"][name] = entry["summary"]
            entry["detail"].update(command=command, machine=machine, arguments=arguments,
                                   peer=ctx.peer_info, peer_error=ctx.peer_error)  # fmt: skip
            path = results / f"{name}.json"
            path.write_text(json.dumps(entry["detail"], indent=2, default=_json_default) + "\n")
            _log(f"{name}: {entry['summary']['status']} in {entry['summary']['seconds']:.1f} s, "
                 f"results: {path}")  # fmt: skip
    finally:
        ctx.close()
    summary["peer"] = ctx.peer_info
    summary["peer_error"] = ctx.peer_error
    summary["total_s"] = time.monotonic() - began
    (results / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default)
                                          + "\n")  # fmt: skip
    charts = write_charts(summary, results)
    print(render(summary))
    print(f"results: {results}/<workload>.json, summary.json")
    for path in charts:
        print(f"chart: {path}")
    failed = [n for n, w in summary["workloads"].items() if w["status"] != "ok"]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run_one(workload: Workload, ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    _log(f"\n== {workload.name}: {workload.about}")
    began = time.monotonic()
    error = None
    result: dict[str, Any] = {"rows": [], "report": None}
    try:
        result = workload.run(ctx, args)
    except Exception as exc:  # one workload's failure must not lose the others' figures
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - began
    status = "ok" if error is None else "error"
    peer_runs = workload.peer and ctx.peer_error is None
    summary = {
        "about": workload.about, "status": status, "error": error, "seconds": seconds,
        "peer_runs": peer_runs,
        "rows": result["rows"],
    }  # fmt: skip
    if workload.peer and not peer_runs:
        summary["peer_skipped"] = ctx.peer_error
    detail = {"workload": workload.name, **summary, "report": result["report"]}
    return {"summary": summary, "detail": detail}


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return repr(value)


# -- printing ----------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if not _number(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def fmt_ratio(ratio: Any) -> str:
    return f"{ratio:.2f}x" if _number(ratio) else "-"


def render(summary: dict[str, Any]) -> str:
    m = summary["machine"]
    lines = [
        "",
        f"summary: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, Python "
        f"{m['python']}" + (" -- TINY sizes: the figures only show the harness works" if
                            summary["tiny"] else ""),
        f"peer: {(summary.get('peer') or {}).get('client', '-')}; "
        f"{(summary.get('peer') or {}).get('broker', summary.get('peer_error') or '-')}",
        f"{'workload':<12} {'figure':<34} {'rafka':>12} {'other':>12} {'other is':<14} "
        f"{'ratio':>8}  unit",
    ]  # fmt: skip
    for name, entry in summary["workloads"].items():
        if entry["status"] != "ok":
            lines.append(f"{name:<12} FAILED: {entry['error']}")
            continue
        for r in entry["rows"]:
            other = r["peer"] if r["peer"] is not None else r["baseline"]
            lines.append(
                f"{name:<12} {r['metric']:<34} {fmt(r['rafka']):>12} {fmt(other):>12} "
                f"{r['against'] or '-':<14} {fmt_ratio(r['ratio']):>8}  {r['unit']}"
            )
        if entry.get("peer_skipped"):
            lines.append(f"{'':<12} (peer skipped: {entry['peer_skipped']})")
    lines.append(f"ratio: {summary['ratio']}")
    return "\n".join(lines)


def write_chart(summary: dict[str, Any], path: Path) -> None:
    """Draw ``summary.png`` (rafka's advantage per figure, as bars) at ``path``."""
    from bench import chart

    chart.summary_chart(summary, path)


def write_charts(summary: dict[str, Any], results: Path) -> list[Path]:
    """Draw summary.png and the charts of the workloads that ran (latency_cdf.png,
    failover_timeline.png, group_timeline.png) into ``results``; answers their paths (none
    when matplotlib, a benchmark dependency, is not installed)."""
    from bench import chart

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _log("no charts: matplotlib is not installed (pip install -e '.[bench]')")
        return []
    return chart.write_charts(summary, results)


def run_main(argv: list[str] | None = None) -> None:
    sys.exit(main(argv))

