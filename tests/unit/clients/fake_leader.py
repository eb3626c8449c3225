"""A fake gateway for Producer tests, with no Ray: each partition's leader appends to a real
``rafka.storage.log.Log`` (so the real producer-state check decides duplicates and sequence
errors) and answers as ``PartitionReplica.produce`` does, while the test decides per request
whether the answer arrives, is held, is lost, or the request is refused before the append.
"""

from __future__ import annotations

import concurrent.futures
import enum
import itertools
import threading
from typing import Callable, NamedTuple

from rafka.errors import BrokerNotAvailable, RafkaError
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb


class Action(enum.Enum):
    ANSWER = "append and answer"
    HOLD = "append now, answer when the test releases it"
    LOSE = "append, then fail the call as if the answer was lost"
    REFUSE = "refuse the whole request before appending (a request-level error)"


class SentBatch(NamedTuple):
    """What one batch of a request carried, as the leader read it."""

    producer_id: int
    epoch: int
    sequence: int
    values: list


class Request:
    """One produce call as the leader saw it, and its answer."""

    def __init__(self, number: int, partition: int, batches: list[SentBatch]) -> None:
        self.number = number
        self.partition = partition
        self.batches = batches
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.answer: tuple | None = None
        self.action = Action.ANSWER

    @property
    def values(self) -> list:
        return [v for b in self.batches for v in b.values]

    def __repr__(self) -> str:
        return f"Request({self.number}, p{self.partition}, {self.batches}, {self.action.name})"


class FakeGateway:
    """Stands in for ``rafka.actors.handles.Gateway`` (the calls the Producer and its
    MetadataCache make). ``script(request)`` picks each request's Action (default ANSWER);
    ``events`` records, in order, ("request", request) and ("answered", request)."""

    def __init__(self, tmp_path, partitions: int = 1, topic_config: dict | None = None) -> None:
        self.partitions = partitions
        self.logs = [
            Log(str(tmp_path / f"topic-{p}"), LogConfig.from_dict(topic_config or {}))
            for p in range(partitions)
        ]
        self.script: Callable[[Request], Action] = lambda request: Action.ANSWER
        self.refusal: RafkaError = BrokerNotAvailable("the leader is unreachable (injected)")
        self.requests: list[Request] = []
        self.events: list[tuple[str, Request]] = []
        self.producer_ids = itertools.count(1000)
        self._changed = threading.Condition()

    # -- the Gateway calls ---------------------------------------------------------------------

    def call_controller(self, method: str, *args, timeout_s: float = 60.0):
        if method == "allocate_producer_id":
            return next(self.producer_ids), 0
        if method == "metadata":
            names = args[0]
            partitions = [{"leader": 1, "leader_epoch": 0}] * self.partitions
            return {n: {"topic_id": f"{n}-id", "partitions": partitions} for n in names}
        raise AssertionError(f"unexpected controller call {method}{args}")

    def replica(self, topic_id: str, partition: int, broker_id: int, host: int = -1) -> int:
        return partition

    def forget_replica(self, topic_id: str, partition: int, broker_id: int) -> None:
        pass

    def produce(self, replica: int, payload, acks: int, timeout_ms: int, client_id: str,
                request_no: int, transactional_id: str | None = None) -> Request:  # fmt: skip
        pieces = _split(payload)
        with self._changed:
            request = Request(len(self.requests), replica, [_read(p) for p in pieces])
            request.action = self.script(request)
            self.requests.append(request)
            self.events.append(("request", request))
            if request.action is Action.REFUSE:
                request.answer = (self.refusal.errno, str(self.refusal), -1, [])
            else:
                request.answer = self._append(replica, pieces)
            self._changed.notify_all()
        if request.action is Action.LOSE:
            self._settle(request, error=BrokerNotAvailable("the answer was lost (injected)"))
        elif request.action is not Action.HOLD:
            self._settle(request)
        return request

    @staticmethod
    def future(ref: Request) -> concurrent.futures.Future:
        return ref.future

    # -- what the test does --------------------------------------------------------------------

    def release(self, request: Request) -> None:
        """Deliver a held answer."""
        assert request.action is Action.HOLD and not request.future.done(), request
        self._settle(request)

    def lose(self, request: Request) -> None:
        """Fail a held call as if its answer was lost (the append stands)."""
        assert request.action is Action.HOLD and not request.future.done(), request
        self._settle(request, error=BrokerNotAvailable("the answer was lost (injected)"))

    def release_held(self) -> None:
        """Deliver every held answer, oldest first."""
        for request in list(self.requests):
            if request.action is Action.HOLD and not request.future.done():
                self._settle(request)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Block until ``predicate()`` holds (checked at every request and answer)."""
        with self._changed:
            if not self._changed.wait_for(predicate, timeout):
                raise AssertionError(f"timed out waiting; requests so far: {self.requests}")

    def log_values(self, partition: int = 0) -> list[tuple[int, bytes]]:
        """(offset, value) of every record in a partition's log."""
        log = self.logs[partition]
        out: list[tuple[int, bytes]] = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for pos, header in rb.iter_batches(data):
                records = rb.decode_records(data, pos)
                out.extend(p for p in zip(records.offsets, records.values) if p[0] >= offset)
                next_offset = header.next_offset
            offset = next_offset
        return out

    def shut(self) -> None:
        """End a test: answer and release everything held, then close the logs (a
        producer still closing gets its answers)."""
        self.script = lambda request: Action.ANSWER
        self.release_held()
        self.close()

    def close(self) -> None:
        for log in self.logs:
            log.close()

    # -- the leader ----------------------------------------------------------------------------

    def _append(self, partition: int, pieces: list) -> tuple:
        """As PartitionReplica.produce: each batch appended on its own."""
        log = self.logs[partition]
        results = []
        for piece in pieces:
            try:
                info = log.append_as_leader(piece, leader_epoch=0)
            except RafkaError as e:
                results.append((e.errno, str(e), -1, -1))
                continue
            results.append((0, "", info.first_offset, info.log_append_time))
        return (0, "", log.log_start_offset, results)

    def _settle(self, request: Request, error: BaseException | None = None) -> None:
        with self._changed:
            self.events.append(("answered", request))
            self._changed.notify_all()
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(request.answer)


def _split(payload) -> list[memoryview]:
    view = memoryview(payload).cast("B")
    pieces, pos = [], 0
    while pos < len(view):
        size = rb.read_header(view, pos).size
        pieces.append(view[pos : pos + size])
        pos += size
    return pieces


def _read(piece) -> SentBatch:
    header = rb.read_header(piece)
    values = rb.decode_records(piece).values
    return SentBatch(header.producer_id, header.producer_epoch, header.base_sequence, values)


class ManualClock:
    """A monotonic clock (seconds) that moves only when the test says: install it as
    ``rafka.clients.producer_batches.clock`` before making the Producer, then ``advance``
    it (which wakes the producer's sender so it looks at the new time)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._producers: list = []

    def __call__(self) -> float:
        return self.now

    def drive(self, producer) -> None:
        """Wake ``producer``'s sender whenever the clock moves."""
        self._producers.append(producer)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for producer in self._producers:
            accumulator = producer._accumulator
            with accumulator.lock:
                accumulator.wake.notify_all()
