"""Consumer lag gauges of one group coordinator's groups.

``LagReporter`` runs beside the coordinator on its event loop: every ``LAG_INTERVAL_S`` it
asks the leaders of the committed partitions for their high watermarks and sets
lag = high watermark - committed offset for every group with a commit there. A metric must
never stop the coordinator: a failed round is logged and the next one tries again.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import ray

from rafka.actors import metrics
from rafka.actors.replica_handle import find_replica, leader_host
from rafka.cluster.hosting import NO_HOST
from rafka.cluster.metadata import NO_LEADER

LATEST = -1
#: How often the consumer lag gauges of groups with commits are refreshed, s.
LAG_INTERVAL_S = 3.0
#: Partitions whose high watermark one lag round asks for, at most: more are taken in turns
#: over the following rounds, so the cost stays bounded however many groups commit.
LAG_PARTITIONS_PER_ROUND = 500
#: Longest wait for the controller's metadata or a leader's high watermark in a lag round, s.
LAG_CALL_TIMEOUT_S = 5.0


class LagReporter:
    """``groups()`` gives the coordinator's groups once they are loaded (None before);
    ``controller_call(method, *args)`` awaits a controller method."""

    def __init__(self, namespace: str, groups: Callable, controller_call: Callable,
                 logger) -> None:  # fmt: skip
        self.namespace = namespace
        self._groups = groups
        self._controller_call = controller_call
        self.logger = logger
        self._lag_replicas: dict[tuple, Any] = {}  # (topic id, partition, leader, host) -> handle
        self._lag_reported: set[tuple[str, str, int]] = set()  # (group, topic, partition)
        self._lag_cursor = 0

    async def run(self) -> None:
        """Every LAG_INTERVAL_S, set the lag gauges of the groups with commits."""
        while True:
            await asyncio.sleep(LAG_INTERVAL_S)
            groups = self._groups()
            if groups is None:
                continue
            try:
                await self._lag_round(groups)
            except (ray.exceptions.RayActorError, asyncio.TimeoutError) as e:
                # The controller restarts or is busy (a failover): expected, next round.
                self.logger.info("consumer lag not refreshed: %r", e)
            except Exception as e:  # a metric must never stop the coordinator; next round
                self.logger.warning("refreshing the consumer lag gauges failed: %r", e)

    async def _lag_round(self, groups) -> None:
        """One round: the high watermark of each committed partition (at most
        LAG_PARTITIONS_PER_ROUND, in turns), from its leader, and lag = high watermark -
        committed offset for every group with a commit there. One controller call for the
        leaders and one call per partition, however many groups share it."""
        committed = {
            (group.group_id, topic, partition): c.offset
            for group in list(groups)
            for (topic, partition), c in list(group.offsets.items())
        }  # fmt: skip
        for gone in self._lag_reported - committed.keys():  # deleted or expired offsets
            metrics.group_lag(*gone, 0)  # Ray keeps exporting a gauge's last value
        self._lag_reported &= committed.keys()
        partitions = sorted({(topic, partition) for _, topic, partition in committed})
        if not partitions:
            return
        if len(partitions) > LAG_PARTITIONS_PER_ROUND:
            start = self._lag_cursor % len(partitions)
            partitions = (partitions + partitions)[start : start + LAG_PARTITIONS_PER_ROUND]
            self._lag_cursor = start + LAG_PARTITIONS_PER_ROUND
        high_watermarks = await self._high_watermarks(partitions)
        for key, offset in committed.items():
            hw = high_watermarks.get(key[1:])
            if hw is not None:
                metrics.group_lag(*key, metrics.consumer_lag(hw, offset))
                self._lag_reported.add(key)

    async def _high_watermarks(self, partitions: list[tuple[str, int]]) -> dict:
        """{(topic, partition): high watermark} of the partitions whose leader answered."""
        topics = sorted({topic for topic, _ in partitions})
        described = await asyncio.wait_for(
            self._controller_call("metadata", topics, False), LAG_CALL_TIMEOUT_S
        )
        # (topic, partition) -> (topic id, partition, leader, its host slot)
        leaders: dict[tuple[str, int], tuple[str, int, int, int]] = {}
        for topic, description in described.items():
            if isinstance(description, dict):  # else deleted since the commit
                for d in description["partitions"]:
                    if d["leader"] != NO_LEADER and leader_host(d) != NO_HOST:
                        leaders[topic, d["partition"]] = (
                            description["topic_id"], d["partition"], d["leader"], leader_host(d)
                        )
        wanted = {tp: leaders[tp] for tp in partitions if tp in leaders}
        missing = [name for name in wanted.values() if name not in self._lag_replicas]
        if missing:
            # Actor lookups block; on a thread they hold up no join or heartbeat.
            if len(self._lag_replicas) + len(missing) > 4 * LAG_PARTITIONS_PER_ROUND:
                self._lag_replicas.clear()  # former leaders' names pile up; start over
            self._lag_replicas.update(await asyncio.to_thread(self._find_replicas, missing))
        asked = []
        for tp, name in wanted.items():
            handle = self._lag_replicas.get(name)
            if handle is not None:
                asked.append((tp, name, handle.list_offset.remote(LATEST)))
        answers = await asyncio.gather(
            *(asyncio.wait_for(ref, LAG_CALL_TIMEOUT_S) for _, _, ref in asked),
            return_exceptions=True,
        )
        out = {}
        for (tp, name, _), answer in zip(asked, answers):
            if isinstance(answer, BaseException) or answer[0]:
                # Restarting, moved or slow: look its leader up again next round.
                self._lag_replicas.pop(name, None)
                continue
            out[tp] = answer[2]
        return out

    def _find_replicas(self, names: list[tuple]) -> dict[tuple, Any]:
        """{(topic id, partition, leader, host slot): handle} of the replicas whose host runs
        (the others are starting or gone)."""
        found = {}
        for name in names:
            handle = find_replica(*name, namespace=self.namespace)
            if handle is not None:
                found[name] = handle
        return found

