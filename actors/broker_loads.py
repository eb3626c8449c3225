"""The brokers' latest load reports, kept by the controller for the balancer's view.

Every ``broker.load.report.interval.ms`` each node agent reports its disk's capacity and use
and its replicas' sizes and traffic (``rafka.actors.load_reports``; what is counted, and how
counters become rates: ``rafka.cluster.load_rates``). The controller keeps the latest report
of each broker (``BrokerLoads``, held by ``Balancing``) in memory only: a restarted
controller knows no load until the next reports arrive, within one interval, and meanwhile
the disk and traffic goals see empty, idle partitions (so they move nothing).

- A report from a broker that is not registered (retired, or not known to this controller's
  metadata) is dropped, and a kept report is dropped once its broker is no longer registered.
- A report older than ``STALE_INTERVALS`` report intervals is stale: its broker went silent
  (dead, fenced, its agent restarting, or the controller too busy to take reports). Its
  sizes are kept (the bytes stay on the disk whatever the broker says, and a move still has
  them to copy) and its rates count as 0: the traffic is unknown, a balancer moving leaders
  and replicas for traffic seen minutes ago would chase load that may be gone, and the rates
  come back with the broker's next report.

Plain Python, no Ray; runs on the controller's event loop, and no method awaits. Times are
the controller's monotonic clock, ms (``controller_core.now_ms``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from rafka.cluster.load_rates import ReplicaLoad

#: A report older than this many report intervals is stale (see the module docstring).
STALE_INTERVALS = 3


@dataclass(frozen=True)
class BrokerLoad:
    """One broker's latest report: its disk's capacity and use, bytes (capacity 0: unknown,
    the disk goal leaves the broker alone), each replica's size and traffic by (topic id,
    partition), when it was received (ms), and whether it is stale (its rates are then 0)."""

    disk_capacity: int = 0
    disk_used: int = 0
    replicas: Mapping[tuple[str, int], ReplicaLoad] = field(default_factory=dict)
    received_ms: int = -1
    stale: bool = False


#: What a broker that never reported counts as.
NO_LOAD = BrokerLoad()


def parse_report(report: Mapping[str, Any], received_ms: int) -> BrokerLoad:
    """A node agent's report (the plain data ``load_reports`` describes) as a ``BrokerLoad``;
    ValueError or KeyError for one that does not have that shape."""
    replicas = {}
    for row in report["replicas"]:
        load = ReplicaLoad(str(row[0]), int(row[1]), int(row[2]), float(row[3]), float(row[4]))
        replicas[(load.topic_id, load.partition)] = load
    return BrokerLoad(int(report["disk_capacity"]), int(report["disk_used"]), replicas,
                      received_ms)  # fmt: skip


class BrokerLoads:
    """The latest report of each registered broker."""

    def __init__(self) -> None:
        self._latest: dict[int, BrokerLoad] = {}

    def record(self, broker_id: int, report: Mapping[str, Any], now_ms: int,
               registered: Collection[int]) -> bool:  # fmt: skip
        """Keep ``report`` as the latest of ``broker_id``, received at ``now_ms``; False
        (and nothing kept) when the broker is not ``registered``."""
        if broker_id not in registered:
            return False
        self._latest[broker_id] = parse_report(report, now_ms)
        return True

    def current(self, registered: Collection[int], now_ms: int,
                interval_ms: int) -> dict[int, BrokerLoad]:  # fmt: skip
        """The latest load of every ``registered`` broker that reported (reports of others
        are dropped for good), stale ones with their rates at 0; ``interval_ms`` is the
        report interval."""
        for broker_id in [b for b in self._latest if b not in registered]:
            del self._latest[broker_id]
        out = {}
        for broker_id, load in self._latest.items():
            if now_ms - load.received_ms > STALE_INTERVALS * interval_ms:
                load = dataclasses.replace(load, stale=True, replicas={
                    key: r._replace(bytes_in_per_s=0.0, bytes_out_per_s=0.0)
                    for key, r in load.replicas.items()
                })  # fmt: skip
            out[broker_id] = load
        return out


def partition_load(loads: Mapping[int, BrokerLoad], topic_id: str, partition: int,
                   replicas: Sequence[int], leader: int) -> tuple[int, float, float]:  # fmt: skip
    """(size in bytes, bytes in per s, bytes out per s) of one partition, from the reports of
    the brokers in ``replicas`` (0 for what none of them reported):

    - size: the largest replica's, what a move copies at most (a follower behind, or a
      replica being added, holds less);
    - bytes in: the leader's (what producers write to it), or while the leader has not
      reported the partition (it was just elected, or moved here) the largest of the other
      replicas' (each appends what the leader appends);
    - bytes out: the leader's (consumers fetch from the leader only)."""
    key = (topic_id, partition)
    found = {b: loads[b].replicas[key] for b in replicas
             if b in loads and key in loads[b].replicas}  # fmt: skip
    if not found:
        return 0, 0.0, 0.0
    size = max(r.size_bytes for r in found.values())
    led = found.get(leader)
    if led is not None:
        return size, led.bytes_in_per_s, led.bytes_out_per_s
    return size, max(r.bytes_in_per_s for r in found.values()), 0.0
