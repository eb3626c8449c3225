"""A restarted replica's check-in with the controller, and its re-check when asked.

A replica that restarted (Ray re-ran its constructor, or it found its files) neither leads
nor follows until the controller has answered its check-in: its log may have lost
unflushed records, and only the controller may decide what it is now. The check-in reports
whether the log was closed cleanly and how far it reaches; the answer is the partition's
state and this life's replica epoch, or that the replica no longer belongs to the
partition (its topic was deleted, or it moved away, while it was down: it deletes itself,
as Kafka deletes stray logs). An answer from an older controller than the replica already
heard from is not taken; the check-in is retried until a current controller answers.

Owned by one ``PartitionReplica`` and run on its event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import ray

from rafka.actors.replica_state import is_stale, state_version
from rafka.storage.log import Log

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica


class ReplicaCheckIn:
    """The check-in of ``replica``."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica

    async def run(self) -> None:
        """Tell the controller this replica restarted; adopt the state and the replica epoch
        it answers. Retried until the controller answers."""
        r = self.replica
        report = r.log.recovery_report
        clean = bool(report and report.clean_shutdown and not report.dropped_data)
        position = log_position(r.log)
        delay = 0.05
        while not r.closed:
            answer = await r.controller.call(
                "replica_started", r.topic_id, r.partition, r.broker_id, clean, position,
                current_node_id(),
            )  # fmt: skip
            if r.closed:  # closed while the answer travelled (a cancel may not have landed)
                return
            if answer is not None and answer[0] is None and answer[1]:
                answer = None  # the controller could not place this check-in yet: retry
            if answer is not None and answer[0] is not None and is_stale(answer[0], r.state):
                answer = None  # an older controller answered: a newer one took over
            if answer is not None:
                state, exists, replica_epoch = answer
                if not exists:
                    r.logger.warning("no longer assigned to this broker; deleting it")
                    await r.delete()
                    if r.on_retired is not None:  # its host lets it go
                        await r.on_retired(r)
                    return
                r.replica_epoch = replica_epoch
                r.checked_in = True
                r.adopt(state, force=True)
                pushed, r._pushed = r._pushed, None
                if pushed is not None and state_version(pushed) > state_version(state):
                    r.adopt(pushed)  # a newer state was pushed while the answer travelled
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def confirm(self, recorded: int) -> None:
        """The controller recorded ``recorded`` as this replica's epoch, newer than the one
        this (running, checked-in) life holds: Ray runs one life of an actor at a time, so
        the record came from a dead life's late check-in. Check in again, cleanly (this life
        lost nothing), so that fetches carry a current epoch and the replica can rejoin."""
        r = self.replica
        if r.closed or not r.checked_in or recorded <= r.replica_epoch:
            return
        r.logger.warning("replica epoch %d is older than the recorded %d; checking in "
                         "again", r.replica_epoch, recorded)  # fmt: skip
        answer = await r.controller.call(
            "replica_started", r.topic_id, r.partition, r.broker_id, True,
            log_position(r.log), current_node_id(),
        )  # fmt: skip
        if answer is not None and answer[1] and not r.closed:
            state, _, replica_epoch = answer
            r.replica_epoch = max(r.replica_epoch, replica_epoch)
            r.adopt(state)


def log_position(log: Log) -> tuple[int, int]:
    """(the leader epoch of the last record written, log end offset): how far a log reaches,
    for choosing the longest when every candidate lost its unflushed tail. An epoch recorded
    at an election but never written to does not count."""
    written = [e.epoch for e in log.epoch_cache.entries if e.start_offset < log.log_end_offset]
    return (written[-1] if written else -1, log.log_end_offset)


def current_node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray; never starts Ray)."""
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()
