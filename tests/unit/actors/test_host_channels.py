"""Finding a host's direct channel (``HostChannels``) and waiting on channel calls through
the clients' gateway, without Ray: fake host handles whose ``channel_address`` answers
through a future the test completes."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading
import time

import pytest

from rafka.actors import host_channels
from rafka.actors.channel_client import ChannelClient, ChannelClosed
from rafka.actors.handles import Gateway
from rafka.actors.host_channels import HostChannels
from rafka.errors import RequestTimedOut
from tests.unit.actors.channel_serving import serving


class _Remote:
    def __init__(self, host) -> None:
        self.host = host

    def remote(self):
        self.host.asked += 1
        future = concurrent.futures.Future()
        self.host.answers.append(future)

        class _Ref:
            def future(self):
                return future

        return _Ref()


class FakeHost:
    """A host handle: an actor id, and a ``channel_address`` method whose answers the test
    sets (``answers[i]``)."""

    def __init__(self, actor_id: str) -> None:
        self._actor_id = actor_id
        self.asked = 0
        self.answers: list[concurrent.futures.Future] = []
        self.channel_address = _Remote(self)


@pytest.fixture
def server():
    async def echo(*args):
        return args

    with serving({"fetch": echo}) as (served, _loop):
        yield served


def _settled(channels: HostChannels, host) -> None:
    """Wait until the background set-up for ``host`` has ended."""
    entry = channels._by_host[host._actor_id]
    if isinstance(entry, concurrent.futures.Future):
        entry.result(5)


def test_the_first_ask_sends_for_the_address_and_a_later_one_connects(server):
    channels, host = HostChannels(), FakeHost("h1")
    try:
        assert channels.channel(host) is None and host.asked == 1
        assert channels.channel(host) is None and host.asked == 1  # still being asked
        host.answers[0].set_result((*server.address, server.token))
        _settled(channels, host)
        channel = channels.channel(host)
        assert channel is not None and channel.call("fetch", 1).result(5) == (1,)
        assert channels.channel(host) is channel
    finally:
        channels.close()


def test_a_host_without_a_channel_is_asked_again_only_after_a_while(monkeypatch):
    channels, host = HostChannels(), FakeHost("h2")
    now = [1000.0]
    monkeypatch.setattr(host_channels.time, "monotonic", lambda: now[0])
    channels.channel(host)
    host.answers[0].set_result(None)  # channels are off at that host
    _settled(channels, host)
    assert channels.channel(host) is None
    assert channels.channel(host) is None and host.asked == 1
    now[0] += host_channels.RETRY_AFTER_S + 0.1
    assert channels.channel(host) is None and host.asked == 2


def test_a_dead_host_or_an_unreachable_address_falls_back_to_actor_calls():
    channels, dead, unreachable = HostChannels(), FakeHost("h3"), FakeHost("h4")
    channels.channel(dead)
    dead.answers[0].set_exception(RuntimeError("the actor died"))
    _settled(channels, dead)
    assert channels.channel(dead) is None and dead.asked == 1
    channels.channel(unreachable)
    unreachable.answers[0].set_result(("127.0.0.1", _unused_port(), b"t"))
    _settled(channels, unreachable)
    assert channels.channel(unreachable) is None and unreachable.asked == 1
    retry_at = channels._by_host[unreachable._actor_id]
    assert retry_at - time.monotonic() > host_channels.RETRY_AFTER_S  # the longer wait


def test_a_channel_that_ended_is_looked_up_again(server):
    channels, host = HostChannels(), FakeHost("h5")
    try:
        channels.channel(host)
        host.answers[0].set_result((*server.address, server.token))
        _settled(channels, host)
        first = channels.channel(host)
        first.close()
        assert first.closed
        assert channels.channel(host) is None and host.asked == 1  # not at once: a backoff
        time.sleep(host_channels.RECONNECT_AFTER_S + 0.05)
        assert channels.channel(host) is None and host.asked == 2
        host.answers[1].set_result((*server.address, server.token))
        _settled(channels, host)
        assert channels.channel(host) not in (None, first)
    finally:
        channels.close()


def test_a_session_started_by_actor_call_moves_to_the_channel_once_request_0_is_answered(
    server,
):
    channels, host = HostChannels(), FakeHost("h7")
    try:
        assert channels.for_request(host, "p.1", 0) is None  # no channel yet: actor call
        first = concurrent.futures.Future()
        channels.sent_as_actor_call(host, "p.1", 0, first)
        host.answers[0].set_result((*server.address, server.token))
        _settled(channels, host)
        # The leader does not know the session until request 0 arrives: no overtaking it.
        assert channels.for_request(host, "p.1", 1) is None
        channels.sent_as_actor_call(host, "p.1", 1, concurrent.futures.Future())  # pipelined
        assert channels.for_request(host, "p.2", 0) is not None  # another session: channel
        first.set_result(None)
        # Known now: the leader waits for request 1 however the rest come.
        assert channels.for_request(host, "p.1", 2) is not None
        assert channels.for_request(host, "p.3", -1) is not None  # unnumbered: either way
    finally:
        channels.close()


def test_a_session_started_on_a_channel_fails_fast_once_that_channel_ended(server):
    channels, host = HostChannels(), FakeHost("h8")
    try:
        channels.channel(host)
        host.answers[0].set_result((*server.address, server.token))
        _settled(channels, host)
        channel = channels.for_request(host, "p.1", 0)
        assert channel is not None
        channel.close()
        # Not an actor call, which could wait at the leader for a request lost with the
        # connection: the ended channel, whose calls fail at once.
        later = channels.for_request(host, "p.1", 1)
        assert later is channel
        with pytest.raises(ChannelClosed):
            later.call("fetch", 1).result(1)
        assert channels.for_request(host, "p.2", 0) is None  # a new session: actor calls
    finally:
        channels.close()


def test_a_session_that_moves_to_another_host_is_not_held_to_the_first_hosts_channel(server):
    channels, first, second = HostChannels(), FakeHost("h9"), FakeHost("h10")
    try:
        for host in (first, second):
            channels.channel(host)
            host.answers[0].set_result((*server.address, server.token))
            _settled(channels, host)
        on_first = channels.for_request(first, "p.1", 0)
        on_second = channels.for_request(second, "p.1", 1)  # the partition was re-hosted
        assert on_second is channels.channel(second) and on_second is not on_first
    finally:
        channels.close()


def test_sessions_whose_request_0_is_unanswered_are_not_forgotten(monkeypatch):
    monkeypatch.setattr(host_channels, "SESSIONS_KEPT", 2)
    channels, host = HostChannels(), FakeHost("h11")
    pending = concurrent.futures.Future()
    channels.sent_as_actor_call(host, "old", 0, pending)
    for n in range(5):  # newer sessions, answered
        channels.sent_as_actor_call(host, f"new-{n}", 0, _done(None))
    channels._by_host[host._actor_id] = _Open()  # a channel is up now
    assert channels.for_request(host, "old", 1) is None  # still behind its request 0


class _Open(ChannelClient):
    closed = False

    def __init__(self) -> None:
        pass


def test_forked_children_start_with_no_channels():
    parent = host_channels.shared()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        os.write(write, b"1" if host_channels.shared() is not parent else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert host_channels.shared() is parent


def test_channels_turned_off_make_no_lookups(monkeypatch):
    monkeypatch.setenv("RAFKA_DIRECT_CHANNEL", "0")
    channels, host = HostChannels(), FakeHost("h6")
    assert channels.channel(host) is None and host.asked == 0


def _unused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the gateway's waits on channel futures ------------------------------------------------------


def _done(value) -> concurrent.futures.Future:
    f = concurrent.futures.Future()
    f.set_result(value)
    return f


def test_wait_returns_once_enough_channel_calls_are_answered_in_their_order():
    a, b, c = concurrent.futures.Future(), _done(2), concurrent.futures.Future()
    ready, waiting = Gateway.wait([a, b, c], 1, timeout_s=5)
    assert ready == [b] and waiting == [a, c]
    threading.Timer(0.05, a.set_result, (1,)).start()
    ready, waiting = Gateway.wait([a, b, c], 2, timeout_s=5)
    assert ready == [a, b] and waiting == [c]


def test_wait_gives_up_after_its_timeout():
    pending = concurrent.futures.Future()
    started = time.monotonic()
    assert Gateway.wait([pending], 1, timeout_s=0.05) == ([], [pending])
    assert time.monotonic() - started >= 0.05


def test_get_of_a_channel_call_that_does_not_answer_in_time_is_request_timed_out():
    with pytest.raises(RequestTimedOut, match="a partition replica did not answer"):
        Gateway.get(concurrent.futures.Future(), 0.01)
    assert Gateway.get([_done(1), _done(2)], 1) == [1, 2]
    assert Gateway.future(fut := _done(3)) is fut
