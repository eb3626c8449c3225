"""The byte budget of one replica's follower fetches while a move copies its log to it.

``replication.throttled.rate`` (KIP-73's replication quota, for moves): the follower loop
(``replica_follower``) asks this throttle before each fetch. While its replica is being added
by a move and has not caught up (``rafka.cluster.replication_quota.follower_rate``: being
added, not in the ISR, behind the leader's high watermark at its last fetch), the fetch
waits until the bytes it took before are paid for at its share of the broker's rate, and
asks for at most one burst (``rafka.cluster.throttle``). Otherwise it goes at once and asks
for ``replica.fetch.max.bytes``: in-sync followers, ordinary ones and the leader's own reads
are never held back, so the ISR and acks=all do not feel a move's throttle.

The wait is taken in slices of ``SLICE_S`` and ends early when the replica stops being
throttled (a pushed state put it in the ISR, the move was cancelled, the rate changed): a
state change must not wait behind a long debt. Waiting happens in the follower's own loop,
before it sends its next fetch, so no other replica's fetch (batched per host by
``fetch_batcher``) and no leader answer waits with it.

Owned by one ``ReplicaFollower``, on its replica's event loop; nothing is persisted (after a
restart the budget starts empty and the counters at zero).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from rafka.cluster.replication_quota import follower_rate
from rafka.cluster.settings import setting
from rafka.cluster.throttle import TokenBucket

if TYPE_CHECKING:
    from rafka.actors.partition_replica import PartitionReplica

#: Longest single sleep while paying a debt, s: how soon a state that ends the throttle (the
#: replica joined the ISR, the move was cancelled) is noticed by a waiting loop.
SLICE_S = 0.1


class FollowerThrottle:
    """Decides, before each fetch of one follower, whether it waits and how much it asks
    for; counts the bytes it took and the seconds it waited while throttled."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.bucket = TokenBucket(0, clock)
        self._clock = clock
        self._sleep = sleep
        self.caught_up = False  # the last answer brought the log to the leader's HW
        self.last_rate = 0  # bytes/s of the latest throttled fetch (0: none yet)
        self.throttled_bytes = 0  # taken by fetches made while throttled
        self.waited_s = 0.0  # spent waiting for the budget

    def update(self, replica: PartitionReplica) -> int:
        """Set the bucket to the rate ``replica``'s next fetch may take now, bytes/s (0: no
        limit), from its state and settings as they are now."""
        rate = follower_rate(setting(replica.settings, "replication.throttled.rate"),
                             replica.state, replica.broker_id, self.caught_up)  # fmt: skip
        self.bucket.set_rate(rate)
        return rate

    async def pay(self, replica: PartitionReplica) -> float:
        """Wait until the bytes taken so far are paid for, while ``replica`` stays
        throttled; the seconds waited (0: the fetch may go now)."""
        started = None
        while self.update(replica):
            wait = self.bucket.wait_s()
            if wait <= 0:
                break
            if started is None:
                started = self._clock()
            await self._sleep(min(wait, SLICE_S))
        if started is None:
            return 0.0  # never slept: the caller must not take this for a wait
        waited = self._clock() - started
        self.waited_s += waited
        return waited

    def ask_size(self, max_bytes: int) -> int:
        """Bytes the next fetch asks for (``max_bytes`` unless throttled)."""
        return self.bucket.ask_size(max_bytes)

    def took(self, nbytes: int, caught_up: bool) -> None:
        """A fetch made at the bucket's current rate brought ``nbytes`` (written to the log);
        ``caught_up``: the log now reaches the leader's high watermark."""
        if self.bucket.limited:
            self.throttled_bytes += nbytes
            self.last_rate = self.bucket.rate
        self.bucket.take(nbytes)
        self.caught_up = caught_up

    def describe(self) -> dict[str, Any]:
        """``throttled``: the next fetch is limited; ``rate``: bytes/s of the latest
        throttled fetch; ``bytes``: taken while throttled; ``waited_s``: spent waiting."""
        return {"throttled": self.bucket.limited, "rate": self.last_rate,
                "bytes": self.throttled_bytes, "waited_s": round(self.waited_s, 3)}  # fmt: skip
