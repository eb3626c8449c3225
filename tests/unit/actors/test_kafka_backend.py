"""The Kafka listener's metadata cache: one controller read per topic however many requests
want it at once."""

from __future__ import annotations

import asyncio

from rafka.actors.kafka_backend import KafkaBackend


class _CountingBackend(KafkaBackend):
    """A KafkaBackend whose controller answers after a pause and counts the reads."""

    def __init__(self) -> None:
        super().__init__("test")
        self.reads = 0

    async def controller(self, method: str, *args, timeout_s: float = 30.0):
        assert method == "metadata"
        self.reads += 1
        await asyncio.sleep(0.01)
        (topic,) = args[0]
        return {topic: {"topic_id": "id", "partitions": [
            {"partition": p, "leader": 1, "leader_epoch": 3, "replicas": [1], "isr": [1]}
            for p in range(8)]}}  # fmt: skip


def test_concurrent_requests_for_a_topic_not_cached_read_it_once():
    """Partitions of one fetch asking for a newer leader epoch (each dropping the cache) or a
    burst of requests after a leader change cost one controller read, not one each."""

    async def run():
        backend = _CountingBackend()
        epochs = await asyncio.gather(*(backend.leader_epoch("t", p, newer_than=9)
                                        for p in range(8)))  # fmt: skip
        return backend.reads, epochs

    reads, epochs = asyncio.run(run())
    assert epochs == [3] * 8
    assert reads <= 2  # the first load, and at most one re-read for the newer epoch
