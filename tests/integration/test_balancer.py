"""The balancer on five disk nodes with a producer writing all along: disk nodes that join
(two, here) become brokers and take their share with no command, a drained broker ends
empty, a broker lost for good is replaced from the in-sync replicas after the healing delay,
and nothing acknowledged is lost.

The scenario runs once for the module in a process of its own (a process holds one Ray
connection; see balancer_scenario.py); each test checks one part of what it saw.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.integration.scenario_process import run_scenario

SCRIPT = os.path.join(os.path.dirname(__file__), "balancer_scenario.py")
#: The scenario takes under a minute; a failing one waits out its bounded waits first.
SCRIPT_TIMEOUT_S = 900

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    found = run_scenario(SCRIPT, tmp_path_factory.mktemp("balancer"), SCRIPT_TIMEOUT_S)
    print("\n" + json.dumps({k: v for k, v in found.items() if k != "settings"}))
    return found


def test_joined_disk_nodes_become_brokers_and_take_their_share_with_no_command(report):
    assert report["timings_s"]["joined_disk_registered"] < 60
    counts = report["after_node_add"]
    assert all(counts["replicas"][str(b)] > 0 for b in report["new_brokers"])
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
