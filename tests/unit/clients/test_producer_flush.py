"""flush() and close() against a fake leader: flush waits for what was sent before it began
(not for records other threads keep sending), and a send that close() overtakes fails at
once instead of handing out a future nobody will complete."""

from __future__ import annotations

import threading

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


def wait_until(predicate, what: str, timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.005)):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError(f"timed out waiting until {what}")


class PausingMetadata:
    """A MetadataCache whose ``topic`` stops in one chosen thread until the test says go:
    it holds a send between its checks and its append."""

    def __init__(self, inner: MetadataCache) -> None:
        self._inner = inner
        self.pause_in: threading.Thread | None = None
        self.paused = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def topic(self, name: str):
        if threading.current_thread() is self.pause_in:
            self.paused.set()
            assert self.go.wait(10)
        return self._inner.topic(name)


def test_flush_returns_once_what_was_sent_before_it_is_done_though_later_sends_are_not(
    gateway,
):
    """Kafka's flush awaits the batches incomplete when it was called: a record sent by
    another thread during the flush, whose answer never comes, does not hold it."""
    gateway.script = lambda r: Action.HOLD
    producer = Producer(gateway, MetadataCache(gateway), acks="all", linger_ms=0)
    before = producer.send("t", value=b"before", partition=0)
    gateway.wait_for(lambda: len(gateway.requests) == 1)

    outcome: list = []
    flusher = threading.Thread(
        target=lambda: outcome.append(_run(producer.flush, timeout=5)), daemon=True
    )
    flusher.start()
    wait_until(lambda: producer._accumulator.flushing, "the flush has begun")
    during = producer.send("t", value=b"during", partition=1)
    gateway.wait_for(lambda: len(gateway.requests) == 2)
    gateway.release(gateway.requests[0])
    flusher.join(10)

    assert outcome == [None], outcome  # returned, not timed out
    assert before.result(timeout=0).offset == 0
    assert not during.done()
    gateway.release_held()
    producer.close(timeout=10)
    assert during.result(timeout=0).offset == 0


def test_flush_returns_while_another_thread_keeps_sending(gateway):
    producer = Producer(gateway, MetadataCache(gateway), acks="all", linger_ms=5)
    stop = threading.Event()

    def keep_sending() -> None:
        while not stop.is_set():
            producer.send("t", value=b"x" * 100)

    sender = threading.Thread(target=keep_sending, daemon=True)
    sender.start()
    try:
        first = producer.send("t", value=b"first", partition=0)
        producer.flush(timeout=10)
        assert first.done()
    finally:
        stop.set()
        sender.join(10)
        producer.close(timeout=10)


def test_a_split_batch_sent_before_flush_is_waited_for_until_both_halves_are_done(tmp_path):
    gateway = FakeGateway(tmp_path, partitions=1, topic_config={"max.message.bytes": 1000})
    try:
        producer = Producer(gateway, MetadataCache(gateway), acks="all", linger_ms=60_000,
                            retry_backoff_ms=1)  # fmt: skip
        futures = [producer.send("t", value=b"r%03d" % i + b"." * 96) for i in range(15)]
        producer.flush(timeout=10)
        assert all(f.done() for f in futures)
        assert [f.result(timeout=0).offset for f in futures] == list(range(15))
        producer.close(timeout=10)
    finally:
        gateway.close()


@pytest.mark.parametrize("bulk", [False, True], ids=["send", "send_batch"])
def test_a_send_that_close_overtakes_raises_illegal_state_instead_of_never_completing(
    gateway, bulk
):
    """The send has passed its checks when close() runs to the end (the sender thread has
    stopped): it must not queue a batch nobody will send."""
    metadata = PausingMetadata(MetadataCache(gateway))
    producer = Producer(gateway, metadata, acks="all", linger_ms=0)
    producer.send("t", value=b"warm", partition=0).result(timeout=10)  # metadata cached
    outcome: list = []

    def send() -> None:
        if bulk:
            outcome.append(_run(producer.send_batch, "t", [b"late"], partition=0))
        else:
            outcome.append(_run(producer.send, "t", value=b"late", partition=0))

    racer = threading.Thread(target=send, daemon=True)
    metadata.pause_in = racer
    racer.start()
    assert metadata.paused.wait(10)
    producer.close(timeout=10)
    metadata.go.set()
    racer.join(10)

    assert len(outcome) == 1
    assert isinstance(outcome[0], IllegalState), outcome
    assert "closed" in str(outcome[0])


def test_a_send_while_close_is_flushing_fails_at_once_and_what_was_sent_is_delivered(gateway):
    gateway.script = lambda r: Action.HOLD
    producer = Producer(gateway, MetadataCache(gateway), acks="all", linger_ms=60_000)
    sent = producer.send("t", value=b"sent")  # opens the topic's sticky batch
    closer = threading.Thread(target=producer.close, kwargs={"timeout": 10}, daemon=True)
    closer.start()
    wait_until(lambda: producer._accumulator.closing, "close has begun")

    with pytest.raises(IllegalState, match="clos"):
        producer.send("t", value=b"sticky")  # the sticky fast path
    with pytest.raises(IllegalState, match="clos"):
        producer.send("t", value=b"keyed", key=b"k")
    with pytest.raises(IllegalState, match="clos"):
        producer.send_batch("t", [b"bulk"])
    gateway.wait_for(lambda: len(gateway.requests) == 1)
    gateway.release_held()
    closer.join(10)

    assert not closer.is_alive()
    assert sent.result(timeout=0).offset == 0
    assert [v for r in gateway.requests for v in r.values] == [b"sent"]


def test_a_column_waiting_for_buffer_room_when_close_begins_fails_saying_what_was_queued(
    gateway,
):
    """Its batches already queued are delivered by close(); the rest are never queued."""
    gateway.script = lambda r: Action.HOLD
    producer = Producer(gateway, MetadataCache(gateway), acks="all", linger_ms=0,
                        batch_size=300, buffer_memory=1000)  # fmt: skip
    outcome: list = []
    values = [b"v%03d" % i + b"." * 96 for i in range(30)]  # 3000 bytes and more
    bulk = threading.Thread(
        target=lambda: outcome.append(_run(producer.send_batch, "t", values, partition=0)),
        daemon=True,
    )
    bulk.start()
    gateway.wait_for(lambda: len(gateway.requests) >= 1)
    wait_until(lambda: producer.metrics()["buffered_bytes"] > 700, "the buffer has filled")
    closer = threading.Thread(target=producer.close, kwargs={"timeout": 10}, daemon=True)
    closer.start()
    bulk.join(10)

    assert len(outcome) == 1 and isinstance(outcome[0], IllegalState), outcome
    assert "of the column's 30 records were queued" in str(outcome[0])
    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    closer.join(10)
    assert not closer.is_alive()
    log = [value for _, value in gateway.log_values(0)]
    assert 0 < len(log) < 30 and log == values[: len(log)]


def _run(fn, *args, **kwargs):
    """What ``fn`` returned, or the exception it raised."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e
