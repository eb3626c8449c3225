"""A seeded, deterministic simulation of rafka's transactions (Kafka 4, transaction version
2: the epoch bumped at every transaction end, markers above the producer's epoch, and the
partition's leader, not the producer, adding the partition to the transaction before the
transaction's first write there, KIP-890).

One ``random.Random(seed)`` drives, on a simulated clock, with no threads and without
starting Ray:

- one transaction coordinator (``coordinator``): the real decisions of
  ``rafka.cluster.transaction_state`` over a metadata dict, persisted as real
  ``__transaction_state`` records to a list that outlives it; it fails over (a new
  incarnation reloads the records and completes what was decided), and an old incarnation
  may still deliver late markers;
- 2-3 partitions (``partition``), each a real ``rafka.storage.log.Log`` in a directory of
  its own, with the leader's marker rule and its add of the partition before a
  transaction's first batch run by the real
  ``rafka.actors.replica_transactions.TransactionHandler``;
- 2-3 transactional ids (``producer``): one used by a single producer for the whole run,
  the others by producers that die, are replaced while they run (zombies) and follow one
  another; the client's states are the real ``TransactionState``;
- a network (``network``) with delays, losses and resends, requests bound to the life of
  the process they were sent to.

Faults: coordinator failovers (and zombies), failed and unacknowledged-but-landed state
writes, transaction timeouts (the coordinator's timer aborts), producers that stall, die or
are replaced, partition leaders that restart or crash, leaders forgetting idle producers
(``producer.id.expiration.ms``), ids expiring at the coordinator, producers reaching the
last epoch (``TxnSimConfig.max_epoch``). The ``checker`` reads every changed partition after
every event as a read_committed consumer does and judges it against the coordinator's
decisions; its docstring lists the invariants. After the last event the faults stop and the
run heals: nothing may stay open, and every committed record must be read once.

Message order: one sender's requests to one receiver arrive in the order they were sent, as
Ray runs one caller's calls to an actor; ``TxnSimConfig.reorder`` lets chosen kinds overtake
(Kafka's resends over a new connection). A failure report names the seed, the event, the
invariant, and the events before it.

Replay one seed: ``txn_sim.replay(7, verbose=True)`` (``tests.unit.cluster.txn_sim``), with
any ``TxnSimConfig`` field as a keyword argument.

Left out: replication of the partitions and of ``__transaction_state`` (each is one durable
leader whose high watermark is its log end; the replication simulation covers replication),
power losses (a crash keeps the page cache, so the logs' syncs are skipped), compaction and
retention, offsets committed in transactions (KIP-447), admin aborts (KIP-664), several
coordinator shards, the coordinator log's own fencing (each incarnation simply has a higher
coordinator epoch), and the client's batching (one batch in flight per partition).
"""

from tests.unit.cluster.txn_sim.config import InvariantViolation, TxnSimConfig
from tests.unit.cluster.txn_sim.runner import TxnSimulation, replay, run_seed

__all__ = ["InvariantViolation", "TxnSimConfig", "TxnSimulation", "replay", "run_seed"]
