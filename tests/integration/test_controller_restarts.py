"""The controller dies in the middle of its work: while it creates a topic, deletes one, moves
a partition to other brokers or elects a preferred leader, with a producer writing. Ray starts
it again; the new process rebuilds from its metadata log and brings the replicas in line with
it, and clients' controller calls retry while it restarts.

The scenarios need three brokers, so they run on a ``LocalCluster`` (a controller node and
three disk nodes) in a process of their own (a process holds one Ray connection), once for
the module: see controller_restart_scenario.py. Each test checks what its scenario saw in
the end state: the metadata and the running replica actors agree, every record a producer
had acknowledged is read back at its offset once, and the interrupted admin call answered
success or a typed error (never the "already done" error for its own request).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "controller_restart_scenario.py")
#: The scenarios take under a minute; a failing one waits out its bounded waits first.
SCRIPT_TIMEOUT_S = 900
#: The script's KILL_DELAYS_S, as its report's keys.
KILL_DELAYS_S = ("0.0", "0.02", "0.08")

pytestmark = pytest.mark.slow

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    work = tmp_path_factory.mktemp("controller-restarts")
    stderr_path = work / "stderr.log"
    began = time.monotonic()
    # A session of its own, so that a run past its time is killed with every process it
    # started (the Ray nodes of its LocalCluster).
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, str(work / "data")], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        stderr_path.write_text(err)
        pytest.fail(
            f"the scenarios did not finish in {SCRIPT_TIMEOUT_S} s (full output in "
            f"{stderr_path}); the end of their output:\n{err[-5000:]}"
        )
    stderr_path.write_text(err)
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (
        f"the scenario script exited with {proc.returncode} and "
        f"{'a' if lines else 'no'} report (full output in {stderr_path}):\n{err[-5000:]}"
    )
    found = json.loads(lines[-1][len("REPORT "):])
    found["stderr_path"] = str(stderr_path)
    found["controller_log"] = [
        _ANSI.sub("", line) for line in err.splitlines() if "(Controller pid=" in line
    ]  # fmt: skip
    print(f"\ncontroller restart scenarios: {time.monotonic() - began:.1f} s in all, "
          f"cluster up in {found['started_s']} s; per scenario: "
          f"{json.dumps(scenario_times(found))}")  # fmt: skip
    return found


def scenario_times(report: dict) -> dict:
    times = {f"{kind} {d}": report[kind][d]["elapsed_s"]
             for kind in ("create", "delete") for d in report[kind]}  # fmt: skip
    times.update({k: report[k]["elapsed_s"] for k in ("reassignment", "election")})
    return times


# -- checks on what a scenario saw -----------------------------------------------------------------


def completed(report: dict, facts: dict) -> dict:
    """``facts``, once it is clear the scenario ran to its end; otherwise the test fails with
    where it stopped, the last state it saw, and the controller's log lines."""
    if facts["failure"] is not None:
        log = "\n".join(report["controller_log"][-40:])
        pytest.fail(
            f"{facts['failure']}\nthe admin call answered: {facts.get('answer')!r}\n"
            f"{facts.get('traceback', '')}\ncontroller log (last lines; everything in "
            f"{report['stderr_path']}):\n{log}",
            pytrace=False,
        )
    return facts


def assert_answered_success_or_a_typed_error(report: dict, facts: dict) -> None:
    if "answer" not in facts:  # the scenario stopped before the call
        completed(report, facts)
    answer = facts["answer"]
    assert answer["outcome"] in ("success", "typed error"), (
        f"the admin call interrupted by the controller's death raised an error that is not "
        f"rafka's: {answer}"
    )


def assert_replicas_agree(seen: dict) -> None:
    """The metadata and the replica actors agree: the running actors are exactly those the
    metadata names; every partition has a leader; every replica checked in and holds the
    metadata's leader and leader epoch; exactly one, the metadata's leader, acts as leader."""
    assert seen["running"] == seen["named"], seen
    for partition, p in seen["partitions"].items():
        meta, views = p["metadata"], p["replicas"]
        assert meta["leader"] >= 0, f"partition {partition} has no leader: {p}"
        assert all(isinstance(v, dict) and v["role"] != "starting" for v in views.values()), (
            f"a replica of partition {partition} is not running or not checked in: {p}"
        )
        assert {(v["leader"], v["leader_epoch"]) for v in views.values()} == {
            (meta["leader"], meta["leader_epoch"])
        }, f"the replicas of partition {partition} disagree with the metadata: {p}"
        acting = [int(b) for b, v in views.items() if v["role"] == "leader"]
        assert acting == [meta["leader"]], (
            f"partition {partition}: replicas acting as leader {acting}, the metadata's "
            f"leader {meta['leader']}: {p}"
        )


def assert_nothing_acknowledged_lost(acked: list, log: list) -> None:
    """Every acknowledged [partition, offset, value] is in the log at its offset, once."""
    assert acked, "no record was acknowledged"
    at = {(p, o): v for p, o, v in log}
    assert len(at) == len(log), "the log was read with an offset twice"
    lost = [(p, o, v, at.get((p, o))) for p, o, v in acked if at.get((p, o)) != v]
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged records are not at their offsets "
        f"(partition, offset, sent, found); first: {lost[:5]}"
    )
    counts = collections.Counter(v for _, _, v in log)
    twice = [v for _, _, v in acked if counts[v] != 1]
    assert not twice, f"acknowledged records found more than once: {twice[:5]}"


# -- 1. create -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill_after_s", KILL_DELAYS_S)
def test_a_topic_created_while_the_controller_dies_ends_with_every_replica_running(
    report, kill_after_s
):
    facts = report["create"][kill_after_s]
    assert_answered_success_or_a_typed_error(report, facts)
    completed(report, facts)
    if facts["answer"]["outcome"] != "success" and not facts["listed"]:
        # A typed error and no topic: the create never took effect, so nothing of it may be
        # on disk either.
        assert facts["dirs_without_topic"] == []
        return
    assert facts["listed"] and facts["partitions"] == [0, 1, 2]
    assert_replicas_agree(facts["agreement"])
    assert facts["written"] == {str(p): [p, 0] for p in range(3)}
    assert sorted(facts["read"]) == [[p, 0, f"to-{p}"] for p in range(3)], facts["read"]
    assert facts["fresh_create"]["type"] == "TopicAlreadyExists", (
        f"a new create of the existing topic answered {facts['fresh_create']}"
    )
    # Checked last, so that a failure here comes after the checks of the cluster's state.
    assert facts["answer"].get("type") != "TopicAlreadyExists", (
        f"the create answered {facts['answer']}: its own retry, after a first attempt that "
        "took effect, must answer success (the retry carries the same request id)"
    )


# -- 2. delete -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill_after_s", KILL_DELAYS_S)
def test_a_topic_deleted_while_the_controller_dies_leaves_no_replica_actor_and_no_files(
    report, kill_after_s
):
    facts = report["delete"][kill_after_s]
    assert_answered_success_or_a_typed_error(report, facts)
    completed(report, facts)
    assert len(facts["dirs_before"]) == 3 and len(facts["running_before"]) == 3, facts
    assert not facts["listed_after"]
    assert facts["describe_after"].get("type") == "UnknownTopicOrPartition", (
        f"describing the deleted topic answered {facts['describe_after']}"
    )
    assert facts["running_after"] == []
    assert facts["dirs_after"] == []
    # Checked last, so that a failure here comes after the checks of the cluster's state.
    assert facts["answer"].get("type") != "UnknownTopicOrPartition", (
        f"the delete answered {facts['answer']}: its own retry, after a first attempt that "
        "took effect, must answer success (the retry carries the same request id)"
    )


# -- 3. reassignment -------------------------------------------------------------------------------


def test_a_reassignment_cut_by_a_controller_death_completes_and_loses_no_acknowledged_record(
    report,
):
    facts = report["reassignment"]
    assert_answered_success_or_a_typed_error(report, facts)
    completed(report, facts)
    assert facts["answer"]["outcome"] == "success", f"the reassignment failed: {facts['answer']}"
    before, target, after = facts["before"], facts["target"], facts["after"]
    assert before["leader"] not in target  # the leader moved out: leader and replicas changed
    assert after["replicas"] == target and after["adding"] == after["removing"] == []
    assert sorted(after["isr"]) == sorted(target) and after["leader"] in target
    # The removed broker's replica actor is gone, the added one runs and follows.
    assert_replicas_agree(facts["agreement"])
    assert facts["removed_replica"] not in facts["running_after"]
    assert {p for p, _, _ in facts["acked"]} == {0, 1}
    assert_nothing_acknowledged_lost(facts["acked"], facts["log"])


# -- 4. preferred leader election ------------------------------------------------------------------


def test_a_preferred_election_cut_by_a_controller_death_leaves_every_replica_agreeing(report):
    facts = report["election"]
    assert_answered_success_or_a_typed_error(report, facts)
    assert facts["answer"]["outcome"] == "success", f"the election failed: {facts['answer']}"
    assert [r["partition"] for r in facts["results"]] == [0]
    assert facts["results"][0]["error"] in (None, "ElectionNotNeeded"), facts["results"]
    completed(report, facts)
    assert facts["failed_over"]["leader"] != facts["preferred"]
    assert facts["preferred"] in facts["rejoined"]["isr"]
    assert_replicas_agree(facts["agreement"])
    assert facts["agreement"]["partitions"]["0"]["metadata"]["leader"] == facts["preferred"]
    assert_nothing_acknowledged_lost(facts["acked"], facts["log"])
