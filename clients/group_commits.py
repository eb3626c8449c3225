"""A group member's offset commits: synchronous, asynchronous, and reading them back.

Part of ``GroupMember`` (``rafka.clients.consumer_group``). A commit names the membership it
was sent under (member id and generation). A subscribed consumer that is in no generation
(joining, or just removed from the group) cannot commit: it fails here with CommitFailed
rather than being taken for a commit from outside the group. Only a consumer that uses
``assign()`` with a group id commits from outside the group (``standalone``), which the
coordinator accepts while the group has no members.

A refusal that says the member is out of the group (UnknownMemberId, IllegalGeneration) resets
the membership only if it is still the one the commit was sent under: a late answer to a
commit of an earlier generation must not undo a newer membership.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from rafka.clients.group_rebalance import JOINING, STABLE, SYNCING
from rafka.errors import (
    CommitFailed,
    FencedInstanceId,
    GroupIdNotFound,
    IllegalGeneration,
    RafkaError,
    RebalanceInProgress,
    UnknownMemberId,
)
from rafka.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
#: Answers that mean the group no longer knows this membership: the member starts over. A
#: group a coordinator lost (its first record never written before a restart) is one too.
MEMBER_GONE = (UnknownMemberId, IllegalGeneration, GroupIdNotFound)


class CommitMixin:
    """Needs from GroupMember: ``_lock``, ``member_id``, ``generation``, ``group_id``,
    ``group_instance_id``, ``standalone``, ``_gateway``, ``_call``, ``_send``, ``_get``,
    ``_reset``, ``_fenced``, ``advance_rebalance``, ``state``, ``_rejoin_needed``, ``_clock`` and
    ``_sleep``."""

    def _commit_args(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple:
        """(member id, instance id, generation, payload, outside_group) of a commit now."""
        with self._lock:
            member_id, generation = self.member_id, self.generation
        if not self.standalone and (generation < 0 or not member_id):
            raise CommitFailed(
                f"this consumer is not in a generation of group {self.group_id} (it is "
                "joining, or was removed from the group), so its partitions may belong to "
                "another member now: nothing was committed. Keep polling; it rejoins, and "
                "records since the last commit may be read again"
            )
        payload = {(tp.topic, tp.partition): (o.offset, o.leader_epoch, o.metadata)
                   for tp, o in offsets.items()}  # fmt: skip
        return member_id, self.group_instance_id, generation, payload, self.standalone

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout_s: float) -> None:
        """Commit and wait; retriable failures are retried until ``timeout_s``."""
        deadline = self._clock() + timeout_s
        backoff = RETRY_BACKOFF_S
        while True:
            args = self._commit_args(offsets)
            try:
                error = self._call("commit_offsets", *args)
            except RafkaError as e:
                error = e
            if error is None:
                return
            waits = error.retriable or self._completing_rebalance(error)
            if not waits or self._clock() + backoff > deadline:
                raise self._commit_error(error, args[0], args[2])
            self._sleep(backoff)
            self.advance_rebalance()  # take a join or sync answer that has come
            backoff = min(backoff * 2, 1.0)

    def _completing_rebalance(self, error: RafkaError) -> bool:
        """Whether ``error`` comes from a rebalance this member takes part in (its join or
        sync is under way): the group completing it (RebalanceInProgress), or already past
        the generation the member still names because the join's answer is not taken yet
        (IllegalGeneration). The heartbeat thread takes the answers, so the commit is tried
        again, in the new generation, rather than failed; Kafka fails it with
        RebalanceInProgressException and leaves the retry to the application."""
        with self._lock:
            return isinstance(error, (RebalanceInProgress, IllegalGeneration)) and (
                self.state in (JOINING, SYNCING)
            )

    def commit_async(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], callback: Callable | None
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs on a later poll (error None on
        success)."""
        try:
            args = self._commit_args(offsets)
            ref = self._send("commit_offsets", *args)
        except RafkaError as e:
            if callback is not None:
                callback(offsets, e)
            return
        self._async_commits.append((ref, callback, offsets, args[0], args[2]))

    def finish_async_commits_of(
        self, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> None:
        """Wait (up to ``timeout_s``) for this member's asynchronous commits of any of
        ``partitions`` to be answered, and run their callbacks."""
        wanted = set(partitions)
        deadline = self._clock() + timeout_s

        def pending() -> bool:
            return any(wanted & set(offsets) for _, _, offsets, _, _ in self._async_commits)

        while pending() and self._clock() < deadline:
            try:
                self._finish_async_commits(wait_s=0.05)
            except RafkaError as e:  # the fetch that follows reports trouble itself
                log.info("group %s: waiting for commits failed: %s", self.group_id, e)
                return
            if pending():
                self._sleep(0.01)

    def _finish_async_commits(self, wait_s: float = 0.0) -> None:
        if not self._async_commits:
            return
        refs = [pending[0] for pending in self._async_commits]
        ready, _ = self._gateway.wait(refs, len(refs), timeout_s=wait_s)
        done = set(ready)
        finished = [p for p in self._async_commits if p[0] in done]
        # Taken out before any callback runs: a callback may come back here.
        self._async_commits = [p for p in self._async_commits if p[0] not in done]
        for ref, callback, offsets, member_id, generation in finished:
            try:
                error = self._get(ref)
            except RafkaError as e:
                error = e
            if error is not None:
                error = self._commit_error(error, member_id, generation)
                log.info("group %s: asynchronous commit failed: %s", self.group_id, error)
            if callback is not None:
                callback(offsets, error)

    def _commit_error(self, error: RafkaError, member_id: str, generation: int) -> RafkaError:
        """Kafka's CommitFailedException for a member that is no longer in the generation
        it committed in (it rejoins on its next poll); other errors as they are."""
        if self._completing_rebalance(error):
            return RebalanceInProgress(
                f"the commit to group {self.group_id} was refused in generation {generation} "
                f"while the group completes a rebalance this member takes part in ({error}); "
                "nothing was committed: commit again after the next poll"
            )
        if isinstance(error, FencedInstanceId):
            self._fenced(error)  # another process is this static member: out for good
            return error
        if isinstance(error, MEMBER_GONE):
            self._reset(error, "commit", member_id, generation)
            return CommitFailed(
                f"the commit to group {self.group_id} was refused because the group "
                f"rebalanced without this member's generation {generation} ({error}); its "
                "partitions may be owned by another member now, so records since the last "
                "commit may be read twice"
            )
        if isinstance(error, RebalanceInProgress):
            with self._lock:
                if self.state == STABLE:  # a rebalance the member has not heard of yet
                    self._rejoin_needed = True
        return error

    def committed(
        self, partitions: Iterable[TopicPartition], timeout_s: float,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions``; ``require_stable``: waiting
        (within ``timeout_s``) while a transaction that committed offsets of them is ending
        (UnstableOffsetCommit, retried)."""
        wanted = [(tp.topic, tp.partition) for tp in partitions]
        deadline = self._clock() + timeout_s
        while True:
            try:
                error, found = self._call("fetch_offsets", wanted, require_stable)
                if error is None:
                    return {
                        TopicPartition(t, p): OffsetAndMetadata(o, m, e)
                        for (t, p), (o, e, m) in found.items()
                    }  # fmt: skip
            except RafkaError as e:
                error = e
            if not error.retriable or self._clock() > deadline:
                raise error
            self._sleep(RETRY_BACKOFF_S)
