"""The transactions benchmark's arithmetic (bench/transactions.py): commit latency
percentiles, best and median over rounds, and its registration in the harness."""

from __future__ import annotations

import pytest

from bench import transactions


def test_latency_figures_are_milliseconds_of_the_given_seconds():
    """p50 and p99 interpolate between the samples (numpy's default), in ms."""
    figures = transactions.latency_figures([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert figures["count"] == 100
    assert figures["p50_ms"] == pytest.approx(50.5)
    assert figures["p99_ms"] == pytest.approx(99.01)
    assert figures["mean_ms"] == pytest.approx(50.5)
    assert figures["max_ms"] == pytest.approx(100.0)


def test_latency_figures_of_no_commits_have_no_percentiles():
    """With nothing timed there is a count of zero and no percentile to report."""
    assert transactions.latency_figures([]) == {"count": 0}


def test_summarise_takes_the_best_and_the_median_of_each_sides_rates():
    """Every side's rate gets the highest value and the median over the rounds; figures
    that are not rates (where the highest is not the best) are left to the rounds."""
    rounds = [
        {"transactional": {"records_per_s": 10.0, "init_transactions_ms": 4000.0},
         "idempotent": {"records_per_s": 40.0}},
        {"transactional": {"records_per_s": 30.0}, "idempotent": {"records_per_s": 20.0}},
        {"transactional": {"records_per_s": 20.0}, "idempotent": {"records_per_s": 30.0}},
    ]
    assert transactions.summarise(rounds) == {
        "transactional.records_per_s": {"best": 30.0, "median": 20.0},
        "idempotent.records_per_s": {"best": 40.0, "median": 30.0},
    }


def test_the_harness_runs_it_on_the_embedded_instance_by_default():
    """``python -m bench`` with no names includes it, with the embedded workloads."""
    from bench import harness

    workload = harness.WORKLOADS["transactions"]
    assert workload.cluster == "embedded" and not workload.peer
    assert "transactions" in harness.resolve([])
    assert harness.resolve(["controller", "transactions", "group"]) == [
        "group", "transactions", "controller"
    ]  # fmt: skip
    args = harness.parse(["transactions", "--tiny"])
    assert args.workloads == ["transactions"]
    assert args.txn_transactions == transactions.TINY["txn_transactions"]
    assert args.txn_records == 1_000 and args.txn_partitions == 3
