"""A batch whose linger is over goes out when its partition can take it: while every request
a partition may have in flight is out (or its idempotence window is full), records sent
meanwhile join the open batch, as in Kafka's producer (a batch closes when the sender drains
it), rather than each sealing a batch of its own that then waits for a slot."""

from __future__ import annotations

import time

import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer

from .fake_leader import Action, FakeGateway


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=1)
    yield g
    g.shut()


@pytest.mark.parametrize("settings", [
    {"acks": "all", "enable_idempotence": True, "max_in_flight": 5},
    {"acks": 1, "enable_idempotence": False, "max_in_flight": 2},
], ids=["idempotent", "plain"])  # fmt: skip
def test_records_sent_while_a_partition_cannot_send_join_one_batch_not_one_batch_each(
    gateway, settings
):
    # The first request is answered (an idempotent producer sends alone until its first
    # answer), then every request is held.
    gateway.script = lambda request: Action.ANSWER if request.number == 0 else Action.HOLD
    producer = Producer(gateway, MetadataCache(gateway), linger_ms=0, retry_backoff_ms=1,
                        **settings)  # fmt: skip
    slots = settings["max_in_flight"]
    try:
        futures = [producer.send("t", value=b"first", partition=0)]
        futures[0].result(timeout=10)
        for i in range(slots):  # one record a request until every slot is taken
            futures.append(producer.send("t", value=b"a%d" % i, partition=0))
            gateway.wait_for(lambda n=i + 2: len(gateway.requests) == n)
        for i in range(100):  # the sender gets its passes in between
            futures.append(producer.send("t", value=b"b%d" % i, partition=0))
            time.sleep(0.0005)
        gateway.script = lambda request: Action.ANSWER
        gateway.release_held()
        producer.flush(timeout=10)
        [f.result(timeout=0) for f in futures]
    finally:
        producer.close(timeout=10)
    later = [b for r in gateway.requests[slots + 1:] for b in r.batches]
    assert [v for b in later for v in b.values] == [b"b%d" % i for i in range(100)]
    assert len(later) == 1  # one batch, sealed when a slot came free
    assert [v for _, v in gateway.log_values(0)] == [b"first"] + [
        b"a%d" % i for i in range(slots)] + [b"b%d" % i for i in range(100)]  # fmt: skip
