"""A replica's line to the controller: one call at a time, never an exception.

Used by a ``PartitionReplica`` and its helpers (check-in, ISR proposals, the follower's state
pulls), all on the replica's one event loop. The handle is looked up on first use and
forgotten after a failure, since the controller may come back as a new actor after a crash;
the callers retry on their own schedule.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from rafka.actors.placement import CONTROLLER_NAME


class ControllerLink:
    """Calls to the controller of one Ray namespace, each answered or None."""

    def __init__(self, namespace: str | None, logger: logging.Logger | logging.LoggerAdapter):
        self.namespace = namespace
        self.logger = logger
        self._handle = None

    def _controller(self):
        if self._handle is None:
            self._handle = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        return self._handle

    async def call(self, method: str, *args, timeout_s: float = 10.0) -> Any:
        """One controller call; None when it could not be made (the caller retries)."""
        try:
            ref = getattr(self._controller(), method).remote(*args)
            return await asyncio.wait_for(ref, timeout_s)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
            self.logger.info("controller %s failed: %r", method, e)
            self._handle = None
            return None
