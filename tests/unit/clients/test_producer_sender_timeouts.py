"""Request and delivery timeouts on a clock the test moves (Kafka's KIP-91): a request with
no answer within request_timeout_ms is given up and its batch resent (the leader may have
written it), and no future outlives delivery_timeout_ms after its batch's creation, queued or
in flight."""

from __future__ import annotations

import pytest

from rafka.clients import producer_batches
from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import RequestTimedOut

from .fake_leader import Action, FakeGateway, ManualClock


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=2)
    yield g
    g.shut()


@pytest.fixture
def clock(monkeypatch):
    clock = ManualClock()
    monkeypatch.setattr(producer_batches, "clock", clock)
    return clock


def make(gateway, clock, **settings) -> Producer:
    settings = {"acks": "all", "linger_ms": 0, "retry_backoff_ms": 0,
                "request_timeout_ms": 1_000, "delivery_timeout_ms": 5_000, **settings}  # fmt: skip
    producer = Producer(gateway, MetadataCache(gateway), **settings)
    clock.drive(producer)
    return producer


def hold_first_attempt_of(value: bytes, gateway: FakeGateway):
    def script(request):
        seen = sum(value in r.values for r in gateway.requests)
        return Action.HOLD if value in request.values and not seen else Action.ANSWER

    return script


def test_an_unanswered_request_is_resent_after_request_timeout_and_written_once(gateway, clock):
    """The leader wrote the batch but never answers: after request_timeout_ms the batch is
    resent under its stamp and answered as a duplicate, with the first offset."""
    producer = make(gateway, clock)
    producer.send("t", value=b"first", partition=0).result(timeout=10)
    gateway.script = hold_first_attempt_of(b"slow", gateway)
    slow = producer.send("t", value=b"slow", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 2)
    assert not slow.done()
    clock.advance(1.0)
    assert slow.result(timeout=10).offset == 1
    attempts = [r.batches[0] for r in gateway.requests if b"slow" in r.values]
    assert len(attempts) == 2 and attempts[0][:3] == attempts[1][:3]
    assert [v for _, v in gateway.log_values(0)] == [b"first", b"slow"]
    producer.close(timeout=10)


def test_without_idempotence_a_request_unanswered_past_its_retries_fails_as_maybe_written(
    gateway, clock
):
    gateway.script = lambda r: Action.HOLD
    producer = make(gateway, clock, acks=1, enable_idempotence=False, retries=0)
    future = producer.send("t", value=b"x", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    clock.advance(1.0)
    error = future.exception(timeout=10)
    assert isinstance(error, RequestTimedOut) and "may or may not" in str(error)
    producer.close(timeout=10)


@pytest.mark.parametrize("idempotent", [True, False])
def test_batches_in_flight_and_queued_fail_at_their_delivery_timeout(gateway, clock, idempotent):
    """One request is held forever and the partition's other batches wait behind it on the
    in-flight limit: each future fails once its delivery timeout has passed, not before."""
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    producer = make(gateway, clock, max_in_flight=1, request_timeout_ms=60_000,
                    enable_idempotence=idempotent, acks="all" if idempotent else 1)  # fmt: skip
    held = producer.send("t", value=b"held", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    clock.advance(2.0)
    queued = producer.send("t", value=b"queued", partition=0)
    producer.send("t", value=b"m", partition=1).result(timeout=10)  # a pass after sealing
    clock.advance(2.999)
    producer.send("t", value=b"m", partition=1).result(timeout=10)
    assert not held.done() and not queued.done()
    clock.advance(0.001)
    assert isinstance(held.exception(timeout=10), RequestTimedOut)
    assert not queued.done()
    clock.advance(2.0)
    assert isinstance(queued.exception(timeout=10), RequestTimedOut)
    producer.close(timeout=10)


def test_a_batch_expiring_while_an_attempt_is_out_names_the_refusal_before_it(gateway, clock):
    """The leader refused the first attempt; the second is out when the delivery timeout
    passes: the failure is RequestTimedOut (the second attempt's outcome is unknown) and it
    says what the attempt before it was told."""
    from rafka.errors import NotEnoughReplicas

    gateway.refusal = NotEnoughReplicas("the ISR [1] is below min.insync.replicas=2 (injected)")
    attempts = []

    def script(request):
        attempts.append(request)
        return Action.REFUSE if len(attempts) == 1 else Action.HOLD

    gateway.script = script
    producer = make(gateway, clock, request_timeout_ms=60_000)
    future = producer.send("t", value=b"v", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 2)
    clock.advance(5.0)
    error = future.exception(timeout=10)
    assert isinstance(error, RequestTimedOut) and "NotEnoughReplicas" in str(error)
    producer.close(timeout=10)
