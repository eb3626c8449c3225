"""The controller's one contact with Ray: find named actors, call them, list and kill them.

Every Ray call the controller makes to node agents and replica actors goes through a
``RayActors``, so the controller's logic runs unchanged over a fake one in tests (with
exact interleavings of calls, deaths and restarts). An actor that died or cannot be reached
surfaces as ``ActorDied``, whatever Ray raised.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import ray

from rafka.actors.replica_handle import ReplicaHandle, find_replica
from rafka.errors import BrokerNotAvailable


class ActorDied(BrokerNotAvailable):
    """The actor a call went to died, or restarts, before it answered."""


class RayActors:
    """Named actors of one Ray namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def find(self, name: str):
        """The handle of the named actor; None when no actor has that name."""
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None

    async def call(self, handle, method: str, *args, timeout_s: float | None = None) -> Any:
        """Call ``method`` and wait for its answer (up to ``timeout_s``: asyncio.TimeoutError
        after it); ActorDied when the actor is dead or restarting."""
        try:
            ref = getattr(handle, method).remote(*args)
            return await (ref if timeout_s is None else asyncio.wait_for(ref, timeout_s))
        except ray.exceptions.RayActorError as e:
            raise ActorDied(f"actor call {method} failed: {type(e).__name__}") from None

    def send(
        self, handle, method: str, *args, on_failure: Callable[[], None] | None = None
    ) -> None:
        """Call ``method`` without waiting; ``on_failure()`` runs if the actor is gone."""
        ref = getattr(handle, method).remote(*args)
        if on_failure is not None:

            def done(future) -> None:
                if isinstance(future.exception(), ray.exceptions.RayActorError):
                    on_failure()

            ref.future().add_done_callback(done)

    def replica(self, topic_id: str, partition: int, broker_id: int, slot: int):
        """The handle of a replica in host ``slot`` of ``broker_id``; None when that host
        does not run."""
        return find_replica(topic_id, partition, broker_id, slot, self.namespace)

    def push_states(
        self, pushes: list[tuple[ReplicaHandle, dict]], on_failure: Callable[[dict], None]
    ) -> None:
        """Send each state to its replica without waiting, one ``update_states`` call per
        host actor; ``on_failure(state)`` runs for each state whose host is gone."""
        by_host: dict[Any, list[dict]] = {}  # Ray actor handles compare by actor id
        for handle, state in pushes:
            by_host.setdefault(handle.host, []).append(state)
        for host, states in by_host.items():
            self.send(host, "update_states", states,
                      on_failure=lambda states=states: [on_failure(s) for s in states])
