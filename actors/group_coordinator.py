"""GroupCoordinator: the Ray actor serving the consumer groups of one shard.

Shard ``k`` serves every group with ``coordinator_shard(group_id) == k`` and keeps their
state in partition ``k`` of the compacted internal topic ``__consumer_offsets``
(``rafka.actors.offsets_log``): offset commits and each group's metadata (members,
generation, assignment). Nothing else is durable, so a coordinator that is killed, restarted
or moved to another node reads its partition back and carries on; until it has, requests
wait.

A thin shell over ``rafka.cluster.group.Group`` (the decisions): requests are handed to the
group's state machine, whose ``Effects`` say which waiting calls to answer and when to write
the group's record. Join and sync calls wait (asyncio futures) until the rebalance answers
them; a timer loop expires sessions and ends rebalances. A commit is applied in memory only
after its records are written, so a reply never claims more than the log holds. Every write
is awaited, so other calls run meanwhile: the group tracks its commits in flight, so offset
expiry and group deletion leave memory and the log agreeing whatever the interleaving
(``rafka.cluster.group_offsets``), and a group being deleted stays in place, refusing joins
and commits with a retriable error, until its deletion is written (or fails and it is back).

Answers are ``(error, result)`` pairs with ``error`` None on success: expected refusals
(a stale generation, a rebalance) cost no exception across Ray.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from rafka.actors import metrics
from rafka.actors.group_lag import LagReporter
from rafka.actors.group_transactions import GroupTransactionsMixin
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.offsets_log import OffsetsLog
from rafka.cluster.group import JOIN, SYNC, CommittedOffset, Effects, Group, GroupState
from rafka.cluster.group_types import GroupWrite
from rafka.cluster.offsets_records import group_key, group_value, offset_key, offset_value
from rafka.cluster.settings import group_config, setting
from rafka.errors import (
    CoordinatorNotAvailable,
    GroupIdNotFound,
    InvalidGroupId,
    RafkaError,
    UnstableOffsetCommit,
)

TICK_S = 0.1
#: How often offsets of long-empty groups are looked for (offsets.retention.minutes).
EXPIRY_CHECK_S = 60.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator(GroupTransactionsMixin):
    def __init__(self, namespace: str, shard: int, settings: dict[str, Any]) -> None:
        self.logger = actor_logger(__name__, "GroupCoordinator", shard=shard)
        label_process_logs(self.logger.prefix)  # this process is this coordinator
        self.namespace = namespace
        self.shard = shard
        self.settings = dict(settings)
        self.config = group_config(self.settings)
        self.commit_timeout_s = setting(self.settings, "offsets.commit.timeout.ms") / 1000
        self.log = OffsetsLog(namespace, shard, self.commit_timeout_s, self.logger)
        self._init_transactions()
        self.groups: dict[str, Group] = {}
        self._waiting: dict[tuple[str, str, str], asyncio.Future] = {}
        self._loaded: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        # For the rebalance counter: the generation each group was at when last counted,
        # with the Group object it was counted on (a deleted and re-created group restarts
        # at generation 0).
        self._counted_generations: dict[str, tuple[Group, int]] = {}
        self._lag = LagReporter(
            namespace, lambda: self.groups.values() if self._loaded.is_set() else None,
            self.log.controller_call, self.logger,
        )  # fmt: skip
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle -----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._loaded is None:
            self._loaded = asyncio.Event()
            self._commit_ended = asyncio.Event()  # set whenever a commit's write ends
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._run()), self.log.start(),
                           loop.create_task(self._lag.run())]  # fmt: skip

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

    async def _load(self) -> None:
        """The shard's groups, from its partition of __consumer_offsets."""
        started = time.monotonic()
        loaded = await self.log.load()
        now = _now_ms()
        for group_id in loaded.group_ids():
            record = loaded.metadata.get(group_id)
            group = (
                Group.from_record(group_id, record, self.config, now) if record
                else Group(group_id, self.config, now)
            )  # fmt: skip
            group.offsets = loaded.offsets.get(group_id, {})
            if group.members or group.offsets:
                self.groups[group_id] = group
        self.pending = loaded.pending
        for group_id, group in self.groups.items():  # loading is no rebalance
            self._counted_generations[group_id] = (group, group.generation)
        self.logger.info(
            "loaded %d group(s) in %.2f s", len(self.groups), time.monotonic() - started
        )


    def _apply(self, group: Group, effects: Effects) -> None:
        self._count_rebalances(group)
        for (member_id, kind), result in effects.replies.items():
            future = self._waiting.pop((group.group_id, member_id, kind), None)
            if future is not None and not future.done():
                future.set_result(result)
        if effects.writes:  # the record as it is now serves every write asked for
            asyncio.get_running_loop().create_task(
                self._persist(group, effects.writes, group.metadata_record())
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

    async def _persist(
        self, group: Group, writes: list[GroupWrite], record: dict[str, Any]
    ) -> None:
        """Write ``record`` and hand each of ``writes`` back to the group, done or failed."""
        try:
            await self.log.write([(group_key(group.group_id), group_value(record))])
        except RafkaError as e:
            self.logger.warning("group %s: storing generation %d failed: %s", group.group_id,
                                record["generation"], e)  # fmt: skip
            for write in writes:
                self._apply(group, group.persist_failed(write, e, _now_ms()))
            return
        for write in writes:
            self._apply(group, group.persisted(write, _now_ms()))

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
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.config, _now_ms())
        # A DEAD group is being deleted: it stays in place until its deletion is written
        # (or revived if that fails), refusing joins and commits with a retriable error.
        if group is None or (group.state == GroupState.DEAD and not create):
            raise GroupIdNotFound(f"consumer group {group_id!r} does not exist")
        return group

    # -- the group protocol --------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, protocol_type: str, protocols: list, session_timeout_ms: int,
        rebalance_timeout_ms: int, require_known_member_id: bool = False,
    ) -> tuple:  # fmt: skip
        """Join or rejoin; answers when the rebalance completes: (error, JoinResult).
        ``require_known_member_id``: a Kafka client's JoinGroup v4+ (``Group.join``)."""
        await self._until_loaded()
        try:
            group = self._group(group_id, create=True)
            member_id, effects = group.join(
                member_id, group_instance_id, client_id, client_host, protocol_type, protocols,
                session_timeout_ms, rebalance_timeout_ms, _now_ms(), require_known_member_id,
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
        offsets: dict[tuple[str, int], tuple[int, int, str]], outside_group: bool = False,
    ) -> RafkaError | None:  # fmt: skip
        """Commit {(topic, partition): (offset, leader epoch, metadata)} for a member of
        ``generation``, or with ``outside_group`` (an admin, or a consumer using ``assign``:
        member "", generation -1) for a group without members (``Group.check_commit``).
        Nothing is applied unless all of it is accepted and written."""
        await self._until_loaded()
        now = _now_ms()
        committed = {
            (t, p): CommittedOffset(o, e, m or "", now) for (t, p), (o, e, m) in offsets.items()
        }
        try:
            group = self._group(group_id, create=True)
            group.check_commit(
                member_id, group_instance_id, generation, committed, outside_group=outside_group
            )
        except RafkaError as e:
            return e
        # In flight from here (no await before): expiry and deletion account for it.
        commit_id = group.begin_commit(committed)
        try:
            await self.log.write([
                (offset_key(group_id, t, p), offset_value(c.offset, c.leader_epoch, c.metadata,
                                                          c.commit_ms))
                for (t, p), c in committed.items()
            ])  # fmt: skip
        except RafkaError as e:
            group.end_commit(commit_id, written=False)
            self._commit_ended.set()
            return e
        group.end_commit(commit_id, written=True)
        self._commit_ended.set()
        return None

    async def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None,
        require_stable: bool = False,
    ) -> tuple:  # fmt: skip
        """(error, {(topic, partition): (offset, leader epoch, metadata)}) for the partitions
        asked (all the group has when None); partitions without a commit are left out.
        ``require_stable``: UnstableOffsetCommit (retriable) while offsets of those
        partitions are pending in a transaction (KIP-447: a read_committed consumer must not
        start from an offset that an ending transaction is about to replace)."""
        await self._until_loaded()
        if require_stable and self.pending.is_pending(group_id, partitions):
            return UnstableOffsetCommit(
                f"group {group_id} has offsets committed in a transaction that has not "
                "ended; retry once it has"
            ), None
        group = self.groups.get(group_id)
        if group is None:
            return None, {}
        in_flight = group.commits_in_flight(partitions)  # answer after them, not later ones
        if in_flight:
            try:
                await asyncio.wait_for(self._commits_end(group, in_flight), self.commit_timeout_s)
            except asyncio.TimeoutError:
                return CoordinatorNotAvailable(
                    f"commits to group {group_id} are still being written; retry"
                ), None
        wanted = group.offsets if partitions is None else {
            tuple(tp): group.offsets[tuple(tp)] for tp in partitions if tuple(tp) in group.offsets
        }  # fmt: skip
        return None, {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in wanted.items()}

    async def _commits_end(self, group: Group, commit_ids: set[int]) -> None:
        while not group.commits_ended(commit_ids):
            self._commit_ended.clear()
            await self._commit_ended.wait()

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
        # Commits still being written are queued before these tombstones, so they go too.
        tombstones = [(offset_key(group_id, t, p), None) for t, p in group.offsets_to_delete()]
        try:
            await self.log.write(tombstones + [(group_key(group_id), None)])
        except RafkaError as e:
            # Nothing was deleted. The dead group kept its place (joins and commits were
            # refused meanwhile), so the same group, with commits that ended since, is back.
            group.revive(_now_ms())
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
                await self.log.write([(offset_key(group.group_id, t, p), None) for t, p in expired])
            except RafkaError as e:
                self.logger.warning("expiring offsets of group %s failed: %s", group.group_id, e)
                continue
            # Offsets committed again while the tombstones were written stay.
            deleted = group.delete_expired_offsets(expired)
            self.logger.info("group %s: %d offset(s) expired", group.group_id, len(deleted))
            if group.is_forgettable and self.groups.get(group.group_id) is group:
                group.mark_dead(now)
                del self.groups[group.group_id]
                self._counted_generations.pop(group.group_id, None)
