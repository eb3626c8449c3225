"""A partition leader's or group coordinator's questions to a transactional id's coordinator
(KIP-890's server-side defense), asked before a transaction's first write to a partition:

- ``add_partition``: the leader of a data partition adds it to the producer's transaction
  (Kafka 4's transaction version 2: the producer sends no AddPartitionsToTxn for data
  partitions, the leader's call adds it, durably, before the first batch is appended);
- ``verify``: a group coordinator checks that the transaction already holds its offsets
  partition (the producer added it) before offsets are committed inside it.

Either way the coordinator judges the producer's id and epoch: a write of a transaction that
has ended (its epoch was bumped) is refused."""

from __future__ import annotations

from typing import Awaitable, Callable

import ray

from rafka.actors.placement import transaction_coordinator_name
from rafka.cluster.topics import TRANSACTION_STATE
from rafka.cluster.transaction_records import shard_of
from rafka.errors import CoordinatorNotAvailable, RafkaError, error_class


class TransactionVerifier:
    """``controller_call(method, *args)`` reaches the controller (for the shard count of
    ``__transaction_state``, fixed once the topic exists). Coordinator handles are kept
    until a call to one fails (a restarted coordinator keeps its name and handle)."""

    def __init__(self, namespace: str | None, controller_call: Callable[..., Awaitable]) -> None:
        self.namespace = namespace
        self.controller_call = controller_call
        self._shards: int | None = None
        self._coordinators: dict[int, ray.actor.ActorHandle] = {}

    async def add_partition(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> RafkaError | None:
        """None once the coordinator has added ``(topic, partition)`` to the transaction of
        this producer id and epoch (beginning it if none is ongoing); else the error to
        refuse the write with (retriable when the coordinator could not be asked, or is
        still completing the producer's previous transaction)."""
        return await self._ask(transactional_id, "add_partitions", transactional_id,
                               producer_id, epoch, [[topic, partition]])  # fmt: skip

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> RafkaError | None:
        """None when the coordinator confirms that ``transactional_id``'s transaction is
        ongoing with this producer id and epoch and holds ``(topic, partition)``; else the
        error to refuse the write with (CoordinatorNotAvailable, retriable, when the
        coordinator cannot be asked)."""
        return await self._ask(transactional_id, "verify_partition", transactional_id,
                               producer_id, epoch, topic, partition)  # fmt: skip

    async def _ask(self, transactional_id: str, method: str, *args) -> RafkaError | None:
        shard = None
        try:
            if self._shards is None:
                described = (await self.controller_call("metadata", [TRANSACTION_STATE],
                                                        False))[TRANSACTION_STATE]  # fmt: skip
                if not isinstance(described, dict):
                    raise CoordinatorNotAvailable(f"{TRANSACTION_STATE} does not exist yet; retry")
                self._shards = len(described["partitions"])
            shard = shard_of(transactional_id, self._shards)
            coordinator = self._coordinators.get(shard)
            if coordinator is None:
                coordinator = ray.get_actor(transaction_coordinator_name(shard),
                                            namespace=self.namespace)  # fmt: skip
                self._coordinators[shard] = coordinator
            errno, message = await getattr(coordinator, method).remote(*args)
        except (ValueError, ray.exceptions.RayActorError) as e:
            self._coordinators.pop(shard, None)
            return CoordinatorNotAvailable(
                f"the transaction coordinator of {transactional_id!r} could not be asked "
                f"({e!r}); retry"
            )
        except RafkaError as e:
            return e
        return error_class(errno)(message) if errno else None
