"""A read_committed consumer's buffer: aborted transactions' batches are not returned, and
the position moves past batches that return no record (markers, aborted batches), so it
reaches the end of what was fetched as Kafka's consumer does."""

from __future__ import annotations

from rafka.clients.consumer_buffer import BufferReader, PartitionState
from rafka.clients.consumer_fetcher import _committed_only
from rafka.storage import record_batch as rb
from rafka.types import TopicPartition


def _at(offset: int, data: bytes) -> bytes:
    buf = bytearray(data)
    rb.set_base_offset(buf, offset)
    return bytes(buf)


def answer() -> tuple[bytes, list]:
    """Offsets 0-1: producer 1's committed transaction and its COMMIT at 2; 3-4: producer 2's
    aborted transaction and its ABORT at 5."""
    txn = dict(producer_epoch=0, is_transactional=True)
    parts = [
        _at(0, rb.encode_batch([b"c1", b"c2"], None, 1, producer_id=1, base_sequence=0, **txn)),
        _at(2, rb.encode_control_batch(rb.ControlType.COMMIT, producer_id=1, producer_epoch=1,
                                       coordinator_epoch=0, timestamp=1)),
        _at(3, rb.encode_batch([b"a1", b"a2"], None, 1, producer_id=2, base_sequence=0, **txn)),
        _at(5, rb.encode_control_batch(rb.ControlType.ABORT, producer_id=2, producer_epoch=1,
                                       coordinator_epoch=0, timestamp=1)),
    ]  # fmt: skip
    return b"".join(parts), [[2, 3]]


def test_aborted_batches_are_dropped_and_the_position_passes_the_markers():
    data, aborted = answer()
    state = PartitionState(TopicPartition("t", 0))
    state.position = state.fetch_offset = 0
    kept = _committed_only(state, data, aborted)
    state.chunks.append([kept, 0, rb.next_offset(data)])
    reader = BufferReader(None, None, True)
    out: list = []
    reader.take_records(state, 100, out)
    assert [r.value for r in out] == [b"c1", b"c2"]
    reader.take_records(state, 100, out)  # the next poll finds the answer read to its end
    assert state.position == 6


def test_an_answer_of_only_aborted_records_still_moves_the_position():
    data, aborted = answer()
    first_two = rb.read_header(data, 0).size
    first_two += rb.read_header(data, first_two).size
    tail = data[first_two:]  # the aborted transaction and its ABORT marker
    state = PartitionState(TopicPartition("t", 0))
    state.position = state.fetch_offset = 2
    kept = _committed_only(state, tail, aborted)
    state.chunks.append([kept, 0, rb.next_offset(tail)])
    out: list = []
    BufferReader(None, None, True).take_records(state, 100, out)
    assert out == [] and state.position == 6
