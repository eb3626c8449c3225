"""A confluent-kafka producer rides through a leader failover on a three-node LocalCluster
with nothing acknowledged lost (see kafka_failover_scenario.py; its own process, since a
process holds one Ray connection)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "kafka_failover_scenario.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    done = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path_factory.mktemp("kafka-failover") / "data")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-5000:]
    found = json.loads(lines[-1][len("REPORT "):])
    print(json.dumps(found, indent=1))
    return found


def test_the_producer_gets_every_record_acknowledged_across_the_failover(report):
    assert report["injected"] and report["new_leader"] != report["old_leader"]
    assert report["left_unflushed"] == 0 and report["failed"] == []
    assert report["acked"] == report["total"]


def test_every_acknowledged_record_is_read_back_once_in_order(report):
    assert report["lost"] == [] and report["duplicates"] == 0
    assert report["read"] == report["acked"]
    assert report["in_send_order"] and report["offsets_match"]
