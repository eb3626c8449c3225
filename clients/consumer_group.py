"""The consumer's side of the group protocol: joining, syncing, heartbeats and commits.

``GroupMember`` is what Kafka's ConsumerCoordinator is to its consumer. The consumer's
``poll`` drives it (``GroupMember.poll``): joins and syncs are sent as actor calls whose
answers are awaited alongside the fetches, so a rebalance never blocks a poll past its
timeout, and with the cooperative protocol the partitions a member keeps are read
throughout. The group leader runs the assignor (``rafka.clients.assignors``) here, on the
client, as in Kafka.

A background thread sends heartbeats every ``heartbeat_interval_ms`` while the member is in
a generation. It learns of rebalances (the next poll rejoins) and of the member's removal,
and it enforces ``max_poll_interval_ms``: a consumer that has not polled for that long
leaves the group (a static member does not leave; its session runs out instead), and its
partitions are reported lost on its next poll.

The consumer hands partitions in and out through the ``host`` (the Consumer): ``owned()``,
``revoke(partitions, lost)``, ``assign_from_group(partitions)``, ``commit_consumed()`` and
``subscribed_topics()``; the rebalance listener runs inside ``revoke`` and ``assign``, in
the polling thread.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from typing import Any, Callable, Iterable

from rafka.clients.assignors import Subscription, make_assignors, rebalance_protocol
from rafka.cluster.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from rafka.errors import (
    CommitFailed,
    FencedInstanceId,
    IllegalGeneration,
    RafkaError,
    RebalanceInProgress,
    RequestTimedOut,
    UnknownMemberId,
)
from rafka.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

UNJOINED, JOINING, SYNCING, STABLE = "unjoined", "joining", "syncing", "stable"
RETRY_BACKOFF_S = 0.1
_MEMBER_GONE = (UnknownMemberId, IllegalGeneration)


class ConsumerRebalanceListener:
    """Override what you need. Each is called in the thread that polls, with a set of
    TopicPartition: ``on_partitions_revoked`` before partitions are taken away (commit their
    offsets here), ``on_partitions_assigned`` after new ones are given (positions are
    resolved lazily afterwards), and ``on_partitions_lost`` when the member was removed from
    the group, so its partitions may already belong to others (by default it calls
    ``on_partitions_revoked``, as Kafka does)."""

    def on_partitions_revoked(self, revoked: set) -> None:
        pass

    def on_partitions_assigned(self, assigned: set) -> None:
        pass

    def on_partitions_lost(self, lost: set) -> None:
        self.on_partitions_revoked(lost)


class GroupMember:
    """One consumer's membership of ``group_id``. Not thread-safe except between the polling
    thread and its own heartbeat thread (which share state under ``_lock``)."""

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
        self._lock = threading.RLock()
        self.member_id = ""
        self.generation = -1
        self.state = UNJOINED
        self.leader_id: str | None = None
        self._rejoin_needed = True
        self._lost = False  # removed from the group: owned partitions are lost, not revoked
        self._fatal: RafkaError | None = None
        self._pending = None  # object ref of the join or sync call in flight
        self._retry_at = 0.0
        self._coordinator = None
        self._assigned_counts: dict[str, int] = {}  # partition counts the leader assigned
        self._checked_metadata_at = time.monotonic()
        self._last_poll = time.monotonic()
        self._async_commits: list = []  # (ref, callback, offsets)
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
        return self._pending

    def poll(self) -> None:
        """Advance the membership as far as it goes without waiting: send a join when one
        is due, handle answers that have arrived. Raises a fatal error (FencedInstanceId,
        InconsistentGroupProtocol, ...) once."""
        self._last_poll = time.monotonic()
        self._start_heartbeats()
        self._finish_async_commits()
        with self._lock:
            if self._fatal is not None:
                error, self._fatal = self._fatal, None
                raise error
        self._maybe_check_metadata()
        for _ in range(4):  # join -> sync -> stable (-> rejoin after a cooperative revoke)
            with self._lock:
                state, pending = self.state, self._pending
            if pending is not None:
                ready, _ = self._gateway.wait([pending], 1, timeout_s=0)
                if not ready:
                    return
                self._pending = None
                self._on_answer(state, pending)
                continue
            if self._rejoin_needed and time.monotonic() >= self._retry_at:
                self._start_join()
                continue
            return

    @property
    def stable(self) -> bool:
        return self.state == STABLE and not self._rejoin_needed

    def _start_join(self) -> None:
        """Kafka's onJoinPrepare, then the join: commit what was consumed (auto-commit),
        revoke (eager) or report lost partitions, and send the subscription."""
        with self._lock:
            lost, self._lost = self._lost, False
        owned = self._host.owned()
        if lost:
            if owned:
                self._host.revoke(owned, lost=True)
            owned = set()
        elif owned:
            self._host.commit_consumed()
            if self.protocol == "eager":
                self._host.revoke(owned, lost=False)
                owned = set()
        topics = sorted(self._host.subscribed_topics())
        data = encode_subscription(topics, owned, self.generation)
        protocols = [(a.name, data) for a in self.assignors]
        try:
            self._pending = self._send(
                "join_group", self.member_id, self.group_instance_id, self.client_id,
                socket.gethostname(), PROTOCOL_TYPE, protocols, self.session_timeout_ms,
                int(self.max_poll_interval_s * 1000),
            )  # fmt: skip
        except RafkaError as e:
            self._retry(e)
            return
        with self._lock:
            self.state = JOINING
            self._rejoin_needed = False

    def _on_answer(self, state: str, ref) -> None:
        if state not in (JOINING, SYNCING):
            return  # the member left meanwhile: the answer is for a membership now gone
        try:
            error, result = self._get(ref, self.max_poll_interval_s + self.request_timeout_s)
        except RafkaError as e:
            error, result = e, None
        if error is not None:
            self._on_error(error, "join" if state == JOINING else "sync")
            return
        if state == JOINING:
            self._on_joined(result)
        else:
            self._on_synced(result)

    def _on_joined(self, result) -> None:
        with self._lock:
            self.member_id = result.member_id
            self.generation = result.generation
            self.leader_id = result.leader_id
        assignments = None
        if result.member_id == result.leader_id and not result.skip_assignment:
            assignments = self._assign(result.protocol, result.members)
        try:
            self._pending = self._send(
                "sync_group", self.member_id, self.group_instance_id, self.generation,
                assignments,
            )  # fmt: skip
        except RafkaError as e:
            self._retry(e)
            return
        with self._lock:
            self.state = SYNCING

    def _assign(self, protocol: str, members: list) -> dict[str, bytes]:
        """The leader's work: run the group's assignor over every member's subscription."""
        assignor = next(a for a in self.assignors if a.name == protocol)
        subscriptions = {}
        for member_id, instance_id, data in members:
            sub = decode_subscription(data)
            subscriptions[member_id] = Subscription(
                tuple(sub.topics), tuple(TopicPartition(t, p) for t, p in sub.owned_partitions),
                sub.generation, instance_id, sub.user_data,
            )  # fmt: skip
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts = self._metadata.partition_counts(topics)
        self._assigned_counts = counts
        assigned = assignor.assign(counts, subscriptions)
        log.info(
            "group %s generation %d: %s assigned %d partition(s) of %d topic(s) to %d member(s)",
            self.group_id, self.generation, protocol, sum(counts.values()), len(counts),
            len(subscriptions),
        )  # fmt: skip
        return {m: encode_assignment(tps) for m, tps in assigned.items()}

    def _on_synced(self, result) -> None:
        assigned = {TopicPartition(t, p) for t, p in decode_assignment(result.assignment)[0]}
        owned = self._host.owned()
        revoked = owned - assigned
        if revoked:  # cooperative: give up only what moves, then rejoin so it can move
            self._host.revoke(revoked, lost=False)
        with self._lock:
            self.state = STABLE
            if revoked:
                self._rejoin_needed = True
        self._host.assign_from_group(assigned - owned)
        log.info(
            "group %s generation %d: member %s owns %d partition(s)",
            self.group_id, self.generation, self.member_id, len(assigned),
        )  # fmt: skip

    def _on_error(self, error: RafkaError, during: str) -> None:
        if isinstance(error, FencedInstanceId) or not (
            error.retriable or isinstance(error, (RebalanceInProgress, *_MEMBER_GONE))
        ):
            with self._lock:
                self.state = UNJOINED
            raise error
        if isinstance(error, _MEMBER_GONE):
            self._reset(error, during)
        else:
            log.info("group %s: %s: %s; rejoining", self.group_id, during, error)
        with self._lock:
            self.state = UNJOINED
            self._rejoin_needed = True
        if error.retriable:
            self._retry_at = time.monotonic() + RETRY_BACKOFF_S

    def _retry(self, error: RafkaError) -> None:
        if not error.retriable:
            raise error
        log.info("group %s: coordinator unavailable (%s); retrying", self.group_id, error)
        with self._lock:
            self.state = UNJOINED
            self._rejoin_needed = True
        self._retry_at = time.monotonic() + RETRY_BACKOFF_S

    def _reset(self, error: RafkaError, during: str) -> None:
        """The group no longer knows this member (or its generation): start over, and
        report the partitions held as lost."""
        log.warning("group %s: member %s is out of the group (%s refused: %s)", self.group_id,
                    self.member_id, during, error)  # fmt: skip
        with self._lock:
            if isinstance(error, UnknownMemberId):
                self.member_id = ""
            self.generation = -1
            self.state = UNJOINED
            self._rejoin_needed = True
            self._lost = True

    def request_rejoin(self) -> None:
        with self._lock:
            self._rejoin_needed = True

    def _maybe_check_metadata(self) -> None:
        """Every metadata_max_age_ms: a pattern may match new topics (the subscription
        changes, so the member rejoins), and the leader rejoins when a subscribed topic grew
        (as Kafka's leader does), so the new partitions get assigned."""
        now = time.monotonic()
        if now - self._checked_metadata_at < self.metadata_max_age_s:
            return
        self._checked_metadata_at = now
        if self._host.refresh_subscription():
            self.request_rejoin()
            return
        if self.state == STABLE and self.member_id == self.leader_id and self._assigned_counts:
            counts = self._metadata.partition_counts(sorted(self._assigned_counts), refresh=True)
            if counts != self._assigned_counts:
                log.info("group %s: partition counts changed; rebalancing", self.group_id)
                self.request_rejoin()

    # -- heartbeats ----------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop, name=f"rafka-heartbeat-{self.group_id}",
                daemon=True,
            )  # fmt: skip
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.heartbeat_interval_s)
            if self._closed:
                return
            with self._lock:
                state, member_id, generation = self.state, self.member_id, self.generation
            if not member_id or state == JOINING:
                continue
            if time.monotonic() - self._last_poll > self.max_poll_interval_s:
                self._poll_timeout(member_id)
                continue
            if state != STABLE:
                continue
            try:
                error = self._call("heartbeat", member_id, self.group_instance_id, generation)
            except RafkaError as e:
                error = e
            if error is None:
                continue
            with self._lock:
                if self.generation != generation or self.member_id != member_id:
                    continue  # a newer join overtook this heartbeat
                if isinstance(error, RebalanceInProgress):
                    self._rejoin_needed = True
                elif isinstance(error, FencedInstanceId):
                    self._fatal = error
                elif isinstance(error, _MEMBER_GONE):
                    self._reset(error, "heartbeat")
                else:
                    log.info("group %s: heartbeat failed: %s", self.group_id, error)

    def _poll_timeout(self, member_id: str) -> None:
        log.warning(
            "group %s: poll() was not called for more than max_poll_interval_ms=%d; member "
            "%s leaves the group (poll more often, or process fewer records per poll with "
            "max_poll_records)", self.group_id, self.max_poll_interval_s * 1000, member_id,
        )  # fmt: skip
        if self.group_instance_id is None:
            try:
                self._call("leave_group", [(member_id, None)])
            except RafkaError as e:
                log.info("group %s: leaving failed: %s", self.group_id, e)
        with self._lock:
            self.member_id = ""
            self.generation = -1
            self.state = UNJOINED
            self._rejoin_needed = True
            self._lost = True
            self._pending = None  # a join or sync answer for the member that left

    # -- offsets -------------------------------------------------------------------------------

    def _commit_args(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple:
        with self._lock:
            member_id, generation = self.member_id, self.generation
        payload = {(tp.topic, tp.partition): (o.offset, o.leader_epoch, o.metadata)
                   for tp, o in offsets.items()}  # fmt: skip
        return member_id, self.group_instance_id, generation, payload

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout_s: float) -> None:
        """Commit and wait; retriable failures are retried until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                error = self._call("commit_offsets", *self._commit_args(offsets))
            except RafkaError as e:
                error = e
            if error is None:
                return
            if not error.retriable or time.monotonic() + backoff > deadline:
                raise self._commit_error(error)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def commit_async(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], callback: Callable | None
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs on a later poll (error None on
        success)."""
        try:
            ref = self._send("commit_offsets", *self._commit_args(offsets))
        except RafkaError as e:
            if callback is not None:
                callback(offsets, e)
            return
        self._async_commits.append((ref, callback, offsets))

    def _finish_async_commits(self, wait_s: float = 0.0) -> None:
        if not self._async_commits:
            return
        refs = [ref for ref, _, _ in self._async_commits]
        ready, _ = self._gateway.wait(refs, len(refs), timeout_s=wait_s)
        done = set(ready)
        remaining = []
        for ref, callback, offsets in self._async_commits:
            if ref not in done:
                remaining.append((ref, callback, offsets))
                continue
            try:
                error = self._get(ref)
            except RafkaError as e:
                error = e
            if error is not None:
                error = self._commit_error(error)
                log.info("group %s: asynchronous commit failed: %s", self.group_id, error)
            if callback is not None:
                callback(offsets, error)
        self._async_commits = remaining

    def _commit_error(self, error: RafkaError) -> RafkaError:
        """Kafka's CommitFailedException for a member that is no longer in the generation
        (it rejoins on its next poll); other errors as they are."""
        if isinstance(error, _MEMBER_GONE):
            self._reset(error, "commit")
            return CommitFailed(
                f"the commit to group {self.group_id} was refused because the group "
                f"rebalanced without this member ({error}); its partitions may be owned by "
                "another member now, so records since the last commit may be read twice"
            )
        if isinstance(error, RebalanceInProgress):
            self.request_rejoin()
        return error

    def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = [(tp.topic, tp.partition) for tp in partitions]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                error, found = self._call("fetch_offsets", wanted)
                if error is None:
                    return {
                        TopicPartition(t, p): OffsetAndMetadata(o, m, e)
                        for (t, p), (o, e, m) in found.items()
                    }  # fmt: skip
            except RafkaError as e:
                error = e
            if not error.retriable or time.monotonic() > deadline:
                raise error
            time.sleep(RETRY_BACKOFF_S)

    # -- leaving -------------------------------------------------------------------------------

    def leave(self) -> None:
        """Leave the group (a dynamic member; a static one just goes silent, so it can come
        back to the same assignment within its session timeout)."""
        with self._lock:
            member_id = self.member_id
            self.member_id, self.generation, self.state = "", -1, UNJOINED
            self._rejoin_needed = True
            self._pending = None
        if member_id and self.group_instance_id is None:
            try:
                self._call("leave_group", [(member_id, None)], timeout_s=5.0)
            except RafkaError as e:
                log.info("group %s: leaving failed: %s", self.group_id, e)

    def close(self, timeout_s: float = 5.0) -> None:
        try:
            self._finish_async_commits(wait_s=timeout_s)
        except RequestTimedOut:
            pass
        self.leave()
        self._closed = True
        self._wake.set()


def matching_topics(pattern: re.Pattern, topics: Iterable[str]) -> set[str]:
    """Topics a pattern subscription covers: full matches, internal topics excluded."""
    return {t for t in topics if pattern.fullmatch(t) and not t.startswith("__")}
