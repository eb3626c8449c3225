"""Several nodes, each with its own disk (``ray.cluster_utils.Cluster`` on one machine):
partitions spread over the disks, and a replica follows its disk, not its Ray node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "multi_node_script.py")


@pytest.mark.slow
def test_replicas_live_on_their_disks_and_come_back_with_them(tmp_path):
    # Its own process: the test session's process already holds a Ray connection.
    done = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path / "data")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    brokers = report["brokers"]
    assert sorted(brokers) == ["disk-a", "disk-b"]
    placed = {broker for replicas in report["replicas"] for broker in replicas}
    assert placed == set(brokers.values())  # both disks hold partitions
    for disk, broker in brokers.items():
        expected = sorted(
            f"spread-{p}" for p, replicas in enumerate(report["replicas"]) if broker in replicas
        )
        assert report["dirs"][disk] == expected  # each partition's files on its own disk
    # One disk's node was replaced by a new one with that disk: nothing acknowledged lost.
    assert report["replaced"] in brokers
    assert report["consumed_after_node_came_back"] == list(range(400))
