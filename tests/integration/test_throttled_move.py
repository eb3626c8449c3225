"""A replica move under a low ``replication.throttled.rate``, on two disk nodes (a LocalCluster
in a process of its own: see throttled_move_scenario.py): the new replica copies the whole
log through its throttle, waiting for its budget, and the move completes with every record
intact. Nothing is timed: the throttle's own accounting says it held the copy back."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.integration.scenario_process import run_scenario

SCRIPT = os.path.join(os.path.dirname(__file__), "throttled_move_scenario.py")
SCRIPT_TIMEOUT_S = 600

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    found = run_scenario(SCRIPT, tmp_path_factory.mktemp("throttled-move"), SCRIPT_TIMEOUT_S)
    print("\n" + json.dumps(found))
    return found


def test_a_throttled_move_completes_with_every_record_intact(report):
    moved = report["moved"]
    assert moved["adding"] == [] and moved["removing"] == [] and moved["isr"] == moved["replicas"]
    assert report["read"] == report["records"]
    assert report["offsets_in_order"] and report["values_intact"]


def test_the_new_replica_copied_the_log_through_its_throttle(report):
    """Every byte of the log was taken by throttled fetches at the whole rate (the only move
    into and out of its brokers), and the copy waited for its budget."""
    throttle = report["throttle"]
    assert throttle is not None, "the replica's description has no throttle"
    assert throttle["bytes"] >= report["before"]["size_bytes"]
    assert throttle["waited_s"] > 0
    assert throttle["rate"] == report["rate"]
    assert throttle["throttled"] is False  # caught up and in sync: no longer held back
