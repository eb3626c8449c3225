"""Several nodes, each with its own disk (``ray.cluster_utils.Cluster`` on one machine):
partitions spread over the disks, and a replica follows its disk, not its Ray node."""

from __future__ import annotations

import os

import pytest

from tests.integration.script_report import run_script

SCRIPT = os.path.join(os.path.dirname(__file__), "multi_node_script.py")


@pytest.mark.slow
def test_replicas_live_on_their_disks_and_come_back_with_them(tmp_path):
    report = run_script(SCRIPT, str(tmp_path / "data"))
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
