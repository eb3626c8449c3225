"""The sender thread never dies: an error of any kind while sending fails only the request it
concerns, with a typed error naming the cause, and a failed producer id request is asked
again with backoff, without spinning."""

from __future__ import annotations

import threading

import pytest

from rafka.clients import producer_batches
from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import IllegalState, InvalidRecord, RecordTooLarge, UnknownTopicOrPartition

from .fake_leader import Action, FakeGateway, ManualClock


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=2, topic_config={"max.message.bytes": 1000})
    yield g
    g.shut()


def make(gateway, metadata=None, **settings) -> Producer:
    settings = {"acks": "all", "linger_ms": 0, "retry_backoff_ms": 1, **settings}
    return Producer(gateway, metadata or MetadataCache(gateway), **settings)


class RaisingOnce(MetadataCache):
    """Its first topic lookup from the sender raises what a Ray task error would be."""

    def __init__(self, gateway) -> None:
        super().__init__(gateway)
        self.armed = False

    def topic(self, name):
        if self.armed and threading.current_thread().name == "rafka-sender":
            self.armed = False
            raise RuntimeError("RayTaskError(ActorDiedError): the controller died (injected)")
        return super().topic(name)


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_request_that_raises_a_non_rafka_error_fails_alone_and_the_sender_lives_on(
    gateway, idempotent
):
    metadata = RaisingOnce(gateway)
    producer = make(gateway, metadata, enable_idempotence=idempotent,
                    acks="all" if idempotent else 1)  # fmt: skip
    producer.send("t", value=b"warm", partition=0).result(timeout=10)
    metadata.armed = True
    failed = producer.send("t", value=b"lost", partition=0)
    error = failed.exception(timeout=10)
    assert isinstance(error, IllegalState) and "RuntimeError" in str(error)
    after = producer.send("t", value=b"after", partition=0)
    assert after.result(timeout=10).offset >= 1
    producer.flush(timeout=10)
    producer.close(timeout=10)
    assert not producer._sender._thread.is_alive()


def test_a_batch_that_cannot_be_encoded_fails_as_an_invalid_record_and_the_sender_lives_on(
    gateway, monkeypatch
):
    """``send`` refuses header names that are not valid text; a batch that still cannot be
    encoded on the sender thread fails alone, as InvalidRecord, and later records go out."""
    from rafka.storage import record_batch

    producer = make(gateway)
    real = record_batch.encode_batch
    broken = []

    def encode_batch(*args, **kwargs):
        if not broken:
            broken.append(1)
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real(*args, **kwargs)

    monkeypatch.setattr(record_batch, "encode_batch", encode_batch)
    bad = producer.send("t", value=b"x", partition=0)
    assert isinstance(bad.exception(timeout=10), InvalidRecord)
    good = producer.send("t", value=b"y", partition=0)
    assert good.result(timeout=10).offset == 0
    producer.close(timeout=10)


def test_a_partition_gone_from_the_topic_fails_its_batch_and_the_sender_lives_on(gateway):
    """A batch for partition 1 is queued, then the topic is re-created with one partition:
    the batch fails (UnknownTopicOrPartition, retried until its delivery timeout) and the
    other partition's records are written."""
    producer = make(gateway, linger_ms=60_000, delivery_timeout_ms=300)
    stranded = producer.send("t", value=b"x", partition=1)
    gateway.partitions = 1
    producer._metadata.invalidate("t")
    producer.flush(timeout=10)
    assert isinstance(stranded.exception(timeout=0), UnknownTopicOrPartition)
    written = producer.send("t", value=b"y", partition=0)
    producer.flush(timeout=10)
    assert written.result(timeout=0).offset == 0
    producer.close(timeout=10)


def test_a_failed_producer_id_renewal_is_asked_again_and_the_partition_carries_on(gateway):
    """The epoch is exhausted and the controller call for a new producer id raises (not a
    RafkaError): it is asked again after a backoff and the next record is written."""
    call_controller = gateway.call_controller
    asked = []

    def flaky(method, *args, **kw):
        if method == "allocate_producer_id":
            asked.append(method)
            if len(asked) == 1:
                return 1000, 32767
            if len(asked) == 2:
                raise RuntimeError("RayTaskError: the controller is restarting (injected)")
        return call_controller(method, *args, **kw)

    gateway.call_controller = flaky
    producer = make(gateway, batch_size=16)
    large = producer.send("t", value=b"L" * 2000, partition=0)
    assert isinstance(large.exception(timeout=10), RecordTooLarge)
    after = producer.send("t", value=b"after", partition=0)
    assert after.result(timeout=10).offset == 0
    assert len(asked) == 3
    assert producer._sender._thread.is_alive()
    producer.close(timeout=10)


def test_a_partition_waiting_on_its_in_flight_limit_does_not_spin_the_sender(
    gateway, monkeypatch
):
    """A request is held past the time the sender looks for moved leaders, and records
    queue behind it: with the clock still, the sender passes only for the work it gets."""
    clock = ManualClock()
    monkeypatch.setattr(producer_batches, "clock", clock)
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    producer = make(gateway, max_in_flight=1, enable_idempotence=False, acks=1)
    clock.drive(producer)
    producer.send("t", value=b"held", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    clock.advance(1.0)  # the request is now old enough to look at its leader
    producer.send("t", value=b"m", partition=1).result(timeout=10)
    before = producer._sender.passes
    for i in range(50):
        producer.send("t", value=b"q%d" % i, partition=0)
    producer.send("t", value=b"m", partition=1).result(timeout=10)
    assert producer._sender.passes - before <= 5
    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    producer.close(timeout=10)
