"""Which brokers hold the replicas of each partition.

Kafka's replica assignment (``AdminUtils.assignReplicasToBrokers``), made deterministic:
the random start index and replica shift Kafka draws come from a CRC of the topic id here,
so a plan depends only on the topic id, the partition range and the brokers.

Rack-unaware (no broker has a rack): partition ``p``'s leader is the broker ``start + p``
places along the sorted broker list, and its followers follow at a fixed shift, so leaders
and followers both spread evenly.

Rack-aware (every broker has a rack): the brokers are first ordered alternating across the
racks (racks sorted by name, brokers sorted by id within a rack: with racks a={0,1}, b={2},
c={3,4} the order is 0, 2, 3, 1, 4), the leader walks that list as above, and each follower
is the next candidate along the shifted walk that is on a rack holding no replica of the
partition yet, until every rack holds one; after that any broker without a replica will do.
So each partition spans ``min(replication_factor, racks)`` racks, and with racks of equal
size consecutive leaders go round the racks. The shift is a multiple of the rack count, so
with equal racks the first candidate is usually on a new rack already (as in Kafka).

A mix of brokers with and without a rack is refused (InvalidReplicaAssignment), as Kafka
refuses it: a rack-aware plan cannot place a broker that has no rack, and quietly falling
back to a rack-unaware plan would put replicas of one partition on one rack.
"""

from __future__ import annotations

import zlib
from typing import Mapping

from rafka.errors import InvalidReplicaAssignment, InvalidReplicationFactor

#: The node label that names a disk node's rack (``ray start --labels``).
RACK_LABEL = "rafka-rack"


def assign_replicas(
    topic_id: str,
    first_partition: int,
    count: int,
    replication_factor: int,
    brokers: list[int],
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Replica lists (leader first) for partitions ``first_partition .. first_partition +
    count - 1``. ``racks`` maps broker ids to rack names (None: no rack; brokers missing from
    it have none; entries for brokers not in ``brokers`` are ignored). Raises
    InvalidReplicationFactor when there are too few brokers, InvalidReplicaAssignment when
    some brokers have a rack and others not."""
    ordered = sorted(brokers)
    n = len(ordered)
    if replication_factor < 1:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} must be at least 1"
        )
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} exceeds the {n} broker(s) with a data "
            "disk; add disk nodes (resource rafka_disk) or lower the replication factor"
        )
    rack_of = _racks_of(ordered, racks)
    seed = zlib.crc32(topic_id.encode())
    start = seed % n
    shift = (seed // n) % max(n - 1, 1)
    if rack_of is not None:
        return _rack_aware(first_partition, count, replication_factor, rack_of, start, shift)
    plan = {}
    for p in range(first_partition, first_partition + count):
        first = (start + p) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % max(n - 1, 1)) % n])
        plan[p] = replicas
    return plan


def rack_alternated(rack_of: Mapping[int, str]) -> list[int]:
    """The brokers ordered one per rack in turn (racks by name, brokers by id within a rack),
    Kafka's ``getRackAlternatedBrokerList``: a rack that runs out is skipped."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(c) for c in columns)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def _racks_of(
    ordered: list[int], racks: Mapping[int, str | None] | None
) -> dict[int, str] | None:
    """Each broker's rack, None when no broker has one; refuses a mix."""
    if not racks:
        return None
    known = {b: racks.get(b) for b in ordered}
    missing = [b for b, rack in known.items() if rack is None]
    if len(missing) == len(ordered):
        return None
    if missing:
        with_rack = ", ".join(f"{b} ({known[b]!r})" for b in ordered if known[b] is not None)
        raise InvalidReplicaAssignment(
            f"broker(s) {', '.join(map(str, missing))} have no rack while broker(s) "
            f"{with_rack} have one: rack-aware placement needs a rack for every broker. Label "
            f"every disk node with its rack (ray start --labels {RACK_LABEL}=<rack>), or "
            "remove the label from all of them"
        )
    return known  # type: ignore[return-value]  # no None left


def _rack_aware(
    first_partition: int, count: int, replication_factor: int, rack_of: dict[int, str],
    start: int, shift: int,
) -> dict[int, list[int]]:  # fmt: skip
    """Kafka's ``assignReplicasToBrokersRackAware`` with a fixed start and shift."""
    arranged = rack_alternated(rack_of)
    n = len(arranged)
    rack_count = len(set(rack_of.values()))
    step = max(n - 1, 1)
    plan = {}
    for p in range(first_partition, first_partition + count):
        first = (start + p) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        k = 0
        while len(replicas) < replication_factor:
            # Over any n-1 consecutive k the candidates are every broker but the leader, so
            # an acceptable one (a new rack while racks remain, else a new broker) comes up
            # within n-1 steps.
            broker = arranged[(first + 1 + (shift * rack_count + k) % step) % n]
            k += 1
            rack = rack_of[broker]
            if broker in replicas or (rack in racks_used and len(racks_used) < rack_count):
                continue
            replicas.append(broker)
            racks_used.add(rack)
        plan[p] = replicas
    return plan
