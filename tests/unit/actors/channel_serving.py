"""A ChannelServer on an event loop of its own thread, for the direct channel's unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, Iterator

from rafka.actors.direct_channel import ChannelServer


@contextlib.contextmanager
def serving(methods: dict[str, Any]) -> Iterator[tuple[ChannelServer, asyncio.AbstractEventLoop]]:
    """(server, its loop): ``methods`` served on loopback until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> ChannelServer:
        server = ChannelServer(methods)
        await server.start("127.0.0.1")
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(5)
    try:
        yield server, loop
    finally:
        loop.call_soon_threadsafe(server.close)
        time.sleep(0.05)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
