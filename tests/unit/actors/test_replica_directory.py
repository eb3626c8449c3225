"""A replica's directory belongs to one topic id (Kafka's KIP-516): files left by a deleted
topic of the same name are set aside, never read as the new topic's log. Runs the replica
class outside Ray, on a real directory."""

from __future__ import annotations

import asyncio
import os

from rafka.actors.partition_replica import PartitionReplica
from rafka.storage import record_batch as rb


def state(topic_id: str) -> dict:
    return {
        "topic": "orders", "topic_id": topic_id, "partition": 0, "broker_id": 0,
        "replicas": [0], "isr": [0], "leader": 0, "leader_epoch": 0, "partition_epoch": 0,
        "config": {}, "replica_epoch": 1,
    }  # fmt: skip


def test_a_new_topic_of_a_deleted_name_starts_with_an_empty_log(tmp_path):
    """The old topic's records, epochs and producer state stay in a stray directory."""
    old = PartitionReplica(str(tmp_path), state("old-id"))
    old.log.append_as_leader(rb.encode_batch([b"a", b"b", b"c"], timestamps=1), 0)
    asyncio.run(old.close())
    new = PartitionReplica(str(tmp_path), state("new-id"))
    assert (new.log.log_start_offset, new.log.log_end_offset) == (0, 0)
    assert new.topic_id == "new-id"
    strays = [n for n in os.listdir(tmp_path) if n.endswith("-stray")]
    assert strays == ["orders-0.old-id-stray"]
    asyncio.run(new.close())


def test_a_restart_of_the_same_topic_keeps_its_log(tmp_path):
    """Same topic id: the log is the replica's own and is kept."""
    first = PartitionReplica(str(tmp_path), state("same-id"))
    first.log.append_as_leader(rb.encode_batch([b"a"], timestamps=1), 0)
    asyncio.run(first.close())
    again = PartitionReplica(str(tmp_path), state("same-id"))
    assert again.log.log_end_offset == 1
    assert not again.checked_in  # a restart asks the controller what it is now
    asyncio.run(again.close())


def test_deleting_a_replica_of_a_deleted_topic_spares_the_new_topics_directory(tmp_path):
    """The old replica's delete removes its own set-aside files, never the directory a
    newer topic of the same name now holds."""
    old = PartitionReplica(str(tmp_path), state("old-id"))
    old.log.append_as_leader(rb.encode_batch([b"a"], timestamps=1), 0)
    new = PartitionReplica(str(tmp_path), state("new-id"))  # sets the old files aside
    new.log.append_as_leader(rb.encode_batch([b"b"], timestamps=1), 0)
    asyncio.run(old.delete())
    assert os.listdir(tmp_path) == ["orders-0"]
    assert new.log.log_end_offset == 1
    asyncio.run(new.close())


def test_a_late_replica_of_a_deleted_topic_never_touches_the_newer_topics_directory(tmp_path):
    """The deleted topic's replica is created after the newer topic of the same name took
    the directory (its creation was slow): it works in its own stray directory, and its
    deletion leaves the newer topic's records in place."""
    new = PartitionReplica(str(tmp_path), {**state("new-id"), "topic_created_at": 20})
    new.log.append_as_leader(rb.encode_batch([b"acked-1", b"acked-2"], timestamps=1), 0)
    new.log.flush()
    late = PartitionReplica(str(tmp_path), {**state("old-id"), "topic_created_at": 10})
    assert late.directory.endswith("orders-0.old-id-stray")
    asyncio.run(late.delete())
    assert os.listdir(tmp_path) == ["orders-0"]
    asyncio.run(new.close())
    again = PartitionReplica(str(tmp_path), {**state("new-id"), "topic_created_at": 20})
    assert again.log.log_end_offset == 2
    asyncio.run(again.close())
