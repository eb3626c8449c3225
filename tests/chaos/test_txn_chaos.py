"""Chaos of transactions: transactional producers and read_committed readers while disk
nodes, transaction coordinators and replica host actors are killed and come back, checked
Jepsen-style: no committed write lost, nothing read twice or two things at one offset, no
aborted write read, no transaction torn, no reader going back (see txn_chaos_run.py for the
run and txn_checker.py for the checks)."""

from __future__ import annotations

import os

import pytest

from tests.chaos.script_run import run_report

SCRIPT = os.path.join(os.path.dirname(__file__), "txn_chaos_run.py")
# The fault schedule is a function of the seed: RAFKA_TXN_CHAOS_SEED=N reruns another one.
SEED = int(os.environ.get("RAFKA_TXN_CHAOS_SEED", "1"))
DURATION_S = float(os.environ.get("RAFKA_TXN_CHAOS_DURATION", "60"))


@pytest.mark.slow
def test_transactions_stay_atomic_and_isolated_while_nodes_and_coordinators_die(tmp_path):
    """Every committed transaction is read whole and once, no failed one is read at all, a
    commit of unknown outcome is all or nothing, and each read_committed reader's offsets go
    up, while nodes, coordinators and leaders' host actors are killed under the writes."""
    args = ["--seed", str(SEED), "--duration", str(DURATION_S),
            "--data-dir", str(tmp_path / "data"), "--dump", str(tmp_path / "history.json")]
    report, message = run_report(SCRIPT, args, tmp_path, "txn-chaos", DURATION_S + 420,
                                 f"; history: {tmp_path / 'history.json'}")  # fmt: skip
    assert "error" not in report, message
    assert report["fault_error"] is None, message
    assert any(not f.get("skipped") for f in report["faults"]), "no fault was made" + message
    assert not report["producer_errors"], message
    assert not report["producers_still_running"], message
    assert "settle_error" not in report, message
    result = report["result"]
    assert result["outcomes"].get("ok_txns", 0) > 0, message
    assert result["polled_records"] > 0, message
    assert result["violations"] == dict.fromkeys(result["violations"], 0), message


# -- the harness itself (fast: no Ray) ---------------------------------------------------------


def _nemesis():
    from tests.chaos import txn_nemesis

    return txn_nemesis


def test_the_fault_schedule_is_a_function_of_the_seed():
    """The same seed plans the same faults, another seed others; every kind comes up and
    every target is in range."""
    run = _nemesis()
    args = (60, 4, 3, 6, (0.4, 0.3, 0.3), (3, 8), (3, 10))
    plan = run.fault_schedule(7, *args)
    assert plan == run.fault_schedule(7, *args)
    assert plan != run.fault_schedule(8, *args)
    steps = [s for seed in range(20) for s in run.fault_schedule(seed, *args)]
    assert {s.kind for s in steps} == set(run.FAULT_KINDS)
    bound = {"node": 4, "coordinator": 3, "host": 6}
    assert all(0 <= s.target < bound[s.kind] for s in steps)
    assert sum(s.gap for s in plan) < 60


def _txn(producer: int, number: int, status: str, *writes) -> dict:
    return {"producer": producer, "number": number, "status": status,
            "writes": [list(w) for w in writes]}  # fmt: skip


def test_the_checker_counts_each_kind_of_anomaly_once():
    """Planted in a history: each anomaly is counted under its own name, and an info
    transaction may end either way as long as it is whole."""
    from tests.chaos.txn_checker import check

    txns = [
        _txn(0, 0, "ok", ("a", 0, "v0"), ("b", 0, "v1")),  # fine
        _txn(0, 1, "ok", ("a", 0, "v2"), ("b", 0, "v3")),  # v3 lost: torn and lost
        _txn(0, 2, "fail", ("a", 0, "v4")),  # read: an aborted read
        _txn(1, 0, "info", ("a", 1, "v5"), ("b", 1, "v6")),  # committed whole: fine
        _txn(1, 1, "info", ("a", 1, "v7")),  # not committed: fine
        _txn(1, 2, "ok", ("a", 1, "v8")),  # read at two offsets: duplicated
        _txn(2, 0, "ok", ("a", 2, "v9")),  # polled, then missing from the final read: lost
        _txn(2, 1, "ok", ("b", 2, "v10")),  # read in a-2: misplaced
        _txn(3, 0, "ok", ("b", 1, "v11"), ("b", 1, "v12")),  # final order v12, v11
    ]
    final = [
        ["a", 0, 0, "v0"], ["a", 0, 1, "v2"], ["a", 0, 2, "v4"],
        ["b", 0, 0, "v1"],
        ["a", 1, 0, "v5"], ["a", 1, 2, "v8"], ["a", 1, 3, "v8"],
        ["b", 1, 0, "v6"], ["b", 1, 1, "v12"], ["b", 1, 2, "v11"],
        ["a", 2, 1, "v10"], ["a", 2, 2, "v13"],  # v13: nobody wrote it
    ]  # fmt: skip
    polls = {
        "r0.0": [[1.0, "a", 0, 0, "v0"], [1.1, "a", 0, 1, "x"],  # offset 1 held v2 too
                 [1.2, "a", 0, 0, "v0"]],  # back to offset 0 without a seek
        "r1.0": [[2.0, "a", 2, 0, "v9"]],
    }  # fmt: skip
    result = check(txns, polls, final)
    assert result["violations"] == {
        "lost": 2, "duplicated": 1, "inconsistent_offsets": 1, "aborted_reads": 1,
        "torn_transactions": 1, "read_then_missing": 1, "nonmonotonic_reads": 1,
        "unknown_values": 2, "misplaced_values": 1, "producer_order": 1,
    }, result["examples"]
    assert result["outcomes"]["info_txns_visible"] == 1
    assert result["outcomes"]["info_txns_invisible"] == 1
    (aborted,) = result["examples"]["aborted_reads"]
    assert aborted["value"] == "v4" and aborted["transaction"]["status"] == "fail"
    assert ["final", None, "a-0", 2] in aborted["read"]


def test_a_clean_history_has_no_anomaly():
    """Committed transactions read whole, in order, by readers going forward; a failed one
    and an uncommitted info one nowhere: nothing to report."""
    from tests.chaos.txn_checker import check

    txns = [_txn(0, 0, "ok", ("a", 0, "v0"), ("a", 0, "v1")), _txn(0, 1, "fail", ("a", 0, "v2")),
            _txn(0, 2, "info", ("a", 0, "v3")), _txn(0, 3, "ok", ("a", 0, "v4"))]  # fmt: skip
    final = [["a", 0, 0, "v0"], ["a", 0, 1, "v1"], ["a", 0, 5, "v4"]]
    polls = {"r0.0": [[0.5, "a", 0, 0, "v0"], [0.6, "a", 0, 1, "v1"], [0.9, "a", 0, 5, "v4"]]}
    result = check(txns, polls, final)
    assert not any(result["violations"].values()), result["examples"]
