"""The TransactionCoordinator shell with Kafka clients of transaction version 1
(``end_txn(..., bump_epoch=False)``), without Ray: transactions one after another at one
epoch, each completed by its own markers, and a retry answered by the state."""

from __future__ import annotations

import asyncio

from rafka.cluster.transaction_types import TxnState
from rafka.errors import ConcurrentTransactions, InvalidTxnState

from .test_transaction_coordinator import begun, coordinator, states


def test_version_1_transactions_follow_one_another_at_the_same_epoch():
    """Each EndTxn answers the identity the client keeps; its markers carry that epoch and
    complete it; the next transaction's add is accepted with the same identity."""

    async def scenario():
        c = coordinator()
        pid, epoch = await begun(c)
        for n, commit in enumerate([True, False, True]):
            assert await c.add_partitions("etl", pid, epoch, [["orders", n]]) == (0, "")
            assert await c.end_txn("etl", pid, epoch, commit, False) == (0, "", pid, epoch)
            await c._completions["etl"]
            marker = c.markers.written[-1]
            assert (marker.producer_id, marker.producer_epoch, marker.commit) == (
                pid, epoch, commit)  # fmt: skip
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            assert c.transactions["etl"].state is done
        assert len(c.markers.written) == 3
        assert [s for s, _ in states(c) if s.startswith("Prepare")] == [
            "PrepareCommit", "PrepareAbort", "PrepareCommit"]  # fmt: skip

    asyncio.run(scenario())


def test_a_version_1_retry_is_concurrent_while_prepared_and_ok_once_complete():
    """The same EndTxn again: retriable while the markers are written, then answered
    without a write; the other result is InvalidTxnState."""

    async def scenario():
        c = coordinator()
        pid, epoch = await begun(c)
        await c.add_partitions("etl", pid, epoch, [["orders", 0]])
        c.markers.delay_s = 0.05
        assert (await c.end_txn("etl", pid, epoch, True, False))[0] == 0
        assert (await c.end_txn("etl", pid, epoch, True, False))[0] == (
            ConcurrentTransactions.errno)  # fmt: skip
        await c._completions["etl"]
        written = len(c.log.records)
        assert await c.end_txn("etl", pid, epoch, True, False) == (0, "", pid, epoch)
        assert (await c.end_txn("etl", pid, epoch, False, False))[0] == InvalidTxnState.errno
        assert len(c.log.records) == written

    asyncio.run(scenario())
