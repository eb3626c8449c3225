"""Which replicas change host actor now, so that the number of host actors follows load.

With ``replicas.per.actor`` > 1 replicas share host actors (``rafka.cluster.hosting``): one
process, one event loop. A replica that takes much traffic slows every replica sharing its
loop, so a *hot* replica gets a host of its own; once it has been *cold* long enough it joins
a shared host again, and its own host stops. Plain Python, the clock passed in; the
controller's timer (``rafka.actors.host_packing``) carries the decisions out.

A replica's load, bytes/s: for the leader its partition's bytes in plus bytes out (it takes
the appends and serves consumers), for a follower the bytes in (it copies the appends).

Rules, per round:

- nothing when ``per_actor`` is 1 (every replica is alone already);
- *hot*: load > ``threshold``; a hot replica in a shared host (more than one replica the
  metadata names) moves to a new host: a slot never used on its broker, as ``hosting``
  requires;
- *cold*: load < ``threshold / 2`` (hysteresis: a replica between the two is left alone and
  its cold clock restarts) continuously for ``COOLDOWN_MS`` while alone in its host: it
  joins the fullest shared host of its broker with room whose replicas are all cold; when
  there is none, the host of another replica that is alone and cold as long (two lone cold
  replicas pair up, so the hosts of a load that went away are given back);
- at most one re-host per broker per round (each is a brief unavailability of that replica:
  they are spread out), none of a partition being reassigned, none of a replica whose load
  is not known (its leader's broker does not report), none of a replica re-hosted less than
  ``COOLDOWN_MS`` ago (so a replica never goes back and forth faster than that).

Invariants kept: a host never holds more than ``per_actor`` replicas the metadata names (a
replica joins only a host with room); a replica joins only a host that holds named replicas,
or a new slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from rafka.cluster.hosting import ReplicaKey, host_loads, named_replicas

#: How long a lone replica must stay cold before it joins a shared host, and how long a
#: re-hosted replica stays where it was put, ms. Each re-host closes and reopens the replica
#: (a leader stops serving for the time its host takes to reopen it, about a second), so it
#: must be rare: 5 minutes is many load reports (10 s each by default) and long enough that
#: a burst pattern of a few minutes does not make a replica bounce between hosts.
COOLDOWN_MS = 5 * 60 * 1000

HOT = "hot"
COLD = "cold"


@dataclass(frozen=True)
class Rehost:
    """Move replica (``topic_id``, ``partition``, ``broker_id``) from host slot
    ``from_slot`` to ``to_slot`` of the same broker, because it is ``reason`` (HOT or COLD)
    at ``load`` bytes/s."""

    topic_id: str
    partition: int
    broker_id: int
    from_slot: int
    to_slot: int
    reason: str
    load: float

    @property
    def key(self) -> ReplicaKey:
        return (self.topic_id, self.partition, self.broker_id)

    def record(self) -> dict:
        """The ``hosted`` metadata record of the move."""
        return {"type": "hosted", "topic_id": self.topic_id, "partition": self.partition,
                "broker_id": self.broker_id, "slot": self.to_slot}  # fmt: skip


@dataclass
class PackingHistory:
    """What the decisions remember between rounds (the controller's memory, not durable: a
    restarted controller starts the cold clocks again, which only waits longer):
    ``cold_since`` (replica -> ms since it is continuously cold) and ``rehosted_at``
    (replica -> ms of its last re-host)."""

    cold_since: dict[ReplicaKey, int] = field(default_factory=dict)
    rehosted_at: dict[ReplicaKey, int] = field(default_factory=dict)

    def rehosted(self, key: ReplicaKey, now_ms: int) -> None:
        """``key`` was re-hosted at ``now_ms``: it stays for COOLDOWN_MS, and its cold
        clock starts again."""
        self.rehosted_at[key] = now_ms
        self.cold_since.pop(key, None)

    def settled(self, key: ReplicaKey, now_ms: int) -> bool:
        """True when ``key`` was not re-hosted in the last COOLDOWN_MS."""
        at = self.rehosted_at.get(key)
        return at is None or now_ms - at >= COOLDOWN_MS

    def forget_before(self, now_ms: int) -> None:
        self.rehosted_at = {k: t for k, t in self.rehosted_at.items()
                            if now_ms - t < COOLDOWN_MS}  # fmt: skip


def replica_loads(image, partitions: Iterable, known_brokers: Iterable[int]) -> dict[
    ReplicaKey, float
]:
    """Each replica's load, bytes/s, from the balancer's ``PartitionView``s (topic name,
    partition, replicas, leader, ``bytes_in_per_s``, ``bytes_out_per_s``: the leader's
    rates). Replicas of a partition whose leader is not in ``known_brokers`` (brokers with a
    current load report) or that has no leader are left out: their load is not known."""
    known = set(known_brokers)
    ids = {t.name: t.topic_id for t in image.topics.values()}
    out: dict[ReplicaKey, float] = {}
    for p in partitions:
        topic_id = ids.get(p.topic)
        if topic_id is None or p.leader not in known:
            continue
        for b in p.replicas:
            load = p.bytes_in_per_s + (p.bytes_out_per_s if b == p.leader else 0.0)
            out[(topic_id, p.partition, b)] = float(load)
    return out


def moving_replicas(image) -> set[ReplicaKey]:
    """Every replica of a partition being reassigned (adding or removing replicas)."""
    return {
        (t.topic_id, p.partition, b)
        for t in image.topics.values() for p in t.partitions.values()
        if p.adding or p.removing
        for b in set(p.replicas) | set(p.adding) | set(p.removing)
    }  # fmt: skip


def decide(
    image,
    loads: Mapping[ReplicaKey, float],
    per_actor: int,
    threshold: float,
    history: PackingHistory,
    now_ms: int,
    busy: Iterable[ReplicaKey] = (),
) -> list[Rehost]:
    """The re-hosts to carry out now (at most one per broker), by the module's rules.
    ``loads``: bytes/s of the replicas whose load is known; ``threshold``: bytes/s above
    which a replica is hot; ``busy``: replicas not to touch (being reassigned, say). Updates
    ``history``'s cold clocks; the caller records each re-host it carries out
    (``history.rehosted``)."""
    named = named_replicas(image)
    cold_limit = threshold / 2
    for key in list(history.cold_since):
        if key not in named or loads.get(key, cold_limit) >= cold_limit:
            del history.cold_since[key]
    for key, load in loads.items():
        if key in named and load < cold_limit:
            history.cold_since.setdefault(key, now_ms)
    if per_actor <= 1:
        return []
    busy = set(busy) | moving_replicas(image)
    members: dict[int, dict[int, list[ReplicaKey]]] = {}  # broker -> slot -> replicas
    for key, slot in image.hosts.items():
        if key in named:
            members.setdefault(key[2], {}).setdefault(slot, []).append(key)
    counts = host_loads(image)

    def cold_ready(key: ReplicaKey) -> bool:
        since = history.cold_since.get(key)
        return since is not None and now_ms - since >= COOLDOWN_MS and history.settled(
            key, now_ms)

    out = []
    for broker in sorted(members):
        slots = members[broker]
        movable = [k for ks in slots.values() for k in ks
                   if k in loads and k not in busy and history.settled(k, now_ms)]  # fmt: skip
        hot = [k for k in movable if loads[k] > threshold and counts[broker][image.hosts[k]] > 1]
        if hot:
            key = max(hot, key=lambda k: (loads[k], k))
            slot = image.next_host_slot.get(broker, 0)
            out.append(Rehost(*key, image.hosts[key], slot, HOT, loads[key]))
            continue
        lone = sorted((k for k in movable if counts[broker][image.hosts[k]] == 1
                       and cold_ready(k)), key=lambda k: (image.hosts[k], k))  # fmt: skip
        for key in reversed(lone):  # the newest host empties first
            target = _shared_host(slots, counts[broker], image.hosts[key], per_actor, loads,
                                  cold_limit)  # fmt: skip
            if target is None:
                pair = [k for k in lone if k != key]
                target = image.hosts[pair[0]] if pair else None
            if target is not None:
                out.append(Rehost(*key, image.hosts[key], target, COLD, loads[key]))
                break
    return out


def _shared_host(slots: Mapping[int, list[ReplicaKey]], counts: Mapping[int, int], own: int,
                 per_actor: int, loads: Mapping[ReplicaKey, float],
                 cold_limit: float) -> int | None:  # fmt: skip
    """The fullest host (lowest slot among equals) other than ``own`` holding more than one
    replica, with room for one more, whose replicas are all known to be cold."""
    fits = [s for s, keys in slots.items()
            if s != own and 1 < counts[s] < per_actor
            and all(loads.get(k, cold_limit) < cold_limit for k in keys)]  # fmt: skip
    return max(fits, key=lambda s: (counts[s], -s)) if fits else None
