"""Producer: batches records per partition and ships each batch to its leader in one call.

``send`` only appends to the open batch of the record's partition and returns a future; a
background sender thread encodes and compresses each batch once, sends it to the partition's
leader replica (one actor call per batch), and resolves the futures from the answer. Retriable
errors are retried with backoff after a metadata refresh; with idempotence on (the default
with ``acks="all"``) each batch carries the producer id and a per-partition sequence, so a
batch resent after a lost answer is written once.

Records sent without ``timestamp_ms`` take the time their batch was opened (ms); a batch is
open for at most ``linger_ms`` or until it fills.

``send_batch`` is the bulk path: a whole column of values (and keys) becomes packed record
batches with no per-record Python objects, through the same sender, sequences and retries.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from rafka.clients.partitioner import (
    DefaultPartitioner,
    make_partitioner,
    partitions_for_keys,
)
from rafka.clients.serializers import BYTES_LIKE, check_bytes, resolve
from rafka.clients.producer_batches import (
    BulkFuture,
    PartitionQueue,
    ProducerBatch,
    RecordFuture,
    new_future,
)
from rafka.clients.metadata import RECHECK_INTERVAL_S, SUSPECT_AFTER_S
from rafka.clients.producer_config import make_config
from rafka.errors import (
    IllegalState,
    NotLeaderOrFollower,
    OutOfOrderSequence,
    RafkaError,
    RecordTooLarge,
    RequestTimedOut,
    UnknownTopicOrPartition,
    error_class,
)
from rafka.storage import record_batch as rb
from rafka.storage.producer_state import BATCHES_KEPT
from rafka.types import RecordMetadata

log = logging.getLogger(__name__)

RECORD_OVERHEAD = 8  # bytes a record adds to a batch besides key and value (msgpack framing)


class Producer:
    """Thread-safe; one background sender thread. Use as a context manager or call close()."""

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
        # A batch must also fit in one request: its header and framing take some room.
        self._batch_limit = max(1, min(self.config.batch_size, self.config.max_request_size - 256))
        self._gateway = gateway
        self._metadata = metadata
        self._key_serializer = resolve(key_serializer, 0, "key_serializer")
        self._value_serializer = resolve(value_serializer, 0, "value_serializer")
        self._partitioner = make_partitioner(partitioner)
        self._no_serializers = self._key_serializer is None and self._value_serializer is None
        self._buffer_memory = self.config.buffer_memory
        self._partition_cache: dict[tuple[str, bytes, int], int] = {}
        # Null-key records under the default partitioner all go to the topic's sticky batch.
        self._sticky_ok = isinstance(self._partitioner, DefaultPartitioner)
        self._sticky_batches: dict[str, ProducerBatch] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # new work or space for the sender
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        self._completions: collections.deque = collections.deque()
        self._requests: set[_SentRequest] = set()  # produce calls awaiting an answer
        self._outstanding = 0  # batches created and not yet done
        self._buffered = 0  # bytes of records not yet acknowledged
        self._flushing = 0
        self._closed = False
        if self.config.enable_idempotence:
            self.producer_id, self.producer_epoch = gateway.call_controller(
                "allocate_producer_id"
            )
        else:
            self.producer_id, self.producer_epoch = rb.NO_PRODUCER_ID, rb.NO_PRODUCER_EPOCH
        self.client_id = uuid.uuid4().hex
        self._sender = threading.Thread(target=self._run_sender, name="rafka-sender", daemon=True)
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
            and callback is None and value.__class__ is bytes and self._no_serializers
        ):  # fmt: skip
            # The common case (a bytes value, nothing else): append to the topic's sticky
            # batch with no other work. Anything unusual takes the general path below.
            size = len(value) + RECORD_OVERHEAD
            with self._lock:
                batch = self._sticky_batches.get(topic)
                if (
                    batch is not None and batch.plain and not batch.closed
                    and batch.size + size <= self._batch_limit
                    and self._buffered + size <= self._buffer_memory
                ):  # fmt: skip
                    index = batch.count
                    batch.values.append(value)
                    batch.count = index + 1
                    batch.size += size
                    self._buffered += size
                    return new_future((batch, index))
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._closed:
            raise IllegalState("the producer is closed; create a new one")
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
        with self._lock:
            if self._buffered + size > self.config.buffer_memory:
                self._wait_for_buffer(size)
            batch = self._open.get((topic, partition))
            if batch is None or (batch.size + size > self._batch_limit and batch.count):
                batch = self._open_batch(topic, partition)
            index = batch.count
            batch.values.append(value)
            if key is None and sticky:
                self._sticky_batches[topic] = batch
            if key is not None or batch.keys is not None:
                if batch.keys is None:
                    batch.keys = [None] * index
                batch.keys.append(key)
            if headers or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [None] * index
                batch.headers.append(headers or None)
            if timestamp_ms is not None or batch.timestamps is not None:
                if batch.timestamps is None:
                    batch.timestamps = [batch.timestamp] * index
                batch.timestamps.append(batch.timestamp if timestamp_ms is None else timestamp_ms)
            batch.count = index + 1
            batch.size += size
            self._buffered += size
            if key is not None or headers or timestamp_ms is not None:
                batch.plain = False
            if callback is not None:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((index, callback))
            if batch.size >= self._batch_limit:
                self._seal(batch)
        return new_future((batch, index))

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

    def _open_batch(self, topic: str, partition: int) -> ProducerBatch:
        old = self._open.get((topic, partition))
        if old is not None:
            self._seal(old)
        batch = ProducerBatch(topic, partition, int(time.time() * 1000))
        self._open[(topic, partition)] = batch
        self._outstanding += 1
        self._wake.notify()  # the sender's linger deadline may now be earlier
        return batch

    def _seal(self, batch: ProducerBatch) -> None:
        """Close ``batch`` to new records and queue it for sending (lock held)."""
        if self._open.get((batch.topic, batch.partition)) is batch:
            del self._open[(batch.topic, batch.partition)]
        batch.closed = True
        if self._sticky_batches.get(batch.topic) is batch:
            del self._sticky_batches[batch.topic]
        queue = self._queue(batch.topic, batch.partition)
        if self.config.enable_idempotence:
            batch.sequence = queue.next_sequence
            queue.next_sequence = rb.increment_sequence(queue.next_sequence, batch.count)
        queue.ready.append(batch)
        # Sticky partitioning moves null-key records on once their batch is sealed.
        meta = self._metadata.cached(batch.topic)  # never a controller call under the lock
        if meta is not None:
            self._partitioner.on_new_batch(batch.topic, len(meta), batch.partition)
        self._wake.notify()

    def _queue(self, topic: str, partition: int) -> PartitionQueue:
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = PartitionQueue()
        return queue

    def _wait_for_buffer(self, size: int) -> None:
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        for batch in list(self._open.values()):  # send what we hold, it frees the buffer
            self._seal(batch)
        while self._buffered + size > self.config.buffer_memory and self._buffered > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                raise RequestTimedOut(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}; the cluster is slower than the "
                    "application: raise buffer_memory or max_block_ms, or send less"
                )
            self._wake.wait(remaining)

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
        ``partition`` when given, else by key (murmur2, as ``send``), else to one partition
        per batch in turn. Returns a future whose result says where the records landed."""
        if self._closed:
            raise IllegalState("the producer is closed; create a new one")
        from rafka.clients import columnar

        value_col = columnar.binary_column(values, "values")
        key_col = None if keys is None else columnar.binary_column(keys, "keys")
        count = len(value_col)
        if key_col is not None and len(key_col) != count:
            raise ValueError(f"{len(key_col)} keys for {count} values: give one key per value")
        meta = self._metadata.topic(topic)
        if partition is not None:
            if not 0 <= partition < len(meta):
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} has partitions 0..{len(meta) - 1}, not {partition}"
                )
            groups = {partition: None}
        elif key_col is not None and key_col.null_count == 0:
            parts = partitions_for_keys(key_col.lengths, key_col.data, len(meta), key_col.offsets)
            groups = columnar.group_rows(parts)
        else:
            groups = {None: None}  # spread batches round the partitions
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        limit = min(self._batch_limit, self.config.max_request_size)
        batches: list[ProducerBatch] = []
        for target, rows in groups.items():
            vals = value_col if rows is None else value_col.take(rows)
            ks = None if key_col is None else (key_col if rows is None else key_col.take(rows))
            for start, stop in columnar.chunks(vals, ks, limit, RECORD_OVERHEAD):
                if stop - start == 1 and vals.size_of(start, stop) > self.config.max_request_size:
                    raise RecordTooLarge(
                        f"record {start} of the column is larger than max_request_size="
                        f"{self.config.max_request_size}"
                    )
                with self._lock:
                    p = target
                    if p is None:
                        p = self._partitioner.partition(topic, None, len(meta))
                    batch = ProducerBatch(topic, p, timestamp)
                    batch.count = stop - start
                    batch.size = vals.size_of(start, stop) + RECORD_OVERHEAD * batch.count
                    batch.packed = (
                        None if ks is None else ks.slice(start, stop).to_msgpack(),
                        vals.slice(start, stop).to_msgpack(),
                    )
                    if self._buffered + batch.size > self.config.buffer_memory:
                        self._wait_for_buffer(batch.size)
                    self._buffered += batch.size
                    self._outstanding += 1
                    self._seal(batch)
                batches.append(batch)
        return BulkFuture(topic, batches)

    # -- flush and close -----------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued (ignoring linger_ms) and wait until it is acknowledged or
        failed. Raises RequestTimedOut if that takes longer than ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            try:
                for batch in list(self._open.values()):
                    self._seal(batch)
                while self._outstanding:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOut(
                            f"flush: {self._outstanding} batch(es) unacknowledged after {timeout} s"
                        )
                    self._wake.wait(remaining)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender. Sending after close raises IllegalState."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._wake.notify_all()
            self._sender.join(timeout)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def metrics(self) -> dict[str, int]:
        with self._lock:
            return {
                "outstanding_batches": self._outstanding,
                "buffered_bytes": self._buffered,
                "producer_id": self.producer_id,
            }

    # -- the sender thread ---------------------------------------------------------------------

    def _run_sender(self) -> None:
        while True:
            if self._requests:
                self._abandon_stalled()
            if self._renewing:
                self._renew_producer_ids()
            with self._lock:
                to_send = self._collect_sendable()
                while not to_send and not self._completions:
                    if self._closed and not self._outstanding:
                        return
                    self._wake.wait(self._next_wakeup())
                    to_send = self._collect_sendable()
                    if self._requests and time.monotonic() - min(
                        r.sent_at for r in self._requests
                    ) > SUSPECT_AFTER_S:
                        break  # look for requests stuck at a leader that moved
                completions = list(self._completions)
                self._completions.clear()
            for batch, answer, error in completions:
                self._handle_answer(batch, answer, error)
            for request in to_send:
                self._dispatch(request)

    def _next_wakeup(self) -> float | None:
        now = time.monotonic()
        deadlines = [b.created + self.config.linger_ms / 1000 for b in self._open.values()]
        deadlines += [q.ready[0].retry_at for q in self._queues.values() if q.ready]
        if self._requests:
            deadlines.append(now + RECHECK_INTERVAL_S)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now) + 0.0005

    def _collect_sendable(self) -> list[list[ProducerBatch]]:
        """Requests to send now: per partition, ready batches in sequence order, as many per
        request as fit in max_request_size (one actor call carries them all). Lock held."""
        now = time.monotonic()
        linger = self.config.linger_ms / 1000
        for batch in list(self._open.values()):
            if self._flushing or self._closed or now - batch.created >= linger:
                self._seal(batch)
        out = []
        limit = self.config.max_in_flight
        budget = self.config.max_request_size
        idempotent = self.config.enable_idempotence
        for queue in self._queues.values():
            if queue.renew_id:
                continue  # nothing goes out until the partition has its new producer id
            while queue.ready and queue.requests_in_flight < limit:
                if queue.ready[0].retry_at > now:
                    break
                if queue.retrying and queue.in_flight:
                    break  # resend in order: wait until everything older has answered
                request: list[ProducerBatch] = []
                size = 0
                while queue.ready and queue.ready[0].retry_at <= now:
                    head = queue.ready[0]
                    if request and (size + head.size > budget or head.attempts):
                        break
                    if idempotent and not head.attempts and queue.unacked >= BATCHES_KEPT:
                        # The leader remembers its last BATCHES_KEPT batches per producer:
                        # more unacknowledged ones and a resent one could not be recognised.
                        break
                    if not head.attempts:
                        queue.unacked += 1
                    queue.ready.popleft()
                    queue.in_flight += 1
                    queue.sent.add(head)
                    request.append(head)
                    size += head.size
                    if head.attempts:
                        break  # a retried batch travels alone
                if not request:
                    break
                queue.requests_in_flight += 1
                queue.retrying = any(b.attempts for b in queue.ready)
                out.append(request)
        return out

    def _dispatch(self, request: list[ProducerBatch]) -> None:
        config = self.config
        first = request[0]
        queue = self._queues[(first.topic, first.partition)]
        try:
            for batch in request:
                if batch.encoded is None:
                    batch.encoded = self._encode(batch)
                batch.attempts += 1
                batch.resequenced = False
            if len(request) == 1 and first.count > 1 and (
                len(first.encoded) > config.max_request_size
            ):
                raise RecordTooLarge(
                    f"batch of {first.count} records encodes to {len(first.encoded)} bytes,"
                    f" over max_request_size={config.max_request_size}; lower batch_size"
                )
            meta = self._metadata.topic(first.topic)
            replica = self._metadata.replica(meta, first.partition)
            request_no = queue.next_request
            queue.next_request += 1
            payload = first.encoded if len(request) == 1 else b"".join(
                b.encoded for b in request
            )
            ref = self._gateway.produce(
                replica, payload, config.acks, config.request_timeout_ms,
                f"{self.client_id}.{queue.session}", request_no,
            )  # fmt: skip
        except RafkaError as e:
            self._post_request(request, None, e)
            return
        if config.acks == 0:
            self._post_request(request, (0, "", -1, [(0, "", -1, -1)] * len(request)), None)
            return
        sent = _SentRequest(request, time.monotonic(), meta.partitions[first.partition])
        with self._lock:
            self._requests.add(sent)
        future = self._gateway.future(ref)
        future.add_done_callback(lambda f, r=sent: self._post_request(r, *_outcome(f)))

    @property
    def _renewing(self) -> bool:
        return any(q.renew_id for q in self._queues.values())

    def _renew_producer_ids(self) -> None:
        """For each partition whose batch failed for good after it may have been written,
        once nothing of it is in flight: a fresh producer id, batches still waiting renumbered
        from sequence 0 under it, and waiting batches that may have been written failed (a
        resend under the new id could write them twice). Sender thread, lock not held."""
        with self._lock:
            idle = [q for q in self._queues.values() if q.renew_id and not q.in_flight]
        for queue in idle:
            try:
                producer_id, epoch = self._gateway.call_controller("allocate_producer_id")
            except RafkaError as e:
                log.warning("could not get a new producer id (%r); trying again", e)
                return
            doomed = []
            with self._lock:
                queue.producer_id, queue.producer_epoch = producer_id, epoch
                sequence = 0
                for batch in list(queue.ready):
                    if batch.maybe_written:
                        queue.ready.remove(batch)
                        doomed.append(batch)
                        continue
                    batch.sequence, batch.encoded = sequence, None
                    sequence = rb.increment_sequence(sequence, batch.count)
                queue.next_sequence = sequence
                queue.retrying = any(b.attempts for b in queue.ready)
                queue.renew_id = False
                self._wake.notify_all()
            for batch in doomed:
                self._complete(batch, RequestTimedOut(
                    f"a batch of {batch.topic}-{batch.partition} may or may not have been "
                    "written: the leader's answer was lost and a later resend was refused"
                ))  # fmt: skip

    def _abandon_stalled(self) -> None:
        """Requests outstanding for long whose partition's leader has moved since they were
        sent are failed with NotLeaderOrFollower, so they are retried at the new leader: a
        call to a dead node's actor may not fail for seconds. Sender thread, lock not held."""
        now = time.monotonic()
        with self._lock:
            stalled = [r for r in self._requests if now - r.sent_at > SUSPECT_AFTER_S]
        for sent in stalled:
            first = sent.batches[0]
            if self._metadata.leader_moved(first.topic, first.partition, sent.leader):
                log.info("%s-%d: the leader moved during a produce; resending",
                         first.topic, first.partition)  # fmt: skip
                self._post_request(sent, None, NotLeaderOrFollower(
                    f"the leader of {first.topic}-{first.partition} moved from broker "
                    f"{sent.leader.leader} while the request was outstanding"
                ))  # fmt: skip

    def _post_request(self, request, answer, error) -> None:
        """Turn one request's answer into one completion per batch. ``request`` is a list of
        batches, or a _SentRequest (answered once: a late answer to an abandoned request is
        dropped)."""
        with self._lock:
            if isinstance(request, _SentRequest):
                if request.settled:
                    return
                request.settled = True
                self._requests.discard(request)
                request = request.batches
            queue = self._queues[(request[0].topic, request[0].partition)]
            queue.requests_in_flight -= 1
            if error is None and (answer[0] != 0 or len(answer[3]) != len(request)):
                if answer[0] == 0:
                    error = IllegalState(
                        f"the leader answered {len(answer[3])} results for {len(request)} batches"
                    )
                else:
                    error = error_class(answer[0])(answer[1])
            for i, batch in enumerate(request):
                if error is not None:
                    self._completions.append((batch, None, error))
                else:
                    errno, message, base_offset, append_time = answer[3][i]
                    self._completions.append(
                        (batch, (errno, message, base_offset, append_time, answer[2]), None)
                    )
            self._wake.notify_all()

    def _encode(self, batch: ProducerBatch) -> bytes:
        queue = self._queues[(batch.topic, batch.partition)]
        own = queue.producer_id is None
        common = dict(
            codec=self.config.compression,
            producer_id=self.producer_id if own else queue.producer_id,
            producer_epoch=self.producer_epoch if own else queue.producer_epoch,
            base_sequence=batch.sequence,
        )  # fmt: skip
        if batch.packed is not None:
            keys, values = batch.packed
            return rb.encode_batch(values, keys, batch.timestamp, count=batch.count, **common)
        return rb.encode_batch(
            batch.values, batch.keys,
            batch.timestamps if batch.timestamps is not None else batch.timestamp,
            batch.headers, **common,
        )  # fmt: skip

    def _handle_answer(self, batch: ProducerBatch, answer, error: BaseException | None) -> None:
        if error is not None:
            # A request-level failure or no answer at all: the batch may be in the log.
            # (Per-batch errors in an answer mean the append refused it.)
            batch.maybe_written = True
        elif answer[0] != 0:
            error = error_class(answer[0])(answer[1])
        key = (batch.topic, batch.partition)
        if error is None:
            batch.base_offset, batch.append_time = answer[2], answer[3]
            with self._lock:
                queue = self._queues[key]
                queue.in_flight -= 1
                queue.sent.discard(batch)
            self._complete(batch, None)
            return
        with self._lock:
            queue = self._queues[key]
            queue.in_flight -= 1
            queue.sent.discard(batch)
            queue.session += 1
            queue.next_request = 0
            retry = self._should_retry(batch, error, queue)
            if retry:
                batch.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
                queue.retrying = True
                _insert_by_sequence(queue.ready, batch)
                self._wake.notify_all()
            elif batch.maybe_written and batch.sequence != rb.NO_SEQUENCE:
                queue.renew_id = True
            else:
                self._release_sequence(queue, batch)
        if retry:
            log.debug("retrying %s-%d after %r", batch.topic, batch.partition, error)
            self._metadata.invalidate(batch.topic)
        else:
            self._complete(batch, error)

    def _should_retry(
        self, batch: ProducerBatch, error: BaseException, queue: PartitionQueue
    ) -> bool:
        if self._closed and not self._flushing:
            return False
        if time.monotonic() - batch.created > self.config.delivery_timeout_ms / 1000:
            return False
        if batch.attempts > self.config.retries:
            return False
        if isinstance(error, OutOfOrderSequence):
            # An earlier batch failed (and is being resent, or gave its sequence numbers
            # back): this one is in order again once resent after it.
            return batch.resequenced or any(
                b.sequence < batch.sequence for b in (*queue.ready, *queue.sent)
            )
        return isinstance(error, RafkaError) and error.retriable

    def _release_sequence(self, queue: PartitionQueue, failed: ProducerBatch) -> None:
        """A batch failed for good and was not written: later batches move down into its
        sequence numbers, so the leader sees no gap (Kafka's client does the same)."""
        if failed.sequence == rb.NO_SEQUENCE:
            return
        for b in (*queue.ready, *queue.sent):
            if b.sequence > failed.sequence:
                b.sequence = rb.increment_sequence(b.sequence, -failed.count)
                b.encoded = None
                b.resequenced = True
        queue.next_sequence = rb.increment_sequence(queue.next_sequence, -failed.count)

    def _complete(self, batch: ProducerBatch, error: BaseException | None) -> None:
        batch.error = error
        batch.done.set()
        if batch.callbacks:
            for index, callback in batch.callbacks:
                try:
                    callback(None if error else batch.metadata(index), error)
                except Exception:  # a user callback must not stop the sender
                    log.exception("producer callback raised")
        batch.values = batch.keys = batch.headers = batch.encoded = batch.packed = None
        with self._lock:
            if batch.attempts:
                self._queues[(batch.topic, batch.partition)].unacked -= 1
            self._outstanding -= 1
            self._buffered -= batch.size
            self._wake.notify_all()


class _SentRequest:
    """One produce call awaiting its answer, and the leader it went to."""

    __slots__ = ("batches", "sent_at", "leader", "settled")

    def __init__(self, batches: list[ProducerBatch], sent_at: float, leader) -> None:
        self.batches = batches
        self.sent_at = sent_at
        self.leader = leader
        self.settled = False


def _outcome(future) -> tuple:
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)


def _insert_by_sequence(ready: collections.deque, batch: ProducerBatch) -> None:
    """Put a batch back for resending: before every later sequence (idempotent), or first
    (no sequences: the failed batch was the oldest sent)."""
    if batch.sequence == rb.NO_SEQUENCE:
        ready.appendleft(batch)
        return
    for i, other in enumerate(ready):
        if other.sequence > batch.sequence:
            ready.insert(i, batch)
            return
    ready.append(batch)


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
        if value is not None and not isinstance(value, BYTES_LIKE):
            raise TypeError(
                f"header {name!r} value must be bytes or None, got {type(value).__name__}; "
                "encode it first"
            )
        out.append((name, None if value is None else bytes(value)))
    return out
