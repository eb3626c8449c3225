"""What the balancer sees and what it decides (``rafka.cluster.balancer`` plans with them).

Plain data, no Ray and no clock: the controller builds a ``ClusterView`` from its metadata
and the brokers' reports, passes the time in, and carries out a ``Plan`` as reassignments (the
new replicas copy the log by follower fetch) and leader elections.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field


class Mode(enum.Enum):
    """``partition.autobalancing.mode`` (Redpanda's names).

    OFF         only what an admin asks: drains and ``rebalance``
    NODE_ADD    the replica and leader counts are balanced when a broker joins (and on an
                admin's ``rebalance``), drains are carried out, and brokers dead past the
                healing delay are replaced from the in-sync replicas; the default, so a disk
                node that joins takes its share with no command, while nothing moves on its
                own otherwise (Redpanda heals only in its continuous mode; here a Ray node
                that is gone does not come back with its disk, so healing is on by default)
    CONTINUOUS  every goal all the time, and healing as in NODE_ADD
    """

    OFF = "off"
    NODE_ADD = "node_add"
    CONTINUOUS = "continuous"


class Goal(enum.Enum):
    """The goals in priority order: a move for one goal never makes a goal before it worse.
    The first three are hard (a plan never breaks them by itself), the others soft. Leaving
    brokers come first: a broker being removed, or lost, must be emptied even where no
    broker on the rack it spans is left (its moves still prefer one that keeps the racks,
    and the rack goal then repairs what it can)."""

    LEAVING = "leaving brokers hold nothing"
    RACK_AWARE = "rack awareness"
    DISK_CAPACITY = "disk capacity"
    REPLICA_COUNT = "replicas per broker"
    LEADER_COUNT = "leaders per broker"
    BYTES_IN = "bytes in per broker"
    BYTES_OUT = "bytes out per broker"


HARD_GOALS = (Goal.LEAVING, Goal.RACK_AWARE, Goal.DISK_CAPACITY)


@dataclass(frozen=True)
class BrokerView:
    """One broker. ``disk_capacity`` and ``disk_used`` in bytes (capacity 0: unknown, the
    disk goal leaves it alone); ``dead_since_ms`` is when it was last seen alive (None while
    alive); ``draining``: an admin asked for it to be emptied; ``ephemeral``: its disk ends
    with its node (an autoscaled node's)."""

    broker_id: int
    rack: str | None = None
    dead_since_ms: int | None = None
    draining: bool = False
    disk_capacity: int = 0
    disk_used: int = 0
    ephemeral: bool = False

    @property
    def alive(self) -> bool:
        return self.dead_since_ms is None


@dataclass(frozen=True)
class PartitionView:
    """One partition: its replicas (the preferred leader first), leader and in-sync replicas;
    its size on each replica in bytes and its traffic in bytes/s (bytes in: what producers
    write, stored by every replica; bytes out: what its leader sends to consumers).
    ``adding``/``removing`` are the brokers of a reassignment in progress (then nothing else
    moves it)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]
    size_bytes: int = 0
    bytes_in_per_s: float = 0.0
    bytes_out_per_s: float = 0.0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


@dataclass(frozen=True)
class ClusterView:
    brokers: tuple[BrokerView, ...]
    partitions: tuple[PartitionView, ...]


@dataclass(frozen=True)
class BalancerSettings:
    """The balancer's limits. Moves in flight are counted per broker (as source or
    destination, Cruise Control's ``num.concurrent.partition.movements.per.broker``, 5 there;
    2 here, where a move competes with producers for two cores) and in the cluster.
    ``disk_threshold``: no broker above this share of its disk after a move (Cruise
    Control's 0.8). ``usage_balance``: a broker's bytes in or out may be this much above the
    mean (1.1, Cruise Control's). ``cooldown_ms``: a replica moved within it stays where it is
    and never goes back to a broker it left (the hysteresis). ``heal_after_ms``: a broker dead
    this long is replaced (Redpanda waits 15 min, Cruise Control 30; 10 min here, since a Ray
    node that is gone for good does not come back with its disk, and a replica short of its
    factor for long is a risk a restart within minutes does not justify)."""

    mode: Mode = Mode.NODE_ADD
    disk_threshold: float = 0.8
    usage_balance: float = 1.1
    max_moves_per_broker: int = 2
    max_moves: int = 50
    cooldown_ms: int = 10 * 60_000
    heal_after_ms: int = 10 * 60_000


@dataclass(frozen=True)
class Move:
    """Reassign ``(topic, partition)`` from its current replicas to ``replicas``: the replica
    on ``source`` goes, one on ``destination`` comes (copied by follower fetch)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    source: int
    destination: int
    goal: Goal


@dataclass(frozen=True)
class LeaderMove:
    """Elect ``leader`` (an in-sync replica) for ``(topic, partition)``."""

    topic: str
    partition: int
    leader: int
    goal: Goal


@dataclass
class Plan:
    """What to do now, and what stays wrong after it (goal -> what, for the status)."""

    moves: list[Move] = field(default_factory=list)
    leader_moves: list[LeaderMove] = field(default_factory=list)
    violations: dict[Goal, list[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.moves and not self.leader_moves


@dataclass
class MoveHistory:
    """When each partition last moved, and which brokers each left (the hysteresis). The
    controller records every move it starts; entries older than the cooldown are dropped."""

    moved_at: dict[tuple[str, int], int] = field(default_factory=dict)
    left_at: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def record(self, move: Move, now_ms: int) -> None:
        self.moved_at[(move.topic, move.partition)] = now_ms
        self.left_at[(move.topic, move.partition, move.source)] = now_ms

    def cooling(self, key: tuple[str, int], now_ms: int, cooldown_ms: int) -> bool:
        at = self.moved_at.get(key)
        return at is not None and now_ms - at < cooldown_ms

    def left_recently(self, key: tuple[str, int], broker: int, now_ms: int,
                      cooldown_ms: int) -> bool:  # fmt: skip
        at = self.left_at.get((*key, broker))
        return at is not None and now_ms - at < cooldown_ms

    def forget_before(self, horizon_ms: int) -> None:
        self.moved_at = {k: t for k, t in self.moved_at.items() if t >= horizon_ms}
        self.left_at = {k: t for k, t in self.left_at.items() if t >= horizon_ms}

    def copy(self) -> "MoveHistory":
        return dataclasses.replace(self, moved_at=dict(self.moved_at), left_at=dict(self.left_at))
