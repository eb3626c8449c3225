"""The direct channel: produce and fetch calls to a replica host over one TCP connection.

An actor call costs about 1.2 ms round trip and a few tenths of a millisecond of CPU on each
side on the 2-core dev machine; a framed request on a socket costs about 0.08 ms. With
linger 0 nearly every record is a call of its own, so the hot calls of clients and followers
(``CHANNEL_METHODS``) go over a socket to the host's event loop, and everything else stays
an actor call. The host runs the same method either way, so answers, errors and ordering
are the actor path's.

Protocol: the caller first sends ``GREETING`` and the token, raw bytes (nothing is
unpickled before they match). Then each side sends frames: ``HEAD`` (call id, kind, the
pickle's size, how many out-of-band buffers follow), each buffer's size, the pickle
(protocol 5, as Ray's own calls are), then the buffers, so a record batch or fetch answer
(a numpy array) is written from and read into its own memory without another copy. A
request's pickle is ``(method, args)``; an answer's is the result (``ANSWER``) or the
exception raised (``ERROR``); a ``CANCEL`` has none and ends the call of its id, which then
gets no answer (a long poll nobody waits for ends at once, as ``ray.cancel`` ends an actor
call). The call id and kind are outside the pickle, so an answer the caller cannot unpickle
fails only its own call. Answers come in any order; requests on one connection start in the
order they were sent, as one caller's actor calls do.

Flow: a connection has at most ``MAX_IN_FLIGHT`` calls running at the host, each holding its
place until its answer is written out, and as many more waiting for a place (their cancels
are still read); past that the host reads no further, so a caller that stops reading stops
the host reading its requests (as Kafka mutes a channel) and the host holds a bounded number
of answers for it.

Trust: the token is random per host process and handed out only by the host's actor method
``channel_address``, so only a process that can call the host actor (a member of the Ray
cluster) can use the channel. A wrong greeting, or none within ``GREETING_TIMEOUT_S``,
closes the connection unread. The caller's side is ``channel_client``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import pickle
import secrets
import socket
import struct
from typing import Any, Awaitable, Callable

from rafka.errors import RafkaError

log = logging.getLogger(__name__)

PROTOCOL = 1
GREETING = b"rafka-direct-channel/%d " % PROTOCOL
TOKEN_BYTES = 16
HEAD = struct.Struct(">QBIH")  # call id, kind, pickle bytes, out-of-band buffers
SIZE = struct.Struct(">I")  # one buffer's bytes
REQUEST, ANSWER, ERROR, CANCEL = range(4)  # frame kinds
#: The largest pickle, and the most buffer bytes, one frame may carry: a produce request or
#: fetch answer is far smaller (max.request.size and fetch.max.bytes are MiBs).
MAX_FRAME_BYTES = 1 << 30
#: Buffers at most this large go inside the pickle (one write beats several for them).
IN_BAND_BYTES = 64 << 10
#: Calls one connection may have at the host, answered or not until the answer is written.
MAX_IN_FLIGHT = 1000
#: Seconds a new connection has to send its greeting.
GREETING_TIMEOUT_S = 10.0
#: The host methods a channel serves: the calls made per record or per fetch.
CHANNEL_METHODS = frozenset({"produce", "fetch", "fetch_committed", "replicate_many"})


def enabled() -> bool:
    """Whether callers use direct channels (``RAFKA_DIRECT_CHANNEL``, on unless ``0``)."""
    return os.environ.get("RAFKA_DIRECT_CHANNEL", "1") != "0"


def encode(call_id: int, kind: int, body: Any = None) -> list:
    """One frame, as the parts to write in order. Raises what pickling ``body`` raises."""
    if kind == CANCEL:
        return [HEAD.pack(call_id, kind, 0, 0)]
    buffers: list = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes <= IN_BAND_BYTES:
            return True  # pickled in band
        buffers.append(raw)
        return False

    data = pickle.dumps(body, protocol=5, buffer_callback=out_of_band)
    head = HEAD.pack(call_id, kind, len(data), len(buffers))
    return [head + b"".join(SIZE.pack(b.nbytes) for b in buffers) + data, *buffers]


def decode(data, buffers: list) -> Any:
    return pickle.loads(data, buffers=buffers)


def check_sizes(size: int, buffer_sizes: list[int]) -> None:
    """Refuse a frame over ``MAX_FRAME_BYTES`` (ValueError) before reading it."""
    if size > MAX_FRAME_BYTES or sum(buffer_sizes) > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {size} + {sum(buffer_sizes)} bytes is over the limit "
                         f"of {MAX_FRAME_BYTES}")  # fmt: skip


def buffer_sizes(data: bytes, count: int) -> list[int]:
    return [SIZE.unpack_from(data, i * SIZE.size)[0] for i in range(count)]


class ChannelServer:
    """Serves ``methods`` (name -> coroutine function) to callers that know ``token``, on
    the event loop that calls ``start``."""

    def __init__(self, methods: dict[str, Callable[..., Awaitable[Any]]]) -> None:
        self.methods = methods
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.address: tuple[str, int] | None = None
        self._starting: asyncio.Future | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.closed = False

    async def start(self, host_ip: str) -> tuple[str, int]:
        """Listen on ``host_ip`` (an ephemeral port), once; the address callers connect to."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(asyncio.start_server(self._serve, host_ip, 0))
        server = await asyncio.shield(self._starting)
        if self._server is None:
            self._server = server
            self.address = (host_ip, server.sockets[0].getsockname()[1])
            if self.closed:
                server.close()
        return self.address

    def close(self) -> None:
        self.closed = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connections.add(writer)
        # A call runs once it has a place in ``room``; the connection is read on while up to
        # as many more wait for one, so their cancels are read and take them out at once.
        room = asyncio.Semaphore(MAX_IN_FLIGHT)
        accepted = asyncio.Semaphore(2 * MAX_IN_FLIGHT)
        running: dict[int, asyncio.Task] = {}  # call id -> its task, running or waiting
        try:
            if not await asyncio.wait_for(self._greeted(reader), GREETING_TIMEOUT_S):
                return
            while True:
                got = await _read_frame(reader)
                if got is None:
                    return
                call_id, kind, data, buffers = got
                if kind == CANCEL:
                    task = running.get(call_id)
                    if task is not None:
                        task.cancel()
                    continue
                await accepted.acquire()
                task = asyncio.get_running_loop().create_task(
                    self._run(writer, room, call_id, data, buffers)
                )
                task.started = False  # set by ``_run`` once it has a place
                running[call_id] = task
                # Released when the task ends, even one cancelled before it ran.
                task.add_done_callback(
                    lambda _, c=call_id: (running.pop(c, None), accepted.release())
                )
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            return  # the caller went away or never greeted: nothing to answer
        except Exception as e:  # noqa: BLE001 - a broken frame ends only its connection
            log.warning("closing a direct channel connection: %s: %s", type(e).__name__, e)
        finally:
            self._connections.discard(writer)
            writer.close()
            # Calls still waiting for a place never run: their caller has been told the
            # connection ended and sends them again; run late, they could land after that.
            for task in [t for t in running.values() if not getattr(t, "started", True)]:
                task.cancel()

    async def _greeted(self, reader: asyncio.StreamReader) -> bool:
        try:
            greeting = await reader.readexactly(len(GREETING) + TOKEN_BYTES)
        except asyncio.IncompleteReadError:
            return False
        return greeting[: len(GREETING)] == GREETING and hmac.compare_digest(
            greeting[len(GREETING):], self.token
        )

    async def _run(self, writer: asyncio.StreamWriter, room: asyncio.Semaphore, call_id: int,
                   data, buffers) -> None:  # fmt: skip
        """Run one call, once it has a place in ``room``, and write its answer, holding the
        place until the answer is out; cancelled, it writes none."""
        async with room:
            asyncio.current_task().started = True
            await self._answer(writer, call_id, data, buffers)

    async def _answer(self, writer: asyncio.StreamWriter, call_id: int, data, buffers) -> None:
        try:
            method, args = decode(data, buffers)
            handler = self.methods.get(method)
            if handler is None:
                raise RafkaError(f"the direct channel serves {sorted(self.methods)}, "
                                 f"not {method!r}")  # fmt: skip
            result = await handler(*args)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - every error goes back to the caller
            out = _error_frame(call_id, e)
        else:
            try:
                out = encode(call_id, ANSWER, result)
            except Exception as e:  # noqa: BLE001 - an answer that does not pickle
                out = _error_frame(call_id, RafkaError(
                    f"the host's answer could not be sent ({type(result).__name__}: {e})"
                ))  # fmt: skip
        if writer.is_closing():
            return
        for part in out:  # not writelines: in 3.11 it joins the parts (a copy)
            writer.write(part)
        try:
            await writer.drain()  # holds the call's place until its answer is out
        except ConnectionError:
            pass


def _error_frame(call_id: int, error: BaseException) -> list:
    try:
        return encode(call_id, ERROR, error)
    except Exception as e:  # noqa: BLE001 - an unpicklable error or answer still answers
        return encode(call_id, ERROR, RafkaError(
            f"the host's answer could not be sent ({type(error).__name__}: {error}; {e})"
        ))  # fmt: skip


async def _read_frame(reader: asyncio.StreamReader) -> tuple | None:
    """(call id, kind, pickle, buffers) of the next frame; None at a clean end of stream."""
    try:
        head = await reader.readexactly(HEAD.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    call_id, kind, size, count = HEAD.unpack(head)
    sizes = buffer_sizes(await reader.readexactly(count * SIZE.size), count) if count else []
    check_sizes(size, sizes)
    data = await reader.readexactly(size) if size else b""
    return call_id, kind, data, [await reader.readexactly(n) for n in sizes]
