"""The leader's producer state for the admin tooling of transactions, outside Ray: a host
routes ``describe_producers`` to the replica it names, and an admin's abort (an ABORT marker
one epoch above the producer's, as ``Admin.abort_transaction`` writes it) ends an open
transaction and moves the last stable offset past it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from rafka.actors.replica_handle import REPLICA_METHODS, ReplicaHandle
from rafka.actors.replica_host import ReplicaHost
from rafka.actors.replica_transactions import TransactionHandler
from rafka.errors import InvalidProducerEpoch, NotLeaderOrFollower
from rafka.storage import record_batch as rb

from .test_replica_host import state

PID, EPOCH, TIMESTAMP = 7, 3, 1_700_000_000_000


def txn_batch(value: bytes, seq: int, pid: int = PID, epoch: int = EPOCH) -> bytes:
    return rb.encode_batch([value], None, TIMESTAMP, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, is_transactional=True)  # fmt: skip


def plain(value: bytes) -> np.ndarray:
    return np.frombuffer(rb.encode_batch([value], timestamps=TIMESTAMP), dtype=np.uint8)


async def leader_with_open_transaction(tmp_path) -> tuple[ReplicaHost, object]:
    """A leader of tid-0 whose log holds a plain record (offset 0), then two batches of an
    open transaction of producer 7 at epoch 3 (offsets 1 and 2), then a plain record (3)."""
    host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
    await host.add_replicas([state(0)])
    replica = host.replicas[("tid", 0)]
    assert (await host.produce("tid", 0, plain(b"before"), 1, 1000))[0] == 0
    for seq, value in enumerate((b"txn-a", b"txn-b")):
        replica.log.append_as_leader(txn_batch(value, seq), 0)  # the coordinator's check passed
    assert (await host.produce("tid", 0, plain(b"after"), 1, 1000))[0] == 0
    return host, replica


def test_describe_producers_lists_each_producer_with_its_open_transaction(tmp_path):
    """A row per producer id: epoch, last sequence, last timestamp, coordinator epoch (-1:
    no marker yet) and the first offset of its open transaction."""

    async def run():
        host, replica = await leader_with_open_transaction(tmp_path)
        replica.log.append_as_leader(txn_batch(b"other", 0, pid=3, epoch=0), 0)
        errno, _, rows = await host.describe_producers("tid", 0)
        assert errno == 0
        assert rows == [[3, 0, 0, TIMESTAMP, -1, 4], [PID, EPOCH, 1, TIMESTAMP, -1, 1]]
        assert replica.log.last_stable_offset == 1
        await host.close_all()

    asyncio.run(run())


def test_an_abort_marker_above_the_epoch_ends_the_transaction_and_frees_the_lso(tmp_path):
    """The admin's marker (epoch + 1) closes the transaction: no open offset, the producer
    at the new epoch, the last stable offset at the high watermark, the transaction indexed
    as aborted. (The marker's own timestamp becomes the producer's last timestamp.)"""

    async def run():
        host, replica = await leader_with_open_transaction(tmp_path)
        errno, message, offset = await host.write_marker("tid", 0, PID, EPOCH + 1, False, -1,
                                                         1000)  # fmt: skip
        assert (errno, offset) == (0, 4), message
        _, _, rows = await host.describe_producers("tid", 0)
        assert [row[:3] + row[4:] for row in rows] == [[PID, EPOCH + 1, -1, -1, -1]]
        assert replica.log.last_stable_offset == replica.log.high_watermark == 5
        assert replica.log.aborted_transactions(0, 5) == [(PID, 1)]
        await host.close_all()

    asyncio.run(run())


def test_a_marker_at_the_producers_epoch_is_refused_and_leaves_it_open(tmp_path):
    """Markers must be above the producer's epoch (transaction version 2): one at it would
    look like a retry, so an admin that wrote the epoch it was given would end nothing."""

    async def run():
        host, replica = await leader_with_open_transaction(tmp_path)
        errno, _, _ = await host.write_marker("tid", 0, PID, EPOCH, False, -1, 1000)
        assert errno == InvalidProducerEpoch.errno
        assert replica.log.last_stable_offset == 1
        await host.close_all()

    asyncio.run(run())


def test_only_the_leader_describes_its_producers(tmp_path):
    """A replica that does not lead answers NotLeaderOrFollower (a follower's state may lag
    its log), and a host refuses a partition it does not hold."""

    class NotLeading:
        topic, partition, namespace = "orders", 0, "rafka-unit"
        controller = SimpleNamespace(call=None)  # never called: describing asks no one

        def require_leader(self):
            raise NotLeaderOrFollower("broker 1 is not the leader of orders-0")

    errno, message, rows = TransactionHandler(NotLeading()).describe_producers()
    assert (errno, message, rows) == (NotLeaderOrFollower.errno,
                                      "broker 1 is not the leader of orders-0", [])  # fmt: skip

    async def run():
        host = ReplicaHost(str(tmp_path), broker_id=1, slot=0)
        await host.add_replicas([state(0)])
        with pytest.raises(NotLeaderOrFollower):
            await host.describe_producers("tid", 9)
        await host.close_all()

    asyncio.run(run())


def test_a_replica_handle_routes_describe_producers_to_its_host():
    """describe_producers is a replica method: the handle calls the host's with the topic
    id and partition first."""

    class Host:
        def __init__(self) -> None:
            self.calls: list[tuple] = []
            self.describe_producers = self

        def remote(self, *args):
            self.calls.append(args)
            return "ref"

    host = Host()
    assert "describe_producers" in REPLICA_METHODS
    assert ReplicaHandle(host, "tid", 4).describe_producers.remote() == "ref"
    assert host.calls == [("tid", 4)]
