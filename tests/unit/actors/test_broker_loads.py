"""The controller's store of load reports (``rafka.actors.broker_loads``) on a fake clock: the
latest report per broker, reports of unregistered brokers dropped, stale reports keeping
their sizes with no traffic, and a partition's size and traffic read from its replicas."""

from __future__ import annotations

import pytest

from rafka.actors.broker_loads import STALE_INTERVALS, BrokerLoads, parse_report, partition_load
from rafka.cluster.load_rates import ReplicaLoad

INTERVAL_MS = 5_000


def report(capacity: int = 1_000, used: int = 100, *replicas: list) -> dict:
    return {"disk_capacity": capacity, "disk_used": used, "replicas": [list(r) for r in replicas]}


def test_the_latest_report_of_each_broker_is_kept():
    loads = BrokerLoads()
    assert loads.record(0, report(1_000, 100, ["tid", 0, 100, 5.0, 1.0]), 0, {0, 1})
    assert loads.record(0, report(1_000, 300, ["tid", 0, 300, 7.0, 2.0]), 1_000, {0, 1})
    assert loads.record(1, report(2_000, 0), 1_000, {0, 1})
    now = loads.current({0, 1}, 2_000, INTERVAL_MS)
    assert now[0].disk_used == 300
    assert now[0].replicas[("tid", 0)] == ReplicaLoad("tid", 0, 300, 7.0, 2.0)
    assert (now[1].disk_capacity, now[1].replicas) == (2_000, {})


def test_a_report_from_a_broker_that_is_not_registered_is_dropped():
    loads = BrokerLoads()
    assert not loads.record(7, report(), 0, {0, 1})
    assert loads.current({0, 1, 7}, 0, INTERVAL_MS) == {}


def test_a_kept_report_goes_once_its_broker_is_no_longer_registered():
    """A retired broker's report is dropped for good, even if its id were registered again."""
    loads = BrokerLoads()
    loads.record(2, report(), 0, {0, 1, 2})
    assert set(loads.current({0, 1}, 0, INTERVAL_MS)) == set()
    assert set(loads.current({0, 1, 2}, 0, INTERVAL_MS)) == set()


def test_a_stale_report_keeps_its_sizes_and_counts_no_traffic():
    loads = BrokerLoads()
    loads.record(0, report(1_000, 400, ["tid", 0, 400, 9.0, 3.0]), 0, {0})
    fresh = loads.current({0}, STALE_INTERVALS * INTERVAL_MS, INTERVAL_MS)[0]
    assert not fresh.stale and fresh.replicas[("tid", 0)].bytes_in_per_s == 9.0
    stale = loads.current({0}, STALE_INTERVALS * INTERVAL_MS + 1, INTERVAL_MS)[0]
    assert stale.stale and (stale.disk_capacity, stale.disk_used) == (1_000, 400)
    assert stale.replicas[("tid", 0)] == ReplicaLoad("tid", 0, 400, 0.0, 0.0)
    loads.record(0, report(1_000, 400, ["tid", 0, 400, 4.0, 0.0]), 20_000, {0})
    assert not loads.current({0}, 20_000, INTERVAL_MS)[0].stale  # speaking again


def test_a_report_of_the_wrong_shape_is_refused():
    with pytest.raises((KeyError, ValueError)):
        parse_report({"disk_capacity": "lots", "disk_used": 0, "replicas": []}, 0)


def test_a_partition_is_as_large_as_its_largest_replica_with_its_leaders_traffic():
    loads = BrokerLoads()
    loads.record(0, report(1_000, 0, ["tid", 0, 500, 10.0, 4.0]), 0, {0, 1, 2})
    loads.record(1, report(1_000, 0, ["tid", 0, 700, 12.0, 0.0]), 0, {0, 1, 2})
    now = loads.current({0, 1, 2}, 0, INTERVAL_MS)
    assert partition_load(now, "tid", 0, [0, 1, 2], leader=0) == (700, 10.0, 4.0)
    # The leader has not reported it yet: what each replica appends is what producers wrote.
    assert partition_load(now, "tid", 0, [0, 1, 2], leader=2) == (700, 12.0, 0.0)
    assert partition_load(now, "tid", 1, [0, 1, 2], leader=0) == (0, 0.0, 0.0)
    assert partition_load(now, "other", 0, [0], leader=0) == (0, 0.0, 0.0)
