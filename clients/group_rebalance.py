"""How a group member joins and takes its assignment: Kafka's onJoinPrepare, the leader's
assignment, and onJoinComplete.

Part of ``GroupMember`` (``rafka.clients.consumer_group``, whose docstring states the
invariants). The host's hooks (``revoke``, ``assign_from_group``, ``commit_consumed``) run the
user's rebalance listener, always in the polling thread; an error a listener raises is kept
and raised once the state change around it has finished (``_listen``).
"""

from __future__ import annotations

import logging
import socket
from typing import Callable

from rafka.clients import leader_assignment
from rafka.clients.assignors import EAGER
from rafka.cluster.consumer_protocol import PROTOCOL_TYPE, decode_assignment, encode_subscription
from rafka.errors import RafkaError
from rafka.types import TopicPartition

log = logging.getLogger(__name__)

#: The member's states (see rafka.clients.consumer_group).
UNJOINED, JOINING, SYNCING, STABLE = "unjoined", "joining", "syncing", "stable"
#: The calls a member waits on.
JOIN, SYNC = "join", "sync"


class RebalanceMixin:
    """Needs from GroupMember: ``_lock``, ``_host``, ``_metadata``, ``assignors``,
    ``protocol``, ``member_id``, ``generation``, ``leader_id``, ``state``, ``_lost``,
    ``_rejoin_needed``, ``_fatal``, ``_assigned_counts``, ``_send``, ``_expect``,
    ``_rejoin_later`` and ``_send_failed``."""

    def _revoke_if_lost(self) -> None:
        """A member told it is out of the group gives its partitions up at once, as lost,
        not only when its next join is due (after a backoff)."""
        with self._lock:
            lost = self._lost
        if lost and self._host.owned():
            errors: list[BaseException] = []
            with self._lock:
                self._lost = False
            self._listen(errors, self._host.revoke, self._host.owned(), True)
            if errors:
                raise errors[0]

    def _take_lost(self) -> bool:
        with self._lock:
            lost, self._lost = self._lost, False
            return lost

    def _start_join(self) -> None:
        """Kafka's onJoinPrepare, then the join: commit what was consumed (auto-commit),
        revoke what may not be kept (eager: all; cooperative: partitions of topics no longer
        subscribed to), report the partitions of a member that is out of the group as lost,
        and send the subscription with what is still owned."""
        errors: list[BaseException] = []
        lost = self._take_lost()
        if not lost and self._host.owned():
            self._host.commit_consumed()  # may learn the member is out of the group
            lost = self._take_lost()
        owned = self._host.owned()
        if not lost and owned:
            subscribed = set(self._host.subscribed_topics())
            give_up = owned if self.protocol == EAGER else {
                tp for tp in owned if tp.topic not in subscribed
            }  # fmt: skip
            if give_up:
                self._listen(errors, self._host.revoke, give_up, False)
            lost = self._take_lost()  # a commit in the listener may have learned it
        while True:  # decide with the membership the join carries, read in one step
            owned = self._host.owned()
            with self._lock:
                member_id, generation = self.member_id, self.generation
                out_of_group = lost or self._lost or generation < 0
                self._lost = False
            if not (out_of_group and owned):
                break
            # Never claim what may belong to another member now: report it lost, then look
            # again (the heartbeat thread may have reset the membership meanwhile).
            self._listen(errors, self._host.revoke, owned, True)
            lost = False
        topics = sorted(self._host.subscribed_topics())
        data = encode_subscription(topics, owned, generation if owned else -1)
        protocols = [(a.name, data) for a in self.assignors]
        try:
            ref = self._send(
                "join_group", member_id, self.group_instance_id, self.client_id,
                socket.gethostname(), PROTOCOL_TYPE, protocols, self.session_timeout_ms,
                int(self.max_poll_interval_s * 1000),
            )  # fmt: skip
        except RafkaError as e:
            self._send_failed(e)
        else:
            with self._lock:
                self._rejoin_needed = False
            self._expect(JOIN, ref, generation, JOINING)
        if errors:
            raise errors[0]

    @staticmethod
    def _listen(errors: list, call: Callable, *args) -> None:
        """Run a host hook that calls the user's listener; its error is kept for later, so
        the state change around it finishes first."""
        try:
            call(*args)
        except Exception as e:
            errors.append(e)

    def _on_joined(self, result) -> None:
        with self._lock:
            self.member_id = result.member_id
            self.generation = result.generation
            self.leader_id = result.leader_id
        assignments = None
        if result.member_id == result.leader_id and result.skip_assignment:
            self._watch_partition_counts(result)
        if result.member_id == result.leader_id and not result.skip_assignment:
            try:
                assignments = self._assign(result.protocol, result.members)
            except Exception as e:  # a metadata call timed out, or the assignor failed
                log.warning("group %s generation %d: the assignment failed (%r); rejoining",
                            self.group_id, result.generation, e)  # fmt: skip
                self._rejoin_later()
                if not (isinstance(e, RafkaError) and e.retriable):
                    with self._lock:
                        self._fatal = e
                return
        try:
            ref = self._send(
                "sync_group", result.member_id, self.group_instance_id, result.generation,
                assignments,
            )  # fmt: skip
        except RafkaError as e:
            self._send_failed(e)
            return
        self._expect(SYNC, ref, result.generation, SYNCING)

    def _watch_partition_counts(self, result) -> None:
        """A static leader that came back keeps the group's assignment: it notes the
        partition counts that assignment covers (from the partitions the members hold), so
        it rebalances when a topic grows or appears."""
        subscriptions = leader_assignment.subscriptions_of(result.members)
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        for topic, partition in result.assigned:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        # A topic no member holds counts as empty (it may have been created meanwhile):
        # if it has partitions now, the next check rebalances.
        self._assigned_counts = {t: counts.get(t, 0) for t in topics}

    def _assign(self, protocol: str, members: list) -> dict[str, bytes]:
        """The leader's work: run the group's assignor over every member's subscription."""
        assignor = next(a for a in self.assignors if a.name == protocol)
        subscriptions = leader_assignment.subscriptions_of(members)
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts = self._metadata.partition_counts(topics)
        # Subscribed topics that do not exist yet count as empty: once they do, the leader's
        # metadata check rebalances.
        self._assigned_counts = {t: counts.get(t, 0) for t in topics}
        assignments = leader_assignment.assign(assignor, counts, subscriptions)
        log.info(
            "group %s generation %d: %s assigned %d partition(s) of %d topic(s) to %d member(s)",
            self.group_id, self.generation, protocol, sum(counts.values()), len(counts),
            len(subscriptions),
        )  # fmt: skip
        return assignments

    def _apply_assignment(self, generation: int, result) -> None:
        """In the polling thread: give up what the assignment takes away (cooperative: then
        rejoin, so it can move), become STABLE, take the new partitions."""
        with self._lock:
            if self._lost or self.generation != generation:
                return  # out of the group since the answer: the next join reports it lost
        assigned = {TopicPartition(t, p) for t, p in decode_assignment(result.assignment)[0]}
        owned = self._host.owned()
        revoked = owned - assigned
        errors: list[BaseException] = []
        if revoked:
            self._host.commit_consumed()  # auto-commit what is given up (logs a failure)
            self._listen(errors, self._host.revoke, revoked, False)
        with self._lock:
            current = not self._lost and self.generation == generation
            if current:
                self.state = STABLE
                if revoked:
                    self._rejoin_needed = True
        if current:  # else a commit in the listener learned the member is out: rejoin
            self._listen(errors, self._host.assign_from_group, assigned - owned)
            log.info(
                "group %s generation %d: member %s owns %d partition(s)",
                self.group_id, generation, self.member_id, len(assigned),
            )  # fmt: skip
        if errors:
            raise errors[0]
