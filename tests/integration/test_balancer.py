"""The balancer on four disk nodes with a producer writing all along: a joined broker takes
its share with no command, a drained broker ends empty, a broker lost for good is replaced
from the in-sync replicas after the healing delay, and nothing acknowledged is lost.

The scenario runs once for the module in a process of its own (a process holds one Ray
connection; see balancer_scenario.py); each test checks one part of what it saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "balancer_scenario.py")
#: The scenario takes one to two minutes; a failing one waits out its bounded waits first.
SCRIPT_TIMEOUT_S = 900

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    """The scenario's REPORT, run in a session of its own so that a run past its time is
    killed with every process it started (the Ray nodes of its LocalCluster)."""
    work = tmp_path_factory.mktemp("balancer")
    stderr_path = work / "stderr.log"
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, str(work / "data")], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        stderr_path.write_text(err)
        pytest.fail(f"the scenario did not finish in {SCRIPT_TIMEOUT_S} s (output in "
                    f"{stderr_path}); its end:\n{err[-5000:]}")  # fmt: skip
    finally:
        if proc.poll() is None:  # interrupted: take its Ray nodes down with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr_path.write_text(err)
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert lines, f"no report, exit {proc.returncode} (output in {stderr_path}):\n{err[-3000:]}"
    found = json.loads(lines[-1][len("REPORT "):])
    print("\n" + json.dumps({k: v for k, v in found.items() if k != "settings"}))
    assert "error" not in found, found["error"] + f"\n(output in {stderr_path})"
    return found


def test_a_joined_broker_takes_its_share_with_no_command(report):
    counts = report["after_node_add"]
    new = str(report["new_broker"])
    assert counts["replicas"][new] > 0
    assert max(counts["replicas"].values()) - min(counts["replicas"].values()) <= 1
    assert max(counts["leaders"].values()) - min(counts["leaders"].values()) <= 1


def test_a_drained_broker_ends_with_no_replicas_and_no_leaderships(report):
    drained = str(report["drained_broker"])
    assert report["after_drain"]["replicas"][drained] == 0
    assert report["after_drain"]["leaders"][drained] == 0


def test_a_broker_lost_for_good_is_replaced_after_the_healing_delay(report):
    lost = report["lost_broker"]
    assert all(lost not in replicas and len(replicas) == 2 for replicas in report["after_heal"])


def test_nothing_acknowledged_is_lost_while_replicas_move(report):
    assert report["acked"] > 0
    assert report["lost"] == 0
    assert report["duplicates"] == 0
