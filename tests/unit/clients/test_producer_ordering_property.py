"""A property of the producer's ordering, over random interleavings of send, send_batch,
flush, answers lost or delayed, leader changes and refused batches, with and without
idempotence, at max_in_flight 1 and 5, on a clock the test moves:

- every future completes by its delivery timeout (delivery_timeout_ms after the send, on
  that clock), even when answers never come;
- per partition, the acknowledged records are in the log at their acknowledged offsets; with
  idempotence each exactly once and in send order; without it in send order at one request
  in flight (by first appearance: a resend may write a record again).
"""

from __future__ import annotations

import collections
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.clients import producer_batches
from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import NotEnoughReplicas, NotLeaderOrFollower, RequestTimedOut

from .fake_leader import Action, FakeGateway, ManualClock

DELIVERY_S = 10.0
PARTITIONS = 2
LARGE = 1500  # over the topic's max.message.bytes: refused, alone or split off its batch

ops = st.one_of(
    st.tuples(st.just("send"), st.integers(0, PARTITIONS - 1), st.integers(1, 4),
              st.booleans()),
    st.tuples(st.just("send_batch"), st.integers(0, PARTITIONS - 1), st.integers(1, 5)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("release")),
    st.tuples(st.just("lose_held")),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1.5, 4.0, 11.0])),
)  # fmt: skip
answers = st.lists(
    st.sampled_from(["answer", "answer", "answer", "hold", "lose", "not_leader", "isr"]),
    max_size=30,
)


class Run:
    def __init__(self, gateway: FakeGateway, clock: ManualClock, script: list[str]) -> None:
        self.gateway = gateway
        self.clock = clock
        self.script = collections.deque(script)
        self.holding = True
        self.sent: dict[int, list] = {p: [] for p in range(PARTITIONS)}  # (value, future)
        self.deadlines: list = []  # (deadline, future)
        self.values = itertools.count()

    def act(self, request) -> Action:
        kind = self.script.popleft() if self.script else "answer"
        if kind == "hold":
            return Action.HOLD if self.holding else Action.ANSWER
        if kind == "lose":
            return Action.LOSE
        if kind == "not_leader":
            self.gateway.refusal = NotLeaderOrFollower("the leader moved (injected)")
            return Action.REFUSE
        if kind == "isr":
            self.gateway.refusal = NotEnoughReplicas("too few in-sync replicas (injected)")
            return Action.REFUSE
        return Action.ANSWER

    def value(self, large: bool = False) -> bytes:
        tag = b"r%05d" % next(self.values)
        return tag + b"." * (LARGE - len(tag)) if large else tag

    def sent_now(self, partition: int, value: bytes, future) -> None:
        self.sent[partition].append((value, future))
        self.deadlines.append((self.clock() + DELIVERY_S, future))

    def advance_to(self, target: float) -> None:
        """Move the clock to ``target`` through every delivery deadline on the way, holding
        it at each until the futures due there are done."""
        while True:
            due = [d for d, f in self.deadlines if not f.done() and d <= target]
            if not due:
                break
            self.clock.advance(max(0.0, min(due) - self.clock()) + 1e-6)
            for deadline, future in self.deadlines:
                if deadline <= self.clock():
                    assert_done(future)
        self.clock.advance(max(0.0, target - self.clock()))


def assert_done(future) -> None:
    """Wait (bounded, real time) for ``future``; a wait that runs out raises."""
    wait = getattr(future, "exception", None)
    if wait is not None:
        wait(timeout=10)
    else:  # a BulkFuture
        try:
            future.result(timeout=10)
        except RequestTimedOut as e:
            assert "bulk send not acknowledged" not in str(e), "a bulk future never completed"
        except Exception:  # noqa: BLE001 - failed: done
            pass


# A short default run (a few seconds); HYPOTHESIS_PROFILE=thorough runs the profile's count.
@settings(max_examples=25 if settings().max_examples <= 60 else settings().max_examples)
@given(
    idempotent=st.booleans(),
    max_in_flight=st.sampled_from([1, 5]),
    steps=st.lists(ops, min_size=1, max_size=25),
    script=answers,
)
def test_acknowledged_records_are_in_the_log_in_send_order_and_futures_end_in_time(
    tmp_path_factory, monkeypatch, idempotent, max_in_flight, steps, script
):
    clock = ManualClock()
    monkeypatch.setattr(producer_batches, "clock", clock)
    gateway = FakeGateway(tmp_path_factory.mktemp("log"), partitions=PARTITIONS,
                          topic_config={"max.message.bytes": 1000})  # fmt: skip
    run = Run(gateway, clock, script)
    gateway.script = run.act
    producer = Producer(
        gateway, MetadataCache(gateway), acks="all" if idempotent else 1,
        enable_idempotence=idempotent, max_in_flight=max_in_flight, linger_ms=0,
        batch_size=64, retry_backoff_ms=0, request_timeout_ms=3_000,
        delivery_timeout_ms=int(DELIVERY_S * 1000),
    )  # fmt: skip
    clock.drive(producer)
    try:
        for step in steps:
            kind = step[0]
            if kind == "send":
                _, partition, count, large = step
                for i in range(count):
                    value = run.value(large and i == 0)
                    run.sent_now(partition, value, producer.send("t", value, partition=partition))
            elif kind == "send_batch":
                _, partition, count = step
                values = [run.value() for _ in range(count)]
                future = producer.send_batch("t", values, partition=partition)
                for index, value in enumerate(values):
                    run.sent_now(partition, value, _BulkRecord(future, index))
            elif kind == "flush":
                run.holding = False
                gateway.release_held()
                producer.flush(timeout=10)
                run.holding = True
            elif kind == "release":
                gateway.release_held()
            elif kind == "lose_held":
                held = [r for r in gateway.requests
                        if r.action is Action.HOLD and not r.future.done()]  # fmt: skip
                if held:
                    gateway.lose(held[0])
            else:
                run.advance_to(clock() + step[1])
        # Answers still held never come: every future must end by its delivery timeout.
        run.advance_to(max((d for d, _ in run.deadlines), default=clock()))
        for _, future in run.deadlines:
            assert future.done()
    finally:
        run.script.clear()
        gateway.script = lambda request: Action.ANSWER
        gateway.release_held()
        producer.close(timeout=10)

    for partition in range(PARTITIONS):
        log = gateway.log_values(partition)
        at = dict(log)
        acked = [(v, f.result(timeout=0).offset) for v, f in run.sent[partition]
                 if f.exception(timeout=0) is None]  # fmt: skip
        assert [at.get(offset) for _, offset in acked] == [v for v, _ in acked]
        acked_values = {v for v, _ in acked}
        in_log = [v for _, v in log if v in acked_values]
        if idempotent:
            assert in_log == [v for v, _ in acked]
        elif max_in_flight == 1:
            first_seen = list(dict.fromkeys(in_log))
            assert first_seen == [v for v, _ in acked]
    gateway.close()


class _BulkRecord:
    """One record of a send_batch, as a future of its own (the test's view)."""

    def __init__(self, bulk, index: int) -> None:
        self.bulk = bulk
        self.index = index

    def done(self) -> bool:
        return self.bulk.done()

    def exception(self, timeout: float | None = None):
        try:
            self.bulk.result(timeout)
        except RequestTimedOut as e:
            if "bulk send not acknowledged" in str(e):
                raise
            return e
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def result(self, timeout: float | None = None):
        result = self.bulk.result(timeout)
        [ranges] = result.ranges.values()  # one partition per bulk send here
        offsets = [o for first, last in ranges for o in range(first, last + 1)]
        return _Offset(offsets[self.index])


class _Offset:
    def __init__(self, offset: int) -> None:
        self.offset = offset
