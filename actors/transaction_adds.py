"""Adds to transactions waiting at a transaction coordinator, decided together.

With transaction version 2 each partition's leader adds its partition to the producer's
transaction as the transaction's first batch arrives there: the leaders of one transaction
ask at about the same moment, all of them right after the producer's previous transaction
completes. Every add waiting for an id with the same producer identity is decided in one
decision and persisted in one record. No Ray: asyncio futures only.
"""

from __future__ import annotations

import asyncio
import dataclasses

from rafka.errors import RafkaError


@dataclasses.dataclass(eq=False)
class WaitingAdd:
    """One add waiting for its decision: ``done`` is resolved by whichever decision takes
    it (None on success, the refusal otherwise)."""

    identity: tuple[int, int]  # (producer id, epoch)
    partitions: frozenset
    done: asyncio.Future


class WaitingAdds:
    """The adds waiting at one coordinator, by transactional id."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[WaitingAdd]] = {}

    def join(self, transactional_id: str, identity: tuple[int, int], partitions) -> WaitingAdd:
        add = WaitingAdd(
            (int(identity[0]), int(identity[1])),
            frozenset((str(t), int(p)) for t, p in partitions),
            asyncio.get_running_loop().create_future(),
        )  # fmt: skip
        self._waiting.setdefault(transactional_id, []).append(add)
        return add

    def leave(self, transactional_id: str, add: WaitingAdd) -> None:
        """``add`` no longer waits (decided, or its caller gave up)."""
        waiting = self._waiting.get(transactional_id)
        if waiting is not None and add in waiting:
            waiting.remove(add)
        if not waiting:
            self._waiting.pop(transactional_id, None)

    def take(self, transactional_id: str, identity: tuple[int, int]) -> list[WaitingAdd]:
        """Remove and return the adds waiting for ``transactional_id`` with ``identity``."""
        waiting = self._waiting.get(transactional_id, [])
        taken = [a for a in waiting if a.identity == tuple(identity) and not a.done.done()]
        for a in taken:
            self.leave(transactional_id, a)
        return taken

    def waiting(self, transactional_id: str) -> int:
        return len(self._waiting.get(transactional_id, ()))


def partitions_of(adds: list[WaitingAdd]) -> list[tuple[str, int]]:
    return sorted(frozenset().union(*(a.partitions for a in adds)))


def resolve(adds: list[WaitingAdd], error: RafkaError | None) -> None:
    """Answer every add of ``adds`` not answered yet."""
    for a in adds:
        if a.done.done():
            continue
        if error is None:
            a.done.set_result(None)
        else:
            a.done.set_exception(error)
