"""The simulation's configuration, the partition state as it travels, and the violation
the checker raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from rafka.cluster.metadata import PartitionState


CONTROLLER = -100  # the controller's network address
CLIENT = -200  # the producers' network address (the client never fails)

LOSSY_RULES = ("others_checked_in", "others_in_sync", "one_holder_at_a_time", "any")
BROKEN_RULES = ("unclean_election", "skip_divergence_check", "no_eligible_leaders")
FLUSH_RULES = ("background", "every_append")

# Rules that fixed the last bugs this simulation found (see the test module's docstring).
# They are rafka's now and on by default; switching one off reproduces the bug it fixed.
MONOTONIC_EPOCH_CACHE = "monotonic_epoch_cache"  # bug G
CHECKIN_KEEPS_NEWEST = "checkin_keeps_newest_state"  # bug H
# A restarted controller pushes every partition's state once, so a leader that missed a push
# while fenced learns it lost leadership (leaders never pull), and treats the first heartbeat
# of every broker as a return, electing where no leader is: ``Controller.start`` and
# ``BrokerWatch.alive``.
CONTROLLER_RESTART_PUSHES = "controller_restart_pushes"
# A rule the correlated faults showed rafka needs (bug I in the test module): a broker whose
# process restarted may lead a partition only once its replica of it checked in
# (``rafka.cluster.node_restarts``, used by ``ControllerCore.electable``).
LIVE_AFTER_CHECKIN = "live_after_checkin"
# The controller pushes every partition's whole state to its live replicas every
# ``reconcile_ms`` (rafka's ``metadata.reconcile.interval.ms``), so a change recorded by a
# controller that died before pushing it reaches every replica: ``Controller.reconcile_tick``.
CONTROLLER_RECONCILES = "controller_reconciles"
PROPOSALS = frozenset({MONOTONIC_EPOCH_CACHE, CHECKIN_KEEPS_NEWEST, CONTROLLER_RESTART_PUSHES,
                       LIVE_AFTER_CHECKIN, CONTROLLER_RECONCILES})  # fmt: skip


@dataclass(frozen=True)
class SimConfig:
    """Timings are simulated milliseconds, scaled down from production (a 1 s lag window
    instead of 30 s) so that a few hundred events see crashes, fencing and recovery.
    ``broken`` breaks one rule on purpose: "unclean_election" gives a dead leader's partition
    to its first live replica, in sync or not; "skip_divergence_check" makes leaders serve
    records without the KIP-320 check, so followers never truncate; "no_eligible_leaders"
    runs the controller's elections with min ISR 1, so no replica is ever eligible and the
    last ISR member leads after losing its tail, as before KIP-966 (gap C).

    ``flush``: "background" never flushes on the write path (Kafka's and rafka's default):
    each replica's timer flushes its whole log with ``flush_chance`` per tick, as the OS
    writes dirty pages back; "every_append" flushes every record as it is written.
    ``correlated`` adds the correlated faults: a power loss of several brokers at once (up to
    every replica of a partition) and controller restarts: the controller crashes as a fault
    of its own (``controller_restart_share``), and, with ``crash_before_push_per_mille``
    per thousand changes, in the middle of one: after it recorded a batch of decisions in its
    metadata log, before it pushed the first of them or between two pushes. With
    ``CONTROLLER_RECONCILES`` the controller pushes every state every ``reconcile_ms``
    (rafka's 10 s, scaled down as the other timers). The producer: ``batch_records``
    records per batch at most, ``max_in_flight`` batches per partition, ``too_large`` of
    batches refused for good by the leader, ``answer_loss`` of produce answers lost,
    ``request_timeout_ms`` before a resend, ``delivery_timeout_ms`` before a batch fails."""

    events: int = 300
    replication_factor: int = 3
    min_insync_replicas: int = 2
    heartbeat_ms: int = 200  # also the period of each broker's timers
    session_timeout_ms: int = 1_000
    controller_tick_ms: int = 200  # how often the controller looks for silent brokers
    probe_timeout_ms: int = 500  # the controller probes for half a session
    preferred_leader_ms: int = 5_000
    lag_time_max_ms: int = 1_000
    fetch_timeout_ms: int = 5_500  # replica.fetch.wait.max.ms + 5 s
    controller_timeout_ms: int = 10_000  # _call_controller's timeout
    state_pull_ms: int = 1_000  # STATE_PULL_AFTER_S
    max_fetch_records: int = 20
    append_every_ms: int = 60  # mean gap between client appends
    fault_every_ms: int = 700  # mean gap between fault attempts
    downtime_ms: tuple[int, int] = (200, 3_000)
    stall_ms: tuple[int, int] = (300, 3_000)
    delay: float = 0.03
    latency_ms: tuple[int, int] = (1, 10)
    delayed_ms: tuple[int, int] = (100, 1_500)
    flush_chance: float = 0.3  # per replica per timer tick
    lossy_share: float = 0.4  # of faults, when the lossy rule allows a lossy crash
    stall_share: float = 0.25  # of faults
    lossy_rule: str = "one_holder_at_a_time"
    heal_limit_ms: int = 60_000
    broken: str | None = None
    proposed: frozenset = PROPOSALS
    flush: str = "background"
    correlated: bool = False
    power_loss_share: float = 0.15  # of faults, with ``correlated``
    controller_restart_share: float = 0.1  # of faults, with ``correlated``
    controller_downtime_ms: tuple[int, int] = (100, 2_000)
    crash_before_push_per_mille: int = 20  # of the controller's changes, with ``correlated``
    reconcile_ms: int = 2_000
    batch_records: int = 3
    max_in_flight: int = 5  # Kafka's limit for idempotence: the leader keeps five batches
    too_large: float = 0.03
    answer_loss: float = 0.05
    request_timeout_ms: int = 1_500
    delivery_timeout_ms: int = 12_000


class State(NamedTuple):
    """A partition state as it travels over the network (immutable)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    @classmethod
    def of(cls, p: PartitionState) -> "State":
        return cls(p.leader, p.leader_epoch, p.partition_epoch, tuple(p.isr), tuple(p.replicas))

    @property
    def version(self) -> tuple[int, int]:
        return self.leader_epoch, self.partition_epoch


class InvariantViolation(Exception):
    def __init__(self, invariant: int | str, message: str) -> None:
        super().__init__(f"invariant {invariant}: {message}")
        self.invariant = invariant
