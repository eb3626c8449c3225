"""A group coordinator's partition of ``__consumer_offsets``: reading it back, and writing to it.

``OffsetsLog`` is the coordinator's only way to the disk. ``load`` reads the partition from its
log start to the high watermark and replays its records (offset commits and group metadata,
``rafka.cluster.offsets_records``); ``write`` appends records with acks=all to the leader
replica of the partition, wherever it is, retrying over leader changes and restarts until
``offsets.commit.timeout.ms``.

Writes go through one writer task: records queued while a write is in flight go together in
the next batch (group commit), in the order they were queued, so the log holds them in the
order the coordinator decided them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from rafka.actors.handles import as_array
from rafka.actors.placement import CONTROLLER_NAME, replica_name
from rafka.cluster.group_types import CommittedOffset
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.offsets_records import GroupKey, OffsetKey, decode_key, decode_value
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.errors import CoordinatorNotAvailable, RafkaError, error_class
from rafka.storage import record_batch as rb

#: Records per batch written to __consumer_offsets (about 100 bytes each).
RECORDS_PER_BATCH = 2000
EARLIEST = -2

Record = tuple[bytes, "bytes | None"]  # (key, value); a None value is a tombstone


class Loaded:
    """What a load found: committed offsets and the newest metadata record of each group."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.metadata: dict[str, dict[str, Any] | None] = {}

    def replay(self, key, value) -> None:
        """Apply one record of __consumer_offsets, in log order."""
        if isinstance(key, OffsetKey):
            group_offsets = self.offsets.setdefault(key.group_id, {})
            if value is None:
                group_offsets.pop((key.topic, key.partition), None)
            else:
                group_offsets[(key.topic, key.partition)] = CommittedOffset(
                    value["offset"], value["leader_epoch"], value["metadata"],
                    value["commit_ms"],
                )  # fmt: skip
        elif isinstance(key, GroupKey):
            self.metadata[key.group_id] = value

    def group_ids(self) -> set[str]:
        return set(self.offsets) | set(self.metadata)


class OffsetsLog:
    """Partition ``shard`` of ``__consumer_offsets``, as one coordinator reads and writes it.
    Lives on the coordinator's event loop; ``start`` once there before writing."""

    def __init__(self, namespace: str, shard: int, commit_timeout_s: float, logger) -> None:
        self.namespace = namespace
        self.shard = shard
        self.commit_timeout_s = commit_timeout_s
        self.logger = logger
        self._queue: list[tuple[list[Record], asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._leader = None  # handle of the partition's leader replica
        self._controller = None

    def start(self) -> asyncio.Task:
        """The writer task (call on the event loop that will write)."""
        self._wake = asyncio.Event()
        return asyncio.get_running_loop().create_task(self._writer())

    async def controller_call(self, method: str, *args):
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        return await getattr(self._controller, method).remote(*args)

    # -- the leader replica --------------------------------------------------------------------

    async def _leader_replica(self):
        if self._leader is None:
            described = (await self.controller_call("metadata", [CONSUMER_OFFSETS], False))[
                CONSUMER_OFFSETS
            ]
            if isinstance(described, (list, tuple)):
                raise error_class(described[0])(described[1])
            leader = described["partitions"][self.shard]["leader"]
            if leader == NO_LEADER:
                raise CoordinatorNotAvailable(
                    f"{CONSUMER_OFFSETS}-{self.shard} has no leader right now; retry"
                )
            name = replica_name(described["topic_id"], self.shard, leader)
            try:
                self._leader = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                raise CoordinatorNotAvailable(f"{name} is not running yet; retry") from None
        return self._leader

    async def _with_leader(self, call, what: str):
        """``call(leader replica)`` retried over leader changes and restarts until
        offsets.commit.timeout.ms (loading: forever, with backoff)."""
        deadline = time.monotonic() + self.commit_timeout_s
        backoff = 0.05
        while True:
            try:
                return await call(await self._leader_replica())
            except (RafkaError, ray.exceptions.RayActorError, ValueError) as e:
                retriable = not isinstance(e, RafkaError) or e.retriable
                self._leader = None
                if not retriable or (what != "load" and time.monotonic() + backoff > deadline):
                    raise CoordinatorNotAvailable(
                        f"group coordinator {self.shard} could not {what} "
                        f"{CONSUMER_OFFSETS}-{self.shard}: {e}"
                    ) from None
                self.logger.info("%s failed (%s); retrying", what, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # -- reading -------------------------------------------------------------------------------

    async def load(self) -> Loaded:
        """Read the partition from its log start to the high watermark."""
        loaded = Loaded()

        async def read_all(replica) -> None:
            errno, message, start, _ = await replica.list_offset.remote(EARLIEST)
            if errno:
                raise error_class(errno)(message)
            position, end = start, None
            while end is None or position < end:
                errno, message, hw, _, _, data = await replica.fetch.remote(
                    position, 4 << 20, 1, 0
                )
                if errno:
                    raise error_class(errno)(message)
                end = hw if end is None else end
                if not len(data):
                    break
                for pos, header in rb.iter_batches(data):
                    position = header.next_offset
                    if header.is_control:
                        continue
                    decoded = rb.decode_records(data, pos)
                    for key, value in zip(decoded.keys or (), decoded.values):
                        loaded.replay(decode_key(key), decode_value(value))

        await self._with_leader(read_all, "load")
        return loaded

    # -- writing -------------------------------------------------------------------------------

    async def write(self, records: list[Record]) -> None:
        """Append ``records`` with acks=all, after every record queued before."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append((records, future))
        self._wake.set()
        await future

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                taken, self._queue = self._queue, []
                records = [r for rs, _ in taken for r in rs]
                try:
                    await self._produce(records)
                except RafkaError as e:
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(e)
                    continue
                for _, future in taken:
                    if not future.done():
                        future.set_result(None)

    async def _produce(self, records: list[Record]) -> None:
        now = int(time.time() * 1000)
        batches = b"".join(
            rb.encode_batch(
                [v for _, v in records[i : i + RECORDS_PER_BATCH]],
                [k for k, _ in records[i : i + RECORDS_PER_BATCH]],
                now,
            )
            for i in range(0, len(records), RECORDS_PER_BATCH)
        )  # fmt: skip
        timeout_ms = int(self.commit_timeout_s * 1000)

        async def send(replica) -> None:
            answer = await replica.produce.remote(
                as_array(batches), -1, timeout_ms, f"group-coordinator-{self.shard}", -1
            )
            errno, message, _, results = answer
            if errno:
                raise error_class(errno)(message)
            for batch_errno, batch_message, _, _ in results:
                if batch_errno:
                    raise error_class(batch_errno)(batch_message)

        await self._with_leader(send, "write to")
