"""The direct channel: produce and fetch calls to a replica host over one TCP connection.

An actor call costs about 1.2 ms round trip and a few tenths of a millisecond of CPU on each
side on the 2-core dev machine; a framed request on a socket costs about 0.08 ms. With
linger 0 nearly every record is a call of its own, so the hot calls of clients and followers
(``produce``, ``fetch``, ``fetch_committed``, ``replicate_many``) go over a socket to the
host's event loop, and everything else stays an actor call. The host runs the same method
either way, so answers, errors and ordering are the actor path's.

Protocol: the client first sends ``GREETING`` and the token, raw bytes (nothing is unpickled
before they match). Then each side sends frames: ``HEAD`` (the pickle's size and how many
out-of-band buffers follow), each buffer's size, the pickle (protocol 5, as Ray's own calls
are), then the buffers, so a record batch or fetch answer (a numpy array) is written from
and read into its own memory without another copy. Requests are ``(call id, method, args)``
and answers ``(call id, ok, value)``, where ``value`` is the
result or the exception raised. Answers come in any order; requests on one connection start
in the order they were sent, as one caller's actor calls do. A request for ``CANCEL`` with
args ``(call id,)`` cancels that call, which then gets no answer (a long poll nobody waits
for any more ends at once, as ``ray.cancel`` ends an actor call).

Trust: the token is random per host process and handed out only by the host's actor method
``channel_address``, so only a process that can call the host actor (a member of the Ray
cluster) can use the channel; a wrong greeting closes the connection unread.

Failure: a lost connection fails every call waiting on it with BrokerNotAvailable
(retriable, as for a dead actor); the caller asks the host again (a restarted host has a new
port and token). Where no channel can be had (the host's node unreachable from the client,
or ``RAFKA_DIRECT_CHANNEL=0``), calls go as actor calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import itertools
import logging
import os
import pickle
import secrets
import socket
import struct
import threading
from typing import Any, Awaitable, Callable

from rafka.errors import BrokerNotAvailable, RafkaError

log = logging.getLogger(__name__)

PROTOCOL = 1
GREETING = b"rafka-direct-channel/%d " % PROTOCOL
TOKEN_BYTES = 16
HEAD = struct.Struct(">IH")  # pickle bytes, out-of-band buffers
SIZE = struct.Struct(">I")  # one buffer's bytes
#: The largest frame either side accepts: a produce request or fetch answer is far smaller
#: (max.request.size and fetch.max.bytes are tens of MiB at most).
MAX_FRAME_BYTES = 1 << 30
#: Buffers at most this large go inside the pickle (one write beats several for them).
IN_BAND_BYTES = 64 << 10
#: Requests one connection may have running at the host; past it the host reads no further
#: (TCP then holds the client back), as Kafka caps a connection's in-flight requests.
MAX_IN_FLIGHT = 1000
#: The host methods a channel serves: the calls made per record or per fetch.
CHANNEL_METHODS = frozenset({"produce", "fetch", "fetch_committed", "replicate_many"})
#: The method name of a cancel request.
CANCEL = "cancel"
#: Seconds to connect to a host before the caller falls back to actor calls.
CONNECT_TIMEOUT_S = 2.0


def enabled() -> bool:
    """Whether callers use direct channels (``RAFKA_DIRECT_CHANNEL``, on unless ``0``)."""
    return os.environ.get("RAFKA_DIRECT_CHANNEL", "1") != "0"


def frame(body: Any) -> list:
    """``body`` as the parts of one frame, to write in order."""
    buffers: list = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes <= IN_BAND_BYTES:
            return True  # pickled in band
        buffers.append(raw)
        return False

    data = pickle.dumps(body, protocol=5, buffer_callback=out_of_band)
    head = HEAD.pack(len(data), len(buffers)) + b"".join(SIZE.pack(b.nbytes) for b in buffers)
    return [head + data, *buffers]


def _sizes(head: bytes) -> tuple[int, int]:
    """(pickle bytes, buffer count) of a frame, checked against the limit."""
    size, count = HEAD.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}")
    return size, count


def _buffer_sizes(data: bytes, count: int) -> list[int]:
    sizes = [SIZE.unpack_from(data, i * SIZE.size)[0] for i in range(count)]
    if sum(sizes) > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {sum(sizes)} bytes of buffers is over the limit of "
                         f"{MAX_FRAME_BYTES}")  # fmt: skip
    return sizes


def _answer(value: Any, ok: bool, call_id: int) -> list:
    try:
        return frame((call_id, ok, value))
    except Exception as e:  # noqa: BLE001 - an unpicklable error still answers the call
        return frame((call_id, False, RafkaError(
            f"the host's answer could not be sent ({type(value).__name__}: {value}: {e})"
        )))


# -- the host's side -------------------------------------------------------------------------


class ChannelServer:
    """Serves ``methods`` (name -> coroutine function) to clients that know ``token``, on
    the event loop that calls ``start``."""

    def __init__(self, methods: dict[str, Callable[..., Awaitable[Any]]]) -> None:
        self.methods = methods
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.address: tuple[str, int] | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self, host_ip: str) -> tuple[str, int]:
        """Listen on ``host_ip`` (an ephemeral port); the address clients connect to."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, host_ip, 0)
            self.address = (host_ip, self._server.sockets[0].getsockname()[1])
        return self.address

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connections.add(writer)
        room = asyncio.Semaphore(MAX_IN_FLIGHT)
        running: dict[int, asyncio.Task] = {}  # call id -> its task
        try:
            if not await self._greeted(reader):
                return
            while True:
                body = await _read_frame(reader)
                if body is None:
                    return
                call_id, method, args = body
                if method == CANCEL:
                    task = running.get(args[0])
                    if task is not None:
                        task.cancel()
                    continue
                await room.acquire()
                task = asyncio.get_running_loop().create_task(
                    self._run(writer, room, call_id, method, args)
                )
                running[call_id] = task
                task.add_done_callback(lambda _, c=call_id: running.pop(c, None))
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the client went away: nothing to answer
        except Exception as e:  # noqa: BLE001 - a broken frame ends only its connection
            log.warning("closing a direct channel connection: %s: %s", type(e).__name__, e)
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _greeted(self, reader: asyncio.StreamReader) -> bool:
        try:
            greeting = await reader.readexactly(len(GREETING) + TOKEN_BYTES)
        except asyncio.IncompleteReadError:
            return False
        return greeting[: len(GREETING)] == GREETING and hmac.compare_digest(
            greeting[len(GREETING):], self.token
        )

    async def _run(self, writer, room, call_id: int, method: str, args: tuple) -> None:
        try:
            handler = self.methods.get(method)
            if handler is None:
                raise RafkaError(f"the direct channel serves {sorted(self.methods)}, "
                                 f"not {method!r}")  # fmt: skip
            out = _answer(await handler(*args), True, call_id)
        except Exception as e:  # noqa: BLE001 - every error goes back to the caller
            out = _answer(e, False, call_id)
        finally:
            room.release()
        if not writer.is_closing():
            for part in out:  # not writelines: in 3.11 it joins the parts (a copy)
                writer.write(part)
            try:
                await writer.drain()
            except ConnectionError:
                pass


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    """One frame's body, unpickled; None at a clean end of stream."""
    try:
        head = await reader.readexactly(HEAD.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    size, count = _sizes(head)
    sizes = _buffer_sizes(await reader.readexactly(count * SIZE.size), count) if count else []
    data = await reader.readexactly(size)
    buffers = [await reader.readexactly(n) for n in sizes]
    return pickle.loads(data, buffers=buffers)


# -- the caller's side, threads --------------------------------------------------------------


class ChannelClosed(BrokerNotAvailable):
    """The connection to a host ended with the call unanswered (retriable)."""


class ChannelClient:
    """One connection to a host, for calling threads: ``call`` returns a concurrent future;
    a reader thread completes futures as answers come. Thread-safe."""

    def __init__(self, address: tuple[str, int], token: bytes,
                 timeout_s: float = CONNECT_TIMEOUT_S) -> None:  # fmt: skip
        self.address = address
        self._sock = socket.create_connection(address, timeout=timeout_s)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._ids = itertools.count()
        self.closed = False
        self._sock.sendall(GREETING + token)
        self._reader = threading.Thread(target=self._read_answers, name="rafka-channel",
                                        daemon=True)  # fmt: skip
        self._reader.start()

    def call(self, method: str, *args: Any) -> concurrent.futures.Future:
        """Send ``method(*args)`` to the host; the future holds its answer or error."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._send_lock:
            if self.closed:
                future.set_exception(ChannelClosed(f"the channel to {self.address} is closed; "
                                                   "retry"))  # fmt: skip
                return future
            call_id = next(self._ids)
            self._pending[call_id] = future
            future.call_id = call_id  # for ``cancel``
            try:
                for part in frame((call_id, method, args)):
                    self._sock.sendall(part)
            except OSError as e:
                self._fail_all(f"sending to {self.address} failed ({e})")
        return future

    def cancel(self, future: concurrent.futures.Future) -> None:
        """Stop waiting for the call of ``future`` (from ``call``): the host cancels it, and
        the future is cancelled here."""
        with self._send_lock:
            call_id = getattr(future, "call_id", None)
            if self.closed or self._pending.pop(call_id, None) is not future:
                return  # answered already, or not this channel's
            try:
                self._sock.sendall(frame((next(self._ids), CANCEL, (call_id,)))[0])
            except OSError as e:
                self._fail_all(f"sending to {self.address} failed ({e})")
        future.cancel()

    def close(self) -> None:
        with self._send_lock:
            if not self.closed:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._reader.join(timeout=5)

    def _read_answers(self) -> None:
        reason = "the host closed the connection"
        try:
            while True:
                head = self._read_exactly(HEAD.size)
                if head is None:
                    break
                size, count = _sizes(head)
                sizes = _buffer_sizes(self._read_exactly(count * SIZE.size), count) if count else []
                data = self._read_exactly(size)
                buffers = [self._read_exactly(n) for n in sizes]
                if data is None or None in buffers:
                    break
                call_id, ok, value = pickle.loads(data, buffers=buffers)
                with self._send_lock:
                    future = self._pending.pop(call_id, None)
                if future is None:
                    continue
                try:
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
                except concurrent.futures.InvalidStateError:
                    pass  # its caller cancelled it meanwhile
        except Exception as e:  # noqa: BLE001 - any failure ends the connection
            reason = f"reading from the host failed ({type(e).__name__}: {e})"
        with self._send_lock:
            self._fail_all(reason)
        self._sock.close()

    def _read_exactly(self, size: int) -> bytes | None:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                return None
            got += n
        return buf

    def _fail_all(self, reason: str) -> None:
        """End the connection and fail every call waiting on it (send lock held)."""
        self.closed = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            try:
                future.set_exception(ChannelClosed(
                    f"the connection to the replica host at {self.address} ended: {reason}; "
                    "retry"
                ))
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by its caller
