"""One Kafka connection over a real loopback socket: framing, answer order, limits, SASL gate."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

from rafka.wire import frames, handlers
from rafka.wire.connection import CloseConnection, Connection
from rafka.wire.listeners import Endpoint
from rafka.wire.session import Session

LOG = logging.getLogger("test")
METADATA, API_VERSIONS, PRODUCE, FETCH = 3, 18, 0, 1


class _AllowAll:
    def authorize(self, *args) -> bool:
        return True


def _request(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return frames.encode_request(
        frames.RequestHeader(api_key, version, correlation_id, "test-client"), body)


async def _read_answer(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await asyncio.wait_for(reader.readexactly(4), 10)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return None  # closed
    (size,) = struct.unpack(">i", head)
    return await reader.readexactly(size)


def _serve(dispatch, protocol: str = "PLAINTEXT", max_bytes: int = 1 << 20):
    """An asyncio server running Connection with ``dispatch``; returns (server, port)."""

    async def start():
        async def on_client(reader, writer):
            session = Session(None, _AllowAll(), Endpoint(protocol, "127.0.0.1", 0),
                              "127.0.0.1", {}, "test")  # fmt: skip
            await Connection(reader, writer, session, dispatch, max_bytes, LOG).serve()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        return server, server.sockets[0].getsockname()[1]

    return start()


def test_api_versions_answer_lists_the_handled_apis():
    async def run():
        server, port = await _serve(handlers.handler_for)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(API_VERSIONS, 3, 7, {"client_software_name": "t",
                                                  "client_software_version": "1"}))
        frame = await _read_answer(reader)
        writer.close()
        server.close()
        return frames.decode_response(API_VERSIONS, 3, frame)

    correlation_id, body = asyncio.run(run())
    assert correlation_id == 7 and body["error_code"] == 0
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert keys[0] == frames.SUPPORTED[0] and keys[1] == frames.SUPPORTED[1]
    assert set(keys) <= set(frames.SUPPORTED)


def test_an_api_versions_version_too_new_gets_the_v0_fallback():
    async def run():
        server, port = await _serve(handlers.handler_for)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # A version above the served range: the body cannot be trusted, the header can.
        head = struct.pack(">hhih", API_VERSIONS, 99, 5, 1) + b"x"
        writer.write(struct.pack(">i", len(head)) + head)
        frame = await _read_answer(reader)
        writer.close()
        server.close()
        return frames.decode_response(API_VERSIONS, 0, frame)

    correlation_id, body = asyncio.run(run())
    assert correlation_id == 5 and body["error_code"] == 35
    assert {k["api_key"] for k in body["api_keys"]} >= {0, 1, 3, 18}


def test_pipelined_requests_are_answered_in_the_order_they_came():
    async def slow_then_fast(session, header, body):
        await asyncio.sleep(0.2 if header.correlation_id == 1 else 0)
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": header.correlation_id}

    async def run():
        server, port = await _serve(lambda key: slow_then_fast)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for cid in (1, 2, 3):
            writer.write(_request(API_VERSIONS, 1, cid, {}))
        answers = [frames.decode_response(API_VERSIONS, 1, await _read_answer(reader))[0]
                   for _ in range(3)]  # fmt: skip
        writer.close()
        server.close()
        return answers

    assert asyncio.run(run()) == [1, 2, 3]


def test_a_request_without_an_answer_does_not_hold_up_the_next():
    async def maybe_silent(session, header, body):
        if header.correlation_id == 1:
            return None  # as a produce with acks=0
        return {"error_code": 0, "api_keys": []}

    async def run():
        server, port = await _serve(lambda key: maybe_silent)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(API_VERSIONS, 1, 1, {}) + _request(API_VERSIONS, 1, 2, {}))
        first = frames.decode_response(API_VERSIONS, 1, await _read_answer(reader))[0]
        writer.close()
        server.close()
        return first

    assert asyncio.run(run()) == 2


def test_an_oversized_or_malformed_frame_closes_only_that_connection():
    async def run():
        server, port = await _serve(handlers.handler_for, max_bytes=1024)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 4096) + b"\0" * 16)
        oversized = await _read_answer(reader)
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", port)
        garbage = struct.pack(">hhi", METADATA, 4, 9) + b"\xff\xff\xff"  # bad client id
        writer2.write(struct.pack(">i", len(garbage)) + garbage)
        malformed = await _read_answer(reader2)
        reader3, writer3 = await asyncio.open_connection("127.0.0.1", port)
        writer3.write(_request(API_VERSIONS, 0, 3, {}))
        still_serving = await _read_answer(reader3)
        for w in (writer, writer2, writer3):
            w.close()
        server.close()
        return oversized, malformed, still_serving

    oversized, malformed, still_serving = asyncio.run(run())
    assert oversized is None and malformed is None
    assert frames.decode_response(API_VERSIONS, 0, still_serving)[0] == 3


def test_a_sasl_listener_serves_nothing_but_sasl_before_authentication():
    async def run():
        server, port = await _serve(handlers.handler_for, protocol="SASL_PLAINTEXT")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(API_VERSIONS, 1, 1, {}))
        versions = await _read_answer(reader)
        writer.write(_request(METADATA, 4, 2, {"topics": None}))
        refused = await _read_answer(reader)
        writer.close()
        server.close()
        return versions, refused

    versions, refused = asyncio.run(run())
    assert frames.decode_response(API_VERSIONS, 1, versions)[1]["error_code"] == 0
    assert refused is None  # closed


def test_a_large_frame_before_sasl_authentication_closes_the_connection():
    async def run():
        server, port = await _serve(handlers.handler_for, protocol="SASL_PLAINTEXT")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        big = struct.pack(">hhih", API_VERSIONS, 1, 1, 1) + b"x" + b"\0" * (600 << 10)
        writer.write(struct.pack(">i", len(big)) + big)
        answer = await _read_answer(reader)
        writer.close()
        server.close()
        return answer

    assert asyncio.run(run()) is None


def test_an_idle_connection_is_closed():
    async def run():
        async def on_client(reader, writer):
            session = Session(None, _AllowAll(), Endpoint("PLAINTEXT", "127.0.0.1", 0),
                              "127.0.0.1", {}, "test")  # fmt: skip
            await Connection(reader, writer, session, handlers.handler_for, 1 << 20, LOG,
                             idle_timeout_s=0.2).serve()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        closed = await asyncio.wait_for(reader.read(1), 3)
        writer.close()
        server.close()
        return closed

    assert asyncio.run(run()) == b""


def test_a_client_that_reads_nothing_holds_at_most_one_fetch_answer_in_the_listener():
    """A connection's fetches run one at a time until each answer is written (Kafka mutes
    the channel), so a client that pipelines fetches and never reads cannot make the
    listener buffer one large answer per request; every answer still comes, in order."""
    started: list[int] = []
    big = b"\0" * (16 << 20)

    async def fetch(session, header, body):
        started.append(header.correlation_id)
        return {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 1,
             "last_stable_offset": 1, "aborted_transactions": None, "records": big}]}]}

    async def run():
        server, port = await _serve(lambda key: fetch, max_bytes=64 << 20)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        for cid in range(1, 7):
            writer.write(_request(FETCH, 4, cid, {
                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 30, "isolation_level": 0,
                "topics": [{"topic": "t", "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 30}]}]}))
        await writer.drain()
        await asyncio.sleep(0.5)
        while_unread = list(started)
        answers = [frames.decode_response(FETCH, 4, await _read_answer(reader))[0]
                   for _ in range(6)]  # fmt: skip
        writer.close()
        server.close()
        return while_unread, answers

    while_unread, answers = asyncio.run(run())
    assert while_unread == [1]
    assert answers == [1, 2, 3, 4, 5, 6]


def test_a_connection_whose_answer_closes_it_ends_while_a_large_request_waits_for_room():
    """A request that closes the connection (or a client gone mid-write) releases the bytes
    of every request still counted, so a reader waiting to admit a large next request ends
    with the connection instead of waiting forever."""
    done: list[bool] = []

    async def closing_first(session, header, body):
        if header.correlation_id == 1:
            raise CloseConnection("the first request ends the connection")
        return {"error_code": 0, "api_keys": []}

    async def run():
        async def on_client(reader, writer):
            session = Session(None, _AllowAll(), Endpoint("PLAINTEXT", "127.0.0.1", 0),
                              "127.0.0.1", {}, "test")  # fmt: skip
            await Connection(reader, writer, session, lambda key: closing_first, 3000,
                             LOG).serve()  # fmt: skip
            done.append(True)

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        pad = "c" * 2000  # two requests of about 2 KB against a 3,000-byte limit
        for cid in (1, 2):
            writer.write(frames.encode_request(
                frames.RequestHeader(API_VERSIONS, 1, cid, pad), {}))
        await writer.drain()
        for _ in range(100):
            if done:
                break
            await asyncio.sleep(0.02)
        writer.close()
        server.close()

    asyncio.run(run())
    assert done == [True]
