"""Broker liveness from heartbeats: live, suspect after a silent session, fenced until the
next heartbeat. The clock is passed in; no sleeps."""

from __future__ import annotations

from rafka.cluster.liveness import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    BrokerLiveness,
)

TIMEOUT = 1000


def tracker(*brokers: int, now: int = 0) -> BrokerLiveness:
    liveness = BrokerLiveness(session_timeout_ms=TIMEOUT)
    liveness.track(brokers, now)
    return liveness


def test_tracked_broker_is_live_for_one_session_without_a_heartbeat():
    """A broker the controller starts watching gets one whole session to speak up; only past
    the timeout is it a suspect."""
    liveness = tracker(0, 1, now=100)
    assert liveness.live() == {0, 1} and liveness.is_live(0)
    assert liveness.suspects(100 + TIMEOUT) == []
    assert liveness.suspects(101 + TIMEOUT) == [0, 1]


def test_heartbeats_keep_a_broker_off_the_suspect_list():
    """Each heartbeat restarts the broker's session; the silent one is the only suspect."""
    liveness = tracker(0, 1)
    for now in range(200, 3000, 200):
        assert liveness.heartbeat(1, now) is False
    assert liveness.suspects(3000) == [0]


def test_suspect_counts_as_live_until_fenced():
    """A timed-out broker awaits its probe: it is still live, and leaves the live set (and the
    suspects) only when fenced."""
    liveness = tracker(0, 1)
    assert liveness.suspects(TIMEOUT + 1) == [0, 1]
    assert liveness.is_live(0)
    liveness.fence(0)
    assert not liveness.is_live(0)
    assert liveness.live() == {1}
    assert liveness.suspects(5 * TIMEOUT) == [1]


def test_heartbeat_from_a_fenced_broker_unfences_it():
    """A fenced broker's next heartbeat makes it live again, and says so once."""
    liveness = tracker(0)
    liveness.fence(0)
    assert liveness.heartbeat(0, 2000) is True
    assert liveness.is_live(0) and liveness.suspects(2000 + TIMEOUT) == []
    assert liveness.heartbeat(0, 2100) is False


def test_tracking_again_does_not_reset_a_brokers_session():
    """A controller re-listing known brokers keeps their last heartbeat times."""
    liveness = tracker(0, now=0)
    liveness.track([0, 1], 900)
    assert liveness.suspects(TIMEOUT + 1) == [0]


def test_untracked_broker_is_not_live_until_it_heartbeats():
    """An unknown broker is not live; its first heartbeat starts tracking it."""
    liveness = tracker()
    assert not liveness.is_live(3) and liveness.live() == set()
    assert liveness.heartbeat(3, 50) is False
    assert liveness.live() == {3}
    assert liveness.suspects(51 + TIMEOUT) == [3]


def test_defaults_give_several_heartbeats_per_session():
    """A broker heartbeats every 200 ms and is suspected after 1 s: a few lost heartbeats are
    not a death."""
    assert (BROKER_HEARTBEAT_INTERVAL_MS, BROKER_SESSION_TIMEOUT_MS) == (200, 1000)
    assert BrokerLiveness().session_timeout_ms == BROKER_SESSION_TIMEOUT_MS


def test_time_the_controller_could_not_listen_is_nobodys_silence():
    """A controller starved of CPU for two sessions wakes with every heartbeat old: that
    stall does not make a suspect of anyone; real silence afterwards still does."""
    live = BrokerLiveness(session_timeout_ms=1000)
    live.heartbeat(1, now_ms=0)
    live.heartbeat(2, now_ms=0)
    live.heartbeat(3, now_ms=2050)  # read just before the late tick
    live.not_listening(2000, now_ms=2100)  # woke at 2,100 ms instead of 100
    assert live.suspects(now_ms=2100) == []
    assert live.last_heartbeat_ms[3] == 2100  # never taken as newer than now
    assert live.suspects(now_ms=3050) == [1, 2]
    assert live.suspects(now_ms=3200) == [1, 2, 3]
