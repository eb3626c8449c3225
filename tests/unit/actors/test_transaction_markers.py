"""Marker writes keep each topic's description and each leader's handle between
transactions, and never take a partition as needing no marker on a kept description: a topic
deleted and created again, or grown, is looked up afresh and its new replica gets the marker."""

from __future__ import annotations

import asyncio
import copy
import logging

from rafka.actors import transaction_markers
from rafka.actors.transaction_markers import TransactionMarkers
from rafka.cluster.transaction_types import Markers
from rafka.errors import UnknownTopicOrPartition


class FakeReplica:
    """A leader replica: records the markers it was asked to write; ``gone`` answers as a
    replica of a deleted topic does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gone = False
        self.markers: list[tuple] = []
        self.versions: list[int] = []  # the transaction version of each marker
        self.write_marker = self  # ``replica.write_marker.remote(...)``

    def remote(self, producer_id, epoch, commit, coordinator_epoch, timeout_ms,
               transaction_version=2):  # fmt: skip
        async def answer():
            if self.gone:
                error = UnknownTopicOrPartition(f"{self.name} does not exist here")
                return (error.errno, str(error), -1)
            self.markers.append((producer_id, epoch, commit))
            self.versions.append(transaction_version)
            return (0, "", len(self.markers) - 1)

        return answer()


class FakeCluster:
    """The controller's ``metadata`` answers and the replicas ``find_replica`` finds."""

    def __init__(self) -> None:
        self.topics: dict[str, dict] = {}
        self.replicas: dict[tuple[str, int], FakeReplica] = {}
        self.metadata_calls = 0

    def create(self, topic: str, topic_id: str, partitions: int) -> None:
        self.topics[topic] = {"topic_id": topic_id, "partitions": [
            {"leader": 1, "replicas": [1], "hosts": [0]} for _ in range(partitions)]}
        for p in range(partitions):
            self.replicas[(topic_id, p)] = FakeReplica(f"{topic_id}-{p}")

    async def controller_call(self, method: str, topics: list[str], _create: bool):
        assert method == "metadata"
        self.metadata_calls += 1
        # copies, as an answer over Ray is
        return {t: copy.deepcopy(self.topics.get(t, "UNKNOWN_TOPIC_OR_PARTITION"))
                for t in topics}  # fmt: skip

    def find_replica(self, topic_id, partition, broker_id, slot, namespace):
        return self.replicas.get((topic_id, partition))


def markers(epoch: int, *partitions: tuple[str, int]) -> Markers:
    return Markers(producer_id=7, producer_epoch=epoch, commit=True,
                   partitions=frozenset(partitions))  # fmt: skip


def writer(monkeypatch) -> tuple[FakeCluster, TransactionMarkers]:
    cluster = FakeCluster()
    monkeypatch.setattr(transaction_markers, "find_replica", cluster.find_replica)
    return cluster, TransactionMarkers("ns", cluster.controller_call, logging.getLogger("t"))


def test_a_producers_next_transaction_reuses_the_leaders_found_for_the_last(monkeypatch):
    cluster, markers_writer = writer(monkeypatch)
    cluster.create("orders", "id-1", 2)
    asyncio.run(markers_writer.write(markers(1, ("orders", 0), ("orders", 1)), 0))
    asyncio.run(markers_writer.write(markers(2, ("orders", 0), ("orders", 1)), 0))
    assert cluster.metadata_calls == 1
    assert [m[1] for m in cluster.replicas[("id-1", 0)].markers] == [1, 2]


def test_a_topic_created_again_gets_the_marker_on_its_new_replica(monkeypatch):
    cluster, markers_writer = writer(monkeypatch)
    cluster.create("orders", "id-1", 1)
    asyncio.run(markers_writer.write(markers(1, ("orders", 0)), 0))
    cluster.replicas[("id-1", 0)].gone = True  # deleted ...
    cluster.create("orders", "id-2", 1)  # ... and created again, then written to
    asyncio.run(markers_writer.write(markers(2, ("orders", 0)), 0))
    assert cluster.replicas[("id-2", 0)].markers == [(7, 2, True)]


def test_a_partition_beyond_the_kept_description_is_looked_up_not_skipped(monkeypatch):
    cluster, markers_writer = writer(monkeypatch)
    cluster.create("orders", "id-1", 1)
    asyncio.run(markers_writer.write(markers(1, ("orders", 0)), 0))
    cluster.topics["orders"]["partitions"].append({"leader": 1, "replicas": [1], "hosts": [0]})
    cluster.replicas[("id-1", 1)] = FakeReplica("id-1-1")  # the topic grew a partition
    asyncio.run(markers_writer.write(markers(2, ("orders", 1)), 0))
    assert cluster.replicas[("id-1", 1)].markers == [(7, 2, True)]


def test_a_deleted_topic_needs_no_marker_once_the_controller_says_so(monkeypatch):
    cluster, markers_writer = writer(monkeypatch)
    cluster.create("orders", "id-1", 1)
    asyncio.run(markers_writer.write(markers(1, ("orders", 0)), 0))
    cluster.replicas[("id-1", 0)].gone = True
    del cluster.topics["orders"]
    asyncio.run(markers_writer.write(markers(2, ("orders", 0)), 0))  # returns: done
    assert cluster.metadata_calls == 2
