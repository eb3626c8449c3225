"""The idempotent Producer against a fake leader that appends to a real Log: a batch that can
never be written fails alone, and every acknowledged record is in the log exactly once, at its
acknowledged offset, in send order, whatever answers fail, are lost or are delayed."""

from __future__ import annotations

import pytest

from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.errors import (
    NotEnoughReplicas,
    OutOfOrderSequence,
    RecordTooLarge,
    RequestTimedOut,
)

from .fake_leader import Action, FakeGateway

LARGE = b"L" * 2000  # over the topic's max.message.bytes=1000 on its own
# Requests carry at most this many bytes of records: the large record travels alone.
ALONE = {"max_request_size": 2010}


def small(i: int) -> bytes:
    return b"s%03d" % i


@pytest.fixture
def gateway(tmp_path):
    g = FakeGateway(tmp_path, partitions=2, topic_config={"max.message.bytes": 1000})
    yield g
    g.shut()


@pytest.fixture
def make_producer(gateway):
    made = []

    def make(**settings) -> Producer:
        settings = {"acks": "all", "linger_ms": 0, "retry_backoff_ms": 1, **settings}
        producer = Producer(gateway, MetadataCache(gateway), **settings)
        made.append(producer)
        return producer

    yield make
    gateway.script = lambda request: Action.ANSWER
    gateway.release_held()
    for producer in made:
        producer.close(timeout=10)


def pass_over_queues(producer: Producer, marker_size: int = 6) -> None:
    """Return once the sender has made a pass over every queue after the records sent so
    far were sealed: a record to partition 1 (sealed at once, by linger_ms=0 or by filling
    its batch) only leaves in such a pass, and it has left once it has an outcome."""
    producer.send("t", value=b"m" * marker_size, partition=1).exception(timeout=10)


def assert_written_once_in_send_order(gateway: FakeGateway, acked: list) -> None:
    """``acked`` is [(value, RecordMetadata)] in send order, all for partition 0."""
    log = gateway.log_values(0)
    assert [value for _, value in log] == [value for value, _ in acked]
    at = dict(log)
    assert [at.get(meta.offset) for _, meta in acked] == [value for value, _ in acked]


def stamps_of(gateway: FakeGateway, value: bytes) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of every attempt of the batch holding ``value``."""
    return [
        (b.producer_id, b.epoch, b.sequence)
        for r in gateway.requests for b in r.batches if value in b.values
    ]  # fmt: skip


def test_batches_in_flight_behind_a_refused_first_batch_are_never_acknowledged_unwritten(
    gateway, make_producer
):
    """A fresh producer's first batch is refused as too large while later batches wait to
    be sent: no later batch is answered with the offset of another, already written one."""
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    producer = make_producer(batch_size=16, max_in_flight=5)
    large = producer.send("t", value=LARGE, partition=0)
    futures = [producer.send("t", value=small(i), partition=0) for i in range(12)]
    pass_over_queues(producer)
    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    producer.flush(timeout=10)

    assert isinstance(large.exception(timeout=0), RecordTooLarge)
    acked = [(small(i), f.result(timeout=0)) for i, f in enumerate(futures)]
    assert_written_once_in_send_order(gateway, acked)


def test_a_batch_refused_as_too_large_is_split_and_only_the_record_over_the_limit_fails(
    gateway, make_producer
):
    """Small records that share a batch with one over max.message.bytes are written (the
    batch is split), in send order, even with later batches ready behind it."""
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    # The first batch fills at 2100 bytes: [s000, LARGE, s001..s006]; later ones hold
    # about 175 small records each.
    producer = make_producer(batch_size=2100, linger_ms=60_000)
    values = [small(0), LARGE] + [small(i) for i in range(1, 400)]
    futures = [producer.send("t", value=v, partition=0) for v in values]
    pass_over_queues(producer, marker_size=2100)
    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    producer.flush(timeout=10)

    assert isinstance(futures[1].exception(timeout=0), RecordTooLarge)
    acked = [(v, f.result(timeout=0)) for v, f in zip(values, futures) if v is not LARGE]
    assert_written_once_in_send_order(gateway, acked)


def test_each_record_of_a_split_batch_reports_its_own_outcome_to_its_callback(
    gateway, make_producer
):
    """Callbacks move with their records into the halves: the large record's reports its
    error, the others their offsets."""
    producer = make_producer(batch_size=2100, linger_ms=60_000)
    values = [small(0), LARGE] + [small(i) for i in range(1, 7)]
    outcomes: dict[bytes, tuple] = {}
    for v in values:
        producer.send("t", value=v, partition=0,
                      callback=lambda meta, error, v=v: outcomes.__setitem__(v, (meta, error)))
    producer.flush(timeout=10)

    meta, error = outcomes[LARGE]
    assert meta is None and isinstance(error, RecordTooLarge)
    log = dict(gateway.log_values(0))
    assert {v: log[outcomes[v][0].offset] for v in values if v is not LARGE} == {
        v: v for v in values if v is not LARGE
    }


def test_a_bulk_column_with_a_record_too_large_writes_the_others(gateway, make_producer):
    """send_batch's packed batches split like any other: the column's result raises the
    large record's error, and the rest of the column is in the log once, in order."""
    producer = make_producer()
    column = [b"b0", LARGE, b"b1", b"b2"]
    future = producer.send_batch("t", column, partition=0)
    with pytest.raises(RecordTooLarge):
        future.result(timeout=10)
    assert [v for _, v in gateway.log_values(0)] == [b"b0", b"b1", b"b2"]


def test_a_batch_whose_answer_was_lost_is_resent_under_its_old_stamp_and_written_once(
    gateway, make_producer
):
    """The leader wrote a batch but its answer was lost: the resend carries the same
    producer id, epoch and sequence, and the leader answers it with the original offset."""
    lost = []

    def lose_first_answer_of_s003(request):
        if small(3) in request.values and not lost:
            lost.append(request)
            return Action.LOSE
        return Action.ANSWER

    gateway.script = lose_first_answer_of_s003
    producer = make_producer(batch_size=16)
    futures = [producer.send("t", value=small(i), partition=0) for i in range(8)]
    producer.flush(timeout=10)

    acked = [(small(i), f.result(timeout=0)) for i, f in enumerate(futures)]
    assert_written_once_in_send_order(gateway, acked)
    attempts = stamps_of(gateway, small(3))
    assert len(attempts) >= 2 and len(set(attempts)) == 1, attempts


def test_a_lost_answer_that_arrives_after_later_answers_is_still_recognised_on_resend(
    gateway, make_producer
):
    """While one batch is unanswered at most four later batches are sent, even when their
    answers come first; so when its answer is then lost, the leader still recognises its
    resend and nothing is written twice."""
    producer = make_producer(batch_size=16)
    first = producer.send("t", value=small(0), partition=0)
    first.result(timeout=10)
    gateway.script = lambda r: Action.HOLD if small(1) in r.values else Action.ANSWER
    slow = producer.send("t", value=small(1), partition=0)
    gateway.wait_for(lambda: any(small(1) in r.values for r in gateway.requests))
    later = [producer.send("t", value=small(i), partition=0) for i in range(2, 12)]
    pass_over_queues(producer)
    [held] = [r for r in gateway.requests if r.action is Action.HOLD]
    sent_after = {v for r in gateway.requests[held.number + 1 :] if r.partition == 0
                  for v in r.values}  # fmt: skip
    assert len(sent_after) <= 4, sorted(sent_after)
    gateway.script = lambda r: Action.ANSWER
    gateway.lose(held)
    producer.flush(timeout=10)

    acked = [(small(0), first.result()), (small(1), slow.result(timeout=0))]
    acked += [(small(i), f.result(timeout=0)) for i, f in zip(range(2, 12), later)]
    assert_written_once_in_send_order(gateway, acked)


def test_a_lost_answer_is_resolved_under_the_old_epoch_before_a_failed_batch_ends_it(
    gateway, make_producer
):
    """A batch whose answer was lost sits before a batch refused as too large: it is
    resolved by a resend under the old epoch (a duplicate, never written twice); the
    batches after the refused one move to the next epoch."""
    producer = make_producer(batch_size=16, **ALONE)
    first = producer.send("t", value=small(0), partition=0)
    first.result(timeout=10)  # the leader now knows the producer
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    lost = producer.send("t", value=small(1), partition=0)
    large = producer.send("t", value=LARGE, partition=0)
    later = [producer.send("t", value=small(i), partition=0) for i in (2, 3)]
    pass_over_queues(producer)
    gateway.script = lambda r: Action.ANSWER
    for request in [r for r in gateway.requests if r.action is Action.HOLD]:
        if small(1) in request.values:
            gateway.lose(request)
        else:
            gateway.release(request)
    producer.flush(timeout=10)

    assert isinstance(large.exception(timeout=0), RecordTooLarge)
    acked = [(small(0), first.result()), (small(1), lost.result(timeout=0))]
    acked += [(small(i), f.result(timeout=0)) for i, f in zip((2, 3), later)]
    assert_written_once_in_send_order(gateway, acked)
    assert {epoch for _, epoch, _ in stamps_of(gateway, small(1))} == {0}
    assert stamps_of(gateway, small(2))[-1][1:] == (1, 0)


def test_the_epoch_is_bumped_only_after_the_partitions_in_flight_requests_answer(
    gateway, make_producer
):
    """After a batch fails for good nothing more is sent to its partition until every
    request in flight there has answered; only then do batches go out under the new epoch."""
    producer = make_producer(batch_size=16, **ALONE)
    first = producer.send("t", value=small(0), partition=0)
    first.result(timeout=10)
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    large = producer.send("t", value=LARGE, partition=0)
    behind = [producer.send("t", value=small(i), partition=0) for i in (1, 2)]
    pass_over_queues(producer)
    held = [r for r in gateway.requests if r.action is Action.HOLD]
    [refused] = [r for r in held if LARGE in r.values]
    sent_before = len([r for r in gateway.requests if r.partition == 0])
    gateway.release(refused)
    large.exception(timeout=10)
    waiting = producer.send("t", value=small(3), partition=0)
    pass_over_queues(producer)
    assert len([r for r in gateway.requests if r.partition == 0]) == sent_before

    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    producer.flush(timeout=10)
    last_old_answer = max(
        i for i, (kind, r) in enumerate(gateway.events) if kind == "answered" and r in held
    )
    first_new_epoch = min(
        i for i, (kind, r) in enumerate(gateway.events)
        if kind == "request" and any(b.epoch == 1 for b in r.batches)
    )  # fmt: skip
    assert first_new_epoch > last_old_answer
    acked = [(small(0), first.result())]
    acked += [(small(i), f.result(timeout=0)) for i, f in zip((1, 2, 3), [*behind, waiting])]
    assert_written_once_in_send_order(gateway, acked)


def test_out_of_order_sequence_after_a_failed_batch_is_retried_under_the_new_epoch(
    gateway, make_producer
):
    """A batch the leader refused as out of order because the batch before it failed is
    not written: it is sent again from sequence 0 of the next epoch, and written once."""
    producer = make_producer(batch_size=16, **ALONE)
    first = producer.send("t", value=small(0), partition=0)
    first.result(timeout=10)
    gateway.script = lambda r: Action.HOLD if r.partition == 0 else Action.ANSWER
    large = producer.send("t", value=LARGE, partition=0)
    after = producer.send("t", value=small(1), partition=0)
    pass_over_queues(producer)
    gateway.script = lambda r: Action.ANSWER
    gateway.release_held()
    producer.flush(timeout=10)

    assert isinstance(large.exception(timeout=0), RecordTooLarge)
    [refused, retried] = [r for r in gateway.requests if small(1) in r.values]
    assert refused.answer[3][0][0] == OutOfOrderSequence.errno
    assert (refused.batches[0].epoch, refused.batches[0].sequence) == (0, 2)
    assert (retried.batches[0].epoch, retried.batches[0].sequence) == (1, 0)
    assert_written_once_in_send_order(
        gateway, [(small(0), first.result()), (small(1), after.result(timeout=0))]
    )


def test_a_batch_never_clearly_answered_fails_as_maybe_written_at_its_delivery_timeout(
    gateway, make_producer
):
    """Every answer to one batch is lost: it is resent under its old stamp until its
    delivery timeout, then fails saying it may or may not have been written; later records
    go out under the next epoch and are written once."""
    gateway.script = lambda r: Action.LOSE if small(1) in r.values else Action.ANSWER
    producer = make_producer(batch_size=16, delivery_timeout_ms=300, retry_backoff_ms=5)
    first = producer.send("t", value=small(0), partition=0)
    first.result(timeout=10)
    unclear = producer.send("t", value=small(1), partition=0)
    error = unclear.exception(timeout=10)
    # Sent once the epoch has ended (a record queued as long as s001 would expire with it).
    later = producer.send("t", value=small(2), partition=0)
    producer.flush(timeout=10)

    assert isinstance(error, RequestTimedOut)
    assert "may or may not have been written" in str(error)
    assert len(set(stamps_of(gateway, small(1)))) == 1
    assert stamps_of(gateway, small(2)) == [(stamps_of(gateway, small(1))[0][0], 1, 0)]
    log = gateway.log_values(0)
    assert [v for _, v in log] == [small(0), small(1), small(2)]  # s001 was written, once
    assert dict(log)[later.result(timeout=0).offset] == small(2)


def test_a_request_refused_for_too_few_in_sync_replicas_is_known_unwritten(
    gateway, make_producer
):
    """NotEnoughReplicas comes before any append (NotEnoughReplicasAfterAppend is the
    other case): resent until its delivery timeout, the batch then fails with it, not as
    'may or may not have been written'."""
    gateway.refusal = NotEnoughReplicas("1 in-sync replica, below min.insync.replicas=2")
    gateway.script = lambda r: Action.REFUSE if small(0) in r.values else Action.ANSWER
    producer = make_producer(batch_size=16, delivery_timeout_ms=200, retry_backoff_ms=5)
    refused = producer.send("t", value=small(0), partition=0)
    assert isinstance(refused.exception(timeout=10), NotEnoughReplicas)
    assert len(stamps_of(gateway, small(0))) > 1  # it was resent until the timeout
    after = producer.send("t", value=small(1), partition=0)
    assert_written_once_in_send_order(gateway, [(small(1), after.result(timeout=10))])


def test_an_exhausted_epoch_moves_the_partition_to_a_new_producer_id(gateway, make_producer):
    """A failed batch at epoch 32767 cannot bump the epoch: the partition takes a fresh
    producer id from the controller and starts it at epoch 0, sequence 0."""
    call_controller = gateway.call_controller

    def first_id_at_its_last_epoch(method, *args, **kw):
        answer = call_controller(method, *args, **kw)
        if method == "allocate_producer_id" and answer[0] == 1000:  # the fake's first id
            return 1000, 32767
        return answer

    gateway.call_controller = first_id_at_its_last_epoch
    producer = make_producer(batch_size=16)
    large = producer.send("t", value=LARGE, partition=0)
    assert isinstance(large.exception(timeout=10), RecordTooLarge)
    after = producer.send("t", value=small(0), partition=0)
    after.result(timeout=10)
    assert stamps_of(gateway, LARGE) == [(1000, 32767, 0)]
    assert stamps_of(gateway, small(0)) == [(1001, 0, 0)]


def test_a_linger_that_ran_out_while_the_sender_was_busy_still_wakes_it(gateway, make_producer):
    """The open batch's linger ends between the sender's pass over the queues and its wait:
    the wait must end at once, not never (nothing else would wake it, and the batch would
    sit until it filled)."""
    import time

    producer = make_producer(linger_ms=200)
    future = producer.send("t", value=b"lingering", partition=0)
    sender = producer._sender
    with sender._lock:  # the sender is busy: its next look comes after the linger ended
        time.sleep(0.25)
        wait = sender._next_wakeup()
    assert wait is not None and wait < 0.01
    assert future.result(timeout=10).offset == 0
