"""What the consumer holds per partition between a fetch answer and ``poll``, and how it is
handed out: as ``Record`` tuples (``poll``) or as Arrow record batches (``poll_columns``).

Invariants of a ``PartitionState``:

- ``position`` <= the first offset still buffered <= ``fetch_offset``: records below the
  position were handed out, the next fetch starts at ``fetch_offset``.
- ``records`` holds the not yet returned records of exactly one batch, the one starting at
  ``decoded_from`` (the answer array and the byte position of the batch in it); that batch
  belongs to ``chunks[0]``. Records are decoded (and deserialized) one batch at a time, only
  as ``poll`` hands them out, so ``poll_columns`` can go back to the raw bytes of that batch.
- Each entry of ``chunks`` is ``[answer bytes, byte position of the next batch to read,
  offset after the answer's last batch]`` (the third may be missing: computed from the
  bytes).
"""

from __future__ import annotations

import collections
import gc
from itertools import repeat
from typing import Callable

from rafka.storage import record_batch as rb
from rafka.types import Record, TopicPartition

_NO_HEADERS = ()
_new_tuple = tuple.__new__


class PartitionState:
    """One assigned partition: positions, buffered answers, and its fetch in flight."""

    __slots__ = (
        "tp", "position", "fetch_offset", "paused", "in_flight", "chunks", "records",
        "decoded_from", "high_watermark", "log_start_offset", "generation", "retry_at",
        "fetch_after_drain", "txn_filter",
    )  # fmt: skip

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.paused = False
        self.in_flight = None  # (ObjectRef, generation, sent at, leader) of the open fetch
        self.retry_at = 0.0  # after a retriable error, no new fetch before this (clock s)
        self.chunks: collections.deque = collections.deque()  # [data, position in data]
        self.records: collections.deque = collections.deque()  # decoded, not yet returned
        self.decoded_from: tuple | None = None  # (data, byte position) of the batch in records
        self.high_watermark = -1
        self.log_start_offset = -1
        self.generation = 0  # bumped by seek: answers to older fetches are dropped
        # A fetch ahead of the buffer was answered OffsetOutOfRange: hand out what is buffered
        # first, then fetch again at the position reached (only that answer may reset it).
        self.fetch_after_drain = False
        # read_committed: the aborted transactions the fetch position is among
        # (``rafka.storage.read_committed``); None until the first such answer.
        self.txn_filter = None

    def clear(self) -> None:
        """Forget everything buffered and the fetch in flight (a seek or a reset)."""
        self.chunks.clear()
        self.records.clear()
        self.decoded_from = None
        self.in_flight = None
        self.fetch_after_drain = False
        self.txn_filter = None  # the next answer starts a new walk from the new position
        self.generation += 1

    def buffered(self) -> bool:
        """Whether records fetched but not yet handed out may remain (control batches and
        records below the position count until they are read past)."""
        return bool(self.records) or any(c[1] < len(c[0]) for c in self.chunks)


class BufferReader:
    """Hands buffered batches out; ``key_deserializer`` and ``value_deserializer`` apply to
    records only, never to ``poll_columns`` (its key and value columns are the raw bytes)."""

    def __init__(
        self, key_deserializer: Callable | None, value_deserializer: Callable | None,
        check_crcs: bool,
    ) -> None:  # fmt: skip
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.check_crcs = check_crcs

    # -- records -------------------------------------------------------------------------------

    def take_records(self, state: PartitionState, limit: int, out: list) -> None:
        """Move up to ``limit`` records of ``state`` to ``out``, advancing the position."""
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

    def _decode_next(self, state: PartitionState) -> bool:
        """Decode the next buffered batch of ``state`` into ``state.records``."""
        while state.chunks:
            chunk = state.chunks[0]
            data, pos = chunk[0], chunk[1]
            if pos >= len(data):
                _read_past(state, state.chunks.popleft())
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
                state.decoded_from = (data, pos)
                return True
        return False

    def _to_records(self, state: PartitionState, decoded: rb.Records) -> None:
        keys, values = decoded.keys, decoded.values
        if self.key_deserializer is not None and keys is not None:
            keys = list(map(self.key_deserializer, keys))
        if self.value_deserializer is not None:
            values = list(map(self.value_deserializer, values))
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

    # -- columns -------------------------------------------------------------------------------

    def take_columns(self, state: PartitionState, limit: int, parts: list) -> int:
        """Append Arrow record batches of up to ``limit`` records of ``state`` to ``parts``,
        advancing the position; returns how many records were taken."""
        from rafka.clients import columnar

        self._undecode(state)
        taken = 0
        while taken < limit and state.chunks:
            chunk = state.chunks[0]
            data, pos = chunk[0], chunk[1]
            if pos >= len(data):
                _read_past(state, state.chunks.popleft())
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

    @staticmethod
    def _undecode(state: PartitionState) -> None:
        """Records left by a ``poll`` go back to their batch's raw bytes: the columns carry
        bytes, and deserialized keys and values need not convert back to them. The batch is
        read again from the position, which skips the records already handed out."""
        if not state.records:
            return
        data, pos = state.decoded_from
        state.records.clear()
        state.decoded_from = None
        if state.chunks and state.chunks[0][0] is data:
            state.chunks[0][1] = pos
        else:
            state.chunks.appendleft([data, pos])


def _read_past(state: PartitionState, chunk: list) -> None:
    """A buffered answer was read to its end (every record of it handed out): the position
    moves past its last batch, which may be a transaction marker or an aborted transaction's
    batch that returns no record (Kafka's consumer does the same), so a read_committed
    consumer's position reaches the last stable offset."""
    data = chunk[0]
    end = chunk[2] if len(chunk) > 2 else (rb.next_offset(data) if len(data) else None)
    if end is not None and state.position is not None:
        state.position = max(state.position, end)
