"""Markers of transaction version 1 at the leader, outside Ray: a Kafka client that keeps its
epoch has its transactions ended by markers at that epoch, written while a transaction of
the epoch is open here; version 2's rule (a marker must be above the epoch) is unchanged."""

from __future__ import annotations

import asyncio
import logging

from rafka.actors import transaction_markers
from rafka.actors.transaction_markers import TransactionMarkers
from rafka.cluster.transaction_state import Markers
from rafka.errors import InvalidProducerEpoch

from .test_replica_producers import EPOCH, PID, leader_with_open_transaction, txn_batch
from .test_transaction_markers import FakeCluster


def test_a_version_1_marker_at_the_producers_epoch_ends_its_open_transaction(tmp_path):
    """The marker is written, the transaction indexed as aborted, the producer kept at its
    epoch and sequence: its next transaction goes on at the next sequence and is ended the
    same way; version 2's marker at that epoch is still refused."""

    async def run():
        host, replica = await leader_with_open_transaction(tmp_path)
        errno, message, offset = await host.write_marker("tid", 0, PID, EPOCH, False, -1,
                                                         1000, 1)  # fmt: skip
        assert (errno, offset) == (0, 4), message
        assert replica.log.aborted_transactions(0, 5) == [(PID, 1)]
        assert replica.log.last_stable_offset == replica.log.high_watermark == 5
        replica.log.append_as_leader(txn_batch(b"txn-c", 2), 0)  # the next transaction
        errno, _, _ = await host.write_marker("tid", 0, PID, EPOCH, True, -1, 1000, 2)
        assert errno == InvalidProducerEpoch.errno  # version 2: not above the epoch
        assert replica.log.last_stable_offset == 5
        errno, _, offset = await host.write_marker("tid", 0, PID, EPOCH, True, -1, 1000, 1)
        assert (errno, offset) == (0, 6)
        assert replica.log.last_stable_offset == replica.log.high_watermark == 7
        await host.close_all()

    asyncio.run(run())


def test_a_repeated_version_1_marker_is_done_without_a_second_write(tmp_path):
    """With nothing open at the epoch the marker was written already: answered done."""

    async def run():
        host, replica = await leader_with_open_transaction(tmp_path)
        assert (await host.write_marker("tid", 0, PID, EPOCH, True, -1, 1000, 1))[0] == 0
        end = replica.log.log_end_offset
        assert await host.write_marker("tid", 0, PID, EPOCH, True, -1, 1000, 1) == (0, "", -1)
        assert replica.log.log_end_offset == end
        errno, _, _ = await host.write_marker("tid", 0, PID, EPOCH - 1, True, -1, 1000, 1)
        assert errno == InvalidProducerEpoch.errno  # an older epoch: stale either way
        await host.close_all()

    asyncio.run(run())


def test_the_marker_writer_passes_the_transaction_version_to_the_leader(monkeypatch):
    cluster = FakeCluster()
    monkeypatch.setattr(transaction_markers, "find_replica", cluster.find_replica)
    writer = TransactionMarkers("ns", cluster.controller_call, logging.getLogger("t"))
    cluster.create("orders", "id-1", 1)
    for version in (1, 2):
        asyncio.run(writer.write(Markers(7, 4, True, frozenset({("orders", 0)}), version), 0))
    assert cluster.replicas[("id-1", 0)].versions == [1, 2]
