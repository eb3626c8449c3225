"""The Consumer's fetch pipeline against a fake leader over a real Log, on a simulated clock:
fetches that are never answered, and error answers to fetches sent ahead of the records
buffered."""

from __future__ import annotations

import pytest

from rafka.clients.consumer import Consumer
from rafka.clients.metadata import MetadataCache
from rafka.errors import OffsetOutOfRange
from rafka.types import TopicPartition

from .fake_fetch import TOPIC, Action, FakeFetchGateway

TP = TopicPartition(TOPIC, 0)
MAX_WAIT_MS = 100
REQUEST_TIMEOUT_MS = 1000


@pytest.fixture
def gateway(tmp_path):
    g = FakeFetchGateway(tmp_path)
    yield g
    g.close()


def make_consumer(gateway: FakeFetchGateway, **settings) -> Consumer:
    settings = {
        "auto_offset_reset": "earliest", "fetch_max_wait_ms": MAX_WAIT_MS,
        "request_timeout_ms": REQUEST_TIMEOUT_MS, **settings,
    }  # fmt: skip
    consumer = Consumer(gateway, MetadataCache(gateway), **settings)
    consumer._use_clock(gateway.clock, gateway.clock.sleep)
    consumer.assign([TP])
    return consumer


def values(n: int, start: int = 0) -> list[bytes]:
    return [b"v%d" % i for i in range(start, start + n)]


def poll_until(consumer: Consumer, count: int, rounds: int = 50) -> list:
    """Poll (each poll up to 1 s of simulated time) until ``count`` records came."""
    out: list = []
    for _ in range(rounds):
        out += consumer.poll(timeout_ms=1000)
        if len(out) >= count:
            break
    return out


def test_a_fetch_unanswered_past_its_wait_and_the_request_timeout_is_sent_again(gateway):
    gateway.append(0, values(5))
    gateway.script = lambda fetch: Action.HOLD if fetch.number == 0 else Action.ANSWER
    consumer = make_consumer(gateway)

    got = consumer.poll(timeout_ms=5000)

    assert [(r.offset, r.value) for r in got] == list(enumerate(values(5)))
    held, again = gateway.fetches[:2]
    assert again.offset == held.offset == 0
    assert again.sent_at - held.sent_at >= (MAX_WAIT_MS + REQUEST_TIMEOUT_MS) / 1000
    # The abandoned fetch's answer arriving late is neither delivered nor counted.
    gateway.release(held)
    gateway.append(0, values(2, start=5))
    later = poll_until(consumer, 2)
    assert [(r.offset, r.value) for r in later] == list(enumerate(values(2, start=5), 5))
    assert consumer.position(TP) == 7


def test_a_prefetch_unanswered_past_the_request_timeout_is_sent_again_from_the_same_offset(
    gateway,
):
    gateway.append(0, values(3))
    gateway.script = lambda fetch: Action.HOLD if fetch.number == 1 else Action.ANSWER
    consumer = make_consumer(gateway)
    first = consumer.poll(timeout_ms=1000)
    assert [r.offset for r in first] == [0, 1, 2]
    assert gateway.fetches[1].offset == 3  # the prefetch, held
    gateway.append(0, values(3, start=3))

    later = poll_until(consumer, 3)

    assert [(r.offset, r.value) for r in later] == list(enumerate(values(3, start=3), 3))
    assert gateway.fetches[2].offset == 3


def test_an_answer_collected_after_the_request_timeout_is_used_not_fetched_again(gateway):
    gateway.append(0, values(3, start=0), [b"k"] * 3)
    gateway.append(0, values(3, start=3), [b"k"] * 3)
    consumer = make_consumer(gateway, max_partition_fetch_bytes=1)
    assert [r.offset for r in consumer.poll(timeout_ms=1000)] == [0, 1, 2]
    assert gateway.fetches[1].done  # the prefetch is answered at once
    gateway.clock.sleep(10 * REQUEST_TIMEOUT_MS / 1000)  # the application works a long time

    assert [r.offset for r in consumer.poll(timeout_ms=1000)] == [3, 4, 5]

    assert [f.offset for f in gateway.fetches] == [0, 3, 6]


def out_of_range_once(number: int):
    def script(fetch):
        return Action.ERROR if fetch.number == number else Action.ANSWER

    return script


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_paused_partition_keeps_its_buffered_records_when_its_prefetch_is_out_of_range(
    gateway, reset
):
    gateway.append(0, values(5))
    gateway.append(0, values(5, start=5))
    gateway.error = OffsetOutOfRange("offset 5 is outside the log (injected)")
    gateway.script = out_of_range_once(1)  # the prefetch, sent with records 2..4 buffered
    # One batch per fetch: the first answer is offsets 0..4.
    consumer = make_consumer(gateway, auto_offset_reset=reset, max_partition_fetch_bytes=1)
    consumer.seek(TP, 0)
    assert [r.offset for r in consumer.poll(timeout_ms=1000, max_records=2)] == [0, 1]
    consumer.pause(TP)
    assert consumer.poll(timeout_ms=1000) == []  # the prefetch's error arrives while paused
    consumer.resume(TP)

    rest = poll_until(consumer, 8)

    assert [(r.offset, r.value) for r in rest] == list(enumerate(values(8, start=2), 2))


def test_an_out_of_range_fetch_at_the_position_reached_after_the_buffer_still_resets(gateway):
    gateway.append(0, values(5))
    gateway.append(0, values(5, start=5))
    gateway.error = OffsetOutOfRange("offset 5 is outside the log (injected)")
    gateway.script = lambda fetch: Action.ERROR if fetch.offset == 5 else Action.ANSWER
    consumer = make_consumer(gateway, auto_offset_reset="latest", max_partition_fetch_bytes=1)
    consumer.seek(TP, 0)
    assert [r.offset for r in consumer.poll(timeout_ms=1000, max_records=2)] == [0, 1]
    assert [r.offset for r in consumer.poll(timeout_ms=1000)] == [2, 3, 4]

    assert consumer.poll(timeout_ms=1000) == []

    assert consumer.position(TP) == 10  # reset to the high watermark
    gateway.append(0, [b"after"])
    assert [(r.offset, r.value) for r in poll_until(consumer, 1)] == [(10, b"after")]


def test_without_a_reset_policy_out_of_range_is_raised_after_the_buffered_records(gateway):
    gateway.append(0, values(5))
    gateway.append(0, values(5, start=5))
    gateway.error = OffsetOutOfRange("offset 5 is outside the log (injected)")
    gateway.script = lambda fetch: Action.ERROR if fetch.offset == 5 else Action.ANSWER
    consumer = make_consumer(gateway, auto_offset_reset="none", max_partition_fetch_bytes=1)
    consumer.seek(TP, 0)
    assert [r.offset for r in consumer.poll(timeout_ms=1000, max_records=2)] == [0, 1]
    consumer.pause(TP)
    assert consumer.poll(timeout_ms=1000) == []
    consumer.resume(TP)

    assert [r.offset for r in consumer.poll(timeout_ms=1000)] == [2, 3, 4]
    with pytest.raises(OffsetOutOfRange):
        poll_until(consumer, 1)
