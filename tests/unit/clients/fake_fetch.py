"""A fake gateway for Consumer tests, with no Ray and no real time: each partition's leader
reads a real ``rafka.storage.log.Log`` and answers ``fetch``, ``list_offset`` and
``describe`` as ``PartitionReplica`` does (a fetch with nothing to return long-polls until
records arrive or its ``max_wait_ms`` runs out), on a ``Clock`` the consumer also runs on.
The test decides per fetch whether it is answered, held (no answer until released), lost, or
answered with an error.

Time moves only inside ``wait`` (the consumer waiting for answers) and ``sleep``: to the next
long-poll deadline or the end of the wait, whichever comes first.
"""

from __future__ import annotations

import enum
from typing import Any, Callable

import numpy as np

from rafka.errors import BrokerNotAvailable, RafkaError, RequestTimedOut
from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb

from .group_fakes import Clock

TOPIC = "t"


class Action(enum.Enum):
    ANSWER = "answer as the leader does (long-polling while there is nothing to return)"
    HOLD = "no answer until the test releases it (a leader that stopped answering)"
    LOSE = "fail the call as if the answer was lost"
    ERROR = "answer with the error in FakeFetchGateway.error"


class FetchRef:
    """One fetch call as the leader saw it, and its answer once there is one."""

    def __init__(self, number: int, partition: int, offset: int, max_bytes: int,
                 min_bytes: int, max_wait_ms: int, sent_at: float) -> None:  # fmt: skip
        self.number = number
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.sent_at = sent_at
        self.deadline = sent_at + max_wait_ms / 1000
        self.action = Action.ANSWER
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        self.done, self.value, self.error = True, value, error

    def __repr__(self) -> str:
        state = "answered" if self.done else "open"
        return f"Fetch({self.number}, p{self.partition}@{self.offset}, {self.action.name}, {state})"


class Answered:
    """A call answered at once (list_offset, describe)."""

    done = True
    error = None

    def __init__(self, value: Any) -> None:
        self.value = value


class FakeFetchGateway:
    """Stands in for ``rafka.actors.handles.Gateway`` (the calls a Consumer and its
    MetadataCache make) over one topic ``t``. ``script(fetch)`` picks each fetch's Action
    (default ANSWER); ``leaders[p]`` is the broker the metadata names as leader of p."""

    def __init__(self, tmp_path, partitions: int = 1, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.logs = [Log(str(tmp_path / f"{TOPIC}-{p}"), LogConfig()) for p in range(partitions)]
        self.leaders = [1] * partitions
        self.script: Callable[[FetchRef], Action] = lambda fetch: Action.ANSWER
        self.error: RafkaError = BrokerNotAvailable("the leader is unreachable (injected)")
        self.fetches: list[FetchRef] = []

    # -- what the test does --------------------------------------------------------------------

    def append(self, partition: int, values: list[bytes], keys: list | None = None) -> None:
        """Append one batch and commit it (the high watermark moves past it); open
        long-polls of the partition see it."""
        log = self.logs[partition]
        log.append_as_leader(rb.encode_batch(values, keys, timestamps=1000), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        for fetch in self.open_fetches(partition):
            if fetch.action is Action.ANSWER:
                self._try_answer(fetch, final=False)

    def release(self, fetch: FetchRef) -> None:
        """Answer a held fetch now, from the log as it is now."""
        assert fetch.action is Action.HOLD and not fetch.done, fetch
        self._try_answer(fetch, final=True)

    def open_fetches(self, partition: int | None = None) -> list[FetchRef]:
        return [f for f in self.fetches if not f.done and partition in (None, f.partition)]

    def close(self) -> None:
        for log in self.logs:
            log.close()

    # -- the Gateway calls ---------------------------------------------------------------------

    def call_controller(self, method: str, *args, timeout_s: float = 60.0):
        if method == "metadata":
            partitions = [{"leader": b, "leader_epoch": 0} for b in self.leaders]
            return {n: {"topic_id": f"{n}-id", "partitions": partitions} for n in args[0]}
        raise AssertionError(f"unexpected controller call {method}{args}")

    def replica(self, topic_id: str, partition: int, broker_id: int, host: int = -1) -> int:
        return partition

    def forget_replica(self, topic_id: str, partition: int, broker_id: int) -> None:
        pass

    def fetch(self, replica: int, offset: int, max_bytes: int, min_bytes: int,
              max_wait_ms: int) -> FetchRef:  # fmt: skip
        fetch = FetchRef(len(self.fetches), replica, offset, max_bytes, min_bytes, max_wait_ms,
                         self.clock.now)  # fmt: skip
        fetch.action = self.script(fetch)
        self.fetches.append(fetch)
        if fetch.action is Action.LOSE:
            fetch.resolve(error=BrokerNotAvailable("the answer was lost (injected)"))
        elif fetch.action is Action.ERROR:
            fetch.resolve((self.error.errno, str(self.error), -1, -1, -1, _EMPTY))
        elif fetch.action is Action.ANSWER:
            self._try_answer(fetch, final=max_wait_ms <= 0)
        return fetch

    def list_offset(self, replica: int, timestamp: int, read_committed: bool = False) -> Answered:
        log = self.logs[replica]
        if timestamp == -2:
            return Answered((0, "", log.log_start_offset, -1))
        if timestamp == -1:
            return Answered((0, "", log.high_watermark, -1))
        found = log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= log.high_watermark:
            return Answered((0, "", -1, -1))
        return Answered((0, "", found[0], found[1]))

    def describe(self, replica: int) -> Answered:
        log = self.logs[replica]
        return Answered({
            "topic": TOPIC, "partition": replica, "leader": self.leaders[replica],
            "log_start_offset": log.log_start_offset, "high_watermark": log.high_watermark,
            "log_end_offset": log.log_end_offset,
        })  # fmt: skip

    @staticmethod
    def get(ref, timeout_s: float | None = None, what: str = "a partition replica"):
        if not ref.done:
            raise RequestTimedOut(f"{what} did not answer within {timeout_s} s")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs: list, num_returns: int = 1, timeout_s: float | None = None):
        """As ray.wait, on the fake clock: time moves to the next long-poll deadline of an
        open fetch, until ``num_returns`` refs are answered or ``timeout_s`` passes."""
        end = self.clock.now + (timeout_s or 0.0)
        while True:
            for ref in refs:
                if not ref.done and ref.action is Action.ANSWER and ref.deadline <= self.clock.now:
                    self._try_answer(ref, final=True)
            ready = [r for r in refs if r.done]
            if len(ready) >= num_returns or self.clock.now >= end:
                return ready, [r for r in refs if not r.done]
            polling = [r.deadline for r in refs
                       if not r.done and r.action is Action.ANSWER and r.deadline < end]
            self.clock.now = min(polling, default=end)

    # -- the leader ----------------------------------------------------------------------------

    def _try_answer(self, fetch: FetchRef, final: bool) -> None:
        """As ReplicaFetch.fetch: committed batches from the offset; with fewer than
        min_bytes the answer waits unless ``final`` (its long-poll time is up)."""
        log = self.logs[fetch.partition]
        try:
            data = log.read(fetch.offset, fetch.max_bytes, log.high_watermark).records
        except RafkaError as e:
            fetch.resolve((e.errno, str(e), -1, -1, -1, _EMPTY))
            return
        if len(data) < fetch.min_bytes and not final:
            return
        records = np.frombuffer(bytes(data), dtype=np.uint8)
        fetch.resolve((0, "", log.high_watermark, log.log_start_offset, log.log_end_offset,
                       records))  # fmt: skip


_EMPTY = np.zeros(0, dtype=np.uint8)
