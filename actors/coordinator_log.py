"""A coordinator's partition of its internal topic: reading it back, and writing to it.

Group coordinators keep their state in ``__consumer_offsets`` and transaction coordinators in
``__transaction_state``; each shard of either owns one partition, and ``CoordinatorLog`` is its
only way to the disk. ``load`` reads the partition from its log start to the high watermark and
replays its records into a fresh state object (``Replay``); ``write`` appends records with
acks=all to the leader replica of the partition, wherever it is, retrying over leader changes
and restarts until the commit timeout.

Writes go through one writer task: records queued while a write is in flight go together in
the next batch (group commit), in the order they were queued, so the log holds them in the
order the coordinator decided them.

Fencing (``rafka.cluster.coordinator_fencing``, which makes the decisions): every incarnation
of the shard's coordinator writes as the shard's own producer id with an epoch it claims as
it loads, so the replica refuses the late writes of an earlier incarnation. ``load`` reads the
partition to the high watermark, writes an epoch marker one above the highest epoch it read
(acks=all), then reads on to the new high watermark; the load is complete only then. Every
batch carries (producer id, epoch, next sequence), is appended alone (the replica's rule for
idempotent batches) and is resent unchanged when retried, so a retry whose first answer was
lost is not written twice. After a write fails, the next one fences again first. Invariant:
every write with epoch E happens after a marker with epoch E is in the log, so a later
incarnation's epoch is higher than every epoch an earlier one wrote with, and the replica
refuses the earlier one's late writes (CoordinatorFenced to their callers).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, NamedTuple, Protocol

import ray

from rafka.actors.handles import as_array
from rafka.actors.placement import CONTROLLER_NAME
from rafka.actors.replica_handle import find_replica, leader_host
from rafka.cluster.coordinator_fencing import Claim, CoordinatorFencing
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.offsets_records import (
    EpochMarkerKey,
    decode_value,
    epoch_marker_key,
    epoch_marker_value,
)
from rafka.errors import (
    CoordinatorFenced,
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    RafkaError,
    error_class,
)
from rafka.storage import record_batch as rb

#: Records per batch written (coordinator records are about 100 bytes each).
RECORDS_PER_BATCH = 2000
EARLIEST = -2

Record = tuple[bytes, "bytes | None"]  # (key, value); a None value is a tombstone


class Replay(Protocol):
    """The state a load rebuilds: every record of the partition, in log order."""

    def replay(self, key: Any, value: Any) -> None: ...


class RecordCodec(NamedTuple):
    """How one internal topic's records read: ``decode_key`` returns an ``EpochMarkerKey``
    for the coordinators' epoch markers (the same kind of key in every such topic), None
    for a kind it does not know (skipped), else the key ``Replay.replay`` takes."""

    topic: str
    decode_key: Callable[[bytes], Any]
    decode_value: Callable[["bytes | None"], Any]


class CoordinatorLog:
    """Partition ``shard`` of ``codec.topic``, as one coordinator incarnation reads and
    writes it. Lives on the coordinator's event loop; ``start`` once there, and ``load``
    before writing (writes before the load ends fail with CoordinatorLoadInProgress).
    Holds nothing durable: a restarted coordinator loads again, and fences this one.
    ``role`` names the coordinator in messages ("group coordinator")."""

    def __init__(
        self, namespace: str, shard: int, commit_timeout_s: float, logger, *,
        codec: RecordCodec, new_state: Callable[[], Replay], producer_id: int, role: str,
    ) -> None:  # fmt: skip
        self.namespace = namespace
        self.shard = shard
        self.commit_timeout_s = commit_timeout_s
        self.logger = logger
        self.codec = codec
        self.topic = codec.topic
        self.role = role
        self._new_state = new_state
        self.fencing = CoordinatorFencing(shard, producer_id=producer_id)
        self._fenced_logged = False
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
            described = (await self.controller_call("metadata", [self.topic], False))[
                self.topic
            ]
            if isinstance(described, (list, tuple)):
                raise error_class(described[0])(described[1])
            leader = described["partitions"][self.shard]["leader"]
            if leader == NO_LEADER:
                raise CoordinatorNotAvailable(
                    f"{self.topic}-{self.shard} has no leader right now; retry"
                )
            self._leader = find_replica(described["topic_id"], self.shard, leader,
                                        leader_host(described["partitions"][self.shard]),
                                        self.namespace)  # fmt: skip
            if self._leader is None:
                raise CoordinatorNotAvailable(
                    f"{self.topic}-{self.shard}'s leader replica is not running yet; retry"
                )
        return self._leader

    async def _with_leader(self, call, what: str):
        """``call(leader replica)`` retried over leader changes and restarts until
        offsets.commit.timeout.ms (loading: forever, with backoff). The replica's verdicts
        on the producer epoch and sequence are raised as they are, for the caller to judge."""
        deadline = time.monotonic() + self.commit_timeout_s
        backoff = 0.05
        while True:
            try:
                return await call(await self._leader_replica())
            except (InvalidProducerEpoch, OutOfOrderSequence):
                raise
            except (RafkaError, ray.exceptions.RayActorError, ValueError) as e:
                retriable = not isinstance(e, RafkaError) or e.retriable
                self._leader = None
                if not retriable or (what != "load" and time.monotonic() + backoff > deadline):
                    raise CoordinatorNotAvailable(
                        f"{self.role} {self.shard} could not {what} "
                        f"{self.topic}-{self.shard}: {e}"
                    ) from None
                self.logger.info("%s failed (%s); retrying", what, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _append(self, batch: bytes, what: str) -> int:
        """Append one batch with acks=all (retried unchanged, see ``_with_leader``); returns
        its base offset (the original's, when the replica answers it as a duplicate)."""
        timeout_ms = int(self.commit_timeout_s * 1000)

        async def send(replica) -> int:
            answer = await replica.produce.remote(
                as_array(batch), -1, timeout_ms, f"{self.role.replace(' ', '-')}-{self.shard}", -1
            )
            errno, message, _, results = answer
            if errno:
                raise error_class(errno)(message)
            ((batch_errno, batch_message, base_offset, _),) = results
            if batch_errno:
                raise error_class(batch_errno)(batch_message)
            return base_offset

        return await self._with_leader(send, what)

    # -- reading -------------------------------------------------------------------------------

    async def load(self) -> Replay:
        """Read the partition from its log start to the high watermark, fence the earlier
        incarnations (an epoch marker, acks=all) and read on to the new high watermark."""
        fencing = self.fencing
        fencing.begin_load()
        reader = _Reader(fencing, self.codec, self._new_state())
        await self._with_leader(reader.read_on, "load")
        while True:
            claim = fencing.claim()
            try:
                offset = await self._append(self._marker(claim), "load")
            except (InvalidProducerEpoch, OutOfOrderSequence) as e:
                self.logger.warning("epoch marker %d refused (%s); claiming a higher epoch",
                                    claim.epoch, e)  # fmt: skip
                fencing.claim_refused(claim, e)
                continue
            await self._read_past(reader, offset)
            if fencing.claimed(claim, reader.marker_tokens.get(offset)):
                break
            self.logger.warning("epoch %d was taken by another incarnation; claiming a "
                                "higher one", claim.epoch)  # fmt: skip
        self.logger.info("%s-%d: writing with producer id %d, epoch %d", self.topic,
                         self.shard, fencing.producer_id, fencing.epoch)  # fmt: skip
        return reader.loaded

    async def _read_past(self, reader: "_Reader", offset: int) -> None:
        """Read on until past ``offset``: a leader that just took over may report an older
        high watermark for a while. Gives up after offsets.commit.timeout.ms (the marker is
        then taken as lost, and a higher epoch claimed)."""
        deadline = time.monotonic() + self.commit_timeout_s
        backoff = 0.05
        while True:
            await self._with_leader(reader.read_on, "load")
            if reader.position > offset or time.monotonic() + backoff > deadline:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _marker(self, claim: Claim) -> bytes:
        f = self.fencing
        return rb.encode_batch(
            [epoch_marker_value(f.producer_id, claim.epoch, claim.token)],
            [epoch_marker_key(self.shard)], int(time.time() * 1000),
            producer_id=f.producer_id, producer_epoch=claim.epoch, base_sequence=0,
        )  # fmt: skip

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
                except Exception as e:  # every caller hears of it; the writer goes on
                    if not isinstance(e, RafkaError):
                        self.logger.exception("writing to %s-%d failed", self.topic, self.shard)
                        e = CoordinatorNotAvailable(
                            f"{self.role} {self.shard} could not write: {e!r}; retry"
                        )
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(e)
                    continue
                for _, future in taken:
                    if not future.done():
                        future.set_result(None)

    async def _produce(self, records: list[Record]) -> None:
        """Append ``records`` in batches of RECORDS_PER_BATCH, one at a time (fencing again
        first if the last write failed)."""
        f = self.fencing
        try:
            f.check_writable()
            if f.needs_fence:
                await self._fence_again()
            now = int(time.time() * 1000)
            for i in range(0, len(records), RECORDS_PER_BATCH):
                chunk = records[i : i + RECORDS_PER_BATCH]
                epoch, sequence = f.next_batch(len(chunk))
                batch = rb.encode_batch(
                    [v for _, v in chunk], [k for k, _ in chunk], now,
                    producer_id=f.producer_id, producer_epoch=epoch, base_sequence=sequence,
                )  # fmt: skip
                try:
                    await self._append(batch, "write to")
                except InvalidProducerEpoch as e:
                    raise f.write_refused(e) from None
                except OutOfOrderSequence as e:
                    raise CoordinatorNotAvailable(
                        f"{self.role} {self.shard} could not write to "
                        f"{self.topic}-{self.shard}: {e}; the next write fences again"
                    ) from None
        except CoordinatorFenced as e:
            if not self._fenced_logged:
                self._fenced_logged = True
                self.logger.error(
                    "FENCED: a later incarnation of this coordinator owns %s-%d; this one is "
                    "a zombie and every write it tries fails: %s", self.topic,
                    self.shard, e,
                )  # fmt: skip
            raise
        except BaseException:
            f.write_failed()
            raise

    async def _fence_again(self) -> None:
        """After a failed write: a marker at this incarnation's epoch + 1, sequence 0, that
        must be acknowledged and found in the log as this incarnation's."""
        f = self.fencing
        claim = f.claim()
        self.logger.info("fencing again at epoch %d after a failed write", claim.epoch)
        try:
            offset = await self._append(self._marker(claim), "fence")
        except (InvalidProducerEpoch, OutOfOrderSequence) as e:
            f.claim_refused(claim, e)  # raises CoordinatorFenced
            raise AssertionError("a refused re-fence must fence this incarnation") from e
        token = await self._with_leader(lambda replica: self._token_at(replica, offset), "fence")
        f.claimed(claim, token)  # raises CoordinatorFenced unless the marker is ours

    async def _token_at(self, replica, offset: int) -> str | None:
        """The token of this producer's epoch marker at ``offset``, None if there is none."""
        errno, message, hw, _, _, data = await replica.fetch.remote(offset, 64 << 10, 1, 0)
        if errno:
            raise error_class(errno)(message)
        if hw <= offset:
            raise CoordinatorNotAvailable(
                f"the high watermark {hw} of {self.topic}-{self.shard} is not yet past "
                f"the epoch marker at {offset}; retry"
            )
        return _marker_tokens(data, self.fencing.producer_id, self.codec).get(offset)


class _Reader:
    """Reads the partition on from where it last stopped, replaying its records into
    ``loaded``, showing every batch header to ``fencing`` and noting the producer's epoch
    markers."""

    def __init__(self, fencing: CoordinatorFencing, codec: RecordCodec, loaded: Replay) -> None:
        self.fencing = fencing
        self.codec = codec
        self.loaded = loaded
        self.position: int | None = None  # offset after the last batch read
        self.marker_tokens: dict[int, str] = {}  # offset of a marker of ours -> its token

    async def read_on(self, replica) -> None:
        """From ``position`` (at first: the log start) to the high watermark."""
        if self.position is None:
            errno, message, start, _ = await replica.list_offset.remote(EARLIEST)
            if errno:
                raise error_class(errno)(message)
            self.position = start
        end = None
        while end is None or self.position < end:
            errno, message, hw, _, _, data = await replica.fetch.remote(
                self.position, 4 << 20, 1, 0
            )
            if errno:
                raise error_class(errno)(message)
            end = hw if end is None else end
            if not len(data):
                break
            self._take(data)

    def _take(self, data) -> None:
        for pos, header in rb.iter_batches(data):
            if header.next_offset <= self.position:
                continue  # read before
            self.position = header.next_offset
            self.fencing.saw(header)
            for offset, key, value in _records(data, pos, header, self.codec):
                if isinstance(key, EpochMarkerKey):
                    token = _token(value, self.fencing.producer_id)
                    if token is not None:
                        self.marker_tokens[offset] = token
                else:
                    self.loaded.replay(key, value)


def _records(data, pos: int, header: rb.BatchHeader, codec: RecordCodec):
    """(offset, decoded key, decoded value) of the keyed records of the batch at ``pos``."""
    if header.is_control:
        return
    decoded = rb.decode_records(data, pos)
    for offset, key, value in zip(decoded.offsets, decoded.keys or (), decoded.values):
        if key is not None:
            key = codec.decode_key(key)
            # Epoch markers are of one kind in every coordinator topic, msgpack values.
            decode = decode_value if isinstance(key, EpochMarkerKey) else codec.decode_value
            yield offset, key, decode(value)


def _token(marker_value: dict | None, producer_id: int) -> str | None:
    """The token of an epoch marker written as ``producer_id``, else None."""
    if marker_value is None or marker_value.get("producer_id") != producer_id:
        return None
    return marker_value.get("token")


def _marker_tokens(data, producer_id: int, codec: RecordCodec) -> dict[int, str]:
    """{offset: token} of the epoch markers ``producer_id`` wrote in ``data`` (whole batches)."""
    return {
        offset: _token(value, producer_id)
        for pos, header in rb.iter_batches(data)
        for offset, key, value in _records(data, pos, header, codec)
        if isinstance(key, EpochMarkerKey) and _token(value, producer_id) is not None
    }
