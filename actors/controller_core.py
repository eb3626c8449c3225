"""What every part of the Controller actor shares.

The controller is one async actor made of parts (broker liveness, partition changes, topic
admin, coordinator shards, calls to brokers); they share the metadata log and its image, the
lock that orders metadata changes, the cluster settings, the brokers' liveness, and the
actor's background tasks. Every part runs on the actor's one event loop, so this state is
never touched by two threads; it may be by two interleaved calls, which is what ``lock`` is
for: a change is decided and appended to the metadata log under it.

Only the metadata log is durable. After a crash Ray re-runs the controller's constructor, the
image is rebuilt from the log, and every broker starts live again until it misses heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from rafka.cluster import controller as decide
from rafka.cluster.liveness import BrokerLiveness
from rafka.cluster.metadata import TopicState
from rafka.cluster.node_restarts import may_elect
from rafka.cluster.metadata_log import MetadataLog
from rafka.storage.config import LogConfig


class ControllerCore:
    """The controller's shared state; ``image`` is the metadata as of the last append."""

    def __init__(
        self,
        store: MetadataLog,
        settings: dict[str, Any],
        namespace: str,
        liveness: BrokerLiveness,
        logger: logging.Logger | logging.LoggerAdapter,
    ):
        self.store = store
        self.settings = settings
        self.namespace = namespace
        self.liveness = liveness
        self.logger = logger
        self.lock = asyncio.Lock()  # one metadata change at a time, in log order
        self.stopping = False  # set by ``rafka down``: silence is then no reason to act
        self._background: set[asyncio.Task] = set()
        # Brokers heard from since this controller started. Liveness counts every known
        # broker live at start (so nobody is fenced at once); only these may be elected:
        # one not heard yet may be on a new node it has not reported.
        self.heard: set[int] = set()
        # broker -> bytes of memory its node had available at its last heartbeat
        self.memory_available: dict[int, int] = {}
        self.fencings = 0  # brokers this controller fenced (missed heartbeats), in all

    @property
    def image(self):
        return self.store.image

    def electable(self, topic_id: str, partition: int) -> set[int]:
        """The live brokers that may be elected for one partition: not those whose replica
        of it has not been seen on its broker's current node (``rafka.cluster.node_restarts``:
        its node restarted and it has not checked in since)."""
        image = self.image
        return {
            b for b in self.liveness.live()
            if b in self.heard and may_elect(image, (topic_id, partition, b))
        }  # fmt: skip

    def reserve_replica_epoch(self) -> int:
        """A replica epoch for replicas about to be created, recorded first. Synchronous (one
        append, no await), so it never lands inside another change's decide-and-append."""
        epoch, records = decide.reserve_replica_epoch(self.image)
        self.store.append(records)
        return epoch

    def spawn(self, coroutine) -> asyncio.Task:
        """Run ``coroutine`` in the background, keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def every(self, interval_s: Callable[[], float], step: Callable[[], Awaitable[Any]],
                    what: str) -> None:  # fmt: skip
        """Run ``step`` every ``interval_s()`` seconds for as long as the controller runs,
        skipping rounds while the services stop; a round that fails is logged (``what``
        failed) and the next one tries again."""
        while True:
            await asyncio.sleep(interval_s())
            if self.stopping:
                continue
            try:
                await step()
            except Exception:
                self.logger.exception("%s failed", what)


def unclean_election_enabled(topic: TopicState) -> bool:
    """``unclean.leader.election.enable`` of ``topic`` (its override or the default)."""
    return bool(LogConfig.from_dict(topic.config).unclean_leader_election_enable)


def min_insync_replicas(topic: TopicState) -> int:
    """``min.insync.replicas`` of ``topic`` (its override or the default)."""
    return int(LogConfig.from_dict(topic.config).min_insync_replicas)


def now_ms() -> int:
    """The liveness clock, ms: monotonic, so a wall-clock jump fences nobody."""
    return int(time.monotonic() * 1000)
