"""GroupCoordinator: the Ray actor serving the consumer groups of one shard.

Shard ``k`` serves every group with ``coordinator_shard(group_id) == k`` and keeps their
state in partition ``k`` of the compacted internal topic ``__consumer_offsets``: offset
commits and each group's metadata (members, generation, assignment). Nothing else is
durable, so a coordinator that is killed, restarted or moved to another node reads its
partition back and carries on; until it has, requests wait.

A thin shell over ``rafka.cluster.group.Group`` (the decisions): requests are handed to the
group's state machine, whose ``Effects`` say which waiting calls to answer and when to write
the group's record. Join and sync calls wait (asyncio futures) until the rebalance answers
them; a timer loop expires sessions and ends rebalances.

Writes go through one writer task: records queued while a write is in flight go together
in the next batch (group commit), in the order they were queued, with acks=all to the
leader replica of the shard's partition, wherever it is. A commit is applied in memory only
after its records are written, so a reply never claims more than the log holds.

Answers are ``(error, result)`` pairs with ``error`` None on success: expected refusals
(a stale generation, a rebalance) cost no exception across Ray.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from rafka.actors import metrics
from rafka.actors.handles import as_array
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.placement import CONTROLLER_NAME, replica_name
from rafka.cluster.group import JOIN, SYNC, CommittedOffset, Effects, Group, GroupState
from rafka.cluster.metadata import NO_LEADER
from rafka.cluster.offsets_records import (
    GroupKey,
    OffsetKey,
    decode_key,
    decode_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from rafka.cluster.settings import group_config, setting
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.errors import (
    CoordinatorNotAvailable,
    GroupIdNotFound,
    InvalidGroupId,
    RafkaError,
    error_class,
)
from rafka.storage import record_batch as rb

TICK_S = 0.1
#: How often offsets of long-empty groups are looked for (offsets.retention.minutes).
EXPIRY_CHECK_S = 60.0
#: Records per batch written to __consumer_offsets (about 100 bytes each).
RECORDS_PER_BATCH = 2000
EARLIEST = -2
LATEST = -1
#: How often the consumer lag gauges of groups with commits are refreshed, s.
LAG_INTERVAL_S = 3.0
#: Partitions whose high watermark one lag round asks for, at most: more are taken in turns
#: over the following rounds, so the cost stays bounded however many groups commit.
LAG_PARTITIONS_PER_ROUND = 500
#: Longest wait for the controller's metadata or a leader's high watermark in a lag round, s.
LAG_CALL_TIMEOUT_S = 5.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, namespace: str, shard: int, settings: dict[str, Any]) -> None:
        self.logger = actor_logger(__name__, "GroupCoordinator", shard=shard)
        label_process_logs(self.logger.prefix)  # this process is this coordinator
        self.namespace = namespace
        self.shard = shard
        self.settings = dict(settings)
        self.config = group_config(self.settings)
        self.commit_timeout_s = setting(self.settings, "offsets.commit.timeout.ms") / 1000
        self.groups: dict[str, Group] = {}
        self._waiting: dict[tuple[str, str, str], asyncio.Future] = {}
        self._queue: list[tuple[list, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._loaded: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._leader = None  # (topic id, broker id, handle) of the shard's partition leader
        self._controller = None
        # For the rebalance counter: the generation each group was at when last counted,
        # with the Group object it was counted on (a deleted and re-created group restarts
        # at generation 0).
        self._counted_generations: dict[str, tuple[Group, int]] = {}
        self._lag_replicas: dict[str, Any] = {}  # replica actor name -> handle
        self._lag_reported: set[tuple[str, str, int]] = set()  # (group, topic, partition)
        self._lag_cursor = 0
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._loaded is None:
            self._loaded = asyncio.Event()
            self._wake = asyncio.Event()
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._run()), loop.create_task(self._writer()),
                           loop.create_task(self._report_lag())]  # fmt: skip

    async def ready(self) -> dict[str, Any]:
        """Returns once the shard's groups are loaded."""
        await self._until_loaded()
        return {"shard": self.shard, "groups": len(self.groups)}

    async def _until_loaded(self) -> None:
        self._start()
        await self._loaded.wait()

    async def _run(self) -> None:
        while True:
            try:
                await self._load()
                break
            except Exception:  # not retriable by itself (a corrupt record?): log, try again
                self.logger.exception("loading its groups failed")
                self.groups.clear()
                await asyncio.sleep(1.0)
        self._loaded.set()
        last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = _now_ms()
            for group in list(self.groups.values()):
                self._apply(group, group.tick(now))
            if time.monotonic() - last_expiry >= EXPIRY_CHECK_S:
                last_expiry = time.monotonic()
                await self._expire_offsets(now)

    # -- the offsets partition -----------------------------------------------------------------

    async def _controller_call(self, method: str, *args):
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        return await getattr(self._controller, method).remote(*args)

    async def _leader_replica(self):
        if self._leader is None:
            described = (await self._controller_call("metadata", [CONSUMER_OFFSETS], False))[
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

    async def _load(self) -> None:
        """Read the shard's partition from its log start to the high watermark."""
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        metadata: dict[str, dict | None] = {}

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
                        _replay(decode_key(key), decode_value(value), offsets, metadata)

        started = time.monotonic()
        await self._with_leader(read_all, "load")
        now = _now_ms()
        for group_id in set(offsets) | set(metadata):
            record = metadata.get(group_id)
            group = (
                Group.from_record(group_id, record, self.config, now) if record
                else Group(group_id, self.config, now)
            )  # fmt: skip
            group.offsets = offsets.get(group_id, {})
            if group.members or group.offsets:
                self.groups[group_id] = group
        for group_id, group in self.groups.items():  # loading is no rebalance
            self._counted_generations[group_id] = (group, group.generation)
        self.logger.info(
            "loaded %d group(s) in %.2f s", len(self.groups), time.monotonic() - started
        )

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` (key, value) with acks=all, after every record queued before."""
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

    async def _produce(self, records: list[tuple[bytes, bytes | None]]) -> None:
        now = _now_ms()
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

    # -- consumer lag --------------------------------------------------------------------------

    async def _report_lag(self) -> None:
        """Every LAG_INTERVAL_S, set the lag gauges of this shard's groups with commits."""
        while True:
            await asyncio.sleep(LAG_INTERVAL_S)
            if self._loaded is None or not self._loaded.is_set():
                continue
            try:
                await self._lag_round()
            except (ray.exceptions.RayActorError, asyncio.TimeoutError) as e:
                # The controller restarts or is busy (a failover): expected, next round.
                self.logger.info("consumer lag not refreshed: %r", e)
            except Exception as e:  # a metric must never stop the coordinator; next round
                self.logger.warning("refreshing the consumer lag gauges failed: %r", e)

    async def _lag_round(self) -> None:
        """One round: the high watermark of each committed partition (at most
        LAG_PARTITIONS_PER_ROUND, in turns), from its leader, and lag = high watermark -
        committed offset for every group with a commit there. One controller call for the
        leaders and one call per partition, however many groups share it."""
        committed = {
            (group.group_id, topic, partition): c.offset
            for group in list(self.groups.values())
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
        leaders: dict[tuple[str, int], str] = {}  # (topic, partition) -> leader replica name
        for topic, description in described.items():
            if isinstance(description, dict):  # else deleted since the commit
                for d in description["partitions"]:
                    if d["leader"] != NO_LEADER:
                        name = replica_name(description["topic_id"], d["partition"], d["leader"])
                        leaders[topic, d["partition"]] = name
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

    def _find_replicas(self, names: list[str]) -> dict[str, Any]:
        """{name: handle} of the replica actors that run (the others are starting or gone)."""
        found = {}
        for name in names:
            try:
                found[name] = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                pass
        return found

    # -- effects -------------------------------------------------------------------------------

    def _apply(self, group: Group, effects: Effects) -> None:
        self._count_rebalances(group)
        for (member_id, kind), result in effects.replies.items():
            future = self._waiting.pop((group.group_id, member_id, kind), None)
            if future is not None and not future.done():
                future.set_result(result)
        if effects.persist:
            asyncio.get_running_loop().create_task(
                self._persist(group, group.generation, group.metadata_record())
            )

    def _count_rebalances(self, group: Group) -> None:
        """Count the rebalances ``group`` completed since it was last looked at: every
        change of the group's state passes through ``_apply``, and each completed join
        phase is one new generation."""
        counted = self._counted_generations.get(group.group_id)
        since = counted[1] if counted is not None and counted[0] is group else 0
        if group.generation != since:
            metrics.group_rebalanced(group.group_id, group.generation - since)
            self._counted_generations[group.group_id] = (group, group.generation)

    async def _persist(self, group: Group, generation: int, record: dict[str, Any]) -> None:
        try:
            await self._write([(group_key(group.group_id), group_value(record))])
        except RafkaError as e:
            self.logger.warning("group %s: storing generation %d failed: %s", group.group_id,
                                generation, e)  # fmt: skip
            self._apply(group, group.persist_failed(generation, e, _now_ms()))
            return
        self._apply(group, group.persisted(generation, _now_ms()))

    async def _wait_for(self, group: Group, member_id: str, kind: str, effects: Effects):
        """Register the caller's wait, then apply ``effects`` (which may answer it at once)."""
        key = (group.group_id, member_id, kind)
        previous = self._waiting.pop(key, None)
        if previous is not None and not previous.done():  # a retried call replaces it
            previous.cancel()
        future = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        self._apply(group, effects)
        return await future

    def _group(self, group_id: str, create: bool) -> Group:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupId(f"group id must be a non-empty string, got {group_id!r}")
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            if not create:
                raise GroupIdNotFound(f"consumer group {group_id!r} does not exist")
            group = self.groups[group_id] = Group(group_id, self.config, _now_ms())
        return group

    # -- the group protocol --------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, protocol_type: str, protocols: list, session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> tuple:  # fmt: skip
        """Join or rejoin; answers when the rebalance completes: (error, JoinResult)."""
        await self._until_loaded()
        try:
            group = self._group(group_id, create=True)
            member_id, effects = group.join(
                member_id, group_instance_id, client_id, client_host, protocol_type, protocols,
                session_timeout_ms, rebalance_timeout_ms, _now_ms(),
            )  # fmt: skip
        except RafkaError as e:
            return e, None
        result = await self._wait_for(group, member_id, JOIN, effects)
        return result.error, result._replace(error=None)

    async def sync_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
        assignments: dict[str, bytes] | None,
    ) -> tuple:  # fmt: skip
        """The member's assignment of ``generation``: (error, SyncResult)."""
        await self._until_loaded()
        try:
            group = self._group(group_id, create=False)
            effects = group.sync(member_id, group_instance_id, generation, assignments, _now_ms())
        except RafkaError as e:
            return e, None
        result = await self._wait_for(group, member_id, SYNC, effects)
        return result.error, result._replace(error=None)

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation: int
    ) -> RafkaError | None:
        await self._until_loaded()
        try:
            self._group(group_id, create=False).heartbeat(
                member_id, group_instance_id, generation, _now_ms()
            )
        except RafkaError as e:
            return e
        return None

    async def leave_group(self, group_id: str, members: list) -> RafkaError | None:
        """``members``: [(member id, group_instance_id)]; a static member may be named by
        its instance id alone (member id "")."""
        await self._until_loaded()
        try:
            group = self._group(group_id, create=False)
        except RafkaError as e:
            return e
        self._apply(group, group.leave(members, _now_ms()))
        return None

    # -- offsets -------------------------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
        offsets: dict[tuple[str, int], tuple[int, int, str]],
    ) -> RafkaError | None:  # fmt: skip
        """Commit {(topic, partition): (offset, leader epoch, metadata)} for a member of
        ``generation`` (or, with member "" and generation -1, for an empty group). Nothing
        is applied unless all of it is accepted and written."""
        await self._until_loaded()
        now = _now_ms()
        committed = {
            (t, p): CommittedOffset(o, e, m or "", now) for (t, p), (o, e, m) in offsets.items()
        }
        try:
            group = self._group(group_id, create=True)
            group.check_commit(member_id, group_instance_id, generation, committed)
            await self._write([
                (offset_key(group_id, t, p), offset_value(c.offset, c.leader_epoch, c.metadata,
                                                          c.commit_ms))
                for (t, p), c in committed.items()
            ])  # fmt: skip
        except RafkaError as e:
            return e
        group.commit(committed)
        return None

    async def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> tuple:
        """(error, {(topic, partition): (offset, leader epoch, metadata)}) for the partitions
        asked (all the group has when None); partitions without a commit are left out."""
        await self._until_loaded()
        group = self.groups.get(group_id)
        if group is None:
            return None, {}
        wanted = group.offsets if partitions is None else {
            tuple(tp): group.offsets[tuple(tp)] for tp in partitions if tuple(tp) in group.offsets
        }  # fmt: skip
        return None, {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in wanted.items()}

    # -- admin ---------------------------------------------------------------------------------

    async def list_groups(self) -> list[dict[str, Any]]:
        await self._until_loaded()
        return [
            {"group_id": g.group_id, "state": g.state.value,
             "protocol_type": g.protocol_type or "", "members": len(g.members)}
            for g in self.groups.values() if g.state != GroupState.DEAD
        ]  # fmt: skip

    async def describe_group(self, group_id: str) -> tuple:
        """(error, description): GroupIdNotFound for a group this shard does not have."""
        await self._until_loaded()
        try:
            return None, self._group(group_id, create=False).describe()
        except RafkaError as e:
            return e, None

    async def delete_group(self, group_id: str) -> RafkaError | None:
        """Delete an empty group and its committed offsets (NonEmptyGroup while it has
        members, GroupIdNotFound for an unknown group)."""
        await self._until_loaded()
        try:
            group = self._group(group_id, create=False)
            group.mark_dead(_now_ms())
        except RafkaError as e:
            return e
        tombstones = [(offset_key(group_id, t, p), None) for t, p in group.offsets]
        try:
            await self._write(tombstones + [(group_key(group_id), None)])
        except RafkaError as e:
            revived = Group(group_id, self.config, _now_ms())  # nothing was deleted
            revived.offsets = group.offsets
            self.groups[group_id] = revived
            return e
        if self.groups.get(group_id) is group:
            del self.groups[group_id]
            self._counted_generations.pop(group_id, None)
        return None

    async def _expire_offsets(self, now: int) -> None:
        for group in list(self.groups.values()):
            expired = group.expired_offsets(now)
            if not expired:
                continue
            try:
                await self._write([(offset_key(group.group_id, t, p), None) for t, p in expired])
            except RafkaError as e:
                self.logger.warning("expiring offsets of group %s failed: %s", group.group_id, e)
                continue
            group.delete_offsets(expired)
            self.logger.info("group %s: %d offset(s) expired", group.group_id, len(expired))
            if not group.offsets and not group.members and group.state == GroupState.EMPTY:
                group.mark_dead(now)
                self.groups.pop(group.group_id, None)
                self._counted_generations.pop(group.group_id, None)


def _replay(key, value, offsets: dict, metadata: dict) -> None:
    """Apply one record of __consumer_offsets to the state being loaded."""
    if isinstance(key, OffsetKey):
        group_offsets = offsets.setdefault(key.group_id, {})
        if value is None:
            group_offsets.pop((key.topic, key.partition), None)
        else:
            group_offsets[(key.topic, key.partition)] = CommittedOffset(
                value["offset"], value["leader_epoch"], value["metadata"], value["commit_ms"]
            )
    elif isinstance(key, GroupKey):
        metadata[key.group_id] = value
