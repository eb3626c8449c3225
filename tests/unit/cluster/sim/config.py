"""The simulation's configuration, the partition state as it travels, and the violation
the checker raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from rafka.cluster.metadata import PartitionState


CONTROLLER = -100  # the controller's network address

LOSSY_RULES = ("others_checked_in", "others_in_sync", "one_holder_at_a_time")
BROKEN_RULES = ("unclean_election", "skip_divergence_check")

# Rules that fixed the last bugs this simulation found (see the test module's docstring).
# They are rafka's now and on by default; switching one off reproduces the bug it fixed.
MONOTONIC_EPOCH_CACHE = "monotonic_epoch_cache"  # bug G
CHECKIN_KEEPS_NEWEST = "checkin_keeps_newest_state"  # bug H
PROPOSALS = frozenset({MONOTONIC_EPOCH_CACHE, CHECKIN_KEEPS_NEWEST})


@dataclass(frozen=True)
class SimConfig:
    """Timings are simulated milliseconds, scaled down from production (a 1 s lag window
    instead of 30 s) so that a few hundred events see crashes, fencing and recovery.
    ``broken`` breaks one rule on purpose: "unclean_election" gives a dead leader's partition
    to its first live replica, in sync or not; "skip_divergence_check" makes leaders serve
    records without the KIP-320 check, so followers never truncate."""

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
