"""Fakes for consumer-group member tests, with no Ray: a coordinator that runs the real group
state machine (``rafka.cluster.group.Group``) on an injected clock, a gateway to it whose
calls the test may hold back and release (late answers), and a consumer built on the real
``GroupConsumerMixin`` (the hooks ``GroupMember`` calls) with partitions as plain positions.

The coordinator answers a call when the state machine does (a join waits for the rebalance);
writes (group records and offset commits, in one queue as the actor's single writer has
them) succeed at once unless the test holds them (``hold_writes``). What was written is kept
in a ``DurableLog``, from which ``FakeCoordinator.restart`` rebuilds every group as the
actor's load does.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from rafka.clients.consumer_groups_api import GroupConsumerMixin
from rafka.cluster.group import JOIN, SYNC, CommittedOffset, Effects, Group, GroupConfig
from rafka.errors import CoordinatorNotAvailable, GroupIdNotFound, RafkaError, RequestTimedOut
from rafka.types import TopicPartition

CONFIG = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
#: Methods whose answer is (error, result) rather than the error alone.
PAIRED = ("join_group", "sync_group", "fetch_offsets")


class Clock:
    """Monotonic seconds, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def ms(self) -> int:
        return int(self.now * 1000)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Ref:
    """An answer that may not have arrived yet."""

    _ids = itertools.count()

    def __init__(self, method: str) -> None:
        self.id = next(self._ids)
        self.method = method
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        if not self.done:
            self.done, self.value, self.error = True, value, error

    def __repr__(self) -> str:
        return f"Ref({self.method}#{self.id}, done={self.done})"


class DurableLog:
    """What the coordinator's partition of ``__consumer_offsets`` holds, compacted: the
    newest metadata record of each group and the newest committed offset of each of its
    partitions. Written only when a write succeeds (or, for one in flight when the
    coordinator dies, when the test says it reached the log)."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}

    def group_ids(self) -> list[str]:
        return sorted(set(self.records) | set(self.offsets))


class _GroupWrite:
    """A group metadata record being written: the record as it was when asked for."""

    def __init__(self, group: Group, effects: Any, record: dict[str, Any]) -> None:
        self.group, self.effects, self.record = group, effects, record

    def reach_log(self, log: DurableLog) -> None:
        log.records[self.group.group_id] = self.record


class _CommitWrite:
    """Accepted offsets being written (a commit in flight for the group); applied to the
    group, and answered, once written."""

    def __init__(self, group: Group, committed: dict, ref: Ref) -> None:
        self.group, self.committed, self.ref = group, committed, ref
        self.commit_id = group.begin_commit(committed)

    def end(self, written: bool) -> None:
        self.group.end_commit(self.commit_id, written=written)

    def reach_log(self, log: DurableLog) -> None:
        log.offsets.setdefault(self.group.group_id, {}).update(self.committed)


class FakeCoordinator:
    """One coordinator shard over real ``Group`` state machines. ``held``: method names
    whose calls wait (unprocessed) until ``release``; ``lost``: method names whose calls are
    processed but never answered; ``hold_writes``: writes (group records, and offset commits
    accepted meanwhile) wait, in order, for ``finish_writes``; ``log``: what was written;
    ``restart``: a new incarnation loads the groups back from ``log``."""

    def __init__(self, clock: Clock, config: GroupConfig = CONFIG) -> None:
        self.clock = clock
        self.config = config
        self.groups: dict[str, Group] = {}
        self.waiting: dict[tuple[str, str, str], Ref] = {}
        self.held: set[str] = set()
        self.lost: set[str] = set()
        self.queue: list[tuple[Ref, str, tuple]] = []
        self.hold_writes = False
        self.writes: list[_GroupWrite | _CommitWrite] = []
        self.calls: list[tuple[str, tuple]] = []
        self.fetches: list[tuple[Ref, str, list | None]] = []  # waiting for commits in flight
        self.log = DurableLog()
        self.restarts = 0

    # -- calls ---------------------------------------------------------------------------------

    def call(self, method: str, args: tuple) -> Ref:
        ref = Ref(method)
        self.calls.append((method, args))
        if method in self.held:
            self.queue.append((ref, method, args))
        else:
            self._process(ref, method, args)
        return ref

    def release(self, method: str | None = None) -> None:
        """Process the held calls (of ``method``, or all), in the order they came."""
        keep = []
        for ref, m, args in self.queue:
            if method is None or m == method:
                self._process(ref, m, args)
            else:
                keep.append((ref, m, args))
        self.queue = keep

    def _process(self, ref: Ref, method: str, args: tuple) -> None:
        target = Ref(method) if method in self.lost else ref  # lost: nobody hears the answer
        try:
            getattr(self, method)(target, *args)
        except RafkaError as e:  # the actor answers (error, None) or the error
            target.resolve((e, None) if method in PAIRED else e)

    def _group(self, group_id: str, create: bool) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                raise GroupIdNotFound(f"no group {group_id}")
            group = self.groups[group_id] = Group(group_id, self.config, self.clock.ms())
        return group

    def _wait(self, ref: Ref, group: Group, member_id: str, kind: str, effects) -> None:
        key = (group.group_id, member_id, kind)
        previous = self.waiting.pop(key, None)
        if previous is not None and not previous.done:
            previous.resolve((CoordinatorNotAvailable("replaced by a retry"), None))
        self.waiting[key] = ref
        self.apply(group, effects)

    def apply(self, group: Group, effects) -> None:
        for (member_id, kind), result in effects.replies.items():
            ref = self.waiting.pop((group.group_id, member_id, kind), None)
            if ref is not None:
                ref.resolve((result.error, result._replace(error=None)))
        if effects.persist:
            self.writes.append(_GroupWrite(group, effects, group.metadata_record()))
            if not self.hold_writes:
                self.finish_writes()

    def finish_writes(self, error: RafkaError | None = None) -> None:
        """End the writes in flight, in the order they were asked for: all succeed, or all
        fail with ``error``."""
        writes, self.writes = self.writes, []
        for write in writes:
            if error is None:
                write.reach_log(self.log)
            if isinstance(write, _CommitWrite):
                write.end(written=error is None)
                write.ref.resolve(error)
                continue
            outcome = persist_outcome(write.group, write.effects, error, self.clock.ms())
            self.apply(write.group, outcome)
        fetches, self.fetches = self.fetches, []
        for ref, group_id, partitions in fetches:  # as the actor's fetch_offsets wait
            self.fetch_offsets(ref, group_id, partitions)

    def restart(self, answer: bool = True, reached_log: bool = False) -> None:
        """The coordinator dies and a new incarnation loads its groups back from ``log`` (as
        ``GroupCoordinator._load`` does). Writes in flight reach the log or not
        (``reached_log``) and are never answered; waiting joins and syncs and held calls are
        never processed, and fail with CoordinatorNotAvailable (``answer``) or get no answer
        at all."""
        for write in self.writes:
            if reached_log:
                write.reach_log(self.log)
        unanswered = [w.ref for w in self.writes if isinstance(w, _CommitWrite)]
        unanswered += list(self.waiting.values()) + [ref for ref, _, _ in self.queue]
        unanswered += [ref for ref, _, _ in self.fetches]
        self.writes, self.waiting, self.queue, self.fetches = [], {}, [], []
        self.restarts += 1
        if answer:
            for ref in unanswered:
                ref.resolve(error=CoordinatorNotAvailable("the group coordinator restarted"))
        now = self.clock.ms()
        self.groups = {}
        for group_id in self.log.group_ids():
            record = self.log.records.get(group_id)
            group = (Group.from_record(group_id, record, self.config, now) if record
                     else Group(group_id, self.config, now))  # fmt: skip
            group.offsets = dict(self.log.offsets.get(group_id, {}))
            if group.members or group.offsets:
                self.groups[group_id] = group

    def tick(self) -> None:
        for group in list(self.groups.values()):
            self.apply(group, group.tick(self.clock.ms()))

    # -- the coordinator's methods (as GroupCoordinator's) -------------------------------------

    def join_group(self, ref, group_id, member_id, instance_id, client_id, host, protocol_type,
                   protocols, session_timeout_ms, rebalance_timeout_ms) -> None:  # fmt: skip
        group = self._group(group_id, True)
        member_id, effects = group.join(
            member_id, instance_id, client_id, host, protocol_type, protocols,
            session_timeout_ms, rebalance_timeout_ms, self.clock.ms(),
        )  # fmt: skip
        self._wait(ref, group, member_id, JOIN, effects)

    def sync_group(self, ref, group_id, member_id, instance_id, generation, assignments):
        group = self._group(group_id, False)
        effects = group.sync(member_id, instance_id, generation, assignments, self.clock.ms())
        self._wait(ref, group, member_id, SYNC, effects)

    def heartbeat(self, ref, group_id, member_id, instance_id, generation) -> None:
        group = self._group(group_id, False)
        group.heartbeat(member_id, instance_id, generation, self.clock.ms())
        ref.resolve(None)

    def leave_group(self, ref, group_id, members) -> None:
        group = self._group(group_id, False)
        self.apply(group, group.leave(members, self.clock.ms()))
        ref.resolve(None)

    def commit_offsets(self, ref, group_id, member_id, instance_id, generation, offsets,
                       outside_group=False) -> None:  # fmt: skip
        group = self._group(group_id, True)
        now = self.clock.ms()
        committed = {tp: CommittedOffset(o, e, m or "", now) for tp, (o, e, m) in offsets.items()}
        check_commit(group, member_id, instance_id, generation, committed, outside_group)
        self.writes.append(_CommitWrite(group, committed, ref))
        if not self.hold_writes:
            self.finish_writes()

    def fetch_offsets(self, ref, group_id, partitions=None, require_stable=False) -> None:
        group = self.groups.get(group_id)
        # The actor waits for the commits in flight at the call; here, for any of them.
        if group is not None and group.commits_in_flight(partitions):
            self.fetches.append((ref, group_id, partitions))  # answered after those writes
            return
        found = {} if group is None else {
            tuple(tp): group.offsets[tuple(tp)] for tp in partitions or group.offsets
            if tuple(tp) in group.offsets
        }  # fmt: skip
        ref.resolve((None, {tp: (c.offset, c.leader_epoch, c.metadata)
                            for tp, c in found.items()}))  # fmt: skip


def check_commit(group, member_id, instance_id, generation, committed, outside_group) -> None:
    group.check_commit(member_id, instance_id, generation, committed, outside_group=outside_group)


def persist_outcome(group: Group, effects, error: RafkaError | None, now: int):
    """What the coordinator does once a group write ends: the state machine's follow-up for
    every write the effects asked for."""
    out = Effects()
    for write in effects.writes:
        if error is None:
            out.merge(group.persisted(write, now))
        else:
            out.merge(group.persist_failed(write, error, now))
    return out


class FakeGateway:
    """The Gateway calls a GroupMember makes, onto a FakeCoordinator."""

    def __init__(self, coordinator: FakeCoordinator) -> None:
        self.coordinator = coordinator

    def group_coordinator(self, group_id: str) -> str:
        return "coordinator"

    def send(self, handle, method: str, *args) -> Ref:
        return self.coordinator.call(method, args)

    @staticmethod
    def get(ref: Ref, timeout_s: float | None = None, what: str = ""):
        if not ref.done:
            raise RequestTimedOut(f"{what} did not answer in time")
        if ref.error is not None:
            raise ref.error
        return ref.value

    @staticmethod
    def wait(refs: list, num_returns: int = 1, timeout_s: float | None = None):
        ready = [r for r in refs if r.done]
        return ready, [r for r in refs if not r.done]


class FakeMetadata:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.fail: Callable[[], RafkaError | None] = lambda: None

    def partition_counts(self, names, refresh: bool = False) -> dict[str, int]:
        error = self.fail()
        if error is not None:
            raise error
        return {n: self.topics[n] for n in names if n in self.topics}

    def topic_names(self) -> list[str]:
        return sorted(self.topics)


class _Position:
    def __init__(self) -> None:
        self.position: int | None = None

    def clear(self) -> None:
        pass


class FakeConsumer(GroupConsumerMixin):
    """The real group hooks over partitions that are only positions; ``poll`` runs the
    membership and resolves positions as Consumer.poll does, ``read`` consumes records."""

    def __init__(self, gateway: FakeGateway, metadata: FakeMetadata, clock: Clock, *,
                 strategy: Any = "cooperative-sticky", auto_commit: bool = False,
                 instance: str | None = None, session_ms: int = 1000, heartbeat_ms: int = 300,
                 max_poll_ms: int = 10_000, client: str = "c",
                 metadata_max_age_ms: int = 300_000, request_timeout_s: float = 5.0,
                 sleep: Callable[[float], None] | None = None) -> None:  # fmt: skip
        self._gateway = gateway
        self._metadata = metadata
        self._partitions: dict[TopicPartition, _Position] = {}
        self.request_timeout_s = request_timeout_s
        self.closed = False
        self._init_group("g", instance, client, auto_commit, 5000, session_ms, heartbeat_ms,
                         max_poll_ms, strategy, metadata_max_age_ms)  # fmt: skip
        self._member_args.update(clock=clock, sleep=sleep or clock.sleep, heartbeat_thread=False)

    def _add_partitions(self, partitions) -> None:
        for tp in partitions:
            self._partitions.setdefault(tp, _Position())

    def _remove_partitions(self, partitions) -> None:
        for tp in partitions:
            self._partitions.pop(tp, None)

    def _reset(self, state) -> None:
        state.position = 0

    def _check_open(self) -> None:
        pass

    def poll(self) -> None:
        self._group_poll()
        self._resolve_positions()

    def read(self, records: int = 1) -> None:
        for state in self._partitions.values():
            state.position += records

    def close(self) -> None:
        """As Consumer.close: leave the group (auto-commit and listener first), then stop."""
        if self.closed:
            return
        try:
            self._close_group()
        finally:
            self.closed = True
            self._partitions = {}

    @property
    def member(self):
        return self._member
