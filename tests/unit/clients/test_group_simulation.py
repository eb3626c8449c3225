"""A consumer group under random faults (``group_simulation``): the real member code against
the real group state machine, checked after every event for one owner per partition,
commits that never go back or get lost, and rebalances that always complete.

``RAFKA_GROUP_SIM_SEEDS=n`` runs n seeds (200 by default), ``RAFKA_GROUP_SIM_EVENTS=n``
events per seed (150); ``RAFKA_GROUP_SIM_SEED=n`` replays one seed and prints its event log
(``pytest -s``). Each finding the simulation made is kept below as a short scripted run
(with the seed that first showed it, where one did)."""

from __future__ import annotations

import logging
import os
from collections import Counter

import pytest

from rafka.clients import assignors, leader_assignment
from tests.unit.clients import group_fakes
from tests.unit.clients.group_simulation import Event, Simulation, run_seed

SEEDS = int(os.environ.get("RAFKA_GROUP_SIM_SEEDS", "200"))
EVENTS = int(os.environ.get("RAFKA_GROUP_SIM_EVENTS", "150"))
REPLAY = os.environ.get("RAFKA_GROUP_SIM_SEED")

class StillFound(Exception):
    """The finding a scripted run below was written for is back."""


def expect_fixed(report, *kinds: str) -> None:
    """Fail on findings of other kinds than ``kinds``; raise StillFound while one is found."""
    log = "\n".join(report.log) or report.summary()
    others = [f for f in report.findings if f.kind not in kinds]
    assert not others, log
    if report.findings:
        raise StillFound(str(report.findings[0]))


@pytest.fixture(autouse=True)
def _quiet_members():
    """The members' warnings are the expected reactions to injected faults."""
    logger = logging.getLogger("rafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def test_random_groups_keep_one_owner_per_partition_lose_no_commit_and_finish_rebalances():
    """Over many seeded runs of every event kind, no partition has two current owners and
    no stale owner keeps one past its grace, no committed offset goes back or falls below
    an acknowledged one (coordinator restarts included), and every group becomes Stable with
    each subscribed partition owned once. Replay a failure with RAFKA_GROUP_SIM_SEED."""
    if REPLAY is not None:
        report = run_seed(int(REPLAY), EVENTS, keep_log=True)
        print("\n".join(report.log))
        print(report.summary())
        assert not report.findings, report.summary()
        return
    failures, injected = [], Counter()
    for seed in range(SEEDS):
        report = run_seed(seed, EVENTS)
        injected.update(report.injected)
        failures += [f"seed {seed}: {f}" for f in report.findings]
    print(f"{SEEDS} seeds x {EVENTS} events; injected {dict(sorted(injected.items()))}")
    assert not failures, "\n".join(failures[:20])


def test_a_seed_replays_the_same_run():
    """Member ids and interleavings are seeded: one seed gives one event log."""
    first = run_seed(3, 60, keep_log=True)
    second = run_seed(3, 60, keep_log=True)
    assert first.log == second.log and first.injected == second.injected


# -- the checks have teeth -----------------------------------------------------------------------


def test_the_owner_check_catches_an_assignor_that_moves_partitions_in_one_round(monkeypatch):
    """With the leader's cooperative check removed and an assignor that hands partitions
    straight on, the simulation sees two current members holding one partition."""

    class Mover(assignors.CooperativeStickyAssignor):
        def _assign(self, group):
            return assignors.RangeAssignor._assign(self, group)

    monkeypatch.setattr(leader_assignment, "check_cooperative", lambda *args: None)
    monkeypatch.setitem(assignors.ASSIGNORS, "cooperative-sticky", Mover)
    kinds = {f.kind for seed in range(10) for f in run_seed(seed, 100).findings}
    assert "two-owners" in kinds


def test_the_commit_check_catches_a_coordinator_restart_that_forgets_offsets(monkeypatch):
    """A coordinator that reloads no offsets shows as commits going back and acknowledged
    commits lost."""
    restart = group_fakes.FakeCoordinator.restart

    def forgetful(self, *args, **kwargs):
        self.log.offsets.clear()
        restart(self, *args, **kwargs)

    monkeypatch.setattr(group_fakes.FakeCoordinator, "restart", forgetful)
    kinds = {f.kind for seed in range(10) for f in run_seed(seed, 150).findings}
    assert {"commit-went-back", "acknowledged-commit-lost"} <= kinds


def test_the_stale_owner_check_catches_a_member_deaf_to_its_expulsion(monkeypatch):
    """A heartbeat round that ignores UnknownMemberId leaves an expelled member fetching."""
    from rafka.clients import group_heartbeat

    monkeypatch.setattr(group_heartbeat, "MEMBER_GONE", ())
    kinds = {f.kind for seed in range(20) for f in run_seed(seed, 150).findings}
    assert "stale-owner" in kinds


# -- findings against the current code, as short scripted runs -----------------------------------


def join(static=False, topics=("t0",), revoke="none", session_ms=2000, max_poll_ms=3000,
         instance=0.0, auto_commit=False) -> Event:  # fmt: skip
    """A consumer subscribes; ``revoke``: how it commits in on_partitions_revoked (sync,
    async, none); a static one takes the free instance id ``instance`` picks (0: the
    first)."""
    return Event("join", (static, auto_commit, revoke, topics, session_ms, max_poll_ms,
                          instance))  # fmt: skip


def scripted(events, strategy="cooperative-sticky", topics=None, seed=0):
    """Run ``events`` (topics t0..t2 with 4, 1 and 1 partitions unless given; ``seed``
    seeds member ids and the order of polls and heartbeat rounds)."""
    return Simulation(seed, events_list=events, keep_log=True, strategy=strategy,
                      topics=topics or {"t0": 4, "t1": 1, "t2": 1}).run()  # fmt: skip


def test_partitions_added_after_a_static_leader_restarts_get_assigned():
    """Static leader L and a dynamic member share t0; L's process restarts (the new one
    takes over, skip_assignment); t0 grows from 4 to 6 partitions: 4 and 5 must be
    assigned."""
    report = scripted([
        join(static=True), Event("step", (0.1,)), join(), Event("wait", (3.0,)),
        Event("static_restart", (0.0, "abandoned")), Event("grow", ("t0", 2)),
    ])  # fmt: skip
    expect_fixed(report, "no-convergence")


def test_a_static_restart_between_an_assignment_and_its_follow_up_leaves_nothing_unowned():
    """Leader D reads t1; static S owns all of t0; E joins for t0, and the next generation takes
    two partitions from S (to move in the follow-up) while the record is being written; S's
    process stalls before applying it and a new process takes S's place: t0-0 and t0-1 must
    still get an owner."""
    report = scripted([
        join(topics=("t1",)), Event("step", (0.1,)), join(static=True), Event("wait", (2.0,)),
        join(), Event("hold_writes", (1.5, False)), Event("wait", (0.4,)),
        Event("stall", (0.5, "long", 1.0)), Event("wait", (1.5,)),
        Event("static_restart", (0.0, "abandoned")),
    ])  # fmt: skip
    expect_fixed(report, "no-convergence")


def test_an_eager_member_resubscribing_while_its_revoke_commit_is_written_never_commits_back():
    """Range members A (leader) and B; B reads t0-1 to 3; while writes are slow, B
    subscribes again to the same topics: it revokes t0-1 committing 3 asynchronously (being
    written), rejoins, is answered from the current generation at once, gets t0-1 back and
    fetches its committed offset: it must not start from (and then commit) 0."""
    report = scripted([
        join(), Event("step", (0.1,)), join(revoke="async"), Event("wait", (2.0,)),
        Event("read", (0.99, 3)), Event("hold_writes", (1.0, False)),
        Event("resubscribe", (0.99, ("t0",))), Event("step", (0.1,)), Event("wait", (1.5,)),
        Event("commit", (0.99, "sync", 1.0)),
    ], strategy="range", topics={"t0": 2, "t1": 1, "t2": 1})  # fmt: skip
    expect_fixed(report, "commit-went-back", "acknowledged-commit-lost")


def test_a_member_of_a_group_lost_by_a_coordinator_restart_rejoins_without_an_error():
    """Two members form a new group whose first record is being written (and will fail);
    one unsubscribes, the other's join is answered; the coordinator restarts before
    anything was written, so the group is gone: the member's sync must lead to a rejoin,
    not an error out of poll()."""
    report = scripted([
        join(topics=("t0", "t1", "t2"), revoke="async"), join(topics=("t2",), revoke="sync"),
        Event("hold_writes", (1.0, True)), Event("step", (0.4,)),
        Event("leave", (0.9, "unsubscribe")), Event("coordinator_restart", (False, False)),
        Event("step", (0.1,)),
    ], topics={"t0": 2, "t1": 3, "t2": 4}, seed=2735)  # fmt: skip
    assert not report.findings, "\n".join(report.log)


def test_a_sync_from_before_a_coordinator_restart_cannot_set_the_next_generation():
    """C0 (leader, t0) and static C1 (t1, t2) are Stable at generation 2; C1 closes and
    static C2 joins for t1; syncs are delayed; generation 3 forms, then the coordinator
    restarts from generation 2 (C1's place, C2 unknown): C2 rejoins under a new member id
    and a new generation 3 forms before the first generation 3's leader sync (for C2's old
    member id) arrives: t1 must still get an owner."""
    report = scripted([
        join(topics=("t0",), revoke="sync", max_poll_ms=4000),
        join(static=True, topics=("t1", "t2"), revoke="sync", session_ms=3000, max_poll_ms=6000),
        Event("wait", (4.927,)), Event("leave", (0.77, "close")),
        join(static=True, topics=("t1",), revoke="async", session_ms=1000, max_poll_ms=4000,
             instance=0.5),
        Event("step", (0.297,)), Event("wait", (1.693,)), Event("hold", ("sync_group", 5.316)),
        Event("step", (0.219,)), Event("step", (0.269,)), Event("step", (0.17,)),
        Event("step", (0.37,)),
        Event("coordinator_restart", (True, True)), Event("wait", (5.6,)),
    ], topics={"t0": 2, "t1": 4, "t2": 3}, seed=4496)  # fmt: skip
    expect_fixed(report, "no-convergence")


def test_a_member_handed_back_a_partition_starts_after_its_own_async_commit_of_it():
    """Seed 1151: a range member gives partitions up with an asynchronous commit that the
    coordinator has not processed yet, gets them back, and fetches their committed offsets:
    it waits for its own commit first, so it neither starts from nor commits the older
    offset."""
    report = run_seed(1151, 150, keep_log=True)
    assert not report.findings, "\n".join(report.log[-60:])
