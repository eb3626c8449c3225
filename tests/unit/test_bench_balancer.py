"""The balancer benchmark's arithmetic (bench/balancer.py): the balance check, the replicas
a join copied, latency percentiles per window, and its registration in the harness."""

from __future__ import annotations

import pytest

from bench import balancer


def test_spread_is_the_most_minus_the_least_counting_a_missing_broker_as_zero():
    assert balancer.spread({0: 8, 1: 8, 2: 8, 3: 0}, [0, 1, 2, 3]) == 8
    assert balancer.spread({0: 6, 1: 6, 2: 7}, [0, 1, 2, 3]) == 7
    assert balancer.spread({0: 6, 1: 6, 2: 7, 3: 6}, [0, 1, 2, 3]) == 1
    assert balancer.spread({}, []) == 0


def test_balanced_when_replicas_and_leaders_differ_by_at_most_one_and_nothing_moves():
    """Within one of the mean, as the balancer's count goals have it."""
    replicas = {0: 6, 1: 6, 2: 6, 3: 6}
    leaders = {0: 3, 1: 3, 2: 2, 3: 4}  # spread 2: not yet
    assert not balancer.is_balanced(replicas, leaders, replicas, [], 3)
    leaders = {0: 3, 1: 3, 2: 3, 3: 3}
    assert balancer.is_balanced(replicas, leaders, replicas, [], 3)


def test_not_balanced_while_a_move_is_in_flight_or_the_new_broker_is_empty_or_unknown():
    replicas = {0: 2, 1: 2, 2: 2, 3: 2}
    leaders = {0: 1, 1: 1, 2: 1, 3: 1}
    moving = [{"topic": "t", "partition": 0, "adding": [3], "removing": [0], "isr": [0]}]
    assert not balancer.is_balanced(replicas, leaders, replicas, moving, 3)
    # Three brokers evenly loaded, the joined one not among them yet.
    three = {0: 8, 1: 8, 2: 8}
    assert not balancer.is_balanced(three, {0: 4, 1: 4, 2: 4}, three, [], 3)
    # One replica in all: spread 1 even with the new broker empty, which is not its share.
    assert not balancer.is_balanced({0: 1, 1: 0}, {0: 1, 1: 0}, [0, 1], [], 1)


def test_gained_replicas_are_those_a_broker_holds_after_and_did_not_before():
    """Leadership reorders (same set, other order) copy nothing."""
    before = {0: [1, 0], 1: [2, 1], 2: [0, 2], 3: [1, 0]}
    after = {0: [3, 1], 1: [1, 2], 2: [0, 3], 3: [1, 0]}
    assert balancer.gained_replicas(before, after) == [(0, 3), (2, 3)]
    assert balancer.gained_replicas(after, after) == []
    assert balancer.gained_replicas({}, {5: [0, 1]}) == [(5, 0), (5, 1)]


def test_latency_figures_take_the_samples_sent_in_the_window_in_ms():
    """Only what was sent in [start, end) counts; p50/p99 interpolate (numpy's default)."""
    samples = [(10.0 + i / 100, i / 1000) for i in range(1, 101)]  # 1..100 ms, sent 10.01..11
    samples += [(5.0, 9.0), (20.0, 9.0)]  # outside the window
    figures = balancer.latency_figures(samples, 10.0, 12.0)
    assert figures["count"] == 100
    assert figures["p50_ms"] == pytest.approx(50.5)
    assert figures["p99_ms"] == pytest.approx(99.01)
    assert figures["max_ms"] == pytest.approx(100.0)
    start_excluded = balancer.latency_figures([(1.0, 0.5), (2.0, 0.25)], 1.0, 2.0)
    assert start_excluded["count"] == 1 and start_excluded["max_ms"] == pytest.approx(500.0)


def test_latency_figures_of_an_empty_window_have_no_percentiles():
    assert balancer.latency_figures([(1.0, 0.1)], 2.0, 3.0) == {
        "count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None
    }  # fmt: skip


def test_ratio_and_per_minute_leave_out_what_cannot_be_divided():
    assert balancer.ratio(300.0, 100.0) == pytest.approx(3.0)
    assert balancer.ratio(None, 1.0) is None and balancer.ratio(1.0, None) is None
    assert balancer.ratio(1.0, 0.0) is None
    assert balancer.per_minute(6, 18.0) == pytest.approx(20.0)
    assert balancer.per_minute(6, 0.0) is None and balancer.per_minute(6, None) is None


def test_only_the_tick_interval_is_changed_and_every_recorded_setting_has_a_value():
    assert balancer.SETTINGS == {"partition.autobalancing.tick.interval.ms": 1000}
    settings = balancer.effective_settings()
    assert set(settings) == set(balancer.RECORDED_SETTINGS)
    assert settings["partition.autobalancing.tick.interval.ms"] == 1000
    assert settings["partition.autobalancing.mode"] == "node_add"
    assert all(value is not None for value in settings.values())


def test_the_harness_runs_it_last_with_tiny_sizes():
    from bench import harness

    workload = harness.WORKLOADS["balancer"]
    assert workload.cluster == "local" and not workload.peer
    assert harness.resolve([])[-1] == "balancer"
    args = harness.parse(["balancer", "--tiny"])
    assert args.workloads == ["balancer"]
    assert args.balancer_partitions == balancer.TINY["balancer_partitions"]
    assert args.balancer_mib_per_partition == balancer.TINY["balancer_mib_per_partition"]
    args = harness.parse(["balancer", "--balancer-mib-per-partition", "8"])
    assert args.balancer_mib_per_partition == 8.0 and args.balancer_partitions == 12


def test_render_prints_every_window_and_the_ratio():
    join = {
        "registered_s": 1.0, "agent_answers_s": 1.5, "first_move_s": 2.0,
        "last_in_flight_s": 5.0, "balanced_s": 5.5, "moves_started": 2,
        "replicas_gained": [[0, 3], [1, 3]], "leaders_moved": 1,
        "replicas_per_broker": {0: 2, 1: 2, 2: 2, 3: 2},
        "leaders_per_broker": {0: 1, 1: 1, 2: 1, 3: 1},
        "moves_seen": {"t-0": {"adding": [3], "removing": [0], "first_seen_s": 2.0,
                               "last_seen_s": 3.2},
                       "t-1": {"adding": [3], "removing": [1], "first_seen_s": 2.0,
                               "last_seen_s": 5.0}},
        "bytes_moved_per_replica": {"0@3": 4 << 20, "1@3": 4 << 20},
        "bytes_moved": 8 << 20, "copy_window_s": 3.1,
    }  # fmt: skip
    figures = {"count": 10, "p50_ms": 5.0, "p99_ms": 9.0, "max_ms": 10.0}
    report = {
        "disks": ["d1", "d2", "d3"], "new_disk": "d4", "partitions": 4,
        "replication_factor": 2, "mib_per_partition": 4.0, "settings":
        balancer.effective_settings(), "join": join, "copy_mib_s": 2.6,
        "raw_write_mib_s": 1000.0, "copy_vs_raw_write": 0.0026, "moves_per_minute": 34.3,
        "latency_before": figures, "latency_joining": figures,
        "latency_during": {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None},
        "p99_during_over_before": None, "producer": {"errors": {}},
    }  # fmt: skip
    text = balancer.render(report)
    assert "tick 1000 ms" in text and "moves in flight" in text
    assert "t-0 -> 3" in text and "4.0" in text
    assert "p99 during / before: -" in text
