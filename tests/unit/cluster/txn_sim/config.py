"""The knobs of one seeded run of the transaction simulation, and the violation its checker
raises. Times are simulated milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field

#: What a coordinator answers a partition leader's add with while it loads its shard:
#: ``"not_available"`` (CoordinatorNotAvailable, retriable: the actor as it is, whose
#: ``_decide`` refuses every call until the load is done) or ``"from_empty_map"`` (a decision
#: on the empty map a loading actor holds, which refuses live transactions as unknown ids).
ADD_WHILE_LOADING = ("not_available", "from_empty_map")

#: Message kinds, for ``TxnSimConfig.reorder`` ("add": a leader's AddPartitionsToTxn).
KINDS = ("init", "add", "end", "produce", "write_marker")


@dataclass(frozen=True)
class TxnSimConfig:
    """One run's knobs; the cluster's shape (partitions, producers) is drawn from the seed."""

    events: int = 300
    topic: str = "orders"
    # -- the coordinator ------------------------------------------------------------------------
    transaction_timeout_ms: int = 2_000
    max_timeout_ms: int = 900_000
    abort_check_ms: int = 200  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expire_check_ms: int = 1_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    expiration_ms: int = 12_000  # transactional.id.expiration.ms
    write_ms: tuple[int, int] = (1, 15)  # one __transaction_state write, acks=all
    load_ms: tuple[int, int] = (10, 250)  # a new incarnation reads its shard back
    add_while_loading: str = "not_available"
    #: Patches MAX_EPOCH of the decisions for the run (None: Java's Short.MAX_VALUE), so
    #: transactions reach the last epoch and move to new producer ids.
    max_epoch: int | None = None
    # -- the network ----------------------------------------------------------------------------
    latency_ms: tuple[int, int] = (1, 8)
    delay: float = 0.04  # share of messages held back
    delayed_ms: tuple[int, int] = (50, 1_500)
    loss: float = 0.02  # share of requests, and of answers, lost while faults are on
    #: Kinds of request that may overtake an earlier request on their channel (sender
    #: process to receiver process). Ray runs one caller's calls to an actor in the order
    #: they were made, so none by default; Kafka's resends over a new connection may.
    reorder: frozenset = field(default_factory=frozenset)
    request_timeout_ms: int = 600  # a caller resends after this long without an answer
    # -- the producers --------------------------------------------------------------------------
    delivery_timeout_ms: int = 4_000
    max_block_ms: int = 4_000
    backoff_ms: tuple[int, int] = (20, 120)
    think_ms: tuple[int, int] = (5, 80)  # between one transaction's end and the next begin
    commit_share: float = 0.75  # of transactions; the rest abort, but for deaths
    #: Share of transactions that send nothing before they end. The producer makes the
    #: EndTxn call anyway, as ``TransactionalMixin._end`` does.
    empty_share: float = 0.0
    records: tuple[int, int] = (1, 3)  # per batch
    batches: tuple[int, int] = (1, 2)  # per partition per transaction
    # -- faults ---------------------------------------------------------------------------------
    fault_every_ms: int = 450
    failover_share: float = 0.25
    zombie_share: float = 0.5  # of failovers: the old incarnation resends markers a while
    zombie_ms: tuple[int, int] = (200, 2_500)
    coordinator_downtime_ms: tuple[int, int] = (20, 600)
    write_failure: float = 0.04  # of state writes while faults are on; half of them land
    death_share: float = 0.12
    replace_share: float = 0.12  # a new instance of a shared id while the old one runs
    stall_share: float = 0.15
    stall_ms: tuple[int, int] = (300, 3_500)
    partition_restart_share: float = 0.12
    partition_downtime_ms: tuple[int, int] = (10, 300)
    respawn_ms: tuple[int, int] = (100, 15_000)  # a dead shared id's next instance
    # -- the log and the reader -----------------------------------------------------------------
    segment_bytes: tuple[int, ...] = (512, 2_048, 1 << 30)  # drawn per seed
    #: The partitions' producer.id.expiration.ms: at each segment roll a leader forgets the
    #: producers idle that long with no transaction open, so a late write of an ended
    #: transaction meets no epoch there and only the coordinator's refusal of its add stops it.
    producer_expiration_ms: int = 1_500
    fetch_bytes: tuple[int, ...] = (600, 4_096, 1 << 20)  # drawn per seed
    #: Let the logs' fsyncs reach the disk (off: no crash here loses the page cache).
    syncs: bool = False
    heal_limit_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.add_while_loading not in ADD_WHILE_LOADING:
            raise ValueError(f"add_while_loading must be one of {ADD_WHILE_LOADING}")
        unknown = set(self.reorder) - set(KINDS)
        if unknown:
            raise ValueError(f"reorder: unknown kinds {sorted(unknown)}; known: {KINDS}")


class InvariantViolation(Exception):
    """An invariant broke; ``invariant`` names it (see the checker's docstring)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"invariant {invariant}: {message}")
        self.invariant = invariant
