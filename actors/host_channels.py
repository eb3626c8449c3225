"""One process's direct channels to replica hosts (``direct_channel``), by host actor.

A caller asks ``channel(host)`` before each hot call and gets a connected ``ChannelClient``,
or None: then it makes the actor call as before. Finding a host's channel never blocks: the
first ask sends the host's ``channel_address`` call and answers None, and a thread connects
once the address comes; a later ask finds the channel. So the first calls to a host go as
actor calls and the rest over the channel; numbered produce requests are appended in their order whichever way
they came (``RequestOrder``), and a fetch has one call in flight per partition.

A channel that ends (the host died or restarted) is dropped and looked up again; a host that
has none (channels off there, its address unreachable from here) is asked again after
``RETRY_AFTER_S`` (``UNREACHABLE_RETRY_S`` when its address did not connect). Thread-safe.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time
from typing import Any, Hashable

from rafka.actors.channel_client import ChannelClient
from rafka.actors.direct_channel import CHANNEL_METHODS, enabled

#: Seconds before a host that gave no channel (dead, restarting, channels off) is asked again.
RETRY_AFTER_S = 5.0
#: Seconds before a host whose channel could not be reached from here is tried again (a
#: driver outside the cluster's network, through Ray Client).
UNREACHABLE_RETRY_S = 60.0
#: Seconds before a host whose channel ended is asked again (a host refusing every
#: connection, or restarting, is not asked in a loop).
RECONNECT_AFTER_S = 0.5
#: Numbered request sessions remembered (``for_request``): a session forgotten goes either
#: way, so this is far more than the partitions a process produces to at once.
SESSIONS_KEPT = 65_536


class HostChannels:
    def __init__(self) -> None:
        # host actor id -> a ChannelClient; a future of one being set up (a ChannelClient,
        # or the monotonic time before which not to ask again); or that time.
        self._by_host: dict[Any, Any] = {}
        self._lock = threading.Lock()
        # Numbered request sessions -> how their request 0 went (the channel, or the future
        # of its actor call's answer), the latest started last.
        self._sessions: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()

    def channel(self, host) -> ChannelClient | None:
        """The connected channel to ``host`` (a ReplicaHost actor handle), or None for now.
        Never waits: a lookup runs in the background."""
        key = getattr(host, "_actor_id", None)  # None: not an actor (an in-process host)
        if key is None or not enabled():
            return None
        entry = self._by_host.get(key)
        if isinstance(entry, ChannelClient) and not entry.closed:
            return entry
        with self._lock:
            entry = self._by_host.get(key)
            if isinstance(entry, concurrent.futures.Future):
                if not entry.done():
                    return None
                self._by_host[key] = entry = entry.result()
            if isinstance(entry, ChannelClient):
                if not entry.closed:
                    return entry
                self._by_host[key] = time.monotonic() + RECONNECT_AFTER_S
                return None
            if isinstance(entry, float) and time.monotonic() < entry:
                return None
            self._by_host[key] = _set_up(host)  # time to ask
            return None

    def call_replica(self, replica, method: str, args: tuple, client_id: str | None = None,
                     request_no: int = -1) -> tuple[Any, ChannelClient | None]:
        """``method`` of ``replica`` (a ReplicaHandle) with ``args``, submitted now: (its
        pending answer, the channel's concurrent future or the actor call's object ref; the
        channel it went over, or None). Methods channels do not serve go as actor calls; a
        producer's numbered request (``client_id``, ``request_no`` >= 0) goes the way
        ``for_request`` says for its session (that client at that partition)."""
        host, channel = replica.host, None
        session = None if client_id is None else (client_id, replica.topic_id, replica.partition)
        if method in CHANNEL_METHODS:
            channel = (self.channel(host) if session is None
                       else self.for_request(host, session, request_no))  # fmt: skip
        if channel is not None:
            return channel.call(method, replica.topic_id, replica.partition, *args), channel
        ref = getattr(replica, method).remote(*args)
        if session is not None and request_no == 0:
            self.sent_as_actor_call(host, session, request_no, ref.future())
        return ref, None

    def for_request(self, host, session: Hashable, request_no: int) -> ChannelClient | None:
        """The channel for request ``request_no`` of a numbered ``session`` (one producer's
        requests to one partition, which the leader appends in number order), or None for
        an actor call, which the caller then reports with ``sent_as_actor_call``.

        The leader waits for a missing number as long as a request may take, but for a
        session it does not know yet only briefly (``RequestOrder``). So a session whose
        request 0 went as an actor call keeps to actor calls until that call is answered
        (a later request on a channel that came up meanwhile could overtake it); and one
        whose request 0 went over a channel keeps to that channel: once it ended, its calls
        fail at once (retriable) and the producer starts a new session, rather than send a
        request that would wait at the leader for one lost with the connection. Unnumbered
        requests (-1) go either way."""
        channel = self.channel(host)
        if request_no < 0:
            return channel
        key = (getattr(host, "_actor_id", None), session)  # a session moved host starts anew
        with self._lock:
            if request_no == 0:
                self._sessions.pop(key, None)
                if channel is not None:
                    self._remember(key, channel)
                return channel
            first = self._sessions.get(key)
            if isinstance(first, ChannelClient):
                return first
            if first is not None and not first.done():
                return None
            return channel

    def sent_as_actor_call(self, host, session: Hashable, request_no: int,
                           answer: concurrent.futures.Future) -> None:  # fmt: skip
        """Request ``request_no`` of ``session`` went to ``host`` as an actor call;
        ``answer`` completes with it."""
        if request_no == 0:
            with self._lock:
                self._remember((getattr(host, "_actor_id", None), session), answer)

    def _remember(self, key: Hashable, first) -> None:
        self._sessions[key] = first
        self._sessions.move_to_end(key)
        if len(self._sessions) > SESSIONS_KEPT:
            # The oldest session whose request 0 is not an actor call still unanswered:
            # forgetting one of those would let its later requests overtake it.
            for old, way in self._sessions.items():
                if isinstance(way, ChannelClient) or way.done():
                    del self._sessions[old]
                    break

    def close(self) -> None:
        """Close every channel (the process is done with the cluster)."""
        with self._lock:
            entries, self._by_host = list(self._by_host.values()), {}
        for entry in entries:
            if isinstance(entry, concurrent.futures.Future) and entry.done():
                entry = entry.result()
            if isinstance(entry, ChannelClient):
                entry.close()


def _set_up(host) -> concurrent.futures.Future:
    """Ask ``host`` for its channel and connect, in the background: a future of the
    ChannelClient, or of the time to ask again when there is none."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def connect(address) -> None:
        try:
            ip, port, token = address
            out.set_result(ChannelClient((ip, port), token))
        except Exception:  # noqa: BLE001 - unreachable from here: actor calls for a while
            out.set_result(time.monotonic() + UNREACHABLE_RETRY_S)

    def answered(asked: concurrent.futures.Future) -> None:
        try:
            address = asked.result()
        except Exception:  # noqa: BLE001 - the host died or restarts
            address = None
        if address is None:
            out.set_result(time.monotonic() + RETRY_AFTER_S)
        else:  # off Ray's callback thread: a connect may take up to its timeout
            threading.Thread(target=connect, args=(address,), name="rafka-channel-connect",
                             daemon=True).start()  # fmt: skip

    try:
        host.channel_address.remote().future().add_done_callback(answered)
    except Exception:  # noqa: BLE001 - Ray refused the call (shutting down)
        out.set_result(time.monotonic() + RETRY_AFTER_S)
    return out
_shared = HostChannels()


def shared() -> HostChannels:
    """This process's channels (one connection per host, whoever calls it)."""
    return _shared


def _forget_after_fork() -> None:
    """A forked child shares its parent's sockets but not their threads: it starts with no
    channels, so no answer meant for the parent is read here, nor the other way round."""
    global _shared
    _shared = HostChannels()


os.register_at_fork(after_in_child=_forget_after_fork)
