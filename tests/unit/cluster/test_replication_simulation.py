"""rafka's replication rules (``rafka.cluster.elections``, ``rafka.cluster.replication`` and
the glue of the replica and controller actors) keep their invariants through thousands of
seeded, simulated runs of crashes, power failures, stalls and late or reordered messages.
The simulator, its failure model and the invariants are described in
``tests/unit/cluster/simulation.py``; replay one seed with
``python -m tests.unit.cluster.simulation --seed N --verbose`` (or ``simulation.replay(N)``).

History. The simulation found these; commit cc7ac66 fixed A, B, D, E and F in rafka, and the
simulation now runs the fixed code as it is (no fix of its own):

A. ``LeaderState.on_isr_committed`` accepted a late copy of the current state (same
   partition epoch) as the answer to a pending ISR proposal; an ISR member could then lack
   committed records. Now only a newer partition epoch settles a proposal.
B. A leader trusted a follower's progress from an earlier life of that follower, so a
   replica that lost its unflushed tail rejoined the ISR without it. Now (Kafka's KIP-903)
   fetches carry the replica's incarnation (``time.time_ns()`` at each start),
   ``LeaderState`` resets a follower's progress when a newer incarnation fetches and ignores
   an older one, and ``alter_isr`` refuses a joiner whose incarnation differs from the newest
   the controller recorded at its check-in. The simulation sends late fetches from a
   replica's earlier life on purpose. (``LeaderState.__init__`` still starts a follower that
   has not fetched yet at offset 0 rather than ``UNKNOWN_OFFSET``; so counted, it can join
   only the ISR of a leader elected with an empty log, and the simulation finds no harm.)
D. acks=all was answered once the high watermark passed the record even if the ISR had
   shrunk below ``min.insync.replicas``. Now the produce fails with
   NotEnoughReplicasAfterAppend; invariant 6 is fatal.
E. A new leader recorded its epoch only at its first append, so a follower could be told
   nothing about its last epoch and truncate committed records. Now the epoch is recorded at
   election, and a follower that truncates on divergence also forgets epochs from the target
   on (even when nothing is truncated).
F. A leader never pulls its state, so one that missed a push could wait forever. Now pushes
   to a live actor are not lost (Ray), the controller skips only fenced brokers and, when a
   fenced broker speaks again, pushes it the state of every partition it hosts; a restarted
   replica checks in. The simulation's leaders no longer pull, and brokers stall long enough
   to be fenced while alive.

C. (design gap, as Kafka before KIP-966; kept) ``elections.replica_restarted`` keeps a replica
   that restarted after an unclean stop in the ISR when it is the last member, and elects
   it. If a broker loses its unflushed tail and, before it catches up, the replicas that
   still hold the records crash, are fenced or are dropped from the ISR (even by a shrink the
   crashed leader proposed just before), the broker that lost them becomes the last ISR
   member and leader, and the others truncate to its log: committed records are lost though
   an intact copy survived. The default failure model (``one_holder_at_a_time``) therefore
   crashes nothing while a broker that lost its tail is out of sync;
   ``test_weaker_failure_models_lose_committed_records`` keeps the examples.

Fixed later, found by the simulation after A-F:

G. A replica elected with an empty log recorded ``(epoch, 0)`` at election; stepping down
   without writing, it appended the new leader's older epochs, which
   ``LeaderEpochCache.assign`` ignored, and later truncated committed records. Now
   ``assign`` drops the entries a new one contradicts, as Kafka's cache does.
H. A restarted replica adopted its check-in answer even when a newer state had been pushed
   while the answer travelled (and ignored), and could lead a stale epoch forever. Now it
   keeps the newest pushed state and adopts it after the answer when it is newer.

``test_each_fixed_seed_fails_without_its_rule`` keeps the seeds that showed them.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit.cluster.simulation import (
    CHECKIN_KEEPS_NEWEST,
    MONOTONIC_EPOCH_CACHE,
    PROPOSALS,
    SimConfig,
    Simulation,
)

SEEDS = 2000
BLOCK = 250
EVENTS = 300

#: Seeds that showed bugs G and H: (seed, events) -> the rule that fixed it.
FIXED = {
    (824, EVENTS): MONOTONIC_EPOCH_CACHE,
    (1715, EVENTS): MONOTONIC_EPOCH_CACHE,
    (294, 2000): CHECKIN_KEEPS_NEWEST,
    (539, 2000): CHECKIN_KEEPS_NEWEST,
}


def _run(seed: int, events: int = EVENTS, **config) -> tuple[Simulation, str | None]:
    """The finished (or stopped) simulation and its failure report, if any."""
    sim = Simulation(seed, SimConfig(events=events, **config))
    try:
        sim.run()
    except AssertionError as failure:
        return sim, str(failure)
    return sim, None


@pytest.mark.parametrize(
    "first", range(0, SEEDS, BLOCK), ids=lambda first: f"seeds_{first}_{first + BLOCK - 1}"
)
def test_every_seed_keeps_the_invariants(first):
    """Each seed of the block keeps every invariant with the rules as they are, and the block
    goes through every kind of fault and outcome."""
    totals: Counter = Counter()
    for seed in range(first, first + BLOCK):
        sim, failure = _run(seed)
        assert failure is None, failure
        totals.update(sim.summary())
    print(f"seeds {first}-{first + BLOCK - 1}: {dict(totals)}")
    for seen in ("crash", "lossy_crash", "stall", "fenced", "unfenced", "lost_from_dead",
                 "acknowledged", "failed_after_append", "refused", "isr_refused",
                 "truncations", "state_pulls"):  # fmt: skip
        assert totals[seen] > 0, f"no {seen} in the block"


@pytest.mark.parametrize("seed, events", sorted(FIXED))
def test_each_fixed_seed_fails_without_its_rule(seed, events):
    """The seeds that showed bugs G and H keep every invariant with rafka's rules, and fail
    again with the rule that fixed them switched off."""
    _, failure = _run(seed, events)
    assert failure is None, failure
    _, failure = _run(seed, events, proposed=PROPOSALS - {FIXED[seed, events]})
    assert failure is not None


def test_a_seed_replays_identically():
    """The same seed gives the same trace, event for event; another seed does not."""

    def trace(seed):
        sim = Simulation(seed, SimConfig(events=EVENTS), record=True)
        try:
            sim.run()
        except AssertionError:
            pass
        return sim.trace, sim.summary()

    first, again, other = trace(7), trace(7), trace(8)
    assert first == again
    assert len(first[0]) > EVENTS
    assert first[0] != other[0]


@pytest.mark.parametrize("broken", ["unclean_election", "skip_divergence_check"])
def test_the_checker_catches_a_broken_rule(broken):
    """With one rule broken on purpose (and the open bugs' rules on, so nothing else fails),
    some seed among the first 200 violates a safety invariant, and the report names the
    seed, the event, the invariant and the events before it."""
    for seed in range(200):
        _, failure = _run(seed, proposed=PROPOSALS, broken=broken)
        if failure is not None and "invariant liveness" not in failure.splitlines()[0]:
            assert f"seed {seed}:" in failure and "invariant" in failure
            assert f"--seed {seed}" in failure and "last 30 events" in failure
            print(failure.splitlines()[0])
            return
    pytest.fail(f"no seed in 200 caught broken rule {broken!r}")


@pytest.mark.parametrize(
    "seed, events, lossy_rule",
    [(146, EVENTS, "others_checked_in"), (727, 2000, "others_in_sync")],
)
def test_weaker_failure_models_lose_committed_records(seed, events, lossy_rule):
    """Why the default failure model is what it is: with a weaker precondition for lossy
    crashes, committed records are lost (the crashing broker was their only holder, or gap
    C); the same seed keeps them under the default model."""
    _, failure = _run(seed, events, proposed=PROPOSALS, lossy_rule=lossy_rule)
    assert failure is not None and "invariant 4" in failure.splitlines()[0], failure
    _, failure = _run(seed, events, proposed=PROPOSALS)
    assert failure is None, failure
