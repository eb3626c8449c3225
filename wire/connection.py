"""One Kafka client connection: frames in, handlers run, answers out in request order.

Kafka's rules kept here:
- a request is a 4-byte big-endian size and that many bytes; a size above
  ``socket.request.max.bytes`` (or below the smallest header) closes the connection;
- a client may send many requests before reading answers (librdkafka keeps up to five
  produce requests in flight); they run concurrently but are answered in the order they
  came, and a produce with acks=0 gets no answer at all;
- a request's bytes count against ``socket.request.max.bytes`` until its answer is written,
  and a connection's fetches run one at a time, each only once the one before it has been
  written: a Kafka broker mutes a channel while it serves a request, so a client that
  pipelines fetches and reads nothing holds at most one fetch answer in the listener, not
  one per request;
- on a SASL listener nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served
  before authentication succeeds; a failed authentication is answered, then the connection
  closes;
- a frame that cannot be decoded closes the connection (there is no way to answer a request
  whose header is unreadable); an unknown API or version gets UNSUPPORTED_VERSION.
The listener never crashes on a connection's account: whatever one connection does, only
that connection ends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
from typing import Any, Awaitable, Callable

from rafka.errors import InvalidRequest, RafkaError, UnsupportedVersion
from rafka.wire import frames
from rafka.wire.session import Session

SIZE = struct.Struct(">i")
#: The smallest request: api key, version, correlation id, client id length.
SMALLEST_REQUEST = 10
FETCH = 1
API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: What an unauthenticated connection may ask on a SASL listener.
BEFORE_AUTHENTICATION = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
#: Requests one connection may have in flight before the reader waits for answers; their
#: bytes together stay within one largest request until their answers are written (Kafka's
#: queued.max.request.bytes spirit).
MAX_IN_FLIGHT = 64
#: The largest frame before SASL authentication (Kafka's sasl.server.max.receive.size).
MAX_BEFORE_AUTHENTICATION = 512 << 10

_connection_numbers = itertools.count(1)

Handler = Callable[[Session, frames.RequestHeader, dict], Awaitable[dict | None]]


class CloseConnection(Exception):
    """Raised by a handler to end the connection after its answer (``answer``, if any)."""

    def __init__(self, reason: str, answer: dict | None = None):
        super().__init__(reason)
        self.answer = answer


class Connection:
    """Serves one client until it disconnects or breaks the protocol."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: Session,
        dispatch: Callable[[int], Handler | None],
        max_request_bytes: int,
        logger: logging.Logger | logging.LoggerAdapter,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.session = session
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.logger = logger
        self.idle_timeout_s = idle_timeout_s  # no request for this long closes it
        self._bytes_in_flight = 0
        self._bytes_freed = asyncio.Condition()
        self.number = next(_connection_numbers)
        self.requests = 0
        self._answers: asyncio.Queue = asyncio.Queue()
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._closing: str | None = None
        # Done once the connection's latest fetch answer is written (or dropped): the next
        # fetch waits for it, so fetch answers are held one at a time.
        self._fetch_written: asyncio.Future | None = None
        self._writer_gone = False  # set once the writer ended: no answer will be written

    async def serve(self) -> None:
        """Read requests until the client goes; answers are written by a second task."""
        writing = asyncio.get_running_loop().create_task(self._write_answers())
        try:
            while self._closing is None and not self._writer_gone:
                await self._in_flight.acquire()  # released once the answer is written
                frame = await self._read_frame()
                if frame is None:
                    break
                self.requests += 1
                answer, written = self._start(frame)
                self._answers.put_nowait((answer, written, len(frame)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went
        except CloseConnection as e:
            self._closing = str(e)
        finally:
            self._answers.put_nowait(None)
            try:
                await writing
            except Exception:  # noqa: BLE001 - the writer logs its own failures
                pass
            if self._closing:
                self.logger.info("closed connection %d from %s: %s", self.number,
                                 self.session.client_host, self._closing)  # fmt: skip
            self.writer.close()

    async def _read_frame(self) -> memoryview | None:
        try:
            head = await asyncio.wait_for(self.reader.readexactly(4), self.idle_timeout_s)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise
            return None  # a clean end between requests
        except asyncio.TimeoutError:
            raise CloseConnection(
                f"no request for {self.idle_timeout_s} s (connections.max.idle.ms)"
            ) from None
        (size,) = SIZE.unpack(head)
        most = self.max_request_bytes
        if self.session.needs_authentication:
            most = min(most, MAX_BEFORE_AUTHENTICATION)
        if size < SMALLEST_REQUEST or size > most:
            raise CloseConnection(
                f"request size {size} is outside [{SMALLEST_REQUEST}, {most}] "
                "(socket.request.max.bytes; 512 KiB before SASL authentication)"
            )
        async with self._bytes_freed:
            await self._bytes_freed.wait_for(
                lambda: self._writer_gone or self._bytes_in_flight == 0
                or self._bytes_in_flight + size <= self.max_request_bytes
            )  # fmt: skip
            if self._writer_gone:
                return None  # the connection is ending: no answer could be written
            self._bytes_in_flight += size
        return memoryview(await self.reader.readexactly(size))

    def _start(self, frame: memoryview) -> tuple[asyncio.Future, asyncio.Future | None]:
        """Decode ``frame`` and start its handler: (the answer's bytes (None: no answer) or
        CloseConnection, a future for the writer to complete once it has written the answer
        when a later request waits for that)."""
        loop = asyncio.get_running_loop()
        try:
            header, body = frames.read_request(frame)
        except UnsupportedVersion as e:
            return _done(loop, self._unsupported(e)), None
        except InvalidRequest as e:
            return _failed(loop, CloseConnection(f"malformed request: {e}")), None
        if self.session.needs_authentication and header.api_key not in BEFORE_AUTHENTICATION:
            return _failed(loop, CloseConnection(
                f"api key {header.api_key} before SASL authentication"
            )), None  # fmt: skip
        handler = self.dispatch(header.api_key)
        if handler is None:
            unsupported = UnsupportedVersion(f"api key {header.api_key} has no handler")
            unsupported.header = header
            return _done(loop, self._unsupported(unsupported)), None
        if header.api_key != FETCH:
            return loop.create_task(self._run(handler, header, body)), None
        previous, written = self._fetch_written, loop.create_future()
        self._fetch_written = written
        return loop.create_task(self._run(handler, header, body, after=previous)), written

    def _free(self, size: int) -> None:
        """A request's answer is written (or there is none): its bytes no longer count as
        in flight."""
        self._bytes_in_flight -= size

        async def wake() -> None:
            async with self._bytes_freed:
                self._bytes_freed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    def _unsupported(self, error: UnsupportedVersion) -> bytes | None:
        header = getattr(error, "header", None)
        if header is None:
            raise CloseConnection(f"unsupported request: {error}")
        if header.api_key == API_VERSIONS:
            from rafka.wire.handlers import api_versions_fallback

            return api_versions_fallback(header)
        # Kafka closes the connection on a version it cannot parse; so does rafka.
        raise CloseConnection(
            f"api key {header.api_key} version {header.api_version} is not supported"
        )

    async def _run(self, handler: Handler, header: frames.RequestHeader, body: dict,
                   after: asyncio.Future | None = None):  # fmt: skip
        if after is not None:
            await after
        try:
            answer = await handler(self.session, header, body)
        except CloseConnection as e:
            if e.answer is not None:
                self._closing = str(e)
                return frames.encode_response(header, e.answer)
            raise
        except RafkaError as e:
            raise CloseConnection(f"api key {header.api_key}: {e}") from None
        except Exception as e:  # noqa: BLE001 - one request's bug must not end the listener
            self.logger.exception("api key %d v%d failed", header.api_key, header.api_version)
            raise CloseConnection(f"internal error in api key {header.api_key}: {e!r}") from None
        if answer is None:
            return None
        return frames.encode_response(header, answer)

    async def _write_answers(self) -> None:
        entry = None
        try:
            while True:
                entry = await self._answers.get()
                if entry is None:
                    return
                pending, _, _ = entry
                try:
                    data = await pending
                except CloseConnection as e:
                    self._closing = str(e)
                    return
                except asyncio.CancelledError:
                    return
                if data is not None:
                    self.writer.write(data)
                    await self.writer.drain()
                done, entry = entry, None
                self._finish(done)
                if self._closing is not None:
                    return
        finally:
            # However the writer ends (the sentinel, a closing answer, a client gone
            # mid-write), every request still counted is released, so a reader waiting for
            # room or for a slot ends with the connection.
            self._writer_gone = True
            if entry is not None:
                self._finish(entry)
            self.writer.close()
            self._drain_rest()

    def _finish(self, entry: tuple) -> None:
        """A request is done with (its answer written, or dropped): a fetch waiting on it
        may run, and its bytes and slot are free."""
        _, written, size = entry
        if written is not None and not written.done():
            written.set_result(None)
        self._free(size)
        self._in_flight.release()

    def _drain_rest(self) -> None:
        """Cancel answers not yet written (the connection is closing) and release them."""
        while not self._answers.empty():
            entry = self._answers.get_nowait()
            if entry is not None:
                entry[0].cancel()
                self._finish(entry)

    def describe(self) -> dict[str, Any]:
        return {"number": self.number, "client": self.session.client_host,
                "principal": self.session.principal, "requests": self.requests}  # fmt: skip


def _done(loop: asyncio.AbstractEventLoop, value: Any) -> asyncio.Future:
    future = loop.create_future()
    future.set_result(value)
    return future


def _failed(loop: asyncio.AbstractEventLoop, error: BaseException) -> asyncio.Future:
    future = loop.create_future()
    future.set_exception(error)
    return future
