"""Writing a decided transaction's markers to its partitions (Kafka's WriteTxnMarkers).

A transaction coordinator calls ``TransactionMarkers.write`` once the Prepare* record is
durable. Each partition's leader replica appends a control batch (COMMIT or ABORT) carrying
the producer id, the bumped epoch and the coordinator's epoch, with acks=all. A partition is
done when its marker is written, when the replica refuses it as stale (the producer's epoch
there is already at or past the marker's: this marker or a later one is in), or when its
topic was deleted. Other failures (a leader moving, replicas behind) are retried within the
call; what is still pending at the end raises, and the coordinator tries again. The
"marker" of a ``__consumer_offsets`` partition goes to its group coordinator instead, which
holds the transaction's offsets (``rafka.cluster.transactional_offsets``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import ray

from rafka.actors.placement import coordinator_name
from rafka.actors.replica_handle import find_replica, leader_host
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.cluster.transaction_state import Markers
from rafka.errors import (
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    RafkaError,
    TransactionCoordinatorFenced,
    UnknownTopicOrPartition,
    error_class,
)

#: How long one marker write may wait for the in-sync replicas, ms.
MARKER_TIMEOUT_MS = 30_000
#: How long one ``write`` keeps retrying the partitions still pending, s.
WRITE_DEADLINE_S = 30.0

#: A refusal that means the marker is not needed any more.
_DONE_ERRORS = (InvalidProducerEpoch, TransactionCoordinatorFenced, UnknownTopicOrPartition)


class TransactionMarkers:
    """Marker writes of one coordinator; ``controller_call(method, *args)`` reaches the
    controller (for the partitions' leaders)."""

    def __init__(
        self, namespace: str, controller_call: Callable[..., Awaitable], logger
    ) -> None:  # fmt: skip
        self.namespace = namespace
        self.controller_call = controller_call
        self.logger = logger

    async def write(self, markers: Markers, coordinator_epoch: int) -> None:
        """Write ``markers`` to every partition of the transaction; raises
        CoordinatorNotAvailable naming the partitions still pending after WRITE_DEADLINE_S."""
        pending = set(markers.partitions)
        deadline = time.monotonic() + WRITE_DEADLINE_S
        backoff = 0.05
        last_error: BaseException | None = None
        while pending:
            leaders = await self._leaders(sorted({t for t, _ in pending
                                                  if t != CONSUMER_OFFSETS}))  # fmt: skip
            results = await asyncio.gather(
                *(self._write_one(leaders, tp, markers, coordinator_epoch) for tp in pending),
                return_exceptions=True,
            )
            for tp, result in zip(list(pending), results):
                if result is None:
                    pending.discard(tp)
                else:
                    last_error = result
            if not pending:
                return
            if time.monotonic() + backoff > deadline:
                raise CoordinatorNotAvailable(
                    f"the {'commit' if markers.commit else 'abort'} markers of producer "
                    f"{markers.producer_id} are not written yet to {sorted(pending)}: "
                    f"{last_error}; retrying"
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _end_offsets(self, shard: int, markers: Markers) -> BaseException | None:
        """The marker of an offsets partition: its group coordinator makes the offsets the
        transaction committed there visible, or drops them (the client wrote no records
        there itself, so the coordinator's own records stand for them)."""
        try:
            coordinator = ray.get_actor(coordinator_name(shard), namespace=self.namespace)
            errno, message = await coordinator.complete_transaction.remote(
                markers.producer_id, markers.producer_epoch, markers.commit
            )
        except (ValueError, ray.exceptions.RayActorError) as e:
            return CoordinatorNotAvailable(f"group coordinator {shard} is not reachable: {e!r}")
        return error_class(errno)(message) if errno else None

    async def _leaders(self, topics: list[str]) -> dict[str, dict | None]:
        """Each topic's description (None when it no longer exists)."""
        if not topics:
            return {}
        described = await self.controller_call("metadata", topics, False)
        return {t: d if isinstance(d, dict) else None for t, d in described.items()}

    async def _write_one(
        self, leaders: dict, tp: tuple[str, int], markers: Markers, coordinator_epoch: int
    ) -> BaseException | None:
        """None when the partition is done, else the error to retry on."""
        topic, partition = tp
        if topic == CONSUMER_OFFSETS:
            return await self._end_offsets(partition, markers)
        described = leaders.get(topic)
        if described is None:
            return None  # the topic was deleted: nothing of the transaction is left there
        partitions = described["partitions"]
        if partition >= len(partitions):
            return None
        p = partitions[partition]
        if p["leader"] == NO_LEADER:
            return CoordinatorNotAvailable(f"{topic}-{partition} has no leader right now")
        replica = find_replica(described["topic_id"], partition, p["leader"], leader_host(p),
                               self.namespace)  # fmt: skip
        if replica is None:
            return CoordinatorNotAvailable(f"{topic}-{partition}'s leader is not running yet")
        try:
            errno, message, _ = await replica.write_marker.remote(
                markers.producer_id, markers.producer_epoch, markers.commit, coordinator_epoch,
                MARKER_TIMEOUT_MS,
            )  # fmt: skip
        except ray.exceptions.RayActorError as e:
            return e
        if errno == 0:
            return None
        error = error_class(errno)(message)
        if isinstance(error, _DONE_ERRORS):
            self.logger.info("%s-%d: marker not needed (%s)", topic, partition, message)
            return None
        return error if isinstance(error, RafkaError) else RafkaError(message)
