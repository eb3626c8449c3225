"""The consumer's side of the group protocol: joining, syncing and applying assignments.

``GroupMember`` is what Kafka's ConsumerCoordinator is to its consumer. The consumer's
``poll`` drives it (``GroupMember.poll``): joins and syncs are sent as actor calls whose
answers are awaited alongside the fetches, so a rebalance never blocks a poll past its
timeout, and with the cooperative protocol the partitions a member keeps are read
throughout. The group leader runs the assignor (``rafka.clients.leader_assignment``) on the
client, as in Kafka. Heartbeats (``rafka.clients.group_heartbeat``) and commits
(``rafka.clients.group_commits``) are parts of the member too.

Membership states: UNJOINED -> JOINING (join sent) -> SYNCING (in a generation, sync sent or
its answer waiting to be applied) -> STABLE (assignment applied). Invariants:

- every state change finishes whatever happens: an answer taken from ``_pending`` always
  leaves the member STABLE, or UNJOINED with a rejoin due; an error (a listener's, the
  assignor's) is raised only after that;
- a join or sync that gets no answer within its deadline is given up and the member rejoins;
- before it joins, the member commits (auto-commit) and revokes what it may not keep (eager:
  everything; cooperative: partitions of topics it no longer subscribes to); partitions of a
  member that learned it is out of the group are revoked as lost, never claimed in a join;
- an assignment is applied (listeners run) only in the polling thread, and not at all if
  the member learned meanwhile that it is out of the group.

The consumer hands partitions in and out through the ``host`` (the Consumer): ``owned()``,
``revoke(partitions, lost)``, ``assign_from_group(partitions)``, ``commit_consumed()``,
``subscribed_topics()`` and ``refresh_subscription()``; the rebalance listener runs inside
``revoke`` and ``assign_from_group``, in the polling thread.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple

from rafka.clients.assignors import make_assignors, rebalance_protocol
from rafka.clients.group_commits import MEMBER_GONE, RETRY_BACKOFF_S, CommitMixin
from rafka.clients.group_heartbeat import HeartbeatMixin
from rafka.clients.group_rebalance import JOIN, STABLE, SYNCING, UNJOINED, RebalanceMixin
from rafka.errors import (
    FencedInstanceId,
    IllegalGeneration,
    IllegalState,
    RafkaError,
    RebalanceInProgress,
    RequestTimedOut,
)

log = logging.getLogger(__name__)

#: Added to a join's or sync's rebalance timeout before it is given up (Kafka adds 5 s to
#: the join's request timeout).
ANSWER_GRACE_S = 5.0


class _Pending(NamedTuple):
    """A join or sync call in flight: its answer's ref, and when to give up on it."""

    kind: str
    ref: Any
    deadline: float
    generation: int


class GroupMember(RebalanceMixin, HeartbeatMixin, CommitMixin):
    """One consumer's membership of ``group_id``. Not thread-safe except between the polling
    thread and its own heartbeat thread (which share state under ``_lock``; only one of them
    moves a rebalance on at a time, under ``_advancing``). ``standalone``: the member of a
    consumer that uses ``assign()``: it only commits and reads commits, from outside the
    group. ``clock`` (monotonic seconds) and ``sleep`` are for tests."""

    def __init__(
        self,
        gateway,
        metadata,
        host,
        group_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        assignment_strategy: Any,
        metadata_max_age_ms: int,
        request_timeout_s: float,
        standalone: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        heartbeat_thread: bool = True,
    ) -> None:
        self._gateway = gateway
        self._metadata = metadata
        self._host = host
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.assignors = make_assignors(assignment_strategy)
        self.protocol = rebalance_protocol(self.assignors)
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.request_timeout_s = request_timeout_s
        self.standalone = standalone
        self._clock = clock
        self._sleep = sleep
        self._heartbeat_thread_enabled = heartbeat_thread
        self._lock = threading.RLock()
        self._advancing = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.state = UNJOINED
        self.leader_id: str | None = None
        self._rejoin_needed = True
        self._lost = False  # removed from the group: owned partitions are lost, not revoked
        self._fatal: BaseException | None = None
        self._fenced_by: FencedInstanceId | None = None  # raised by every poll once set
        self._in_poll = False
        self._pending: _Pending | None = None
        self._synced: tuple[int, Any] | None = None  # (generation, SyncResult) to apply
        self._retry_at = 0.0
        self._coordinator = None
        self._assigned_counts: dict[str, int] = {}  # partition counts the leader assigned
        self._checked_metadata_at = clock()
        self._last_poll = clock()
        self._async_commits: list = []  # (ref, callback, offsets, member id, generation)
        self._closed = False
        self._heartbeats: threading.Thread | None = None
        self._wake = threading.Event()

    # -- coordinator ---------------------------------------------------------------------------

    def _call(self, method: str, *args, timeout_s: float | None = None):
        """Call the coordinator and wait; a retriable failure forgets its handle."""
        return self._get(self._send(method, *args), timeout_s)

    def _send(self, method: str, *args):
        if self._coordinator is None:
            self._coordinator = self._gateway.group_coordinator(self.group_id)
        return self._gateway.send(self._coordinator, method, self.group_id, *args)

    def _get(self, ref, timeout_s: float | None = None):
        try:
            return self._gateway.get(
                ref, timeout_s or self.request_timeout_s, what="the group coordinator"
            )
        except RafkaError as e:
            if e.retriable:
                self._coordinator = None
            raise

    # -- polling -------------------------------------------------------------------------------

    def pending_ref(self):
        """The join or sync answer being waited for (the consumer waits on it with its
        fetches), or None."""
        pending = self._pending
        return pending.ref if pending is not None else None

    def poll(self) -> None:
        """Advance the membership as far as it goes without waiting: send a join when one
        is due, handle answers that have arrived, apply an assignment. Raises a fatal error
        (InconsistentGroupProtocol, a listener's or assignor's error) once, after the state
        change it interrupted is finished; FencedInstanceId on every poll once fenced."""
        if self._in_poll:
            raise IllegalState(
                "poll() was called from a rebalance listener of the same consumer; a "
                "listener may commit, seek or read positions, but not poll"
            )
        self._last_poll = self._clock()
        self._start_heartbeats()
        self._finish_async_commits()
        self._raise_fatal()
        self._maybe_check_metadata()
        self._in_poll = True
        try:
            with self._advancing:
                self._poll_rebalance()
        finally:
            self._in_poll = False

    def _poll_rebalance(self) -> None:
        self._revoke_if_lost()
        for _ in range(6):  # join -> sync -> apply (-> rejoin after a cooperative revoke)
            self._advance()
            self._raise_fatal()
            with self._lock:
                synced, self._synced = self._synced, None
                due = (
                    self._pending is None and self._rejoin_needed
                    and self._clock() >= self._retry_at
                )  # fmt: skip
            if synced is not None:
                self._apply_assignment(*synced)
            elif due:
                self._start_join()
            else:
                return

    def _raise_fatal(self) -> None:
        with self._lock:
            error, self._fatal = self._fatal, None
            fenced = self._fenced_by
        if fenced is not None:
            if self._take_lost():
                owned = self._host.owned()
                if owned:
                    self._host.revoke(owned, lost=True)
            raise fenced
        if error is not None:
            raise error

    def in_generation(self) -> bool:
        """Whether the member still holds its partitions by a generation of the group (not
        told it is out, not fenced)."""
        with self._lock:
            return self.generation >= 0 and not self._lost and self._fenced_by is None

    @property
    def stable(self) -> bool:
        return self.state == STABLE and not self._rejoin_needed

    def advance_rebalance(self) -> None:
        """Take a join or sync answer that has arrived, from either thread, unless the other
        thread is at it. Never raises: a fatal error waits for the next poll."""
        if self._advancing.acquire(blocking=False):
            try:
                self._advance()
            finally:
                self._advancing.release()

    def _advance(self) -> None:
        with self._lock:
            pending = self._pending
        if pending is None:
            return
        ready, _ = self._gateway.wait([pending.ref], 1, timeout_s=0)
        if not ready:
            if self._clock() >= pending.deadline:
                log.warning("group %s: no answer to the %s within %.1f s; rejoining",
                            self.group_id, pending.kind, self._answer_timeout_s())  # fmt: skip
                self._rejoin_later(pending)
            return
        with self._lock:
            if self._pending is not pending:
                return  # the membership was reset meanwhile
            self._pending = None
        try:
            error, result = self._get(pending.ref)
        except RafkaError as e:
            error, result = e, None
        if error is not None:
            self._on_error(error, pending)
        elif pending.kind == JOIN:
            self._on_joined(result)
        else:
            with self._lock:
                if self.generation == pending.generation and self.state == SYNCING:
                    self._synced = (pending.generation, result)

    def _answer_timeout_s(self) -> float:
        return self.max_poll_interval_s + self.request_timeout_s + ANSWER_GRACE_S

    def _expect(self, kind: str, ref, generation: int, state: str) -> None:
        with self._lock:
            self._pending = _Pending(
                kind, ref, self._clock() + self._answer_timeout_s(), generation
            )
            self.state = state

    def _rejoin_later(self, pending: _Pending | None = None) -> None:
        """Back to UNJOINED with a rejoin due after a backoff (dropping ``pending``)."""
        with self._lock:
            if pending is not None and self._pending is pending:
                self._pending = None
            self.state = UNJOINED
            self._rejoin_needed = True
            self._retry_at = self._clock() + RETRY_BACKOFF_S

    # -- errors --------------------------------------------------------------------------------

    def _on_error(self, error: RafkaError, pending: _Pending) -> None:
        during = pending.kind
        if isinstance(error, FencedInstanceId) or not (
            error.retriable or isinstance(error, (RebalanceInProgress, *MEMBER_GONE))
        ):
            log.warning("group %s: %s refused: %s", self.group_id, during, error)
            if isinstance(error, FencedInstanceId):
                self._fenced(error)
                return
            self._rejoin_later()
            with self._lock:
                self._fatal = error
            return
        if isinstance(error, MEMBER_GONE):
            self._reset(error, during, pending=pending)
        else:
            log.info("group %s: %s: %s; rejoining", self.group_id, during, error)
        self._rejoin_later()

    def _fenced(self, error: FencedInstanceId) -> None:
        """Another process joined as this static member: this one is out for good. Every
        later poll raises the error and hands back what it holds as lost (Kafka's fenced
        consumer keeps failing too), so it reads no partition the new process owns."""
        with self._lock:
            self._forget_membership(member_id_too=True)
            self._rejoin_needed = False
            self._lost = True
            self._fenced_by = error

    def _send_failed(self, error: RafkaError) -> None:
        log.info("group %s: coordinator unavailable (%s); retrying", self.group_id, error)
        self._rejoin_later()
        if not error.retriable:
            with self._lock:
                self._fatal = error

    def _reset(
        self, error: RafkaError, during: str, member_id: str | None = None,
        generation: int | None = None, pending: _Pending | None = None,
    ) -> None:  # fmt: skip
        """The group no longer knows this member (or its generation): start over, and
        report the partitions held as lost. ``member_id`` and ``generation`` name the
        membership the refused call was sent under: a newer one is left alone."""
        with self._lock:
            if member_id is not None and (member_id, generation) != (
                self.member_id, self.generation
            ):
                return
            if pending is not None and pending.generation != self.generation:
                return
            log.warning("group %s: member %s is out of the group (%s refused: %s)",
                        self.group_id, self.member_id, during, error)  # fmt: skip
            self._forget_membership(member_id_too=not isinstance(error, IllegalGeneration))
            self._lost = True

    def _forget_membership(self, member_id_too: bool) -> None:
        """Under ``_lock``: no generation, nothing pending, a rejoin due."""
        if member_id_too:
            self.member_id = ""
        self.generation = -1
        self.state = UNJOINED
        self._rejoin_needed = True
        self._pending = None
        self._synced = None

    def request_rejoin(self) -> None:
        with self._lock:
            self._rejoin_needed = True

    def _maybe_check_metadata(self) -> None:
        """Every metadata_max_age_ms: a pattern may match new topics (the subscription
        changes, so the member rejoins), and the leader rejoins when a subscribed topic grew
        (as Kafka's leader does), so the new partitions get assigned."""
        now = self._clock()
        if now - self._checked_metadata_at < self.metadata_max_age_s:
            return
        self._checked_metadata_at = now
        if self._host.refresh_subscription():
            self.request_rejoin()
            return
        if self.state == STABLE and self.member_id == self.leader_id and self._assigned_counts:
            found = self._metadata.partition_counts(sorted(self._assigned_counts), refresh=True)
            counts = {t: found.get(t, 0) for t in self._assigned_counts}  # 0: no such topic
            if counts != self._assigned_counts:
                log.info("group %s: partition counts changed; rebalancing", self.group_id)
                self.request_rejoin()

    # -- leaving -------------------------------------------------------------------------------

    def leave(self) -> None:
        """Leave the group (a dynamic member; a static one just goes silent, so it can come
        back to the same assignment within its session timeout). A join answered but not yet
        taken names the member id to leave with."""
        with self._lock:
            member_id, pending = self.member_id, self._pending
            self._forget_membership(member_id_too=True)
        if pending is not None and pending.kind == JOIN:
            ready, _ = self._gateway.wait([pending.ref], 1, timeout_s=0)
            if ready:
                try:
                    error, result = self._get(pending.ref)
                    member_id = result.member_id if error is None else member_id
                except RafkaError:
                    pass
        if member_id and self.group_instance_id is None:
            try:
                self._call("leave_group", [(member_id, None)], timeout_s=5.0)
            except RafkaError as e:
                log.info("group %s: leaving failed: %s", self.group_id, e)

    def close(self, timeout_s: float = 5.0) -> None:
        """Finish async commits, stop the heartbeat thread (so it cannot take a join answer
        after the leave and keep a member nothing runs), then leave."""
        try:
            self._finish_async_commits(wait_s=timeout_s)
        except RequestTimedOut:
            pass
        self._closed = True
        self._wake.set()
        heartbeats = self._heartbeats
        if heartbeats is not None and heartbeats is not threading.current_thread():
            heartbeats.join(timeout_s)
        if self._in_poll:  # closed from a listener: this thread holds _advancing already
            self.leave()
            return
        with self._advancing:
            self.leave()


def matching_topics(pattern: re.Pattern, topics: Iterable[str]) -> set[str]:
    """Topics a pattern subscription covers: full matches, internal topics excluded."""
    return {t for t in topics if pattern.fullmatch(t) and not t.startswith("__")}
