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

from rafka.actors.placement import REPLICA_PREFIX
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

    async def replica_names(self) -> set[str]:
        """The names of every replica actor of this namespace (alive or restarting)."""
        named = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        return {
            a["name"] for a in named
            if a.get("namespace") == self.namespace and a["name"].startswith(REPLICA_PREFIX)
        }  # fmt: skip
