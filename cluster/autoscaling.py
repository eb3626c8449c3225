"""How many disk nodes rafka asks Ray for, and which autoscaled broker it gives back: a pure
function of the cluster view, the settings, the topic creations waiting for brokers, the
autoscaler's own state and the time.

Scale up: the brokers needed are the most any one measure asks for, each the cluster's total
divided by what one broker may hold (``ceil(total / per_broker)``):

- replicas (``max_replicas_per_broker``),
- bytes in, every replica taking what its partition's producers write (``max_bytes_in``),
- bytes out, each leader sending what its consumers read (``max_bytes_out``),
- disk, the partitions' sizes times their replicas over ``disk_threshold`` of the smallest
  reported disk (no report: not counted),
- the largest replication factor in use, and the one a topic creation was refused for
  (``wanted_by_topics``: a topic cannot be created on fewer brokers than its factor), until
  that many brokers are there or ``TOPIC_DEMAND_TTL_MS`` has passed.

The wanted count is that, clamped to ``[min_brokers, max_brokers]``, and the request is that
many ``rafka_disk`` bundles (Ray's request is a target for the whole cluster, existing nodes
included), plus one per retired node Ray has not released yet (Ray counts it; rafka never
uses it again). Once no more are wanted the request is the brokers there are, so such a node
is not needed and Ray's idle timeout takes it. The balancer moves load onto the nodes that
join.

Scale down (hysteresis): only when the load would fit one broker fewer with every limit
taken at ``LOW_WATER`` of its value, continuously for ``scale_down_delay_ms``, with no move
in flight and no broker draining already. Then the emptiest broker the autoscaler may remove
(one on an ephemeral disk that does not hold the controller: ``removable``) is drained; once
it holds nothing its actors are stopped and it is retired from the metadata, and the request
drops by one so Ray's idle timeout releases the node. A need that returns while the broker
drains cancels the drain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rafka.cluster.balancer_types import ClusterView

#: Scale down only when the load fits one broker fewer at this share of every limit (scale
#: up happens at the limit itself): the gap keeps a cluster at the edge from flapping.
LOW_WATER = 0.7
#: How long a topic creation refused for too few brokers keeps asking for them, ms: long
#: enough for a node to be launched and to join, and for the creation to be retried.
TOPIC_DEMAND_TTL_MS = 10 * 60_000


@dataclass(frozen=True)
class AutoscalingSettings:
    """Limits per broker: replicas, bytes/s in and out; ``disk_threshold`` share of a disk."""

    enabled: bool = False
    min_brokers: int = 1
    max_brokers: int = 16
    max_replicas_per_broker: int = 200
    max_bytes_in_per_broker: float = float(64 << 20)
    max_bytes_out_per_broker: float = float(128 << 20)
    disk_threshold: float = 0.8
    scale_down_delay_ms: int = 600_000
    #: A broker dead for less than this still counts (its node is likely coming back; the
    #: balancer's healing delay).
    dead_grace_ms: int = 600_000


@dataclass
class AutoscalerState:
    """What the autoscaler remembers between ticks (this controller's own: a restarted
    controller asks again at its first tick, waits the scale-down delay anew, and finds the
    broker it was retiring from the metadata). ``requested``: brokers asked of Ray at the
    last request (None: never asked); ``low_since_ms``: since when one broker fewer would
    do; ``retiring``: the broker it is draining to give back; ``topic_demand``: topic name
    -> (brokers, when first refused) of refused topic creations."""

    requested: int | None = None
    low_since_ms: int | None = None
    retiring: int | None = None
    topic_demand: dict[str, tuple[int, int]] = field(default_factory=dict)

    def want_for_topic(self, brokers: int, now_ms: int, max_brokers: int,
                       topic: str = "") -> bool:  # fmt: skip
        """A creation of ``topic`` was refused: it needs ``brokers`` brokers. True if they
        are asked for: not beyond ``max_brokers`` (no node would ever make it fit), and a
        retry does not renew the demand (a client retrying in a loop would hold the
        cluster up for good)."""
        if brokers > max_brokers:
            return False
        first = self.topic_demand.get(topic)
        self.topic_demand[topic] = (max(brokers, first[0]) if first else brokers,
                                    first[1] if first else now_ms)  # fmt: skip
        return True

    def met_for_topics(self, brokers: int) -> None:
        """``brokers`` are there: the creations that wanted at most that many can go ahead,
        and their demand no longer holds brokers up (the topic's own replicas do)."""
        self.topic_demand = {t: d for t, d in self.topic_demand.items() if d[0] > brokers}

    def wanted_by_topics(self, now_ms: int) -> int:
        self.topic_demand = {t: (n, at) for t, (n, at) in self.topic_demand.items()
                             if now_ms - at < TOPIC_DEMAND_TTL_MS}  # fmt: skip
        return max((n for n, _ in self.topic_demand.values()), default=0)


@dataclass
class Decision:
    """What to do now. ``request``: ask Ray for this many disk nodes (None: leave the request
    as it is); ``drain``/``undrain``: start or cancel the drain of a broker; ``retire``: a
    drained broker to stop and remove from the metadata; ``reasons``: why, for the logs and
    the status."""

    wanted: int
    request: int | None = None
    drain: int | None = None
    undrain: int | None = None
    retire: int | None = None
    reasons: list[str] = field(default_factory=list)


def brokers_needed(view: ClusterView, settings: AutoscalingSettings, wanted_by_topics: int = 0,
                   share: float = 1.0) -> tuple[int, list[str]]:  # fmt: skip
    """The brokers the load needs with every limit taken at ``share`` of its value, and what
    each measure asks for (the reasons)."""
    replicas = sum(len(p.replicas) for p in view.partitions)
    bytes_in = sum(p.bytes_in_per_s * len(p.replicas) for p in view.partitions)
    bytes_out = sum(p.bytes_out_per_s for p in view.partitions)
    stored = sum(p.size_bytes * len(p.replicas) for p in view.partitions)
    capacities = [b.disk_capacity for b in view.brokers if b.alive and b.disk_capacity]
    needs = {
        "replicas": _need(replicas, settings.max_replicas_per_broker * share),
        "bytes in": _need(bytes_in, settings.max_bytes_in_per_broker * share),
        "bytes out": _need(bytes_out, settings.max_bytes_out_per_broker * share),
        "replication factor": max((len(p.replicas) for p in view.partitions), default=0),
        "topic creations": wanted_by_topics,
    }
    if capacities:
        # The mean disk: a small disk joining must not raise the need it was added for.
        mean = sum(capacities) / len(capacities)
        needs["disk"] = _need(stored, mean * settings.disk_threshold * share)
    needed = max(needs.values())
    return needed, [f"{what}: {n}" for what, n in needs.items() if n and n == needed]


def _need(total: float, per_broker: float) -> int:
    return math.ceil(total / per_broker) if per_broker > 0 else 0


def decide(view: ClusterView, settings: AutoscalingSettings, state: AutoscalerState,
           removable: set[int], now_ms: int, lingering: int = 0) -> Decision:  # fmt: skip
    """The autoscaler's step (see the module docstring). Updates ``state``'s timers and
    ``requested``/``retiring`` as if the decision is carried out. ``removable``: brokers on
    ephemeral disks the autoscaler may give back (one lost is gone for good);
    ``lingering``: retired brokers whose node Ray has not released yet.

    Ray counts the nodes alive against the request, so the request counts what Ray sees:
    the brokers alive, the new ones wanted, and, while asking for more, the alive nodes
    rafka will not use (retired or draining), which would otherwise meet part of it. A named
    broker down for less than ``dead_grace_ms`` still counts as one of the cluster (Ray
    brings its node back) but is not asked for again."""
    holds = {b for p in view.partitions for b in p.replicas}
    alive = [b for b in view.brokers if b.alive and not b.draining]
    returning = [b for b in view.brokers if not b.alive and not b.draining
                 and b.broker_id not in removable
                 and now_ms - b.dead_since_ms < settings.dead_grace_ms]  # fmt: skip
    unused_alive = lingering + sum(1 for b in view.brokers if b.alive and b.draining)
    staying = len(alive) + len(returning)
    state.met_for_topics(staying)
    topics = state.wanted_by_topics(now_ms)
    needed, reasons = brokers_needed(view, settings, topics)
    wanted = min(max(needed, settings.min_brokers), settings.max_brokers)
    decision = Decision(wanted=wanted, reasons=reasons)
    # A lost ephemeral broker never comes back: once healing has moved its replicas away,
    # it is retired (one a tick).
    lost = [b.broker_id for b in view.brokers if not b.alive and b.broker_id in removable
            and b.broker_id not in holds]  # fmt: skip
    retiring = next((b for b in view.brokers if b.broker_id == state.retiring), None)
    if retiring is None or not retiring.draining or not retiring.alive:
        state.retiring = None  # retired, undrained by an admin, or lost (healing takes it)
    if state.retiring is not None and wanted > staying:
        decision.undrain = state.retiring  # needed again: keep it
        decision.reasons.append(f"broker {state.retiring} is needed again")
        alive.append(retiring)
        state.retiring = None
        staying += 1
        unused_alive -= 1
    if wanted > staying:
        state.low_since_ms = None
        target = wanted - len(returning) + unused_alive
        if state.requested != target:
            decision.request = state.requested = target
        decision.retire = lost[0] if lost else None
        return decision
    if state.retiring is not None and state.retiring not in holds:
        decision.retire, state.retiring = state.retiring, None
        decision.request = state.requested = len(alive)
        return decision
    if lost:
        decision.retire = lost[0]
    if state.requested != len(alive):
        # Ask for what the cluster has: less would let Ray take a node rafka still uses,
        # were the node ever idle; more would keep a node Ray should release.
        decision.request = state.requested = len(alive)
    if state.retiring is not None:
        return decision
    low, _ = brokers_needed(view, settings, topics, LOW_WATER)
    low = max(low, settings.min_brokers)
    candidates = [b.broker_id for b in alive if b.broker_id in removable]
    quiet = not any(p.moving for p in view.partitions) and not returning and not lost
    if low > staying - 1 or not candidates or not quiet:
        state.low_since_ms = None
        return decision
    if state.low_since_ms is None:
        state.low_since_ms = now_ms
    if now_ms - state.low_since_ms < settings.scale_down_delay_ms:
        return decision
    held = {b: sum(b in p.replicas for p in view.partitions) for b in candidates}
    emptiest = min(candidates, key=lambda b: (held[b], -b))
    decision.drain = state.retiring = emptiest
    decision.reasons = [f"{staying - 1} broker(s) would hold the load below "
                        f"{LOW_WATER:.0%} of every limit for "
                        f"{settings.scale_down_delay_ms} ms"]  # fmt: skip
    state.low_since_ms = None
    return decision
