"""Per-client request order for one partition's produce calls.

Ray starts an async actor's calls in arrival order but does not promise to run them in the
order one client sent them, so each producer numbers its requests to a partition from 0 and
the leader appends them in that order: a request waits its turn (``wait_turn``) and passes it
on when done (``end_turn``).

Used by the produce path of one ``PartitionReplica``, on its one event loop; any number of
requests may wait at once. In memory only: after a restart every client is unknown again,
and a request from an unknown client waits only briefly for its predecessors (they may have
been appended before the restart). A request that never arrives (its sender died) is given
up on after the waiting request's timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time

#: How long a request from a client this replica has not seen waits for number 0, ms: long
#: enough for a first burst that raced itself, short for a replica that restarted mid-session.
UNKNOWN_CLIENT_WAIT_MS = 200
#: Clients remembered before idle ones (silent for an hour) are forgotten.
MAX_CLIENTS = 10_000
IDLE_CLIENT_S = 3600


class RequestOrder:
    """Each client's next request number and when it was last heard from."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter):
        self.logger = logger
        self._next_request: dict[str, list] = {}  # client id -> [next number, last used]
        self._changed: asyncio.Condition | None = None  # made on the actor's running loop

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def wait_turn(self, client_id: str, request_no: int, timeout_ms: int) -> None:
        """Wait until every earlier request of ``client_id`` has been appended. A request
        that never arrives (its sender died) is given up on after ``timeout_ms``."""
        turn = self._next_request.get(client_id)
        wait_ms = timeout_ms
        if turn is None:
            turn = self._next_request[client_id] = [0, 0.0]
            if len(self._next_request) > MAX_CLIENTS:
                self._forget_idle_clients()
            # A client this replica has not seen: either its first requests raced each other
            # (wait a little for number 0) or this replica restarted mid-session (go on).
            wait_ms = min(timeout_ms, UNKNOWN_CLIENT_WAIT_MS)
        turn[1] = time.monotonic()
        if request_no <= turn[0]:
            return
        deadline = time.monotonic() + wait_ms / 1000
        changed = self._condition()
        async with changed:
            while turn[0] < request_no:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.logger.warning(
                        "request %d of client %s waited %d ms for request %d; going on",
                        request_no, client_id, wait_ms, turn[0],
                    )  # fmt: skip
                    turn[0] = request_no
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    async def end_turn(self, client_id: str, request_no: int) -> None:
        """Request ``request_no`` of ``client_id`` is done: let the next one go."""
        turn = self._next_request.get(client_id)
        if turn is not None and request_no >= turn[0]:
            turn[0] = request_no + 1
            changed = self._condition()
            async with changed:
                changed.notify_all()

    def _forget_idle_clients(self) -> None:
        idle = time.monotonic() - IDLE_CLIENT_S
        for client_id in [c for c, t in self._next_request.items() if t[1] < idle]:
            del self._next_request[client_id]
