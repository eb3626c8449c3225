"""A producer's callbacks, flush and close keep Kafka's promises: callbacks have run when a
future or flush() returns; close() and flush() from a callback never deadlock the sender; a
close that runs out of time returns instead of raising; a header name that cannot be encoded
fails its own send at once, not the records batched with it."""

from __future__ import annotations

import threading
import time

import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import IllegalState

from .fake_leader import Action, FakeGateway


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=2)
    yield g
    g.shut()


def make(gateway, **settings) -> Producer:
    settings = {"acks": "all", "linger_ms": 0, "retry_backoff_ms": 1, **settings}
    return Producer(gateway, MetadataCache(gateway), **settings)


def test_callbacks_have_run_when_flush_returns(gateway):
    producer = make(gateway, linger_ms=20)
    seen = []
    for i in range(20):
        producer.send("t", value=b"%d" % i, partition=i % 2,
                      callback=lambda m, e, i=i: (time.sleep(0.001), seen.append(i)))
    producer.flush(timeout=10)
    assert sorted(seen) == list(range(20))
    producer.close(timeout=10)


def test_close_from_a_callback_returns_and_the_other_records_still_complete(gateway):
    held = threading.Event()
    gateway.script = lambda r: Action.HOLD if r.partition == 1 else Action.ANSWER
    producer = make(gateway)
    outcome = []

    def close_in_callback(metadata, error):
        try:
            producer.close()
            outcome.append("closed")
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            outcome.append(repr(e))
        held.set()

    other = producer.send("t", value=b"held", partition=1)
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    producer.send("t", value=b"first", partition=0, callback=close_in_callback)
    assert held.wait(10) and outcome == ["closed"]
    gateway.release_held()
    assert other.result(timeout=10).offset == 0


def test_flush_from_a_callback_raises_instead_of_deadlocking(gateway):
    producer = make(gateway)
    outcome = []
    done = threading.Event()

    def flush_in_callback(metadata, error):
        try:
            producer.flush()
        except IllegalState as e:
            outcome.append(str(e))
        done.set()

    producer.send("t", value=b"v", partition=0, callback=flush_in_callback)
    assert done.wait(10) and "send callback" in outcome[0]
    producer.close(timeout=10)


def test_a_close_that_runs_out_of_time_returns_within_it_without_raising(gateway):
    gateway.script = lambda r: Action.HOLD
    producer = make(gateway)
    future = producer.send("t", value=b"held", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    started = time.monotonic()
    producer.close(timeout=0.5)
    assert time.monotonic() - started < 1.5
    gateway.release_held()
    assert future.result(timeout=10).offset == 0


def test_a_header_name_that_cannot_be_encoded_fails_its_own_send_at_once(gateway):
    producer = make(gateway, linger_ms=50)
    good = producer.send("t", value=b"good", partition=0)
    with pytest.raises(TypeError, match="UTF-8"):
        producer.send("t", value=b"bad", partition=0, headers=[("\udcff", b"x")])
    assert good.result(timeout=10).offset == 0
    producer.close(timeout=10)
