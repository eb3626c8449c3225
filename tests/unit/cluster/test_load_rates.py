"""Replica traffic rates from host counters (``rafka.cluster.load_rates``): differences over
time between two samples, counter resets and new lives counted from 0, hosts that do not
answer keeping their sizes, and hosts that are gone forgotten."""

from __future__ import annotations

import pytest

from rafka.cluster.load_rates import (
    MIN_WINDOW_MS,
    HostSample,
    LoadRates,
    ReplicaCounters,
    ReplicaLoad,
)


def counters(appended: int, sent: int = 0, size: int = 0, since: int = 0,
             partition: int = 0) -> ReplicaCounters:  # fmt: skip
    return ReplicaCounters("tid", partition, size, appended, sent, since)


def sample(at: int, *replicas: ReplicaCounters) -> HostSample:
    return HostSample(at, list(replicas))


def test_a_rate_is_the_counter_difference_over_the_time_between_two_samples():
    rates = LoadRates()
    rates.update({0: sample(10_000, counters(1_000, 500))})
    [load] = rates.update({0: sample(15_000, counters(11_000, 3_000, size=42))})
    assert load == ReplicaLoad("tid", 0, 42, 2_000.0, 500.0)


def test_a_replica_seen_first_counts_from_zero_since_it_opened():
    """An agent that starts (or restarts) gets the replica's average over its life."""
    [load] = LoadRates().update({0: sample(60_000, counters(100_000, since=50_000))})
    assert load.bytes_in_per_s == pytest.approx(10_000.0)


def test_a_replica_opened_a_moment_ago_is_averaged_over_at_least_the_minimum_window():
    [load] = LoadRates().update({0: sample(50_010, counters(2_000, since=50_000))})
    assert load.bytes_in_per_s == pytest.approx(2_000 * 1000 / MIN_WINDOW_MS)


def test_a_counter_that_went_down_is_a_new_life_counted_from_zero():
    """The host restarted and its replica counted again from 0; the lower value is no
    negative rate, and the previous sample's counter is not subtracted from it."""
    rates = LoadRates()
    rates.update({0: sample(10_000, counters(900_000, since=0))})
    [load] = rates.update({0: sample(20_000, counters(40_000, since=0))})
    assert load.bytes_in_per_s == pytest.approx(4_000.0)


def test_a_new_life_with_counters_already_above_the_old_ones_is_still_a_new_life():
    """A replica removed and added again (or a host restarted) in one interval may already
    have counted past the old value: its new ``since_ms`` tells."""
    rates = LoadRates()
    rates.update({0: sample(10_000, counters(1_000, since=0))})
    [load] = rates.update({0: sample(20_000, counters(30_000, since=14_000))})
    assert load.bytes_in_per_s == pytest.approx(5_000.0)


def test_a_host_that_does_not_answer_keeps_its_replicas_sizes_and_last_rates():
    # The busiest hosts are the likeliest to miss a report: taking them as idle would make
    # the balancer and the autoscaler see the load drop when it is highest.
    rates = LoadRates()
    rates.update({0: sample(10_000, counters(1_000, size=7_000))})
    rates.update({0: sample(15_000, counters(11_000, 500, size=8_000))})
    assert rates.update({0: None}) == [ReplicaLoad("tid", 0, 8_000, 2_000.0, 100.0)]
    [load] = rates.update({0: sample(35_000, counters(31_000, 500, size=9_000))})
    assert load.bytes_in_per_s == pytest.approx(1_000.0)  # over the 20 s since its last answer


def test_a_host_that_is_gone_is_forgotten_and_a_new_one_in_its_slot_starts_afresh():
    rates = LoadRates()
    rates.update({0: sample(10_000, counters(1_000, size=7_000))})
    assert rates.update({}) == []
    assert rates.update({0: None}) == []


def test_each_host_and_replica_is_measured_on_its_own():
    rates = LoadRates()
    rates.update({0: sample(0, counters(0, partition=0), counters(0, partition=1)),
                  1: sample(500, counters(0, partition=2))})  # fmt: skip
    loads = rates.update({0: sample(1_000, counters(1_000, partition=0),
                                    counters(3_000, 2_000, partition=1)),
                          1: sample(2_500, counters(8_000, partition=2))})  # fmt: skip
    assert {(r.partition, r.bytes_in_per_s, r.bytes_out_per_s) for r in loads} == {
        (0, 1_000.0, 0.0), (1, 3_000.0, 2_000.0), (2, 4_000.0, 0.0)}
