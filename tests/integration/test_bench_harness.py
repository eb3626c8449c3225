"""The benchmark harness cannot rot: ``python -m bench --tiny`` runs every workload at a size
that takes seconds, rafka beside the peer, and writes its results. Figures are not checked
against anything (tiny runs on a busy machine say nothing about speed), only that each is a
finite positive number where one is due."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_every_workload_runs_at_a_tiny_size_with_the_peer(tmp_path):
    from bench.harness import WORKLOADS

    results = tmp_path / "results"
    # Its own process: this one may hold the test session's Ray connection.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--results-dir", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    summary_path = results / "summary.json"
    if summary_path.exists():  # name the failed workloads and their errors before the exit code
        failed = {name: entry["error"] for name, entry in
                  json.loads(summary_path.read_text())["workloads"].items()
                  if entry["status"] != "ok"}  # fmt: skip
        if failed:
            pytest.fail(f"workloads failed: {failed}\n--- stderr tail ---\n"
                        f"{done.stderr[-4000:]}", pytrace=False)  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])

    summary = json.loads(summary_path.read_text())
    assert set(summary["workloads"]) == set(WORKLOADS)
    assert summary["peer_error"] is None, summary["peer_error"]
    machine = summary["machine"]
    assert machine["cpus"] >= 1 and machine["python"] and machine["versions"]["ray"]
    for name, workload in WORKLOADS.items():
        entry = summary["workloads"][name]
        assert entry["status"] == "ok", (name, entry["error"])
        assert entry["rows"], name
        for row in entry["rows"]:
            assert _positive(row["rafka"]), (name, row)
            if row["baseline"] is not None:  # against a baseline (also in a peer workload)
                assert _positive(row["baseline"]) and _positive(row["ratio"]), (name, row)
            elif workload.peer:  # the peer runs it: its figure and the ratio are there
                assert _positive(row["peer"]) and _positive(row["ratio"]), (name, row)
        detail = json.loads((results / f"{name}.json").read_text())
        assert detail["workload"] == name and detail["machine"]["cpus"] == machine["cpus"]
        assert detail["report"] is not None
    assert (results / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "summary:" in done.stdout


@pytest.mark.slow
def test_the_kafka_workload_runs_at_a_tiny_size_against_both_brokers(tmp_path):
    """``python -m bench kafka --tiny``: confluent-kafka produces and consumes through
    rafka's listener and Tansu; every rate, latency and ratio is a positive number, and the
    CPU of the listener, the partition's host, the controller and the client is measured."""
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "kafka", "--tiny", "--results-dir", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    detail = json.loads((results / "kafka.json").read_text())
    assert detail["status"] == "ok" and detail["peer_error"] is None, detail["error"]
    for row in detail["rows"]:
        assert _positive(row["rafka"]) and _positive(row["peer"]), row
        assert _positive(row["ratio"]), row
    summary = detail["report"]["summary"]
    for phase in ("produce", "consume"):
        cpu = summary[f"rafka.{phase}"]["cpu"]
        for label in ("client", "listener", "partition host", "controller", "machine"):
            assert label in cpu and cpu[label]["cpu_s"] >= 0, (phase, label, cpu)
        assert {"client", "tansu broker"} <= set(summary[f"tansu.{phase}"]["cpu"])
    assert "where the time goes" in done.stdout
