"""A partition leader's view of its replicas: who is in sync, and the high watermark.

Plain Python; the PartitionReplica actor feeds it local appends and follower fetches and
asks it when an ``acks=all`` produce may be answered. Invariants:

- the high watermark never moves backwards while this replica leads;
- it is the smallest log end offset among the in-sync replicas (the leader included);
- a follower leaves the ISR when it has not caught up to the leader's log end for
  ``replica.lag.time.max.ms``, and rejoins once its fetch offset reaches the high watermark.

With one replica the ISR is the leader alone and the high watermark is its log end offset.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLICA_LAG_TIME_MAX_MS = 30_000


@dataclass
class FollowerProgress:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    leader_end_at_last_fetch: int = 0  # the leader's log end when the previous fetch came
    last_fetch_ms: int = 0


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
    ) -> None:
        if broker_id not in replicas:
            raise ValueError(f"leader {broker_id} is not among the replicas {replicas}")
        self.broker_id = broker_id
        self.replicas = list(replicas)
        self.isr = [b for b in isr if b in replicas] or [broker_id]
        if broker_id not in self.isr:
            self.isr.append(broker_id)
        self.leader_epoch = leader_epoch
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.lag_time_max_ms = lag_time_max_ms
        self.followers = {
            b: FollowerProgress(0, now_ms) for b in self.replicas if b != broker_id
        }

    def on_local_append(self, log_end_offset: int) -> int:
        """The leader's log grew; returns the (possibly new) high watermark."""
        self.log_end_offset = log_end_offset
        return self._advance_high_watermark()

    def on_follower_fetch(self, follower: int, fetch_offset: int, now_ms: int) -> int:
        """A follower asked for ``fetch_offset``, so it holds everything below it."""
        progress = self.followers.get(follower)
        if progress is None:
            raise KeyError(follower)
        progress.log_end_offset = fetch_offset
        # Caught up now if it has the leader's whole log; caught up as of its previous fetch if
        # it has what the leader had then (Kafka's rule: a follower one batch behind a busy
        # leader stays in sync).
        if fetch_offset >= self.log_end_offset:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.leader_end_at_last_fetch = self.log_end_offset
        progress.last_fetch_ms = now_ms
        if follower not in self.isr and fetch_offset >= self.high_watermark:
            self.isr.append(follower)
            progress.last_caught_up_ms = now_ms
        return self._advance_high_watermark()

    def shrink_isr(self, now_ms: int) -> list[int]:
        """Drop followers that have lagged too long; returns the ones dropped."""
        dropped = [
            b for b in self.isr
            if b != self.broker_id
            and now_ms - self.followers[b].last_caught_up_ms > self.lag_time_max_ms
        ]  # fmt: skip
        if dropped:
            self.isr = [b for b in self.isr if b not in dropped]
            self._advance_high_watermark()
        return dropped

    def _advance_high_watermark(self) -> int:
        candidate = min(
            self.log_end_offset if b == self.broker_id else self.followers[b].log_end_offset
            for b in self.isr
        )
        if candidate > self.high_watermark:
            self.high_watermark = candidate
        return self.high_watermark

    def enough_in_sync(self, min_insync_replicas: int) -> bool:
        return len(self.isr) >= min_insync_replicas
