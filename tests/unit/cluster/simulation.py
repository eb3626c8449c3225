"""A seeded, deterministic simulation of rafka's replication protocol.

In the spirit of Kafka's ``RaftEventSimulationTest``: one ``random.Random(seed)`` drives a
small cluster (a controller, 3-4 brokers, 1-3 partitions of three replicas) through a few
hundred events on a simulated clock: no threads, no wall clock, no Ray. The decisions are
rafka's own plain-Python modules, called as the actors call them:

- ``rafka.cluster.elections`` (``fence_broker``, ``elect_if_leaderless``,
  ``replica_restarted``, ``preferred_leader``, ``alter_isr`` with the incarnations) and
  ``rafka.cluster.liveness.BrokerLiveness`` decide the controller's partition states;
- ``rafka.cluster.replication`` (``LeaderState``, ``diverging_epoch``, ``truncation_offset``)
  decides the leaders' high watermarks and ISR proposals and the followers' truncation;
- ``rafka.storage.leader_epoch.LeaderEpochCache`` (kept in memory) answers epoch lookups.

Only the glue the actors provide is written here, after the Controller's parts
(``actors/partition_changes.py``, ``actors/broker_watch.py``) and the replica's
(``actors/partition_replica.py``, ``actors/replica_follower.py``): heartbeats, the probe
of a silent broker and fencing; state pushes to live brokers only, and the push of every hosted partition's state to a fenced
broker that comes back; the check-in of a restarted replica (with its incarnation, which the
controller keeps per replica); the follower fetch loop (with its incarnation), its state pull
after a second without progress (leaders never pull), truncation on divergence (also
forgetting epochs recorded but never written); a new leader's epoch recorded at election;
acks=all, failed with NotEnoughReplicasAfterAppend when the leader's ISR is below
``min.insync.replicas`` once the high watermark passes the record; a restarted log truncates
its epoch cache to its log end, as ``Log`` does on every load.

Failure model, after Ray's delivery guarantees. Messages between live actors are never lost;
they are delayed at random (a few, while faults are on, by up to 1.5 s), so they arrive out of
order. A request (or push) to a broker is bound to the broker process running when it is
sent, and is lost if that process is down or dies before it arrives (Ray fails calls to a dead
actor instance; rafka's replicas have ``max_task_retries=0``): a follower's fetch then fails
at once (RayActorError), other callers wait for their timeout. An answer is lost if the
process that answers dies before it arrives (a fetch then fails the same way). A request
sent before its sender died still arrives (a late fetch from a replica's earlier life). The
controller may die and restart (in the correlated mixes), also between recording a batch of
partition changes and pushing them; a restarted controller pushes every state, and pushes
them all again every ``reconcile_ms``. A broker

- crashes (its process dies, its log survives), or crashes lossily (each log loses its
  unflushed tail, as in a power failure), and restarts after a random downtime;
- or stalls (a long pause, as in a GC pause or an overloaded node): it handles nothing, and
  messages to it wait, until the pause ends; a long stall gets it fenced while it is alive,
  so that it comes back to the controller and is told what it missed.

At most RF-1 brokers are down or stalled at once. A replicated log keeps a committed record
only while some holder of it survives, so a lossy crash is injected only while another holder
of every committed record is sure to survive it, chosen by ``SimConfig.lossy_rule``:

- ``"others_checked_in"``: every other replica of the broker's partitions is up and checked
  in (the rule first proposed). Too weak: those replicas may be out of the ISR and lack
  records the crashing broker alone holds;
- ``"others_in_sync"``: they are also in the controller's ISR, so they hold every committed
  record (invariant 4), and where the crashing broker leads it has no ISR proposal in
  flight (which could take them out of the ISR after it crashed);
- ``"one_holder_at_a_time"`` (the default): as ``others_in_sync``, and no broker crashes or
  stalls while one that lost its tail has not yet rejoined the ISR of all its partitions.
  Without this, losing the last intact holder can leave the broker that lost records as the
  last ISR member, and rafka, like Kafka before KIP-966, elects it (design gap C in the test
  module).

Invariants, checked after every event (``Checker``):

1. at most one replica (one replica incarnation) ever leads a given (partition, leader epoch);
2. the controller's leader epoch and partition epoch never decrease; nor does the leader
   epoch a replica knows, within one incarnation;
3. a replica's high watermark never decreases within one incarnation, as leader or follower;
4. every record below the committed point (the highest high watermark any leader exposed)
   is, at the same offset with the same id, in the log of every live, checked-in member of
   the controller's current ISR; a committed record is never replaced;
5. every live replica's log agrees with the committed log below that replica's own high
   watermark, and no replica exposes a high watermark above the committed point. (Between
   its high watermark and the committed point a replica outside the ISR may still hold a
   stale tail from an old epoch, as in Kafka, until its next fetch truncates it.)
6. an acknowledged record was received by at least ``min.insync.replicas`` replicas when it
   is acknowledged (Kafka's acks=all promise).

At the end the faults stop, every broker restarts, producing stops and the cluster
converges (every live replica holds exactly the controller's recorded state); then every
acknowledged record must be in the final leader's log, exactly once, at its acknowledged
offset, and no record whose append was refused may be there.

``SimConfig.broken`` breaks a rule on purpose, to prove the checker can fail.
``SimConfig.proposed`` holds the rules that fixed bugs G and H (in the test module): Kafka's
monotonic ``LeaderEpochCache.assign`` and the check-in that keeps the newest state pushed
while it was under way. They are rafka's rules, on by default; switching one off replays
the bug it fixed.

The code lives in ``tests/unit/cluster/sim/``: ``network`` (clock and network),
``controller``, ``broker`` and ``replica`` (the actors' glue), ``checker`` (the invariants)
and ``runner`` (one seeded run, the report, replay and the command line).

Since then (see the sub-modules' docstrings): an idempotent producer (``sim/producer.py``,
KIP-360 epoch bumps, lost answers, batches refused as too large) checked by the real
``ProducerStateManager``; replica epochs from the controller's persisted counter; eligible
leader replicas and min ISR in every election; flushing (``SimConfig.flush``); correlated
faults (``SimConfig.correlated``: power loss of several brokers, controller restarts).
Invariant 7: a leader's high watermark never covers a record received by fewer than
``min.insync.replicas`` replicas. Loss is judged against physics (``Checker._judge_losses``):
a committed record may vanish only if every replica that held it lost it in a power failure
before flushing it, never with ``flush="every_append"``.

Replay one seed: ``python -m tests.unit.cluster.simulation --seed 7 --events 300 --verbose``
(``--correlated``, ``--flush``, ``--min-insync-replicas``, ``--set name=value`` for any knob),
or ``simulation.replay(7, correlated=True, ...)``.
"""

from tests.unit.cluster.sim.config import (
    BROKEN_RULES,
    CHECKIN_KEEPS_NEWEST,
    CONTROLLER,
    LOSSY_RULES,
    MONOTONIC_EPOCH_CACHE,
    PROPOSALS,
    InvariantViolation,
    SimConfig,
    State,
)
from tests.unit.cluster.sim.runner import Simulation, main, replay

__all__ = [
    "BROKEN_RULES", "CHECKIN_KEEPS_NEWEST", "CONTROLLER", "LOSSY_RULES", "MONOTONIC_EPOCH_CACHE",
    "PROPOSALS", "InvariantViolation", "SimConfig", "Simulation", "State", "main", "replay",
]  # fmt: skip

if __name__ == "__main__":
    main()
