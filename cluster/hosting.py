"""Which host actor holds each replica: the controller's decision, kept in the metadata.

A replica (a topic id, a partition and a broker) lives in one *host*: a Ray actor pinned to
its broker's disk that holds up to ``replicas.per.actor`` replicas. Hosts are numbered per
broker (their *slot*); a host's actor name is ``host_name(broker, slot)``. With the default of
one replica per actor every replica gets a host of its own.

Invariants:

- a replica keeps its slot for as long as its topic exists (moved away and back, it returns
  to the same host, so a late deletion and a creation of the same replica meet in one place),
  unless it is *re-hosted*: an explicit move to another host of the same broker, recorded in
  the metadata (a ``hosted`` record naming the new slot) before the replica is closed in its
  old host and opened in the new one (``rafka.cluster.host_packing`` decides,
  ``rafka.actors.host_packing`` carries it out; never while its partition is reassigned);
- a slot is filled only while a replica the metadata names holds it, or is new: a host
  emptied of named replicas may be being stopped, so it is never filled again, and a new
  host always gets a slot number never used on that broker;
- a host holds at most ``per_actor`` replicas named by the metadata.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from rafka.errors import PolicyViolation

HOST_PREFIX = "rafka-host-"
#: The most replicas one host actor may hold (``replicas.per.actor``): beyond this a host's
#: event loop and its restart (every replica recovers its log, one after another) get long.
MAX_REPLICAS_PER_ACTOR = 1000
#: Slot of a replica the metadata has not placed in a host yet (it is starting).
NO_HOST = -1
#: Unique memory of a host actor process before its replicas, bytes (measured: 58 MiB).
HOST_BASE_BYTES = 58 << 20
#: Unique memory of one idle replica in a host beyond that base, bytes (``python -m bench
#: scale`` measures it; this is the figure the memory check plans with).
REPLICA_BYTES = 2 << 20
#: Share of a node's available memory that new replicas may be planned to take.
MEMORY_SHARE = 0.8
#: Host actors one disk may hold: each pinned actor takes PINNED_DISK_SHARE (1/1000) of the
#: disk's resource, and the node agent and controller need theirs.
MAX_HOSTS_PER_DISK = 990

ReplicaKey = tuple[str, int, int]  # (topic id, partition, broker id)


def host_name(broker_id: int, slot: int) -> str:
    """Ray actor name of host ``slot`` of ``broker_id``."""
    return f"{HOST_PREFIX}b{broker_id}-{slot}"


def named_replicas(image) -> set[ReplicaKey]:
    """Every replica the metadata names now."""
    return {
        (topic.topic_id, p.partition, b)
        for topic in image.topics.values()
        for p in topic.partitions.values()
        for b in p.replicas
    }


def place(image, keys: Iterable[ReplicaKey], per_actor: int) -> list[dict[str, Any]]:
    """``hosted`` records that give each of ``keys`` without a host one: the fullest host of
    its broker that has room (fewest hosts stay busy), else a new host. Keys already placed
    are left where they are."""
    # broker -> slot -> load, for the hosts with room only (with one replica per actor
    # there are none, so placing is linear in the keys).
    open_hosts = {b: {s: n for s, n in slots.items() if n < per_actor}
                  for b, slots in host_loads(image).items()}  # fmt: skip
    next_slot = dict(image.next_host_slot)
    records = []
    for key in sorted(set(keys)):
        if key in image.hosts:
            continue
        broker = key[2]
        room = open_hosts.setdefault(broker, {})
        if room:
            slot = max(room, key=lambda s: (room[s], -s))
        else:
            slot = next_slot.get(broker, 0)
            next_slot[broker] = slot + 1
            room[slot] = 0
        room[slot] += 1
        if room[slot] >= per_actor:
            del room[slot]
        records.append({"type": "hosted", "topic_id": key[0], "partition": key[1],
                        "broker_id": broker, "slot": slot})  # fmt: skip
    return records


def slots_of(image, topic_id: str, partition: int, replicas: list[int]) -> list[int]:
    """The host slot of each of ``replicas`` (NO_HOST where none is recorded)."""
    return [image.hosts.get((topic_id, partition, b), NO_HOST) for b in replicas]


def host_loads(image) -> dict[int, dict[int, int]]:
    """broker -> slot -> replicas the metadata names in that host."""
    named = named_replicas(image)
    out: dict[int, dict[int, int]] = {}
    for key, slot in image.hosts.items():
        if key in named:
            by_slot = out.setdefault(key[2], {})
            by_slot[slot] = by_slot.get(slot, 0) + 1
    return out


def new_hosts(image, broker_id: int, count: int, per_actor: int,
              loads: Mapping[int, Mapping[int, int]] | None = None) -> int:  # fmt: skip
    """Host actors ``count`` more replicas on ``broker_id`` would start (its open hosts are
    filled first, as ``place`` does); ``loads``: ``host_loads(image)``, if at hand."""
    loads = host_loads(image) if loads is None else loads
    room = sum(per_actor - n for n in loads.get(broker_id, {}).values() if 0 < n < per_actor)
    return math.ceil(max(0, count - room) / per_actor)


def memory_needed(image, broker_id: int, count: int, per_actor: int,
                  loads: Mapping[int, Mapping[int, int]] | None = None) -> int:  # fmt: skip
    """Bytes ``count`` more replicas on ``broker_id`` are planned to take."""
    hosts = new_hosts(image, broker_id, count, per_actor, loads)
    return hosts * HOST_BASE_BYTES + count * REPLICA_BYTES


def replicas_that_fit(available: int, per_actor: int) -> int:
    """How many replicas fit in ``available`` bytes in new hosts of ``per_actor`` each."""
    per_host = HOST_BASE_BYTES + per_actor * REPLICA_BYTES
    budget = int(available * MEMORY_SHARE)
    whole, rest = divmod(budget, per_host)
    return whole * per_actor + max(0, min(per_actor, (rest - HOST_BASE_BYTES) // REPLICA_BYTES))


def check_fits(
    image, new_by_broker: Mapping[int, int], per_actor: int, available: Mapping[int, int],
    what: str, pending_by_broker: Mapping[int, int] | None = None,
) -> None:
    """PolicyViolation when the new replicas of ``what`` (count per broker) would take more
    than MEMORY_SHARE of a broker node's available memory (``available``, bytes, per
    broker; brokers not in it are not checked), counting the replicas placed but not
    started yet (``pending_by_broker``: the memory reading does not show them), or more
    host actors than a disk can pin (MAX_HOSTS_PER_DISK); saying how many fit and what
    to change."""
    pending_by_broker = pending_by_broker or {}
    loads = host_loads(image)
    for broker_id, count in sorted(new_by_broker.items()):
        if count <= 0:
            continue
        hosts = len(loads.get(broker_id, {})) + new_hosts(image, broker_id, count, per_actor,
                                                           loads)  # fmt: skip
        if hosts > MAX_HOSTS_PER_DISK:
            raise PolicyViolation(
                f"{what} would need {hosts} host actors on broker {broker_id}; a disk pins "
                f"at most {MAX_HOSTS_PER_DISK}: set the cluster setting replicas.per.actor "
                f"higher (now {per_actor}) when the services start, or ask for fewer "
                "partitions"
            )
        free = available.get(broker_id)
        if free is None:
            continue
        pending = pending_by_broker.get(broker_id, 0)
        needed = memory_needed(image, broker_id, count, per_actor, loads) + pending * (
            REPLICA_BYTES + HOST_BASE_BYTES // per_actor
        )
        if needed <= free * MEMORY_SHARE:
            continue
        fit = replicas_that_fit(free, per_actor)
        packed = max(per_actor, 100)
        advice = (
            f"set the cluster setting replicas.per.actor to {packed} or more when the services "
            f"start (rafka.connect(settings={{'replicas.per.actor': {packed}}}) or `rafka up "
            f"--set replicas.per.actor={packed}`: then about "
            f"{replicas_that_fit(free, packed):,} fit), "
            if per_actor < packed else ""
        )
        raise PolicyViolation(
            f"{what} would put {count} replica(s) on broker {broker_id}, about "
            f"{needed / 2**30:.1f} GiB with replicas.per.actor={per_actor}, but its node has "
            f"{free / 2**30:.1f} GiB available: about {fit:,} new replica(s) fit there now; "
            f"{advice}or ask for fewer partitions or a lower replication factor"
        )
