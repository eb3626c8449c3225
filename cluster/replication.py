"""Replication decisions of one partition: the leader's view of its followers, and how a
follower finds where its log diverged from the leader's.

Plain Python; the PartitionReplica actor feeds ``LeaderState`` local appends and follower
fetches, sends the ISR changes it proposes to the controller, and asks it when an ``acks=all``
produce may be answered. Invariants of ``LeaderState``:

- the high watermark never moves backwards while this replica leads;
- it is the smallest log end offset among the *maximal* ISR (the committed ISR plus any
  member a pending proposal adds, and minus nobody a pending proposal removes), so every
  replica the controller could elect holds everything below it (Kafka's KIP-497 rule);
- ``min.insync.replicas`` is checked against the committed ISR only, and the high watermark
  does not advance while the committed ISR is smaller than it (Kafka's KIP-966): a record is
  exposed to consumers only once that many replicas hold it, and every replica that leaves
  an ISR below that size holds everything committed (the controller keeps it eligible);
- at most one ISR proposal is pending at a time; the controller's answer (or a newer
  partition state) settles it;
- a follower joins the ISR once it has everything below the high watermark and everything
  this leader wrote before it took over (its epoch start offset); it leaves when it has not
  caught up to the leader's log end for ``replica.lag.time.max.ms``;
- a follower's progress counts only from its own fetches to this leader, in its current
  incarnation: a replica that restarted (and may have lost its unflushed tail) starts from
  nothing, and a late fetch from its earlier life is ignored (Kafka's KIP-903);
- only a newer partition epoch than the one held settles a pending proposal.

With one replica the ISR is the leader alone and the high watermark is its log end offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

REPLICA_LAG_TIME_MAX_MS = 30_000
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

#: (epoch, end offset) answer of a leader-epoch cache: see ``LeaderEpochCache.end_offset_for``.
EpochEndLookup = Callable[[int], tuple[int, int]]


#: A follower's log end before its first fetch to this leader: unknown, below everything.
UNKNOWN_OFFSET = -1

#: Earlier fetches a follower's progress is credited against: a follower that sends its
#: next fetch before appending the last answer (``prefetch_offset``) reports, with each
#: fetch, what the leader had two fetches back.
FETCH_HISTORY = 2


@dataclass
class FollowerProgress:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    #: (time ms, the leader's log end then) of the follower's last FETCH_HISTORY fetches,
    #: oldest first.
    recent_fetches: list[tuple[int, int]] = field(default_factory=list)
    incarnation: int | None = None  # of the follower's replica, as its fetches say


class LeaderState:
    def __init__(
        self,
        broker_id: int,
        replicas: list[int],
        isr: list[int],
        leader_epoch: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS,
        partition_epoch: int = 0,
        min_insync_replicas: int = 1,
    ) -> None:
        if broker_id not in replicas:
            raise ValueError(f"leader {broker_id} is not among the replicas {replicas}")
        self.broker_id = broker_id
        self.replicas = list(replicas)
        self.isr = [b for b in isr if b in replicas] or [broker_id]
        if broker_id not in self.isr:
            self.isr.append(broker_id)
        self.pending_isr: list[int] | None = None
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        # Records below this were written under earlier leaders; a follower must have them
        # all before it may join the ISR.
        self.epoch_start_offset = log_end_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        # Followers start as caught up "now": a new leader gives each a full lag window.
        self.followers = {
            b: FollowerProgress(UNKNOWN_OFFSET, now_ms) for b in self.replicas if b != broker_id
        }

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR together with every member a pending proposal adds."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [b for b in self.pending_isr if b not in self.isr]

    def on_local_append(self, log_end_offset: int) -> int:
        """The leader's log grew; returns the (possibly new) high watermark."""
        self.log_end_offset = log_end_offset
        return self._advance_high_watermark()

    def on_follower_fetch(
        self, follower: int, fetch_offset: int, now_ms: int, incarnation: int | None = None
    ) -> int:
        """A follower (in ``incarnation``, which grows each time its replica starts) asked
        for ``fetch_offset`` after any divergence was settled, so it holds everything below
        it. Returns the high watermark."""
        progress = self.followers.get(follower)
        if progress is None:
            raise KeyError(follower)
        if incarnation is not None and incarnation != progress.incarnation:
            if progress.incarnation is not None and incarnation < progress.incarnation:
                return self.high_watermark  # a late fetch from the follower's earlier life
            self.followers[follower] = progress = FollowerProgress(
                UNKNOWN_OFFSET, progress.last_caught_up_ms, incarnation=incarnation
            )
        progress.log_end_offset = fetch_offset
        # Caught up now if it has the leader's whole log; caught up as of an earlier fetch if
        # it has what the leader had then (Kafka's rule, for the previous fetch: a follower
        # one batch behind a busy leader stays in sync; a pipelined follower reports one
        # fetch later still).
        if fetch_offset >= self.log_end_offset:
            progress.last_caught_up_ms = now_ms
        else:
            for fetched_ms, leader_end in reversed(progress.recent_fetches):
                if fetch_offset >= leader_end:
                    progress.last_caught_up_ms = max(progress.last_caught_up_ms, fetched_ms)
                    break
        progress.recent_fetches.append((now_ms, self.log_end_offset))
        del progress.recent_fetches[:-FETCH_HISTORY]
        return self._advance_high_watermark()

    def proposed_isr(self, now_ms: int) -> list[int] | None:
        """The ISR to propose to the controller now, or None: nothing to change, or a
        proposal is still pending. Expansion and shrinking are decided together."""
        if self.pending_isr is not None:
            return None
        lagging = {
            b for b in self.isr
            if b != self.broker_id
            and now_ms - self.followers[b].last_caught_up_ms > self.lag_time_max_ms
        }  # fmt: skip
        joining = [
            b for b, p in self.followers.items()
            if b not in self.isr
            and p.log_end_offset >= self.high_watermark
            and p.log_end_offset >= self.epoch_start_offset
            and now_ms - p.last_caught_up_ms <= self.lag_time_max_ms
        ]  # fmt: skip
        if not lagging and not joining:
            return None
        return [b for b in self.isr if b not in lagging] + sorted(joining)

    def incarnations(self, brokers: list[int]) -> dict[int, int]:
        """The incarnation each of ``brokers`` fetched in (for the controller to check that a
        replica joining the ISR is the one that caught up)."""
        return {
            b: self.followers[b].incarnation
            for b in brokers
            if b in self.followers and self.followers[b].incarnation is not None
        }

    def propose(self, isr: list[int]) -> None:
        """``isr`` was sent to the controller; until it answers, the high watermark counts
        the committed members and any joining one."""
        self.pending_isr = list(isr)

    def on_isr_committed(self, isr: list[int], partition_epoch: int) -> int:
        """The controller recorded ``isr`` (the answer to a proposal, or its own change such
        as fencing a dead follower). Returns the high watermark."""
        if partition_epoch <= self.partition_epoch:
            return self.high_watermark  # a late copy of what this leader already holds
        self.partition_epoch = partition_epoch
        self.isr = [b for b in isr if b in self.replicas] or [self.broker_id]
        if self.broker_id not in self.isr:
            self.isr.append(self.broker_id)
        self.pending_isr = None
        return self._advance_high_watermark()

    def on_proposal_refused(self) -> None:
        """The controller refused the pending proposal (stale epochs); a newer partition
        state is on its way."""
        self.pending_isr = None

    def update_replicas(self, replicas: list[int], now_ms: int) -> None:
        """A reassignment changed the replica set while this replica kept leading."""
        self.replicas = list(replicas)
        for b in replicas:
            if b != self.broker_id and b not in self.followers:
                self.followers[b] = FollowerProgress(UNKNOWN_OFFSET, now_ms)
        for b in list(self.followers):
            if b not in replicas:
                del self.followers[b]
        self.isr = [b for b in self.isr if b in replicas] or [self.broker_id]

    def set_min_insync_replicas(self, min_insync_replicas: int) -> int:
        """The topic's ``min.insync.replicas`` changed; returns the high watermark (a lower
        value may let it advance)."""
        self.min_insync_replicas = min_insync_replicas
        return self._advance_high_watermark()

    @property
    def under_min_isr(self) -> bool:
        """The committed ISR is smaller than ``min.insync.replicas`` (capped at the replica
        count, Kafka's effective min ISR): the high watermark holds still."""
        effective = max(1, min(self.min_insync_replicas, len(self.replicas)))
        return len(self.isr) < effective

    def _advance_high_watermark(self) -> int:
        if self.under_min_isr:
            return self.high_watermark
        candidate = min(
            self.log_end_offset if b == self.broker_id else self.followers[b].log_end_offset
            for b in self.maximal_isr
            if b == self.broker_id or b in self.followers
        )
        if candidate > self.high_watermark:
            self.high_watermark = candidate
        return self.high_watermark

    def enough_in_sync(self, min_insync_replicas: int) -> bool:
        return len(self.isr) >= min_insync_replicas


def prefetch_offset(
    records_end: int, leader_log_end: int, throttled: bool, answer_bytes: int, max_bytes: int
) -> int | None:
    """Where a follower's next fetch starts when it goes out before the answer that just
    came (``answer_bytes`` of records up to ``records_end``) is appended: ``records_end``
    while the leader holds more (``leader_log_end`` as it answered) and the answer was cut
    by size (at least half of the fetch's ``max_bytes``), so the leader reads and sends the
    next chunk while the follower writes this one. None otherwise: a follower that is not
    behind by a chunk appends first, and its next fetch reports the new log end at once, so
    the high watermark moves without waiting for another fetch (a prefetching follower's
    progress reaches the leader a fetch later); and None while a throttle paces it.

    A prefetching fetch reports the follower's log end before that append: the leader credits
    it one fetch later (``FETCH_HISTORY``), and never counts records the follower has not
    written."""
    if throttled or records_end >= leader_log_end or 2 * answer_bytes < max_bytes:
        return None
    return records_end


def diverging_epoch(
    leader_end_for: EpochEndLookup, fetch_offset: int, last_fetched_epoch: int
) -> tuple[int, int] | None:
    """The leader's check of a follower fetch (KIP-320): None when the follower's log is a
    prefix of the leader's, else the (epoch, end offset) to send back so the follower can
    truncate. ``last_fetched_epoch`` is the epoch of the follower's last batch (-1: none)."""
    if last_fetched_epoch == UNDEFINED_EPOCH or fetch_offset == 0:
        return None
    epoch, end = leader_end_for(last_fetched_epoch)
    if epoch == last_fetched_epoch and end >= fetch_offset:
        return None
    return epoch, end


def truncation_offset(
    local_end_for: EpochEndLookup,
    log_end_offset: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> int:
    """Where a follower truncates when the leader answered that its log diverges after
    ``leader_epoch`` ends at ``leader_end_offset`` (KIP-279). The follower keeps what both
    logs hold for the largest epoch they share. Without an answer from the leader it falls
    back to its high watermark, which every in-sync replica holds."""
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_OFFSET:
        return min(high_watermark, log_end_offset)
    local_epoch, local_end = local_end_for(leader_epoch)
    if local_end == UNDEFINED_OFFSET:
        return min(leader_end_offset, log_end_offset)
    if local_epoch != leader_epoch:
        # We never had the leader's epoch: keep what we had before it; the next fetch
        # checks again from there.
        return min(local_end, leader_end_offset, log_end_offset)
    return min(leader_end_offset, local_end, log_end_offset)
