"""The direct channel between a caller and a replica host, without Ray: a ChannelServer on
an event loop in a thread, ChannelClients calling it."""

from __future__ import annotations

import asyncio
import pickle
import socket
import threading
import time

import numpy as np
import pytest

from rafka.actors import channel_client, direct_channel
from rafka.actors.channel_client import ChannelClient, ChannelClosed
from rafka.actors.direct_channel import ChannelServer
from rafka.errors import BrokerNotAvailable, NotLeaderOrFollower, RafkaError
from tests.unit.actors.channel_serving import serving


class Host:
    """A host's methods: ``produce`` records the order calls start in; ``slow`` waits for
    its event; ``fail`` raises NotLeaderOrFollower; ``odd`` answers something unpicklable."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.release = asyncio.Event()
        self.cancelled = 0

    async def produce(self, topic_id, partition, n):
        self.started.append(n)
        return (0, "", n)

    async def slow(self, topic_id, partition):
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "slow"

    async def fail(self, topic_id, partition):
        raise NotLeaderOrFollower(f"{topic_id}-{partition} moved")

    async def odd(self, topic_id, partition):
        return threading.Lock()


@pytest.fixture
def served():
    """(server, host, loop) with the server listening on loopback; stopped after."""
    host = Host()
    with serving({name: getattr(host, name) for name in ("produce", "slow", "fail", "odd")}
                 ) as (server, loop):  # fmt: skip
        try:
            yield server, host, loop
        finally:
            loop.call_soon_threadsafe(host.release.set)


def _client(server) -> ChannelClient:
    return ChannelClient(server.address, server.token)


def test_calls_are_answered_with_the_host_methods_results(served):
    server, _host, _loop = served
    client = _client(server)
    try:
        assert client.call("produce", "t", 0, 7).result(5) == (0, "", 7)
    finally:
        client.close()


def test_pipelined_calls_start_in_the_order_they_were_sent(served):
    server, host, _loop = served
    client = _client(server)
    try:
        futures = [client.call("produce", "t", 0, n) for n in range(500)]
        assert [f.result(5)[2] for f in futures] == list(range(500))
        assert host.started == list(range(500))
    finally:
        client.close()


def test_a_slow_call_does_not_hold_back_later_answers(served):
    server, host, loop = served
    client = _client(server)
    try:
        slow = client.call("slow", "t", 0)
        assert client.call("produce", "t", 0, 1).result(5) == (0, "", 1)
        assert not slow.done()
        loop.call_soon_threadsafe(host.release.set)
        assert slow.result(5) == "slow"
    finally:
        client.close()


def test_a_host_error_comes_back_as_its_own_type(served):
    server, _host, _loop = served
    client = _client(server)
    try:
        with pytest.raises(NotLeaderOrFollower, match="t-3 moved"):
            client.call("fail", "t", 3).result(5)
        assert client.call("produce", "t", 0, 2).result(5) == (0, "", 2)  # still usable
    finally:
        client.close()


def test_a_method_the_channel_does_not_serve_is_refused_by_name(served):
    server, _host, _loop = served
    client = _client(server)
    try:
        with pytest.raises(RafkaError, match="not 'delete'"):
            client.call("delete", "t", 0).result(5)
    finally:
        client.close()


def test_an_answer_that_cannot_be_sent_fails_only_its_call(served):
    server, _host, _loop = served
    client = _client(server)
    try:
        with pytest.raises(RafkaError, match="could not be sent.*cannot pickle"):
            client.call("odd", "t", 0).result(5)
        assert client.call("produce", "t", 0, 3).result(5) == (0, "", 3)
    finally:
        client.close()


def test_a_cancelled_call_ends_at_the_host_and_gets_no_answer(served):
    server, host, loop = served
    client = _client(server)
    try:
        slow = client.call("slow", "t", 0)
        assert client.call("produce", "t", 0, 1).result(5)  # the slow call is running
        client.cancel(slow)
        assert slow.cancelled()
        assert client.call("produce", "t", 0, 2).result(5) == (0, "", 2)
        assert host.cancelled == 1  # the cancel went before the call answered above
        assert not client._pending and not client.closed
    finally:
        client.close()


def test_an_answer_to_a_call_its_caller_cancelled_is_dropped(served):
    server, host, loop = served
    client = _client(server)
    try:
        slow = client.call("slow", "t", 0)
        assert client.call("produce", "t", 0, 1).result(5)
        assert slow.cancel()  # as asyncio.wrap_future does when its awaiter is cancelled
        loop.call_soon_threadsafe(host.release.set)
        assert client.call("produce", "t", 0, 2).result(5) == (0, "", 2)
        assert not client.closed
    finally:
        client.close()


def test_a_wrong_token_gets_the_connection_closed_unanswered(served):
    server, _host, _loop = served
    client = ChannelClient(server.address, b"not the token....")
    try:
        with pytest.raises(ChannelClosed):
            client.call("produce", "t", 0, 1).result(5)
    finally:
        client.close()


def test_a_connection_that_ends_fails_every_call_in_flight_as_retriable(served):
    server, _host, loop = served
    client = _client(server)
    try:
        in_flight = [client.call("slow", "t", 0) for _ in range(5)]
        loop.call_soon_threadsafe(server.close)
        for future in in_flight:
            with pytest.raises(ChannelClosed) as failed:
                future.result(5)
            assert isinstance(failed.value, BrokerNotAvailable) and failed.value.retriable
        later = client.call("produce", "t", 0, 9)  # after the end: fails at once
        with pytest.raises(ChannelClosed):
            later.result(1)
        assert client.closed
    finally:
        client.close()


def _greet(sock, server, greeting: bytes = direct_channel.GREETING) -> None:
    sock.sendall(greeting + server.token)


def _send(sock, call_id: int, method: str, args: tuple) -> None:
    for part in direct_channel.encode(call_id, direct_channel.REQUEST, (method, args)):
        sock.sendall(part)


def test_a_frame_over_the_limit_closes_the_connection(served):
    server, _host, _loop = served
    with socket.create_connection(server.address, timeout=5) as sock:
        _greet(sock, server)
        sock.sendall(direct_channel.HEAD.pack(1, direct_channel.REQUEST,
                                              direct_channel.MAX_FRAME_BYTES + 1, 0))
        assert sock.recv(16) == b""  # closed by the host, nothing answered


def test_a_greeting_of_another_protocol_is_refused_before_anything_is_unpickled(served):
    server, _host, _loop = served

    class Bomb:
        def __reduce__(self):
            return (pytest.fail, ("unpickled before the greeting matched",))

    with socket.create_connection(server.address, timeout=5) as sock:
        _greet(sock, server, b"rafka-direct-channel/99 ")
        _send(sock, 0, "produce", ("t", 0, Bomb()))
        assert sock.recv(16) == b""


def test_large_buffers_travel_out_of_band_and_arrive_whole(served):
    server, _host, _loop = served
    payload = np.frombuffer(np.random.default_rng(1).bytes(3 << 20), dtype=np.uint8)
    parts = direct_channel.encode(1, direct_channel.REQUEST, ("produce", ("t", 0, payload)))
    assert len(parts) == 2 and parts[1].nbytes == payload.nbytes  # not copied into the pickle
    client = _client(server)
    try:
        answer = client.call("produce", "t", 0, payload).result(5)
        assert np.array_equal(answer[2], payload)
    finally:
        client.close()


def test_answers_are_frames_with_the_call_id(served):
    server, _host, _loop = served
    with socket.create_connection(server.address, timeout=5) as sock:
        _greet(sock, server)
        _send(sock, 41, "produce", ("t", 0, 5))
        head = sock.recv(direct_channel.HEAD.size, socket.MSG_WAITALL)
        call_id, kind, size, buffers = direct_channel.HEAD.unpack(head)
        body = sock.recv(size, socket.MSG_WAITALL)
        assert (call_id, kind, buffers) == (41, direct_channel.ANSWER, 0)
        assert pickle.loads(body) == (0, "", 5)


def test_channels_are_on_unless_turned_off(monkeypatch):
    monkeypatch.delenv("RAFKA_DIRECT_CHANNEL", raising=False)
    assert direct_channel.enabled()
    monkeypatch.setenv("RAFKA_DIRECT_CHANNEL", "0")
    assert not direct_channel.enabled()


# -- flow control, failures and limits -----------------------------------------------------------


class Loaded:
    """A host whose ``busy`` blocks its event loop, whose ``poll`` long-polls, whose ``big``
    answers 8 MiB, and whose ``unreadable`` answers what the caller cannot unpickle."""

    def __init__(self) -> None:
        self.big_calls = 0
        self.counted = 0

    async def busy(self, *args):
        time.sleep(0.2)  # the loop held, as by a long append
        return "busy"

    async def poll(self, *args):
        await asyncio.sleep(0.1)
        return "polled"

    async def big(self, *args):
        self.big_calls += 1
        return np.zeros(8 << 20, dtype=np.uint8)

    async def unreadable(self, *args):
        return _Unreadable()

    async def produce(self, *args):
        return "ok"

    async def count(self, *args):
        self.counted += 1
        return self.counted


def _fails_to_load():
    raise ImportError("no module named host_only")


class _Unreadable:
    def __reduce__(self):
        return (_fails_to_load, ())


@pytest.fixture
def loaded(monkeypatch):
    monkeypatch.setattr(direct_channel, "MAX_IN_FLIGHT", 3)
    host = Loaded()
    with serving({name: getattr(host, name) for name in
                  ("busy", "poll", "big", "unreadable", "produce", "count")}
                 ) as (server, loop):  # fmt: skip
        yield server, host, loop


def test_a_cancel_read_before_its_call_started_frees_the_calls_place(loaded):
    server, _host, _loop = loaded
    client = _client(server)
    try:
        for _ in range(direct_channel.MAX_IN_FLIGHT + 1):
            client.call("busy", "t", 0)  # the loop is held: the next two arrive together
            client.cancel(client.call("poll", "t", 0))
            time.sleep(0.3)
        assert client.call("produce", "t", 0).result(3) == "ok"
    finally:
        client.close()


def test_a_host_that_stopped_reading_never_blocks_a_caller():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = ChannelClient(listener.getsockname(), b"0" * direct_channel.TOKEN_BYTES)
        peer, _ = listener.accept()  # accepted, never read
        try:
            payload = np.zeros(16 << 20, dtype=np.uint8)
            started = time.monotonic()
            calls = [client.call("produce", "t", 0, payload) for _ in range(8)]
            assert time.monotonic() - started < 2.0  # 128 MiB queued, nothing waited on
            assert not any(call.done() for call in calls)
        finally:
            peer.close()
            client.close()


def test_client_connections_notice_a_silent_peer(served):
    server, _host, _loop = served
    client = _client(server)
    try:
        sock = client._sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == (
            channel_client.KEEPALIVE_IDLE_S
        )
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == (
            channel_client.USER_TIMEOUT_MS
        )
    finally:
        client.close()


def test_an_answer_the_caller_cannot_read_fails_only_its_call(loaded):
    server, _host, _loop = loaded
    client = _client(server)
    try:
        waiting = client.call("poll", "t", 0)
        with pytest.raises(RafkaError, match="could not be read.*host_only") as failed:
            client.call("unreadable", "t", 0).result(5)
        assert not failed.value.retriable
        assert waiting.result(5) == "polled" and not client.closed
    finally:
        client.close()


def test_a_reader_that_stopped_holds_at_most_max_in_flight_answers_at_the_host(loaded):
    server, host, _loop = loaded
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        _greet(sock, server)
        for call_id in range(20):
            _send(sock, call_id, "big", ("t", 0))
        time.sleep(1.0)
        assert host.big_calls <= direct_channel.MAX_IN_FLIGHT + 1


def test_a_connection_that_never_greets_is_closed(served, monkeypatch):
    server, _host, _loop = served
    monkeypatch.setattr(direct_channel, "GREETING_TIMEOUT_S", 0.2)
    with socket.create_connection(server.address, timeout=5) as sock:
        assert sock.recv(16) == b""  # closed by the host after the timeout


def test_concurrent_starts_share_one_listener():
    loop = asyncio.new_event_loop()
    try:
        server = ChannelServer({})

        async def both():
            return await asyncio.gather(server.start("127.0.0.1"), server.start("127.0.0.1"))

        first, second = loop.run_until_complete(both())
        assert first == second
        server.close()
    finally:
        loop.close()


def test_a_callback_that_calls_again_when_the_connection_ends_does_not_deadlock(served):
    server, host, loop = served
    client = _client(server)
    retried: list = []
    try:
        waiting = client.call("slow", "t", 0)
        waiting.add_done_callback(lambda _: retried.append(client.call("produce", "t", 0, 1)))
        loop.call_soon_threadsafe(server.close)
        for thread in client._threads:
            thread.join(5)
            assert not thread.is_alive()
        assert retried and isinstance(retried[0].exception(5), ChannelClosed)
    finally:
        client.close()


def test_frames_partly_sent_at_once_and_finished_by_the_writer_stay_whole_and_in_order(served):
    server, host, _loop = served
    client = _client(server)
    try:
        sizes = [(4 << 20) if n % 3 == 0 else 10 for n in range(60)]
        futures = [client.call("produce", "t", 0, (n, np.full(size, n % 251, dtype=np.uint8)))
                   for n, size in enumerate(sizes)]  # fmt: skip
        for n, future in enumerate(futures):
            number, payload = future.result(10)[2]
            assert number == n and payload.nbytes == sizes[n] and (payload == n % 251).all()
        assert [n for n, _ in host.started] == list(range(60))
    finally:
        client.close()


def test_a_cancel_behind_calls_waiting_for_a_place_is_read_and_frees_it(loaded):
    server, _host, _loop = loaded
    client = _client(server)
    try:
        polls = [client.call("poll", "t", 0) for _ in range(direct_channel.MAX_IN_FLIGHT)]
        waiting = [client.call("busy", "t", 0) for _ in range(2)]  # no place: they wait
        for call in waiting:
            client.cancel(call)  # read although every place is taken
        assert client.call("produce", "t", 0).result(3) == "ok"
        assert [p.result(3) for p in polls] == ["polled"] * direct_channel.MAX_IN_FLIGHT
    finally:
        client.close()


def test_an_interrupted_inline_send_ends_the_channel_rather_than_wedge_it(served, monkeypatch):
    server, _host, _loop = served
    client = _client(server)
    try:
        def interrupted(parts):
            raise KeyboardInterrupt

        monkeypatch.setattr(client, "_send_inline", interrupted)
        with pytest.raises(KeyboardInterrupt):
            client.call("produce", "t", 0, 1)
        assert client.closed  # given up: the next lookup makes a new channel
    finally:
        client.close()


def test_calls_still_waiting_for_a_place_when_the_connection_ends_never_run(loaded):
    """Their caller was told the connection ended and sends them again: run late, they
    could land after the resend."""
    server, host, _loop = loaded
    client = _client(server)
    polls = [client.call("poll", "t", 0) for _ in range(direct_channel.MAX_IN_FLIGHT)]
    waiting = [client.call("count", "t", 0) for _ in range(2)]
    time.sleep(0.02)  # all read by the host; the polls hold every place
    client.close()
    for call in polls + waiting:
        with pytest.raises(ChannelClosed):
            call.result(1)
    time.sleep(0.3)  # the polls are over: a waiting call would have run by now
    assert host.counted == 0
