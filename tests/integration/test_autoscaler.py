"""rafka with Ray's real autoscaler loop (the fake multi-node provider) and a producer
writing all along: a topic that needs more brokers than exist makes rafka ask Ray for a node,
the autoscaler starts it, it becomes a broker and takes replicas; once the load is gone rafka
drains and retires a broker and Ray removes its node; nothing acknowledged is lost.

The scenario runs once for the module in a process of its own, with a Ray head of its own
(see autoscaler_scenario.py); each test checks one part of what it saw.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.integration.scenario_process import run_scenario

SCRIPT = os.path.join(os.path.dirname(__file__), "autoscaler_scenario.py")
#: The scenario takes about a minute; a failing one waits out its bounded waits first.
SCRIPT_TIMEOUT_S = 900

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    found = run_scenario(SCRIPT, tmp_path_factory.mktemp("autoscaler"), SCRIPT_TIMEOUT_S)
    print("\n" + json.dumps({k: v for k, v in found.items() if k != "settings"}))
    return found


def test_a_topic_needing_more_brokers_makes_ray_launch_a_node_that_becomes_a_broker(report):
    assert "asked Ray's autoscaler for 2 disk nodes" in report["refusal"]
    assert report["disk_nodes"]["at_start"] == 1
    assert report["disk_nodes"]["after_scale_up"] == 2
    assert all(n > 0 for n in report["after_scale_up"]["replicas"].values())


def test_once_the_load_is_gone_a_broker_is_drained_retired_and_its_node_removed(report):
    assert report["disk_nodes"]["after_scale_down"] == 1
    autoscaler = report["autoscaler"]
    assert len(autoscaler["retired"]) == 1 and autoscaler["requested"] == 1


def test_nothing_acknowledged_is_lost_while_nodes_come_and_go(report):
    assert report["acked"] > 0
    assert report["lost"] == 0
    assert report["duplicates"] == 0
