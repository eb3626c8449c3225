"""Offset lookups for the consumer: the leader's log start, high watermark or first offset at a
time (Kafka's ListOffsets), and resetting a position as ``auto_offset_reset`` says."""

from __future__ import annotations

import time
from typing import Callable

from rafka.clients.consumer_buffer import PartitionState
from rafka.errors import OffsetOutOfRange, RafkaError, error_class
from rafka.types import TopicPartition

#: ListOffsets' special timestamps: the log start offset, and the high watermark.
EARLIEST = -2
LATEST = -1
RESETS = ("earliest", "latest", "none")


class OffsetLookup:
    """Asks partition leaders for offsets. ``clock`` (monotonic seconds) and ``sleep`` are
    ``time.monotonic`` and ``time.sleep`` unless a test runs the consumer on its own clock."""

    def __init__(
        self, gateway, metadata, auto_offset_reset: str, request_timeout_s: float,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
        read_committed: bool = False,
    ) -> None:  # fmt: skip
        """``read_committed``: the latest offset is the last stable offset (a consumer that
        starts there misses nothing an open transaction later commits), as Kafka's
        ListOffsets answers a read_committed consumer."""
        self.read_committed = read_committed
        self.gateway = gateway
        self.metadata = metadata
        self.auto_offset_reset = auto_offset_reset
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.sleep = sleep

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) from the leader. Retriable errors (a replica restarting, a
        leader moving) are retried with backoff for up to request_timeout_s."""
        deadline = self.clock() + self.request_timeout_s
        backoff = 0.05
        while True:
            try:
                meta = self.metadata.topic(tp.topic)
                replica = self.metadata.replica(meta, tp.partition)
                answer = self.gateway.get(
                    self.gateway.list_offset(replica, timestamp, self.read_committed),
                    self.request_timeout_s,
                )
                if answer[0] == 0:
                    return answer[2], answer[3]
                error = error_class(answer[0])(answer[1])
            except RafkaError as e:
                error = e
            if not error.retriable or self.clock() + backoff > deadline:
                raise error
            self.metadata.invalidate(tp.topic)
            self.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def reset(self, state: PartitionState) -> None:
        """Move ``state`` to the log start or the high watermark per ``auto_offset_reset``,
        dropping whatever it buffered; OffsetOutOfRange with ``auto_offset_reset='none'``."""
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRange(
                f"{state.tp} has no position and auto_offset_reset='none'; seek() first or use "
                "auto_offset_reset='earliest' or 'latest'"
            )
        which = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        offset = self.list_offset(state.tp, which)[0]
        state.clear()
        state.position = state.fetch_offset = offset
