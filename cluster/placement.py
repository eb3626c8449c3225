"""Which brokers hold the replicas of each partition.

Kafka's rack-unaware assignment: partition ``p``'s leader is the broker ``start + p`` places
along the sorted broker list, and its followers follow at a fixed shift, so leaders and
followers both spread evenly. ``start`` is derived from the topic id, so a plan is
deterministic for a given topic.
"""

from __future__ import annotations

import zlib

from rafka.errors import InvalidReplicationFactor


def assign_replicas(
    topic_id: str,
    first_partition: int,
    count: int,
    replication_factor: int,
    brokers: list[int],
) -> dict[int, list[int]]:
    """Replica lists (leader first) for partitions ``first_partition .. first_partition +
    count - 1``; raises InvalidReplicationFactor when there are too few brokers."""
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
    seed = zlib.crc32(topic_id.encode())
    start = seed % n
    shift = (seed // n) % max(n - 1, 1)
    plan = {}
    for p in range(first_partition, first_partition + count):
        first = (start + p) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % max(n - 1, 1)) % n])
        plan[p] = replicas
    return plan
