"""One process's direct channels to replica hosts (``direct_channel``), by host actor.

A caller asks ``channel(host)`` before each hot call and gets a connected ``ChannelClient``,
or None: then it makes the actor call as before. Finding a host's channel never blocks on
the host: the first ask sends the host's ``channel_address`` call and answers None; a later
ask finds that answer and connects. So the first calls to a host go as actor calls and the
rest over the channel; numbered produce requests are appended in their order whichever way
they came (``RequestOrder``), and a fetch has one call in flight per partition.

A channel that ends (the host died or restarted) is dropped and looked up again; a host that
has none (channels off there, its address unreachable from here) is asked again after
``RETRY_AFTER_S``. Thread-safe.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

from rafka.actors.direct_channel import ChannelClient, enabled

#: Seconds before a host without a usable channel is asked again.
RETRY_AFTER_S = 5.0


class HostChannels:
    def __init__(self) -> None:
        # host actor id -> a ChannelClient, a future of its address being asked, or the
        # monotonic time before which not to ask again.
        self._by_host: dict[Any, Any] = {}
        self._lock = threading.Lock()

    def channel(self, host) -> ChannelClient | None:
        """The connected channel to ``host`` (a ReplicaHost actor handle), or None for now."""
        key = host._actor_id
        entry = self._by_host.get(key)
        if isinstance(entry, ChannelClient) and not entry.closed:
            return entry
        if not enabled():
            return None
        with self._lock:
            entry = self._by_host.get(key)
            if isinstance(entry, ChannelClient):
                if not entry.closed:
                    return entry
                entry = None  # ended: ask for the address again
            if isinstance(entry, float):
                if time.monotonic() < entry:
                    return None
                entry = None
            if entry is None:
                self._by_host[key] = host.channel_address.remote().future()
                return None
            if not entry.done():
                return None
            self._by_host[key] = client = self._connect(entry)
            return client if isinstance(client, ChannelClient) else None

    @staticmethod
    def _connect(asked: concurrent.futures.Future) -> ChannelClient | float:
        try:
            address = asked.result(timeout=0)
            if address is None:
                return time.monotonic() + RETRY_AFTER_S
            ip, port, token = address
            return ChannelClient((ip, port), token)
        except Exception:  # noqa: BLE001 - the host died, or its address is unreachable here
            return time.monotonic() + RETRY_AFTER_S

    def close(self) -> None:
        """Close every channel (the process is done with the cluster)."""
        with self._lock:
            entries, self._by_host = list(self._by_host.values()), {}
        for entry in entries:
            if isinstance(entry, ChannelClient):
                entry.close()


_shared = HostChannels()


def shared() -> HostChannels:
    """This process's channels (one connection per host, whoever calls it)."""
    return _shared
