"""A byte budget that refills at a rate: the token bucket behind ``replication.throttled.rate``.

Kafka's replication quotas (KIP-73) measure bytes over sampled windows and hold a throttled
replica back while the measured rate is above the quota; a token bucket says the same thing
with one number and a clock. The budget (``tokens``, bytes) refills at ``rate`` bytes/s up to
``burst`` bytes (``rate * BURST_S``). Taking is never refused: a follower must take the whole
batch the leader answered, even one larger than the budget, so the budget goes negative and
the debt is paid by waiting (``wait_s``) before the next fetch. A throttled follower thus
always makes progress, whatever ``replica.fetch.max.bytes`` is next to the rate.

Invariants: ``tokens <= burst``; over any window of T seconds a caller that waits out
``wait_s()`` before each take takes at most ``burst + rate * T`` bytes plus its last answer.
Rate 0 means no limit: nothing ever waits.

Plain Python with the clock passed in (seconds, monotonic); one owner, no locks (the follower
loop that uses it runs on one event loop). Nothing is persisted: a restarted replica starts
with an empty budget, which only makes it wait a little more.
"""

from __future__ import annotations

from typing import Callable

#: Seconds of the rate an idle bucket saves up, and the most a throttled fetch asks for:
#: one second of the rate keeps each fetch's debt (and so each wait) about a second long,
#: short next to ``replica.lag.time.max.ms``, while a fetch a second amortises its call
#: (at the default 100 MiB/s a burst is 100 MiB, so the default 1 MiB fetches are not cut).
BURST_S = 1.0


class TokenBucket:
    """``rate`` bytes/s (0: no limit), saving up at most ``burst`` bytes; ``clock()`` gives
    monotonic seconds."""

    def __init__(self, rate: int, clock: Callable[[], float], burst_s: float = BURST_S) -> None:
        if rate < 0:
            raise ValueError(f"rate={rate}; bytes/s must be >= 0 (0: no limit)")
        self._clock = clock
        self._burst_s = burst_s
        self._rate = rate
        self._tokens = 0.0  # bytes that may be taken now; < 0: owed
        self._at = clock()  # when _tokens was last brought up to date
        self.taken_bytes = 0  # every byte taken, limited or not

    @property
    def rate(self) -> int:
        """Bytes/s; 0: no limit."""
        return self._rate

    @property
    def limited(self) -> bool:
        return self._rate > 0

    @property
    def burst(self) -> int:
        """The most an idle bucket saves up, bytes."""
        return int(self._rate * self._burst_s)

    def set_rate(self, rate: int) -> None:
        """Change the rate from now on: what was saved or owed stays in bytes (a debt is then
        paid at the new rate); turning the limit off forgets both, so a limit turned on again
        starts with an empty budget."""
        if rate < 0:
            raise ValueError(f"rate={rate}; bytes/s must be >= 0 (0: no limit)")
        if rate == self._rate:
            return
        self._refill()
        self._rate = rate
        if rate == 0:
            self._tokens = 0.0
        else:
            self._tokens = min(self._tokens, self.burst)

    def wait_s(self) -> float:
        """Seconds until the debt is paid (0: take now)."""
        if not self.limited:
            return 0.0
        self._refill()
        return -self._tokens / self._rate if self._tokens < 0 else 0.0

    def take(self, nbytes: int) -> None:
        """Count ``nbytes`` taken now, whatever the budget (it may go into debt)."""
        self.taken_bytes += nbytes
        if self.limited:
            self._refill()
            self._tokens -= nbytes

    def ask_size(self, max_bytes: int) -> int:
        """How much a fetch should ask for: ``max_bytes``, but at most one burst while limited
        (whole batches may still come back larger: see the module doc)."""
        if not self.limited:
            return max_bytes
        return max(1, min(max_bytes, self.burst))

    def _refill(self) -> None:
        now = self._clock()
        if self._rate:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
