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


class _StaleMetadata(CoordinatorNotAvailable):
    """A kept description of a partition's topic may be out of date: ask again."""


class TransactionMarkers:
    """Marker writes of one coordinator; ``controller_call(method, *args)`` reaches the
    controller (for the partitions' leaders)."""

    def __init__(
        self, namespace: str, controller_call: Callable[..., Awaitable], logger
    ) -> None:  # fmt: skip
        self.namespace = namespace
        self.controller_call = controller_call
        self.logger = logger
        # Each topic's description and each partition leader's handle, as last used: a
        # producer's transactions usually go to the same partitions one after another. A
        # partition whose write fails is looked up afresh (its leader may have moved; the
        # replica itself refuses a marker when it does not lead).
        self._described: dict[str, dict] = {}
        # (topic id, leader, host slot) -> that leader replica's handle, by partition
        self._leaders_seen: dict[tuple[str, int], tuple[tuple, object]] = {}

    async def write(self, markers: Markers, coordinator_epoch: int) -> None:
        """Write ``markers`` to every partition of the transaction; raises
        CoordinatorNotAvailable naming the partitions still pending after WRITE_DEADLINE_S."""
        pending = set(markers.partitions)
        deadline = time.monotonic() + WRITE_DEADLINE_S
        backoff = 0.05
        last_error: BaseException | None = None
        while pending:
            leaders, fresh = await self._leaders(sorted({t for t, _ in pending
                                                         if t != CONSUMER_OFFSETS}))  # fmt: skip
            results = await asyncio.gather(
                *(self._write_one(leaders, tp, markers, coordinator_epoch, tp[0] in fresh)
                  for tp in pending),
                return_exceptions=True,
            )  # fmt: skip
            stale_only = True
            for tp, result in zip(list(pending), results):
                if result is None:
                    pending.discard(tp)
                    continue
                self._described.pop(tp[0], None)
                self._leaders_seen.pop(tp, None)
                if not isinstance(result, _StaleMetadata):
                    last_error, stale_only = result, False
            if not pending:
                return
            if stale_only:
                continue  # look the partitions up afresh, at once
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
                markers.producer_id, markers.producer_epoch, markers.commit,
                markers.transaction_version,
            )
        except (ValueError, ray.exceptions.RayActorError) as e:
            return CoordinatorNotAvailable(f"group coordinator {shard} is not reachable: {e!r}")
        return error_class(errno)(message) if errno else None

    async def _leaders(self, topics: list[str]) -> tuple[dict[str, dict | None], set[str]]:
        """Each topic's description (None when it no longer exists), and the topics asked
        of the controller just now (the others were described before and not failed since)."""
        missing = [t for t in topics if t not in self._described]
        described = {}
        if missing:
            described = await self.controller_call("metadata", missing, False)
            for tp in [tp for tp in self._leaders_seen if tp[0] in described]:
                del self._leaders_seen[tp]  # found again below, against the new description
            for t, d in described.items():
                if isinstance(d, dict):
                    self._described[t] = d
                else:
                    self._described.pop(t, None)
        return {t: self._described.get(t) for t in topics}, set(described)

    async def _write_one(
        self, leaders: dict, tp: tuple[str, int], markers: Markers, coordinator_epoch: int,
        fresh: bool,
    ) -> BaseException | None:  # fmt: skip
        """None when the partition is done, else the error to retry on. A partition is
        found to need no marker (its topic deleted, or re-created) only on a description
        just asked for: a kept one answers _StaleMetadata instead."""
        topic, partition = tp
        if topic == CONSUMER_OFFSETS:
            return await self._end_offsets(partition, markers)
        described = leaders.get(topic)
        if described is None or partition >= len(described["partitions"]):
            if not fresh:
                return _StaleMetadata(f"{topic}-{partition}: looking it up again")
            return None  # the topic was deleted: nothing of the transaction is left there
        partitions = described["partitions"]
        p = partitions[partition]
        if p["leader"] == NO_LEADER:
            return CoordinatorNotAvailable(f"{topic}-{partition} has no leader right now")
        where = (described["topic_id"], p["leader"], leader_host(p))
        seen_where, replica = self._leaders_seen.get(tp, (None, None))
        if seen_where != where:
            replica = find_replica(described["topic_id"], partition, p["leader"],
                                   leader_host(p), self.namespace)  # fmt: skip
            if replica is None:
                return CoordinatorNotAvailable(f"{topic}-{partition}'s leader is not running yet")
            self._leaders_seen[tp] = (where, replica)
        try:
            errno, message, _ = await replica.write_marker.remote(
                markers.producer_id, markers.producer_epoch, markers.commit, coordinator_epoch,
                MARKER_TIMEOUT_MS, markers.transaction_version,
            )  # fmt: skip
        except ray.exceptions.RayActorError as e:
            return e
        if errno == 0:
            return None
        error = error_class(errno)(message)
        if isinstance(error, UnknownTopicOrPartition) and not fresh:
            return _StaleMetadata(f"{topic}-{partition}: {message}; looking it up again")
        if isinstance(error, _DONE_ERRORS):
            self.logger.info("%s-%d: marker not needed (%s)", topic, partition, message)
            return None
        return error if isinstance(error, RafkaError) else RafkaError(message)
