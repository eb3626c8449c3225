"""The caller's end of a direct channel (``direct_channel``): one connection to a replica
host, used by any thread and by event loops.

``call`` never blocks: it sends what the socket takes at once when nothing is queued, and
queues the rest of the frame, or the whole frame, for a writer thread, which sends them in
order; it returns a concurrent future, which a reader thread completes when the answer
comes. Futures are completed outside the lock, so a done
callback may call again.

Failure: a connection that ends (the host closed it or died, a send or read failed, or TCP
gave up on a silent peer: keepalive probes after ``KEEPALIVE_IDLE_S`` idle, and
``USER_TIMEOUT_MS`` for data the peer does not take) fails every call waiting on it
with ChannelClosed, a BrokerNotAvailable (retriable, as for a dead actor). An answer this
process cannot unpickle fails only its own call, not retriable.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import socket
import threading
from typing import Any

from rafka.actors.direct_channel import (
    ANSWER,
    CANCEL,
    ERROR,
    GREETING,
    HEAD,
    REQUEST,
    SIZE,
    buffer_sizes,
    check_sizes,
    decode,
    encode,
)
from rafka.errors import BrokerNotAvailable, RafkaError

#: Seconds to connect to a host before the caller falls back to actor calls.
CONNECT_TIMEOUT_S = 2.0
#: TCP keepalive: probes after this many idle seconds, every KEEPALIVE_INTERVAL_S, and the
#: connection ends after KEEPALIVE_PROBES unanswered (a host whose node lost power).
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_PROBES = 3
#: Data the host does not acknowledge for this long ends the connection (ms). Linux counts a
#: host that reads nothing (a zero window) too: a host reads on until twice its in-flight
#: limit, so this long means it is stuck or gone, and a minute is past any produce timeout.
USER_TIMEOUT_MS = 60_000


class ChannelClosed(BrokerNotAvailable):
    """The connection to a host ended with the call unanswered (retriable)."""


class ChannelClient:
    """One connection to the host at ``address`` that knows ``token``. Thread-safe."""

    def __init__(self, address: tuple[str, int], token: bytes,
                 timeout_s: float = CONNECT_TIMEOUT_S) -> None:  # fmt: skip
        self.address = address
        self._sock = sock = socket.create_connection(address, timeout=timeout_s)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
        sock.sendall(GREETING + token)
        self._lock = threading.Lock()
        self._queued = threading.Condition(self._lock)
        self._outbox: collections.deque[list] = collections.deque()  # frames to send
        self._sending = False  # a thread is writing a frame (frames go whole, in order)
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._ids = itertools.count()
        self.calls = 0  # calls made on this channel
        self.closed = False
        self._threads = [
            threading.Thread(target=self._write_frames, name="rafka-channel-out", daemon=True),
            threading.Thread(target=self._read_answers, name="rafka-channel-in", daemon=True),
        ]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def call(self, method: str, *args: Any) -> concurrent.futures.Future:
        """Send ``method(*args)`` to the host; the future holds its answer or error."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        call_id = next(self._ids)
        self.calls = call_id + 1
        try:
            parts = encode(call_id, REQUEST, (method, args))
        except Exception as e:  # noqa: BLE001 - the caller's bad argument fails its call only
            future.set_exception(RafkaError(f"the arguments of {method} could not be sent "
                                            f"to the host: {type(e).__name__}: {e}"))  # fmt: skip
            return future
        inline: bool | None = False
        try:
            with self._lock:
                if self.closed:
                    inline = None
                else:
                    future.call_id = call_id  # for ``cancel``
                    self._pending[call_id] = future
                    inline = not self._outbox and not self._sending
                    if inline:
                        self._sending = True
                    else:
                        self._outbox.append(parts)
                        self._queued.notify()
            if inline:
                self._send_inline(parts)
        except BaseException:
            if inline:  # interrupted (Ctrl-C) while sending: the stream may be torn
                self._end("a send was interrupted")
            raise
        if inline is None:
            future.set_exception(ChannelClosed(f"the channel to {self.address} is closed; "
                                               "retry"))  # fmt: skip
        return future

    def _send_inline(self, parts: list) -> None:
        """Send what the socket takes now, without waiting; the writer thread sends the rest
        (a thread hop saved on the hot path)."""
        left: list = []
        try:
            for i, part in enumerate(parts):
                view = memoryview(part).cast("B")
                while view.nbytes:
                    try:
                        view = view[self._sock.send(view, socket.MSG_DONTWAIT):]
                    except BlockingIOError:
                        left = [view, *parts[i + 1:]]
                        break
                if left:
                    break
        except OSError as e:
            self._end(f"sending failed ({e})")
            return
        with self._lock:
            self._sending = False
            if left:
                self._outbox.appendleft(left)
            if self._outbox:
                self._queued.notify()

    def cancel(self, future: concurrent.futures.Future) -> None:
        """Stop waiting for the call of ``future``: the host cancels it, and the future is
        cancelled here (a no-op once answered)."""
        call_id = getattr(future, "call_id", None)
        with self._lock:
            if self.closed or self._pending.pop(call_id, None) is not future:
                return
            self._outbox.append(encode(call_id, CANCEL))
            self._queued.notify()
        future.cancel()

    def close(self) -> None:
        self._end("the caller closed the channel")
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    # -- the threads -------------------------------------------------------------------------

    def _write_frames(self) -> None:
        while True:
            with self._lock:
                while (not self._outbox or self._sending) and not self.closed:
                    self._queued.wait()
                if self.closed:
                    return
                parts = self._outbox.popleft()
                self._sending = True
            try:
                for part in parts:
                    self._sock.sendall(part)
            except OSError as e:
                self._end(f"sending failed ({e})")
                return
            with self._lock:
                self._sending = False

    def _read_answers(self) -> None:
        reason = "the host closed the connection"
        try:
            while True:
                head = self._read_exactly(HEAD.size)
                if head is None:
                    break
                call_id, kind, size, count = HEAD.unpack(head)
                sizes = buffer_sizes(self._read_exactly(count * SIZE.size) or b"", count)
                check_sizes(size, sizes)
                data = self._read_exactly(size)
                buffers = [self._read_exactly(n) for n in sizes]
                if data is None or None in buffers:
                    break
                self._complete(call_id, kind, data, buffers)
        except Exception as e:  # noqa: BLE001 - any failure ends the connection
            reason = f"reading from the host failed ({type(e).__name__}: {e})"
        self._end(reason)
        self._sock.close()

    def _complete(self, call_id: int, kind: int, data, buffers: list) -> None:
        with self._lock:
            future = self._pending.pop(call_id, None)
        if future is None:
            return  # cancelled by its caller
        try:
            value = decode(data, buffers)
        except Exception as e:  # noqa: BLE001 - this call's answer only
            kind, value = ERROR, RafkaError(
                f"the host's answer could not be read here ({type(e).__name__}: {e}); "
                "is this process's rafka the cluster's version?"
            )
        try:
            if kind == ANSWER:
                future.set_result(value)
            else:
                future.set_exception(value)
        except concurrent.futures.InvalidStateError:
            pass  # its caller cancelled it meanwhile

    def _read_exactly(self, size: int) -> bytearray | None:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                return None
            got += n
        return buf

    def _end(self, reason: str) -> None:
        """End the connection and fail every call waiting on it (outside the lock: their
        callbacks may call again)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            pending, self._pending = self._pending, {}
            self._outbox.clear()
            self._queued.notify_all()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
        except OSError:
            pass
        for future in pending.values():
            try:
                future.set_exception(ChannelClosed(
                    f"the connection to the replica host at {self.address} ended: {reason}; "
                    "retry"
                ))
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by its caller
