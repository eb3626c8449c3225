"""A transaction coordinator killed between the commit point (PrepareCommit) and the markers
completes the commit after Ray starts it again: on three disk nodes, with the data
partition unable to take its marker (``min.insync.replicas=3``, one broker down), the commit
is answered, read_committed readers see nothing of it, the coordinator is killed, and once
the broker is back the restarted coordinator writes the markers and CompleteCommit.

The scenario runs once for the module in a process of its own (a process holds one Ray
connection; see txn_failover_scenario.py); each test checks one part of what it saw.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.integration.scenario_process import run_scenario

SCRIPT = os.path.join(os.path.dirname(__file__), "txn_failover_scenario.py")
#: The scenario takes about a minute; a failing one waits out its bounded waits first.
SCRIPT_TIMEOUT_S = 600

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Any]:
    found = run_scenario(SCRIPT, tmp_path_factory.mktemp("txn-failover"), SCRIPT_TIMEOUT_S)
    print("\n" + found["summary"])
    return found


def test_the_stopped_broker_leads_neither_partition_nor_runs_the_coordinator(report):
    """The broker stopped leads neither the data partition nor the id's __transaction_state
    partition, so the data ISR shrinks to the other two and PrepareCommit can be written;
    the coordinator runs on another node, so only the scenario's own kill stops it."""
    stopped = report["stopped_broker"]
    assert stopped not in (report["data_leader"], report["txn_state_leader"])
    assert report["coordinator_before"]["node_id"] != report["stopped_node_id"]
    assert report["isr_while_down"] == sorted(
        b for b in map(int, report["brokers"]) if b != stopped
    )


def test_commit_returns_at_prepare_commit_while_no_marker_can_be_written(report):
    """commit_transaction() returns with the broker down; the coordinator holds the
    transaction in PrepareCommit and read_committed readers see none of its records: the
    last stable offset stays at the transaction's first offset below the high watermark."""
    assert report["commit_returned"] is True
    assert report["state_after_commit"] == "PrepareCommit"
    assert report["high_watermark_after_writes"] == report["records"]
    assert report["open_transaction_first_offset"] == 0
    assert report["read_after_commit"] == {"values": [], "end_offset": 0, "position": 0}
    assert len(report["isr_after_commit"]) == 2


def test_the_killed_coordinator_runs_again_and_still_holds_the_prepared_commit(report):
    """The coordinator's process is killed and Ray starts another; it loads its partition
    of __transaction_state and finds the transaction still PrepareCommit, still invisible
    while the broker is down."""
    assert report["coordinator_restarted"] is True
    assert report["state_after_restart"] == "PrepareCommit"
    assert report["read_after_restart"]["values"] == []
    assert report["read_after_restart"]["end_offset"] == 0


def test_the_restarted_coordinator_completes_the_commit_once_the_broker_is_back(report):
    """With the broker back in the ISR, the restarted coordinator writes the COMMIT marker
    and CompleteCommit: read_committed readers get every record, in order, once."""
    assert report["state_after_revive"] == "CompleteCommit"
    assert report["all_visible"] is True
    assert report["read_after_revive"]["values"] == [f"txn1-{i}" for i in range(report["records"])]
    assert report["read_after_revive"]["end_offset"] == report["records"] + 1  # the marker
    assert report["isr_after_revive"] == sorted(map(int, report["brokers"]))


def test_the_producer_commits_its_next_transaction_after_the_failover(report):
    """The producer that committed through the failover goes on: its next transaction
    commits and is read after the first."""
    assert report["state_after_next"] == "CompleteCommit"
    assert report["final_ok"] is True
