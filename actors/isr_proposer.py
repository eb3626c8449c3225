"""The leader's side of ISR changes: watch follower lag, propose a new ISR, send it.

The decisions (who is caught up, who lags past ``replica.lag.time.max.ms``, what to propose)
are ``rafka.cluster.replication.LeaderState``'s; this sends its proposal to the controller
(``alter_isr``) until the controller answers or the leadership changes, and adopts the state
the controller answers with. At most one proposal is pending at a time (``LeaderState``
keeps it), so a new proposal waits until the previous one is answered.

Owned by one ``PartitionReplica`` and run on its event loop; the watch runs for the
replica's whole life and does nothing while it follows. Nothing is persisted: a proposal
lost in a crash is simply not made, and the next leader proposes from what it sees.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rafka.cluster.replication import LeaderState
from rafka.cluster.settings import setting
from rafka.storage.log import now_ms

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica


class IsrProposer:
    """ISR proposals of ``replica`` while it leads."""

    def __init__(self, replica: PartitionReplica):
        self.replica = replica
        self._sender: asyncio.Task | None = None

    async def watch(self) -> None:
        """A leader re-checks its followers' lag a few times per lag window, so a follower
        that stopped fetching leaves the ISR even when nothing else happens."""
        while not self.replica.closed:
            lag_ms = setting(self.replica.settings, "replica.lag.time.max.ms")
            await asyncio.sleep(min(max(lag_ms / 4000, 0.05), 1.0))
            self.maybe_propose()

    def maybe_propose(self) -> None:
        """Propose a new ISR when the leader's followers call for one and none is pending."""
        leader = self.replica.leader
        if leader is None or self.replica.closed:
            return
        proposal = leader.proposed_isr(now_ms())
        if proposal is None:
            return
        leader.propose(proposal)
        self._sender = asyncio.get_running_loop().create_task(self._send(leader, proposal))

    def stop(self) -> None:
        if self._sender is not None:
            self._sender.cancel()

    async def _send(self, leader: LeaderState, proposal: list[int]) -> None:
        """Send one ISR proposal until the controller answers, or this leader is replaced."""
        r = self.replica
        delay = 0.05
        while r.leader is leader and leader.pending_isr == proposal and not r.closed:
            r.logger.info("proposes ISR %s (was %s)", proposal, leader.isr)
            answer = await r.controller.call(
                "alter_isr", r.topic_id, r.partition, r.broker_id,
                leader.leader_epoch, leader.partition_epoch, proposal,
                leader.incarnations(proposal),
            )  # fmt: skip
            if answer is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            errno, message, state = answer
            if r.leader is not leader:
                return
            if errno:
                r.logger.info("ISR proposal refused: %s", message)
                leader.on_proposal_refused()
            if state is not None:
                r.adopt(state)
            return
