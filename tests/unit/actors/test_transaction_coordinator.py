"""The TransactionCoordinator shell without Ray, on a fake log and fake marker writes: adds
that wait together are written as one record, a completion is applied once its markers are
written and its record comes later (or never, when the next transaction's record comes
first), and an add whose decision was cut short is still answered."""

from __future__ import annotations

import asyncio
import logging

from rafka.actors import transaction_coordinator as tc
from rafka.actors.transaction_adds import WaitingAdds
from rafka.cluster.transaction_records import decode
from rafka.cluster.transaction_types import TxnState
from rafka.errors import CoordinatorNotAvailable


class FakeLog:
    """``TransactionLog``'s writes: decoded records, each write taking ``delay_s``."""

    class fencing:  # noqa: N801 - the attribute the shell reads
        epoch = 3

    def __init__(self) -> None:
        self.records: list = []
        self.delay_s = 0.0

    async def write(self, records) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.records.extend(decode(k, v) for k, v in records)

    async def controller_call(self, method: str, *args):
        assert method == "allocate_producer_id"
        return (1000 + len(self.records), 0)


class FakeMarkers:
    def __init__(self) -> None:
        self.written: list = []
        self.delay_s = 0.0

    async def write(self, markers, coordinator_epoch: int) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.written.append(markers)


def coordinator() -> tc.TransactionCoordinator:
    """The shell with its Ray-facing parts replaced (``__init__`` needs a running actor)."""
    c = object.__new__(tc.TransactionCoordinator)
    c.logger, c.shard, c.settings = logging.getLogger("test"), 0, {}
    c.log, c.markers = FakeLog(), FakeMarkers()
    c.max_timeout_ms, c.expiration_ms = 900_000, 10**9
    c.transactions, c._locks, c._completions = {}, {}, {}
    c._adds, c._unpersisted, c._producer_ids, c._tasks = WaitingAdds(), {}, [], []
    c._loaded = asyncio.Event()
    c._loaded.set()
    return c


def states(c) -> list[tuple[str, list]]:
    return [(meta.state.value, sorted(meta.partitions)) for _, meta in c.log.records]


async def begun(c, tid: str = "etl") -> tuple[int, int]:
    errno, _, producer_id, epoch = await c.init_producer_id(tid, 60_000)
    assert errno == 0
    return producer_id, epoch


def test_adds_arriving_together_are_written_as_one_record():
    async def scenario():
        c = coordinator()
        pid, epoch = await begun(c)
        c.log.records.clear()
        answers = await asyncio.gather(*(
            c.add_partitions("etl", pid, epoch, [["orders", p]]) for p in range(3)))
        assert answers == [(0, "")] * 3
        assert states(c) == [("Ongoing", [("orders", 0), ("orders", 1), ("orders", 2)])]

    asyncio.run(scenario())


def test_a_completion_is_applied_at_once_and_written_later_unless_superseded():
    async def scenario():
        c = coordinator()
        pid, epoch = await begun(c)
        await c.add_partitions("etl", pid, epoch, [["orders", 0]])
        _, _, pid, epoch = await c.end_txn("etl", pid, epoch, True)
        await c._completions["etl"]
        assert c.transactions["etl"].state is TxnState.COMPLETE_COMMIT
        assert states(c)[-1][0] == "PrepareCommit"  # nothing written for the completion yet
        # The next transaction's first add comes first: its record holds the completion.
        assert await c.add_partitions("etl", pid, epoch, [["orders", 1]]) == (0, "")
        assert states(c)[-1] == ("Ongoing", [("orders", 1)]) and not c._unpersisted
        # A completion nothing follows is written by the timer.
        _, _, pid, epoch = await c.end_txn("etl", pid, epoch, False)
        await c._completions["etl"]
        await c._persist_completions()
        assert states(c)[-2:] == [("PrepareAbort", [("orders", 1)]), ("CompleteAbort", [])]
        assert not c._unpersisted

    asyncio.run(scenario())


def test_an_add_decided_with_another_is_answered_though_that_call_is_cancelled():
    async def scenario():
        c = coordinator()
        pid, epoch = await begun(c)
        c.log.delay_s = 0.2
        first = asyncio.create_task(c.add_partitions("etl", pid, epoch, [["orders", 0]]))
        second = asyncio.create_task(c.add_partitions("etl", pid, epoch, [["orders", 1]]))
        await asyncio.sleep(0.05)  # the first took both and is writing
        first.cancel()
        errno, message = await asyncio.wait_for(second, 2.0)
        assert errno == CoordinatorNotAvailable.errno and "retry" in message

    asyncio.run(scenario())
