"""Without idempotence the sender keeps a partition's batches in send order across retries:
a failed request's batches go back together, ahead of anything sealed while it was in flight
(Kafka's client keeps order at one request in flight)."""

from __future__ import annotations

import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer

from .fake_leader import Action, FakeGateway


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=1)
    yield g
    g.shut()


def plain_producer(gateway, **settings) -> Producer:
    settings = {"acks": 1, "enable_idempotence": False, "max_in_flight": 1,
                "retry_backoff_ms": 1, **settings}  # fmt: skip
    return Producer(gateway, MetadataCache(gateway), **settings)


def test_a_failed_request_goes_back_ahead_of_batches_sealed_while_it_was_in_flight(gateway):
    """The answer to the only request in flight is lost while newer batches wait on the
    in-flight limit: the lost batch is resent before them."""
    gateway.script = lambda r: Action.HOLD if not gateway.requests else Action.ANSWER
    producer = plain_producer(gateway, linger_ms=0)
    try:
        first = producer.send("t", value=b"v0", partition=0)
        gateway.wait_for(lambda: len(gateway.requests) == 1)
        later = [producer.send("t", value=b"v%d" % i, partition=0) for i in (1, 2)]
        gateway.lose(gateway.requests[0])  # written, but the producer cannot know
        producer.flush(timeout=10)
        [f.result(timeout=0) for f in [first, *later]]
    finally:
        producer.close(timeout=10)
    # Without idempotence the resend writes v0 again, but never after v1 or v2.
    assert [v for _, v in gateway.log_values(0)] == [b"v0", b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("failure", [Action.REFUSE, Action.LOSE])
def test_a_failed_request_of_several_batches_is_resent_as_a_group_in_send_order(
    gateway, failure
):
    failed = []

    def fail_first_request(request):
        if not failed:
            failed.append(request)
            return failure
        return Action.ANSWER

    gateway.script = fail_first_request
    producer = plain_producer(gateway, linger_ms=60_000, batch_size=16)
    try:
        values = [b"v%03d" % i for i in range(6)]
        futures = [producer.send("t", value=v, partition=0) for v in values]
        producer.flush(timeout=10)
        [f.result(timeout=0) for f in futures]
    finally:
        producer.close(timeout=10)
    assert len(failed[0].batches) == 6  # the failed request carried every batch
    written = [v for _, v in gateway.log_values(0)]
    if failure is Action.LOSE:  # the first attempt was written too
        written = written[len(values):]
    assert written == values
    assert [r.values for r in gateway.requests[1:]] == [values]  # resent together
