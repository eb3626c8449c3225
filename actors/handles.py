"""The clients' gateway to the actors: every ``ray.*`` call a client makes goes through here.

Clients (producer, consumer, admin) never import Ray themselves; they ask this gateway for
object refs and results, and get rafka's typed errors back instead of Ray's exceptions: a
RafkaError raised inside an actor comes back as itself, an unreachable actor as
BrokerNotAvailable (retriable), and an answer that takes too long as RequestTimedOut.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rafka.actors import host_channels
from rafka.actors.placement import CONTROLLER_NAME, replica_name
from rafka.actors.replica_handle import find_replica
from rafka.errors import BrokerNotAvailable, LeaderNotAvailable, RafkaError, RequestTimedOut

__all__ = ["Gateway", "as_array"]

#: How often a wait on channel futures and object refs together looks at the refs (s).
MIXED_WAIT_SLICE_S = 0.005


def as_array(data) -> np.ndarray:
    """Bytes-like record data as a uint8 array: Ray moves arrays through the object store
    without copying, while ``bytes`` are pickled and copied."""
    return data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)


def _translate(error: BaseException, what: str) -> BaseException:
    if isinstance(error, RayTaskError):
        cause = error.cause
        if isinstance(cause, RafkaError):
            return cause
        if isinstance(cause, RayActorError):
            error = cause
        else:
            return error
    if isinstance(error, RayActorError):
        return BrokerNotAvailable(f"{what} is unreachable ({type(error).__name__}); retry")
    if isinstance(error, GetTimeoutError):
        return RequestTimedOut(f"{what} did not answer in time")
    return error


class Gateway:
    """Actor lookups and calls for one Ray namespace. Thread-safe; handles are cached."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._replicas: dict[str, Any] = {}
        self._controller = None
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget every cached handle (after the services were stopped or restarted)."""
        with self._lock:
            self._replicas.clear()
            self._controller = None

    # -- controller ----------------------------------------------------------------------------

    def controller(self):
        if self._controller is None:
            try:
                self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
            except ValueError:
                raise BrokerNotAvailable(
                    f"no rafka controller runs in Ray namespace {self.namespace!r}; start the "
                    "services with rafka.connect() or `rafka up`"
                ) from None
        return self._controller

    def call_controller(self, method: str, *args, timeout_s: float = 60.0) -> Any:
        """Call a controller method and wait for its answer, with rafka's errors. While the
        controller restarts (Ray brings it back after a crash) the call is retried until
        ``timeout_s``. Metadata changes are safe to repeat: the admin calls that create,
        grow or delete send a request id, so a repeat of one that succeeded is answered as it
        was, and any other repeat fails with a typed error rather than changing anything
        twice."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ref = getattr(self.controller(), method).remote(*args)
                return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except RayActorError as e:
                self._controller = None  # it may come back under a new handle
                if time.monotonic() + 0.2 >= deadline:
                    raise _translate(e, "the rafka controller") from None
                time.sleep(0.2)
            except (RayTaskError, GetTimeoutError) as e:
                raise _translate(e, "the rafka controller") from None

    # -- replicas ------------------------------------------------------------------------------

    def replica(self, topic_id: str, partition: int, broker_id: int, host: int):
        """The replica of ``partition`` on ``broker_id``, in host actor slot ``host``
        (a ``ReplicaHandle``); LeaderNotAvailable (retriable) while that host does not run."""
        name = replica_name(topic_id, partition, broker_id)
        handle = self._replicas.get(name)
        if handle is None or handle[0] != host:
            found = find_replica(topic_id, partition, broker_id, host, self.namespace)
            if found is None:
                raise LeaderNotAvailable(
                    f"the replica of partition {partition} of topic id {topic_id} on broker "
                    f"{broker_id} is not running yet (starting, or its disk's node is down); "
                    "retrying"
                )
            handle = (host, found)
            with self._lock:
                self._replicas[name] = handle
        return handle[1]

    def forget_replica(self, topic_id: str, partition: int, broker_id: int) -> None:
        with self._lock:
            self._replicas.pop(replica_name(topic_id, partition, broker_id), None)

    # -- group coordinators --------------------------------------------------------------------

    def group_coordinator(self, group_id: str):
        """The coordinator actor serving ``group_id`` (Kafka's FindCoordinator); started
        with __consumer_offsets on first use."""
        name = self.call_controller("group_coordinator", group_id)["name"]
        return self._named(name, "group coordinator")

    def group_coordinators(self) -> list:
        """Every coordinator shard's actor (for listing groups)."""
        return [self._named(n, "group coordinator") for n in self.call_controller(
            "group_coordinators"
        )]  # fmt: skip

    def transaction_coordinator(self, transactional_id: str):
        """The coordinator actor serving ``transactional_id``; started with
        __transaction_state on first use."""
        name = self.call_controller("transaction_coordinator", transactional_id)["name"]
        return self._named(name, "transaction coordinator")

    def transaction_coordinators(self) -> list:
        """Every transaction coordinator shard's actor (for listing transactions)."""
        return [self._named(n, "transaction coordinator") for n in self.call_controller(
            "transaction_coordinators"
        )]  # fmt: skip

    def _named(self, name: str, what: str):
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            raise BrokerNotAvailable(f"{what} {name} is not running; retry") from None

    @staticmethod
    def send(handle, method: str, *args):
        """Call ``method`` of an actor; returns the object ref of its answer."""
        return getattr(handle, method).remote(*args)

    @staticmethod
    def produce(replica, batch, acks: int, timeout_ms: int, client_id: str, request_no: int,
                transactional_id: str | None = None):  # fmt: skip
        """The leader's answer to a produce request: a pending result for ``get``, ``wait``
        and ``future`` (a direct channel's future, or an object ref)."""
        args = (as_array(batch), acks, timeout_ms, client_id, request_no, transactional_id)
        return host_channels.shared().call_replica(replica, "produce", args, client_id,
                                                   request_no)[0]  # fmt: skip

    @staticmethod
    def fetch(replica, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int):
        args = (offset, max_bytes, min_bytes, max_wait_ms)
        return host_channels.shared().call_replica(replica, "fetch", args)[0]

    @staticmethod
    def fetch_committed(replica, offset: int, max_bytes: int, min_bytes: int, max_wait_ms: int):
        args = (offset, max_bytes, min_bytes, max_wait_ms)
        return host_channels.shared().call_replica(replica, "fetch_committed", args)[0]

    @staticmethod
    def list_offset(replica, timestamp: int, read_committed: bool = False):
        return replica.list_offset.remote(timestamp, read_committed)

    @staticmethod
    def describe(replica):
        return replica.describe.remote()

    # -- results -------------------------------------------------------------------------------

    @staticmethod
    def get(refs, timeout_s: float | None = None, what: str = "a partition replica"):
        """The answer of one pending call (an object ref or a channel's future), or of a
        list of them; rafka's errors."""
        if isinstance(refs, list) and any(isinstance(r, Future) for r in refs):
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            return [Gateway.get(r, None if deadline is None else max(
                0.0, deadline - time.monotonic()), what) for r in refs]  # fmt: skip
        if isinstance(refs, Future):
            try:
                return refs.result(timeout_s)
            except TimeoutError:
                raise RequestTimedOut(f"{what} did not answer in time") from None
        try:
            return ray.get(refs, timeout=timeout_s)
        except (RayTaskError, RayActorError, GetTimeoutError) as e:
            raise _translate(e, what) from None

    @staticmethod
    def wait(refs: list, num_returns: int = 1, timeout_s: float | None = None):
        """(ready, not ready) of ``refs`` (object refs and channel futures, mixed or not),
        each in ``refs``' order: returns once ``num_returns`` are ready or after
        ``timeout_s``."""
        futures = [r for r in refs if isinstance(r, Future)]
        if not futures:
            return ray.wait(refs, num_returns=num_returns, timeout=timeout_s, fetch_local=True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        objects = [r for r in refs if not isinstance(r, Future)]
        while True:
            done = {id(f) for f in futures if f.done()}
            if objects:
                ready_objects, _ = ray.wait(objects, num_returns=len(objects), timeout=0,
                                            fetch_local=True)  # fmt: skip
                done.update(id(r) for r in ready_objects)
            remaining = None if deadline is None else deadline - time.monotonic()
            if len(done) >= min(num_returns, len(refs)) or (
                remaining is not None and remaining <= 0
            ):
                ready = [r for r in refs if id(r) in done]
                return ready, [r for r in refs if id(r) not in done]
            # Object refs have no wakeup shared with futures: look at them every few ms.
            slice_s = MIXED_WAIT_SLICE_S if objects else remaining
            if remaining is not None and slice_s is not None:
                slice_s = min(slice_s, remaining)
            concurrent.futures.wait([f for f in futures if not f.done()] or futures,
                                    timeout=slice_s, return_when=FIRST_COMPLETED)  # fmt: skip

    @staticmethod
    def future(ref) -> concurrent.futures.Future:
        """A concurrent future for ``ref``; its exception is the host's own error (a rafka
        error for every failure the host means), or BrokerNotAvailable for a host gone."""
        if isinstance(ref, Future):
            return ref  # a channel's: its errors are the host's own
        out: concurrent.futures.Future = concurrent.futures.Future()

        def done(inner: concurrent.futures.Future) -> None:
            error = inner.exception()
            if error is None:
                out.set_result(inner.result())
            else:
                out.set_exception(_translate(error, "a partition replica"))

        ref.future().add_done_callback(done)
        return out
