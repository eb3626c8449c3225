"""A broker's replica traffic in bytes/s, from the counters its host actors keep.

Plain Python (no Ray, no clock of its own): the node agent (``rafka.actors.load_reports``)
asks each host actor for a ``HostSample`` every report interval and keeps one ``LoadRates``,
which turns the counters into rates.

What is counted, per replica, from 0 when the replica opens its log (``since_ms``):

- bytes appended to its log: by a leader, the producers' batches (and transaction markers);
  by a follower, what it copied from the leader. Every replica stores what producers write,
  so a broker's bytes in are its leaders' produce bytes in plus its followers' replication
  bytes in (Cruise Control keeps the two apart and sums them for a broker's network in; the
  balancer only needs the sum, and a partition's produce rate is its leader's rate);
- bytes sent to consumers: client fetches (consumers, and a group coordinator loading its
  state). Followers' replication fetches are not counted (they are the followers' bytes in),
  nor are Spark exports (they go through the object store and any in-sync replica may serve
  them, so they do not follow the leadership, which is what the bytes-out goal moves).

Times are ms of the host's node monotonic clock (``monotonic_ms``): ``since_ms`` and the
sample's ``at_ms`` come from the same host process, so a rate never depends on two clocks,
and the clock never jumps.

A rate is the difference of a counter between two samples over the time between them. A
replica seen for the first time, or in a new life (its ``since_ms`` changed, or a counter went
down: its host restarted, or it was removed and added again), counted from 0 at its
``since_ms`` (or from the previous sample, if that is later): its rate is its counters over
that time, as Prometheus's ``rate()`` treats a counter reset, and over at least
``MIN_WINDOW_MS`` (a replica opened a moment ago with one burst would otherwise report an
absurd rate). After an agent restart the first rates are thus the replicas' averages since
they opened, and exact from the next report on.
"""

from __future__ import annotations

import time
from typing import Mapping, NamedTuple

#: Shortest time a rate is taken over, ms (see the module docstring).
MIN_WINDOW_MS = 1_000


def monotonic_ms() -> int:
    """This node's monotonic clock, ms (the same in every process of the node)."""
    return int(time.monotonic() * 1000)


class ReplicaCounters(NamedTuple):
    """One replica as its host sees it: its log's size now (bytes) and its counters since
    ``since_ms`` (bytes appended to its log, bytes sent to consumers)."""

    topic_id: str
    partition: int
    size_bytes: int
    bytes_appended: int
    bytes_to_consumers: int
    since_ms: int


class HostSample(NamedTuple):
    """A host actor's answer: its replicas' counters, read at ``at_ms``."""

    at_ms: int
    replicas: list[ReplicaCounters]

    @classmethod
    def from_answer(cls, answer: Mapping) -> "HostSample":
        """From ``ReplicaHost.load_report``'s plain-data answer."""
        return cls(int(answer["at_ms"]), [ReplicaCounters(*r) for r in answer["replicas"]])


class ReplicaLoad(NamedTuple):
    """One replica in a load report: its size (bytes) and its traffic (bytes/s) in (appended
    to its log) and out (sent to consumers)."""

    topic_id: str
    partition: int
    size_bytes: int
    bytes_in_per_s: float
    bytes_out_per_s: float


class LoadRates:
    """The last sample of each host actor of one disk, and the rates since.

    Not thread-safe; the agent calls it from its event loop, one report at a time."""

    def __init__(self) -> None:
        self._last: dict[int, HostSample] = {}  # slot -> its last answer
        self._loads: dict[int, list[ReplicaLoad]] = {}  # slot -> what its last answer gave

    def update(self, answers: Mapping[int, HostSample | None]) -> list[ReplicaLoad]:
        """Every replica of the disk, with its rates since the previous sample of its host.

        ``answers`` holds every host slot the disk has: a sample, or None for a host that
        did not answer (restarting, or too slow). Such a host's replicas keep their last
        known sizes and rates (the busiest hosts are the likeliest to be slow: taking them
        as idle would show the load dropping when it is highest), and its next answer is
        compared with its last one. A slot left out is gone (its host was emptied and
        stopped): forgotten."""
        out: list[ReplicaLoad] = []
        for slot, sample in answers.items():
            last = self._last.get(slot)
            if sample is None:
                out.extend(self._loads.get(slot, ()))
                continue
            before = {(r.topic_id, r.partition): r for r in last.replicas} if last else {}
            loads = [_rates(now, sample.at_ms, before.get((now.topic_id, now.partition)),
                            last.at_ms if last else None) for now in sample.replicas]
            out.extend(loads)
            self._last[slot], self._loads[slot] = sample, loads
        for slot in set(self._last) - set(answers):
            del self._last[slot]
            self._loads.pop(slot, None)
        return out


def _rates(now: ReplicaCounters, at_ms: int, then: ReplicaCounters | None,
           then_ms: int | None) -> ReplicaLoad:  # fmt: skip
    same_life = (
        then is not None and then_ms is not None and then_ms < at_ms
        and then.since_ms == now.since_ms
        and now.bytes_appended >= then.bytes_appended
        and now.bytes_to_consumers >= then.bytes_to_consumers
    )  # fmt: skip
    if same_life:
        window = at_ms - then_ms
        appended = now.bytes_appended - then.bytes_appended
        sent = now.bytes_to_consumers - then.bytes_to_consumers
    else:  # counted from 0 at since_ms: first seen, or a new life
        # A new life's counting began after the previous sample, whatever its since_ms says
        # (a host restarted on another node reads another clock).
        start = now.since_ms if then_ms is None else max(now.since_ms, then_ms)
        window = max(at_ms - start, MIN_WINDOW_MS)
        appended, sent = now.bytes_appended, now.bytes_to_consumers
    return ReplicaLoad(now.topic_id, now.partition, now.size_bytes,
                       appended * 1000 / window, sent * 1000 / window)  # fmt: skip
