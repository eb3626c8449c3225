"""The token bucket behind ``replication.throttled.rate``: the rate holds over any window, a
burst is bounded, an answer larger than the budget is taken and its debt paid by waiting,
rate 0 means no limit, and a rate change takes effect at once. A fake clock; no sleeps."""

from __future__ import annotations

import pytest

from rafka.cluster.throttle import BURST_S, TokenBucket

KIB = 1024
RATE = 100 * KIB


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def copy(bucket: TokenBucket, clock: FakeClock, answer: int, seconds: float,
         latency_s: float = 0.01) -> list[tuple[float, int]]:  # fmt: skip
    """A follower that copies a log bigger than ``seconds`` of the rate: it waits out its
    debt, asks for ``ask_size`` (but the leader answers whole batches of ``answer`` bytes,
    at least one), and takes what came. Returns (time taken, bytes) per answer."""
    end = clock.now + seconds
    taken = []
    while clock.now < end:
        clock.advance(bucket.wait_s())
        asked = bucket.ask_size(1 << 20)
        size = max(answer, asked // answer * answer)
        clock.advance(latency_s)
        bucket.take(size)
        taken.append((clock.now, size))
    return taken


def test_the_rate_holds_over_every_window():
    """Over any window of T seconds the bytes taken stay within the rate times T plus one
    burst and one answer; over a long copy the average is the rate."""
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock)
    answer = 4 * KIB
    taken = copy(bucket, clock, answer, 60.0)
    for i, (start, _) in enumerate(taken):
        for window in (0.5, 1.0, 5.0, 20.0):
            inside = sum(n for t, n in taken[i:] if t <= start + window)
            assert inside <= RATE * window + bucket.burst + answer
    total = sum(n for _, n in taken)
    elapsed = taken[-1][0] - taken[0][0]
    assert RATE * elapsed * 0.95 <= total <= RATE * elapsed + bucket.burst + answer


def test_a_fetch_asks_for_at_most_one_burst():
    """A throttled fetch asks for at most the burst (``rate * BURST_S``), so one answer's debt
    is at most about a burst's worth of waiting; unlimited, it asks for what it would."""
    clock = FakeClock()
    assert TokenBucket(RATE, clock).ask_size(1 << 20) == int(RATE * BURST_S)
    assert TokenBucket(RATE, clock).ask_size(1000) == 1000
    assert TokenBucket(0, clock).ask_size(1 << 20) == 1 << 20
    assert TokenBucket(1, clock).ask_size(1 << 20) >= 1


def test_an_idle_bucket_saves_up_one_burst_at_most():
    """After a long idle time, one burst goes without waiting; the next byte waits."""
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock)
    clock.advance(3600.0)
    assert bucket.wait_s() == 0
    bucket.take(bucket.burst)
    assert bucket.wait_s() == 0  # exactly the burst: nothing owed yet
    bucket.take(1)
    assert bucket.wait_s() == pytest.approx(1 / RATE)


def test_an_answer_larger_than_the_budget_is_taken_and_its_debt_paid_by_waiting():
    """A follower must take a whole batch bigger than its rate (replica.fetch.max.bytes
    above it): the take never refuses, the next fetch waits until the debt is paid, and
    then goes without waiting."""
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock)
    bucket.take(10 * RATE)
    assert bucket.wait_s() == pytest.approx(10.0)
    clock.advance(4.0)
    assert bucket.wait_s() == pytest.approx(6.0)
    clock.advance(6.0)
    assert bucket.wait_s() == 0
    assert bucket.taken_bytes == 10 * RATE


def test_rate_zero_means_no_limit():
    """With rate 0 nothing ever waits, however much is taken, and the bytes are counted."""
    clock = FakeClock()
    bucket = TokenBucket(0, clock)
    for _ in range(100):
        bucket.take(1 << 30)
        assert bucket.wait_s() == 0
    assert not bucket.limited
    assert bucket.taken_bytes == 100 << 30


def test_a_rate_change_takes_effect_at_once():
    """A debt is owed in bytes: a halved rate doubles the wait left, a doubled one halves
    it; turning the limit off ends the wait, and turning it on again starts afresh."""
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock)
    bucket.take(4 * RATE)
    clock.advance(2.0)  # half paid: 2 s of debt left at RATE
    bucket.set_rate(RATE // 2)
    assert bucket.wait_s() == pytest.approx(4.0)
    bucket.set_rate(2 * RATE)
    assert bucket.wait_s() == pytest.approx(1.0)
    bucket.set_rate(0)
    assert bucket.wait_s() == 0
    bucket.take(10 * RATE)
    bucket.set_rate(RATE)
    assert bucket.wait_s() == 0  # nothing owed from the unlimited time
    bucket.take(RATE)
    assert bucket.wait_s() == pytest.approx(1.0)


def test_setting_the_same_rate_again_changes_nothing():
    """The follower sets the rate before every fetch: the same value keeps debt and savings."""
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock)
    bucket.take(2 * RATE)
    clock.advance(0.5)
    bucket.set_rate(RATE)
    assert bucket.wait_s() == pytest.approx(1.5)


def test_a_negative_rate_is_refused():
    """A rate below 0 is a mistake, not a limit: refused at creation and on change."""
    with pytest.raises(ValueError):
        TokenBucket(-1, FakeClock())
    with pytest.raises(ValueError):
        TokenBucket(RATE, FakeClock()).set_rate(-1)
