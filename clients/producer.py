"""Producer: batches records per partition and ships each batch to its leader in one call.

``send`` only appends to the open batch of the record's partition (the accumulator,
``producer_accumulator``) and returns a future; a background sender thread
(``producer_sender``) encodes and compresses each batch once, sends it to the partition's
leader replica (one actor call per batch), and resolves the futures from the answer. Retriable
errors are retried with backoff after a metadata refresh; a batch the topic refuses as too
large is split, so only a record too large on its own fails. With idempotence on (the default
with ``acks="all"``) each batch carries the producer id, an epoch and a per-partition
sequence: a batch resent after a lost answer is written once, a batch that fails for good
fails alone, and every acknowledged record is in the log once, in send order (the rules are
in ``producer_idempotence``).

Records sent without ``timestamp_ms`` take the time their batch was opened (ms); a batch is
open for at most ``linger_ms`` or until it fills.

``send_batch`` is the bulk path: a whole column of values (and keys) becomes packed record
batches with no per-record Python objects, through the same sender, sequences and retries.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Sequence

import numpy as np

from rafka.clients.partitioner import (
    DefaultPartitioner,
    make_partitioner,
    partitions_for_keys,
)
from rafka.clients.serializers import BYTES_LIKE, check_bytes, resolve
from rafka.clients.producer_accumulator import CLOSED, RecordAccumulator
from rafka.clients.producer_batches import (
    BulkFuture,
    ProducerBatch,
    RecordFuture,
    new_future,
)
from rafka.clients.producer_config import make_config
from rafka.clients.producer_sender import Sender
from rafka.clients.producer_transactions import TransactionalMixin
from rafka.errors import (
    IllegalState,
    RecordTooLarge,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from rafka.storage import record_batch as rb
from rafka.types import RecordMetadata

log = logging.getLogger(__name__)

RECORD_OVERHEAD = 8  # bytes a record adds to a batch besides key and value (msgpack framing)


class Producer(TransactionalMixin):
    """Thread-safe; one background sender thread. Use as a context manager or call close().
    With a ``transactional_id``, records are sent inside transactions (see
    ``producer_transactions``)."""

    def __init__(
        self,
        gateway,
        metadata,
        *,
        key_serializer: Callable | str | None = None,
        value_serializer: Callable | str | None = None,
        partitioner: Any = None,
        **settings: Any,
    ) -> None:
        self.config = make_config(**settings)
        self._gateway = gateway
        self._metadata = metadata
        self._key_serializer = resolve(key_serializer, 0, "key_serializer")
        self._value_serializer = resolve(value_serializer, 0, "value_serializer")
        self._partitioner = make_partitioner(partitioner)
        self._no_serializers = self._key_serializer is None and self._value_serializer is None
        self._partition_cache: dict[tuple[str, bytes, int], int] = {}
        # Null-key records under the default partitioner all go to the topic's sticky batch.
        self._sticky_ok = isinstance(self._partitioner, DefaultPartitioner)
        self._accumulator = RecordAccumulator(self.config, metadata, self._partitioner)
        # The accumulator's lock and sticky batches, bound here for send()'s fast path.
        self._lock = self._accumulator.lock
        self._sticky_batches = self._accumulator.sticky_batches
        if self.config.transactional_id is not None:
            # init_transactions() gets the identity from the transaction coordinator.
            self.producer_id, self.producer_epoch = rb.NO_PRODUCER_ID, rb.NO_PRODUCER_EPOCH
        elif self.config.enable_idempotence:
            self.producer_id, self.producer_epoch = gateway.call_controller(
                "allocate_producer_id"
            )
        else:
            self.producer_id, self.producer_epoch = rb.NO_PRODUCER_ID, rb.NO_PRODUCER_EPOCH
        self.client_id = uuid.uuid4().hex
        self._sender = Sender(
            self._accumulator, gateway, metadata, self.config,
            self.producer_id, self.producer_epoch, self.client_id,
        )  # fmt: skip
        self._init_transactional()
        # send()'s fast path: a bytes value to the sticky batch, no serializers, and no
        # transaction to add the partition to first.
        self._fast_sends = self._no_serializers and self._txn is None
        self._sender.start()

    # -- send ----------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        callback: Callable[[RecordMetadata | None, BaseException | None], None] | None = None,
    ) -> RecordFuture:
        """Queue one record; returns a future of its RecordMetadata. ``callback(metadata,
        error)`` runs on the sender thread once the record is acknowledged or has failed.
        Raises at once for a record that can never be sent (TypeError, RecordTooLarge,
        UnknownTopicOrPartition), and RequestTimedOut when ``buffer_memory`` stays full
        for ``max_block_ms``."""
        if (
            key is None and partition is None and headers is None and timestamp_ms is None
            and callback is None and value.__class__ is bytes and self._fast_sends
        ):  # fmt: skip
            # The common case (a bytes value, nothing else): append to the topic's sticky
            # batch with no other work. Anything unusual takes the general path below.
            size = len(value) + RECORD_OVERHEAD
            with self._lock:
                batch = self._sticky_batches.get(topic)
                acc = self._accumulator
                if (
                    batch is not None and batch.plain and not batch.closed
                    and batch.size + size <= acc.batch_limit
                    and acc.buffered + size <= acc.buffer_memory
                ):  # fmt: skip
                    index = batch.count
                    batch.values.append(value)
                    batch.count = index + 1
                    batch.size += size
                    acc.buffered += size
                    return new_future((batch, index))
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._accumulator.closing:
            raise IllegalState(CLOSED)  # checked again under the lock, when appending
        if value is not None and value.__class__ is not bytes:
            check_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            check_bytes(key, "key")
        size = RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        if headers:
            headers = _check_headers(headers)
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)
        if size > self.config.max_request_size:
            raise RecordTooLarge(
                f"record of {size} bytes exceeds max_request_size={self.config.max_request_size}"
                "; raise max_request_size (and the topic's max.message.bytes) or send less"
            )
        sticky = False
        if partition is None:
            partition = self._choose_partition(topic, key)
            sticky = key is None and headers is None and timestamp_ms is None and self._sticky_ok
        else:
            count = len(self._metadata.topic(topic))
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} has partitions 0..{count - 1}, not {partition}"
                )
        def queue():
            with self._lock:
                return self._accumulator.append(
                    topic, partition, value, key, headers, timestamp_ms, callback, size, sticky
                )

        if self._txn is not None:
            return self._in_transaction(topic, partition, queue)
        return queue()

    def _choose_partition(self, topic: str, key) -> int:
        count = len(self._metadata.topic(topic))
        if key is None:
            with self._lock:
                return self._partitioner.partition(topic, None, count)
        cache_key = (topic, bytes(key), count)
        found = self._partition_cache.get(cache_key)
        if found is None:
            with self._lock:
                found = self._partitioner.partition(topic, bytes(key), count)
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            if self._sticky_ok:
                self._partition_cache[cache_key] = found  # murmur2 is a pure function of key
        return found

    # -- bulk ----------------------------------------------------------------------------------

    def send_batch(
        self,
        topic: str,
        values,
        keys=None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> BulkFuture:
        """Queue a whole column of values (and optional keys, one per value) in one call.

        ``values``/``keys`` may be a pyarrow binary or string array (no per-record copy), a
        sequence of bytes/None, or a 2-D uint8 numpy array (one row per record). Records go to
        ``partition`` when given, else by key (murmur2, as ``send``); null-key records go
        to the sticky partition, which moves on after each batch. Within a partition the
        records keep their column order and follow the records sent before the call. Raises
        before queuing anything for a column that can not be sent whole (RecordTooLarge,
        UnknownTopicOrPartition, IllegalState once close() has begun). Returns a future
        whose result says where the records landed."""
        if self._accumulator.closing:
            raise IllegalState(CLOSED)
        from rafka.clients import columnar

        value_col = columnar.binary_column(values, "values")
        key_col = None if keys is None else columnar.binary_column(keys, "keys")
        count = len(value_col)
        if key_col is not None and len(key_col) != count:
            raise ValueError(f"{len(key_col)} keys for {count} values: give one key per value")
        meta = self._metadata.topic(topic)
        # Every check comes before the first batch is queued: a column is refused whole.
        sizes = columnar.record_sizes(value_col, key_col, RECORD_OVERHEAD)
        _check_sizes(sizes, self.config.max_request_size)
        limit = min(self._accumulator.batch_limit, self.config.max_request_size)
        if partition is not None:
            if not 0 <= partition < len(meta):
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} has partitions 0..{len(meta) - 1}, not {partition}"
                )
            groups = {partition: None}
        elif key_col is not None and key_col.null_count < count:
            parts = partitions_for_keys(key_col.lengths, key_col.data, len(meta), key_col.offsets)
            if key_col.null_count:
                self._place_null_keys(topic, parts, sizes, limit, len(meta))
            groups = columnar.group_rows(parts)
        else:
            groups = {None: None}  # spread batches round the partitions
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        batches: list[ProducerBatch] = []
        try:
            for target, rows in groups.items():
                vals = value_col if rows is None else value_col.take(rows)
                ks = None if key_col is None else (key_col if rows is None else key_col.take(rows))
                row_sizes = sizes if rows is None else sizes[rows]
                for start, stop in columnar.size_chunks(row_sizes, limit):
                    p = target
                    if p is None:
                        with self._lock:
                            p = self._partitioner.partition(topic, None, len(meta))
                    batch = ProducerBatch(topic, p, timestamp)
                    batch.count = stop - start
                    batch.size = int(row_sizes[start:stop].sum())
                    batch.packed = (
                        None if ks is None else ks.slice(start, stop).to_msgpack(),
                        vals.slice(start, stop).to_msgpack(),
                    )

                    def queue(batch=batch):
                        with self._lock:
                            self._accumulator.add_sealed(batch)

                    if self._txn is not None:
                        self._in_transaction(topic, p, queue)
                    else:
                        queue()
                    batches.append(batch)
        except (IllegalState, RequestTimedOut) as e:
            if not batches:
                raise
            queued = sum(b.count for b in batches)
            raise type(e)(
                f"{e} ({queued} of the column's {count} records were queued before this and "
                "are sent; the others were not)"
            ) from e
        return BulkFuture(topic, batches)

    def _place_null_keys(
        self, topic: str, parts: np.ndarray, sizes: np.ndarray, limit: int, count: int
    ) -> None:
        """Give the null-key rows of a keyed column (``parts`` -1) partitions as send()
        would: the sticky partition, moving on after each batch's worth (``limit`` bytes)
        of them, so the keyed rows keep their murmur2 partitions."""
        from rafka.clients import columnar

        null_rows = np.flatnonzero(parts < 0)
        with self._lock:
            for start, stop in columnar.size_chunks(sizes[null_rows], limit):
                chosen = self._partitioner.partition(topic, None, count)
                parts[null_rows[start:stop]] = chosen
                self._partitioner.on_new_batch(topic, count, chosen)

    # -- flush and close -----------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued (ignoring linger_ms) and wait until every record sent
        before the call is acknowledged or failed; records other threads send meanwhile
        are sent at once but not waited for (as Kafka's flush). Raises RequestTimedOut if
        that takes longer than ``timeout`` seconds."""
        if self._sender.is_current_thread():
            raise IllegalState(
                "flush() was called from a send callback: callbacks run on the producer's "
                "sender thread, which flush() would wait for forever; flush from another thread"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        acc = self._accumulator
        with self._lock:
            waiting = acc.begin_flush()
        try:
            for batch in waiting:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.done.wait(remaining):
                    left = sum(not b.done.is_set() for b in waiting)
                    raise RequestTimedOut(
                        f"flush: {left} batch(es) unacknowledged after {timeout} s; wait "
                        "longer, or check the cluster (each record's future has its outcome)"
                    )
        finally:
            with self._lock:
                acc.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender, within ``timeout`` seconds in all (None: as long as
        it takes). A send begun once close() has begun raises IllegalState (no record is
        queued that the stopped sender would never send). If the timeout runs out, close
        returns anyway (as Kafka's close does): the records still out complete through their
        futures, by their answers or their delivery timeouts. Called from a send callback
        (the sender's own thread), close waits for nothing, as Kafka's does there."""
        if self._accumulator.closed:
            return
        with self._lock:
            self._accumulator.begin_close()
        own_thread = self._sender.is_current_thread()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if not own_thread:
                self.flush(timeout)
        except RequestTimedOut:
            log.warning("producer closed after %s s with records still unacknowledged; "
                        "their futures say how they end", timeout)  # fmt: skip
        finally:
            with self._lock:
                self._accumulator.closed = True
                self._accumulator.wake.notify_all()
            if not own_thread:
                self._sender.join(None if deadline is None
                                  else max(0.0, deadline - time.monotonic()))  # fmt: skip

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def metrics(self) -> dict[str, int]:
        with self._lock:
            return {
                "outstanding_batches": self._accumulator.outstanding,
                "buffered_bytes": self._accumulator.buffered,
                "producer_id": self.producer_id,
            }


def _check_sizes(sizes: np.ndarray, max_request_size: int) -> None:
    """RecordTooLarge naming the first record of a column (``sizes`` in bytes, as send()
    counts them) over ``max_request_size``."""
    over = np.flatnonzero(sizes > max_request_size)
    if over.size:
        first = int(over[0])
        raise RecordTooLarge(
            f"record {first} of the column is {int(sizes[first])} bytes (key, value and "
            f"{RECORD_OVERHEAD} bytes of framing), over max_request_size={max_request_size} "
            f"({over.size} record(s) are); nothing of the column was queued: raise "
            "max_request_size (and the topic's max.message.bytes) or send them smaller"
        )


def _check_headers(headers) -> list[tuple[str, bytes | None]]:
    out = []
    for item in headers:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(
                f"headers must be (str, bytes | None) pairs, got {item!r}"
            ) from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, got {type(name).__name__}: {name!r}")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as e:
            raise TypeError(
                f"header name {name!r} cannot be encoded as UTF-8 ({e.reason}); "
                "header names must be valid text"
            ) from None
        if value is not None and not isinstance(value, BYTES_LIKE):
            raise TypeError(
                f"header {name!r} value must be bytes or None, got {type(value).__name__}; "
                "encode it first"
            )
        out.append((name, None if value is None else bytes(value)))
    return out
