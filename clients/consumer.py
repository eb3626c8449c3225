"""Consumer: long-poll fetches, prefetched, decoded on the client.

Partitions come from ``assign`` or, with a ``group_id`` and ``subscribe``, from the consumer
group (``rafka.clients.consumer_groups_api``, which also holds commit and committed).

Each assigned partition keeps one fetch in flight to its leader replica. When an answer
arrives the next fetch (from the offset after the last batch received) is sent at once, so the
cluster works on the next chunk while the application handles this one. Answers are raw batch
bytes (numpy arrays straight from Ray's object store); records are decoded here, batch by
batch, only as ``poll`` hands them out. ``poll_columns`` hands the same data out as an Arrow
table instead, without per-record Python objects.

Two positions per partition: the *position* (next record ``poll`` returns, what ``position()``
reports and ``seek`` sets) and the *fetch offset* (where the next fetch starts, ahead of the
position by whatever is buffered).
"""

from __future__ import annotations

import collections
import gc
import logging
import time
from itertools import repeat
from typing import Any, Callable, Iterable

from rafka.clients.assignors import DEFAULT_STRATEGY
from rafka.clients.consumer_groups_api import GroupConsumerMixin
from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.clients.serializers import resolve
from rafka.errors import (
    IllegalState,
    InvalidConfig,
    OffsetOutOfRange,
    RafkaError,
    error_class,
)
from rafka.storage import record_batch as rb
from rafka.types import OffsetAndTimestamp, Record, TopicPartition

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
_RESETS = ("earliest", "latest", "none")
RETRY_BACKOFF_S = 0.05
_NO_HEADERS = ()
_new_tuple = tuple.__new__


class _Partition:
    __slots__ = (
        "tp", "position", "fetch_offset", "paused", "in_flight", "chunks", "records",
        "high_watermark", "log_start_offset", "generation", "retry_at",
    )  # fmt: skip

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.paused = False
        self.in_flight = None  # (ObjectRef, generation, sent at, leader) of the open fetch
        self.retry_at = 0.0  # after a retriable error, no new fetch before this
        self.chunks: collections.deque = collections.deque()  # [data, position in data]
        self.records: collections.deque = collections.deque()  # decoded, not yet returned
        self.high_watermark = -1
        self.log_start_offset = -1
        self.generation = 0  # bumped by seek: answers to older fetches are dropped

    def clear(self) -> None:
        self.chunks.clear()
        self.records.clear()
        self.in_flight = None
        self.generation += 1


class Consumer(GroupConsumerMixin):
    """Not thread-safe (as Kafka's consumer): use it from one thread. The group settings
    (``group_id`` ... ``metadata_max_age_ms``) have Kafka's names and defaults."""

    def __init__(
        self,
        gateway,
        metadata,
        *,
        auto_offset_reset: str = "latest",
        key_deserializer: Callable | str | None = None,
        value_deserializer: Callable | str | None = None,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int = 500,
        check_crcs: bool = True,
        request_timeout_ms: int = 30_000,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "rafka-consumer",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Any = DEFAULT_STRATEGY,
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        if auto_offset_reset not in _RESETS:
            raise InvalidConfig(
                f"auto_offset_reset={auto_offset_reset!r} is invalid; use one of {_RESETS}"
            )
        for name, value, low in (
            ("fetch_min_bytes", fetch_min_bytes, 0), ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
            ("max_poll_records", max_poll_records, 1),
            ("request_timeout_ms", request_timeout_ms, 1),
        ):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidConfig(f"{name}={value!r} is invalid; give an integer >= {low}")
        self._gateway = gateway
        self._metadata = metadata
        self.auto_offset_reset = auto_offset_reset
        self._key_deserializer = resolve(key_deserializer, 1, "key_deserializer")
        self._value_deserializer = resolve(value_deserializer, 1, "value_deserializer")
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.check_crcs = check_crcs
        self.request_timeout_s = request_timeout_ms / 1000
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._closed = False
        self._init_group(
            group_id, group_instance_id, client_id, enable_auto_commit, auto_commit_interval_ms,
            session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
            partition_assignment_strategy, metadata_max_age_ms,
        )  # fmt: skip

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        self._check_open()
        if self._member is not None:
            raise IllegalState(
                "this consumer subscribed to topics; assign() and subscribe() are mutually "
                "exclusive: unsubscribe() first"
            )
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            meta = self._metadata.topic(tp.topic)
            if not 0 <= tp.partition < len(meta):
                raise error_class(3)(
                    f"topic {tp.topic!r} has partitions 0..{len(meta) - 1}, not {tp.partition}"
                )
        self._partitions = {tp: self._partitions.get(tp) or _Partition(tp) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def _add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.setdefault(tp, _Partition(tp))

    def _remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.pop(tp, None)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._partitions.items() if s.paused}

    # -- positions -----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record returned for ``partition``. An offset outside the
        log is detected on the next fetch and handled per ``auto_offset_reset``."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        state = self._state(partition)
        state.clear()
        state.position = state.fetch_offset = offset

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._partitions):
            self.seek(tp, self._list_offset(tp, EARLIEST)[0])

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._partitions):
            self.seek(tp, self._list_offset(tp, LATEST)[0])

    def position(self, partition: TopicPartition) -> int:
        """Offset of the next record ``poll`` will return for ``partition``."""
        state = self._state(partition)
        if state.position is None:
            self._resolve_positions()
        return state.position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._list_offset(tp, EARLIEST)[0] for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next record will get)."""
        return {tp: self._list_offset(tp, LATEST)[0] for tp in partitions}

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is >= the given ms, or None."""
        out = {}
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative int (ms), got {ts!r}")
            offset, found_ts = self._list_offset(tp, ts)
            out[tp] = None if offset < 0 else OffsetAndTimestamp(offset, found_ts)
        return out

    def _list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        """Ask the leader; retriable errors (a replica restarting, a leader moving) are
        retried with backoff for up to request_timeout_ms."""
        deadline = time.monotonic() + self.request_timeout_s
        backoff = 0.05
        while True:
            try:
                meta = self._metadata.topic(tp.topic)
                replica = self._metadata.replica(meta, tp.partition)
                answer = self._gateway.get(
                    self._gateway.list_offset(replica, timestamp), self.request_timeout_s
                )
                if answer[0] == 0:
                    return answer[2], answer[3]
                error = error_class(answer[0])(answer[1])
            except RafkaError as e:
                error = e
            if not error.retriable or time.monotonic() + backoff > deadline:
                raise error
            self._metadata.invalidate(tp.topic)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _reset(self, state: _Partition) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRange(
                f"{state.tp} has no position and auto_offset_reset='none'; seek() first or use "
                "auto_offset_reset='earliest' or 'latest'"
            )
        which = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        offset = self._list_offset(state.tp, which)[0]
        state.clear()
        state.position = state.fetch_offset = offset

    # -- polling -------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        """Records from the assigned, unpaused partitions: whatever is ready, waiting up to
        ``timeout_ms`` when nothing is. At most ``max_records`` (default max_poll_records)."""
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._group_poll()
            self._send_fetches()
            out: list[Record] = []
            for state in self._partitions.values():
                if not state.paused:
                    self._take_records(state, limit - len(out), out)
                    if len(out) >= limit:
                        break
            if out or not self._await_answers(deadline):
                self._send_fetches()  # prefetch while the application works on these
                return out

    def poll_columns(self, timeout_ms: int = 0, max_records: int = 1_000_000):
        """Like ``poll`` but returns a ``pyarrow.Table`` (topic, partition, offset, timestamp,
        key, value), built batch by batch without per-record Python objects; packed batches
        (written by ``send_batch``) come back over their own bytes."""
        from rafka.clients import columnar

        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._group_poll()
            self._send_fetches()
            parts: list = []
            taken = 0
            for state in self._partitions.values():
                if not state.paused:
                    taken += self._take_columns(state, max_records - taken, parts, columnar)
                    if taken >= max_records:
                        break
            if parts or not self._await_answers(deadline):
                self._send_fetches()
                import pyarrow as pa

                return pa.Table.from_batches(parts, schema=columnar.SCHEMA)

    def _take_records(self, state: _Partition, limit: int, out: list) -> None:
        records = state.records
        while limit > 0:
            if not records and not self._decode_next(state):
                return
            n = min(limit, len(records))
            if n == len(records):
                out.extend(records)
                records.clear()
            else:
                out.extend(records.popleft() for _ in range(n))
            state.position = out[-1].offset + 1
            limit -= n

    def _take_columns(self, state: _Partition, limit: int, parts: list, columnar) -> int:
        taken = 0
        if state.records:  # left over from a record-mode poll
            import pyarrow as pa

            leftover = [state.records.popleft() for _ in range(min(limit, len(state.records)))]
            parts.append(pa.RecordBatch.from_pylist(
                [{"topic": r.topic, "partition": r.partition, "offset": r.offset,
                  "timestamp": r.timestamp, "key": r.key, "value": r.value} for r in leftover],
                schema=columnar.SCHEMA,
            ))  # fmt: skip
            taken += len(leftover)
            state.position = leftover[-1].offset + 1
        while taken < limit and state.chunks:
            chunk = state.chunks[0]
            data, pos = chunk
            if pos >= len(data):
                state.chunks.popleft()
                continue
            header = rb.read_header(data, pos)
            chunk[1] = pos + header.size
            if header.is_control or header.next_offset <= state.position:
                continue
            batch = columnar.batch_to_arrow(
                state.tp.topic, state.tp.partition, data, pos, state.position
            )
            if len(batch) > limit - taken:
                rest = batch.slice(limit - taken)
                batch = batch.slice(0, limit - taken)
                chunk[1] = pos  # come back to this batch for the rest
                state.position = rest.column(2)[0].as_py()
            else:
                state.position = header.next_offset
            if len(batch):
                parts.append(batch)
                taken += len(batch)
        return taken

    def _decode_next(self, state: _Partition) -> bool:
        """Decode the next buffered batch of ``state`` into ``state.records``."""
        while state.chunks:
            chunk = state.chunks[0]
            data, pos = chunk
            if pos >= len(data):
                state.chunks.popleft()
                continue
            # Thousands of new objects per batch and none of them cyclic: the cyclic GC would
            # only rescan them (and every buffered record) over and over, so it waits.
            collecting = gc.isenabled()
            gc.disable()
            try:
                decoded = rb.decode_records(data, pos, verify=self.check_crcs)
                header = decoded.header
                chunk[1] = pos + header.size
                if header.is_control or header.next_offset <= state.position:
                    continue
                self._to_records(state, decoded)
            finally:
                if collecting:
                    gc.enable()
            if state.records:
                return True
        return False

    def _to_records(self, state: _Partition, decoded: rb.Records) -> None:
        keys, values = decoded.keys, decoded.values
        if self._key_deserializer is not None and keys is not None:
            keys = list(map(self._key_deserializer, keys))
        if self._value_deserializer is not None:
            values = list(map(self._value_deserializer, values))
        headers = decoded.headers
        tp = state.tp
        # tuple.__new__ straight from map and zip: no Python frame per record.
        records = list(map(_new_tuple, repeat(Record), zip(
            repeat(tp.topic), repeat(tp.partition), decoded.offsets, decoded.timestamps,
            repeat(None) if keys is None else keys, values,
            repeat(_NO_HEADERS) if headers is None else (h or _NO_HEADERS for h in headers),
        )))  # fmt: skip
        if decoded.offsets[0] < state.position:
            records = [r for r in records if r.offset >= state.position]
        state.records.extend(records)

    # -- fetching ------------------------------------------------------------------------------

    def _send_fetches(self) -> None:
        self._resolve_positions()
        now = time.monotonic()
        for state in self._partitions.values():
            if state.paused or state.in_flight is not None or state.retry_at > now:
                continue
            if state.position is None:
                self._reset(state)
            if len(state.chunks) > 1:
                continue  # a whole answer is buffered beyond the one being read: enough ahead
            self._fetch(state)

    def _fetch(self, state: _Partition) -> None:
        try:
            meta = self._metadata.topic(state.tp.topic)
            replica = self._metadata.replica(meta, state.tp.partition)
        except RafkaError as e:
            if not e.retriable:
                raise
            self._retry_later(state)
            return
        ref = self._gateway.fetch(
            replica, state.fetch_offset, self.max_partition_fetch_bytes, self.fetch_min_bytes,
            self.fetch_max_wait_ms,
        )  # fmt: skip
        leader = meta.partitions[state.tp.partition]
        state.in_flight = (ref, state.generation, time.monotonic(), leader)

    def _retry_later(self, state: _Partition) -> None:
        """A retriable failure (leader moving or restarting): fresh metadata, short backoff."""
        self._metadata.invalidate(state.tp.topic)
        state.retry_at = time.monotonic() + RETRY_BACKOFF_S

    def _abandon_stalled(self) -> None:
        """Give up fetches outstanding far past their long-poll time whose leader has moved
        (a request to a dead node may not fail for seconds)."""
        now = time.monotonic()
        stall_after = self.fetch_max_wait_ms / 1000 + SUSPECT_AFTER_S
        for state in self._partitions.values():
            if state.in_flight is None or now - state.in_flight[2] < stall_after:
                continue
            if self._metadata.leader_moved(state.tp.topic, state.tp.partition, state.in_flight[3]):
                log.info("%s: the leader moved during a fetch; fetching again", state.tp)
                state.in_flight = None

    def _await_answers(self, deadline: float) -> bool:
        """Wait (until ``deadline``) for fetch answers and buffer them; False on timeout."""
        self._abandon_stalled()
        pending = {s.in_flight[0]: s for s in self._partitions.values() if s.in_flight}
        joining = self._member.pending_ref() if self._member is not None else None
        if joining is not None:  # a join or sync answer wakes the poll too
            pending[joining] = None
        if not pending:
            remaining = deadline - time.monotonic()
            if remaining > 0:
                time.sleep(min(remaining, 0.05))  # everything paused or failing: do not spin
            return time.monotonic() < deadline
        # Wake at least every RECHECK_INTERVAL_S to look for stalled fetches.
        remaining = max(0.0, min(deadline - time.monotonic(), RECHECK_INTERVAL_S))
        ready, waiting = self._gateway.wait(list(pending), 1, timeout_s=remaining)
        if ready and waiting:
            more, _ = self._gateway.wait(waiting, len(waiting), timeout_s=0)
            ready += more
        for ref in ready:
            state = pending[ref]
            if state is None:
                continue  # the member's answer: its poll() takes it
            generation = state.in_flight[1]
            state.in_flight = None
            try:
                answer = self._gateway.get(ref, self.request_timeout_s)
            except RafkaError as e:
                if not e.retriable:
                    raise
                self._retry_later(state)
                continue
            if generation == state.generation:
                self._on_answer(state, answer)
        return bool(ready) or time.monotonic() < deadline

    def _on_answer(self, state: _Partition, answer: tuple) -> None:
        errno, message, high_watermark, log_start, _log_end, data = answer
        if errno:
            error = error_class(errno)(message)
            if isinstance(error, OffsetOutOfRange):
                if self.auto_offset_reset == "none":
                    raise error
                log.info("%s: %s; resetting to %s", state.tp, message, self.auto_offset_reset)
                self._reset(state)
                return
            if not error.retriable:
                raise error
            self._retry_later(state)
            return
        state.high_watermark = high_watermark
        state.log_start_offset = log_start
        if len(data):
            state.chunks.append([data, 0])
            state.fetch_offset = rb.next_offset(data)

    # -- lifecycle -----------------------------------------------------------------------------

    def _state(self, tp: TopicPartition) -> _Partition:
        self._check_open()
        state = self._partitions.get(TopicPartition(*tp))
        if state is None:
            raise IllegalState(f"{tp} is not assigned to this consumer; assign() it first")
        return state

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalState("the consumer is closed; create a new one")

    def close(self) -> None:
        """Leave the group (committing what was consumed, with auto-commit) and stop."""
        if self._closed:
            return
        try:
            self._close_group()
        finally:
            self._closed = True
            self._partitions = {}

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self):
        while not self._closed:
            yield from self.poll(timeout_ms=self.fetch_max_wait_ms)
