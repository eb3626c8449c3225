"""Chaos: disk nodes die and come back under idempotent acks=all producers, and nothing that
was acknowledged is lost, duplicated, reordered or moved (see chaos_run.py for the run and the
checks)."""

from __future__ import annotations

import os

import pytest

from tests.chaos.script_run import run_report

SCRIPT = os.path.join(os.path.dirname(__file__), "chaos_run.py")
# The fault schedule is a function of the seed: RAFKA_CHAOS_SEED=N reruns another one.
SEED = int(os.environ.get("RAFKA_CHAOS_SEED", "1"))
DURATION_S = float(os.environ.get("RAFKA_CHAOS_DURATION", "60"))


@pytest.mark.slow
@pytest.mark.parametrize("replicas_per_actor", [1, 100], ids=["a process per replica", "packed"])
def test_acknowledged_writes_survive_nodes_dying_and_coming_back(tmp_path, replicas_per_actor):
    """Every acknowledged record is read back once, at its acknowledged offset, in its
    producer's order, the same in two reads, and no definitely failed write shows up; with
    every replica in its own process and with a disk's replicas packed in one."""
    args = ["--seed", str(SEED), "--duration", str(DURATION_S),
            "--data-dir", str(tmp_path / "data"),
            "--replicas-per-actor", str(replicas_per_actor)]  # fmt: skip
    report, message = run_report(SCRIPT, args, tmp_path, "chaos", DURATION_S + 300)
    assert "error" not in report, message
    assert report["fault_error"] is None, message
    assert report["faults"], "no fault was injected" + message
    assert not report["producer_errors"], message
    assert report["result"]["acked"] > 0, message
    assert report["result"]["violations"] == dict.fromkeys(report["result"]["violations"], 0), (
        message
    )


# -- the harness itself (fast: no Ray) ---------------------------------------------------------


def _chaos_run():
    from tests.chaos import chaos_run

    return chaos_run


def test_the_fault_schedule_is_a_function_of_the_seed_and_keeps_max_down():
    """The same seed plans the same faults, another seed others, and the plan never has more
    than max_down disks down at once."""
    run = _chaos_run()
    disks = ["d1", "d2", "d3", "d4"]
    plan = run.fault_schedule(7, disks, 60, 2, (2, 10), (2, 8))
    assert plan == run.fault_schedule(7, disks, 60, 2, (2, 10), (2, 8))
    assert plan != run.fault_schedule(8, disks, 60, 2, (2, 10), (2, 8))
    t, down = 0.0, {}
    for step in plan:
        t += step.gap
        down = {d: back for d, back in down.items() if back > t}
        assert step.disk not in down and len(down) < 2
        down[step.disk] = t + step.downtime
    assert t < 60


def test_the_checker_counts_each_kind_of_violation():
    """Records read back against the producers' outcomes: each planted anomaly is counted
    once under its own name, and an indeterminate write that was written is allowed."""
    run = _chaos_run()

    def value(n, seq):
        return b"p%d-%d" % (n, seq)

    def acked(seq, partition, offset):
        return {"seq": seq, "status": "acked", "partition": partition, "offset": offset}

    sent = {0: [
        acked(0, 0, 0), acked(1, 0, 1), acked(2, 0, 2),  # fine
        acked(3, 0, 9),  # lost: never read
        acked(4, 0, 3),  # read at offset 4: offset mismatch (3 holds seq 5: reordered)
        acked(5, 0, 5),  # read at 3 and 5: duplicated; acked offset 5 is right
        {"seq": 6, "status": "definite", "error": "NotEnoughReplicas"},  # yet read at 6
        {"seq": 7, "status": "indeterminate", "error": "RequestTimedOut"},  # read at 7: fine
        acked(8, 0, 2),  # told seq 2's offset: reused, and lost
    ]}  # fmt: skip
    log = [(0, 0), (1, 1), (2, 2), (3, 5), (4, 4), (5, 5), (6, 6), (7, 7)]
    first = {0: [(offset, value(0, seq)) for offset, seq in log]}
    second = {0: first[0][:-1] + [(7, b"p9-1")]}  # the second read disagrees at offset 7
    result = run.check(sent, [first, second], value)
    assert result["violations"] == {
        "lost": 2, "duplicated": 1, "out_of_order": 1, "offset_mismatch_between_reads": 1,
        "offset_mismatch_with_ack": 1, "acked_offset_reused": 1, "offset_gaps": 0,
        "unknown_values": 0, "definite_failures_read": 1,
    }  # fmt: skip
    assert result["acked"] == 7 and result["indeterminate_read"] == 1
