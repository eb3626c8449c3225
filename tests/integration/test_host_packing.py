"""Host packing on a running cluster (slow, in its own process): with replicas packed into
shared hosts, a partition written hard gets a host actor of its own on each broker while an
idempotent acks=all producer writes all along, and nothing acknowledged is lost or
duplicated."""

from __future__ import annotations

import os

import pytest

from tests.integration.scenario_process import run_scenario

SCENARIO = os.path.join(os.path.dirname(__file__), "host_packing_scenario.py")


@pytest.mark.slow
def test_a_hot_partition_gets_hosts_of_its_own_and_every_acknowledged_record_reads_back_once(
    tmp_path,
):
    """Partition 0's replicas move out of their shared hosts (the leader's too, under
    writes); every acknowledged record is read back at its offset, once."""
    report = run_scenario(SCENARIO, tmp_path, timeout_s=300)
    print(report["summary"])
    assert report["shared_before"] is True
    assert report["hot_alone"] is True
    assert report["rehosts"] >= 2  # one replica per broker
    assert report["acked_hot"] > 0
    assert report["lost"] == 0 and report["duplicated"] == 0
    assert report["failed_sends"] == 0
