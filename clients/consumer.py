"""Consumer: long-poll fetches, prefetched, decoded on the client.

Partitions come from ``assign`` or, with a ``group_id`` and ``subscribe``, from the consumer
group (``rafka.clients.consumer_groups_api``, which also holds commit and committed).

Each assigned partition keeps one fetch in flight to its leader replica
(``rafka.clients.consumer_fetcher``). Answers are raw batch bytes (numpy arrays straight from
Ray's object store); records are decoded here, batch by batch, only as ``poll`` hands them out
(``rafka.clients.consumer_buffer``). ``poll_columns`` hands the same data out as an Arrow
table instead, without per-record Python objects.

Two positions per partition: the *position* (next record ``poll`` returns, what ``position()``
reports and ``seek`` sets) and the *fetch offset* (where the next fetch starts, ahead of the
position by whatever is buffered). Offset lookups and resets: ``rafka.clients.consumer_offsets``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from rafka.clients.assignors import DEFAULT_STRATEGY
from rafka.clients.consumer_buffer import BufferReader, PartitionState
from rafka.clients.consumer_fetcher import Fetcher
from rafka.clients.consumer_groups_api import GroupConsumerMixin
from rafka.clients.consumer_offsets import EARLIEST, LATEST, RESETS, OffsetLookup
from rafka.clients.serializers import resolve
from rafka.errors import IllegalState, InvalidConfig, error_class
from rafka.types import OffsetAndTimestamp, Record, TopicPartition

#: Kafka's isolation levels: read_uncommitted reads up to the high watermark, every record;
#: read_committed up to the last stable offset, without aborted transactions' records.
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)

__all__ = ["Consumer", "EARLIEST", "LATEST"]


class Consumer(GroupConsumerMixin):
    """Not thread-safe (as Kafka's consumer): use it from one thread. The group settings
    (``group_id`` ... ``metadata_max_age_ms``) have Kafka's names and defaults. A fetch with
    no answer after ``fetch_max_wait_ms`` + ``request_timeout_ms`` is given up and sent again
    from the same offset; ``request_timeout_ms`` also bounds each offset lookup."""

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
        isolation_level: str = READ_UNCOMMITTED,
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfig(
                f"isolation_level={isolation_level!r} is invalid; use {READ_UNCOMMITTED!r} "
                f"(every record, Kafka's default) or {READ_COMMITTED!r} (only records of "
                "committed transactions, and none past an open one)"
            )
        if auto_offset_reset not in RESETS:
            raise InvalidConfig(
                f"auto_offset_reset={auto_offset_reset!r} is invalid; use one of {RESETS}"
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
        self.isolation_level = isolation_level
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.check_crcs = check_crcs
        self.request_timeout_s = request_timeout_ms / 1000
        self._partitions: dict[TopicPartition, PartitionState] = {}
        self._closed = False
        self._clock: Callable[[], float] = time.monotonic
        self._offsets = OffsetLookup(gateway, metadata, auto_offset_reset, self.request_timeout_s,
                                     read_committed=isolation_level == READ_COMMITTED)
        self._fetcher = Fetcher(
            gateway, metadata, fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            request_timeout_s=self.request_timeout_s, auto_offset_reset=auto_offset_reset,
            reset=self._reset, read_committed=isolation_level == READ_COMMITTED,
        )  # fmt: skip
        self._reader = BufferReader(
            resolve(key_deserializer, 1, "key_deserializer"),
            resolve(value_deserializer, 1, "value_deserializer"), check_crcs,
        )  # fmt: skip
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
        self._partitions = {tp: self._partitions.get(tp) or PartitionState(tp) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def _add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._partitions.setdefault(tp, PartitionState(tp))

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
        return self._offsets.list_offset(tp, timestamp)

    def _reset(self, state: PartitionState) -> None:
        self._offsets.reset(state)

    def _use_clock(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        """Run on another clock (monotonic seconds) and sleep: simulations and tests."""
        self._clock = clock
        for helper in (self._offsets, self._fetcher):
            helper.clock, helper.sleep = clock, sleep

    # -- polling -------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        """Records from the assigned, unpaused partitions: whatever is ready, waiting up to
        ``timeout_ms`` when nothing is. At most ``max_records`` (default max_poll_records)."""
        limit = max_records or self.max_poll_records
        deadline = self._clock() + timeout_ms / 1000
        while True:
            self._group_poll()
            self._send_fetches()
            out: list[Record] = []
            for state in self._partitions.values():
                if not state.paused:
                    self._reader.take_records(state, limit - len(out), out)
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

        deadline = self._clock() + timeout_ms / 1000
        while True:
            self._group_poll()
            self._send_fetches()
            parts: list = []
            taken = 0
            for state in self._partitions.values():
                if not state.paused:
                    taken += self._reader.take_columns(state, max_records - taken, parts)
                    if taken >= max_records:
                        break
            if parts or not self._await_answers(deadline):
                self._send_fetches()
                import pyarrow as pa

                return pa.Table.from_batches(parts, schema=columnar.SCHEMA)

    def _send_fetches(self) -> None:
        self._resolve_positions()
        self._fetcher.send_fetches(self._partitions.values())

    def _await_answers(self, deadline: float) -> bool:
        """Wait (until ``deadline``) for fetch answers, or the group's join or sync answer."""
        joining = self._member.pending_ref() if self._member is not None else None
        return self._fetcher.await_answers(list(self._partitions.values()), deadline, joining)

    # -- lifecycle -----------------------------------------------------------------------------

    def _state(self, tp: TopicPartition) -> PartitionState:
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
