"""Asking a transactional id's coordinator whether a write may join its transaction (KIP-890's
check, made before a transaction's first write to a partition, and before offsets are
committed inside a transaction)."""

from __future__ import annotations

from typing import Awaitable, Callable

import ray

from rafka.actors.placement import transaction_coordinator_name
from rafka.cluster.topics import TRANSACTION_STATE
from rafka.cluster.transaction_records import shard_of
from rafka.errors import CoordinatorNotAvailable, RafkaError, error_class


class TransactionVerifier:
    """``controller_call(method, *args)`` reaches the controller (for the shard count of
    ``__transaction_state``, fixed once the topic exists)."""

    def __init__(self, namespace: str | None, controller_call: Callable[..., Awaitable]) -> None:
        self.namespace = namespace
        self.controller_call = controller_call
        self._shards: int | None = None

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> RafkaError | None:
        """None when the coordinator confirms that ``transactional_id``'s transaction is
        ongoing with this producer id and epoch and holds ``(topic, partition)``; else the
        error to refuse the write with (CoordinatorNotAvailable, retriable, when the
        coordinator cannot be asked)."""
        try:
            if self._shards is None:
                described = (await self.controller_call("metadata", [TRANSACTION_STATE],
                                                        False))[TRANSACTION_STATE]  # fmt: skip
                if not isinstance(described, dict):
                    raise CoordinatorNotAvailable(f"{TRANSACTION_STATE} does not exist yet; retry")
                self._shards = len(described["partitions"])
            name = transaction_coordinator_name(shard_of(transactional_id, self._shards))
            coordinator = ray.get_actor(name, namespace=self.namespace)
            errno, message = await coordinator.verify_partition.remote(
                transactional_id, producer_id, epoch, topic, partition
            )
        except (ValueError, ray.exceptions.RayActorError) as e:
            return CoordinatorNotAvailable(
                f"the transaction coordinator of {transactional_id!r} could not be asked "
                f"({e!r}); retry"
            )
        except RafkaError as e:
            return e
        return error_class(errno)(message) if errno else None
