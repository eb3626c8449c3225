"""The read_committed filter: aborted batches skipped, markers never returned; and, end to end
through a log, exactly the committed records below the last stable offset come out."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb
from rafka.storage.read_committed import ReadCommittedFilter

from .support import ABORT, COMMIT, FakeClock, batch, marker, txn_batch


def header(base_offset, count=1, pid=rb.NO_PRODUCER_ID, transactional=False, control=False):
    data = rb.encode_batch([b"v"] * count, None, 0, base_offset=base_offset, producer_id=pid,
                           producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=0 if pid >= 0 and not control else -1,
                           is_transactional=transactional, is_control=control)  # fmt: skip
    return rb.read_header(data)


def data(base_offset, pid, count=1):
    return header(base_offset, count, pid, transactional=True)


def ctrl(base_offset, pid):
    return header(base_offset, 1, pid, transactional=True, control=True)


def test_batches_of_an_aborted_transaction_are_skipped_until_its_abort_marker():
    """Producer 1 aborts (first offset 0), producer 2 commits; interleaved batches of both,
    and producer 1's next transaction after its marker, are judged batch by batch."""
    f = ReadCommittedFilter()
    f.add_aborted([(1, 0)])
    walk = [
        (data(0, 1), None, False),
        (data(1, 2), None, True),
        (data(2, 1, count=3), None, False),
        (header(5), None, True),  # a plain batch in between
        (ctrl(6, 1), ABORT, False),  # markers are never returned
        (data(7, 1), None, True),  # producer 1's next transaction
        (ctrl(8, 2), COMMIT, False),
    ]
    assert [f.accept(h, kind) for h, kind, _ in walk] == [keep for _, _, keep in walk]
    assert f.aborted_producers == frozenset()


def test_an_aborted_transaction_becomes_current_only_at_its_first_offset():
    """A producer's committed batches before the first offset of its aborted transaction
    are returned."""
    f = ReadCommittedFilter()
    f.add_aborted([(1, 3)])
    assert f.accept(data(0, 1))
    assert f.accept(ctrl(1, 1), COMMIT) is False
    assert f.accept(data(3, 1)) is False


def test_only_transactional_batches_of_an_aborted_producer_are_skipped():
    """As Kafka's consumer: the aborted set concerns transactional batches only."""
    f = ReadCommittedFilter()
    f.add_aborted([(1, 0)])
    idempotent = header(1, pid=1)
    assert f.accept(data(0, 1)) is False
    assert f.accept(idempotent)


def test_the_filter_carries_its_state_across_fetch_answers():
    """A transaction spanning two answers is listed by both; its producer stays aborted
    until the marker, whichever answer holds it, and is queued once."""
    f = ReadCommittedFilter()
    f.add_aborted([(1, 0)])
    assert f.accept(data(0, 1)) is False
    f.add_aborted([(1, 0)])
    assert f.accept(data(1, 1)) is False
    assert f.accept(ctrl(2, 1), ABORT) is False
    assert f.accept(data(3, 1))
    f.reset()
    assert f.accept(data(0, 1))


def test_a_control_batch_needs_its_type():
    with pytest.raises(ValueError, match="control type"):
        ReadCommittedFilter().accept(ctrl(0, 1))


def test_select_reads_markers_from_a_fetched_buffer():
    """``select`` walks whole batches of a fetch answer, reading only markers' records."""
    answer = (rb.encode_batch([b"a"], None, 0, base_offset=0, producer_id=1, producer_epoch=0,
                              base_sequence=0, is_transactional=True)
              + bytearray(marker(ABORT, pid=1)) + batch([b"b"]))  # fmt: skip
    answer = bytearray(answer)
    positions = [p for p, _ in rb.iter_batches(answer)]
    rb.set_base_offset(answer, 1, positions[1])
    rb.set_base_offset(answer, 2, positions[2])
    f = ReadCommittedFilter()
    f.add_aborted([(1, 0)])
    assert [h.base_offset for _, h in f.select(answer, verify=True)] == [2]


# -- end to end --------------------------------------------------------------------------------

PRODUCERS = (1, 2, 3)
operation = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("write"), st.sampled_from(PRODUCERS), st.integers(1, 3)),
    st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
    st.tuples(st.just("reopen"), st.booleans()),
)


@given(st.lists(operation, max_size=40), st.integers(60, 400), st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_a_read_committed_consumer_reads_exactly_the_committed_records(
    tmp_path_factory, operations, fetch_bytes, reopen_every
):
    """Random interleavings of transactions (committed, aborted, left open), plain batches,
    rolls and reopens (clean or after a crash): fetches below the LSO, filtered with the
    aborted transactions of each answer, return the records of committed transactions and
    plain batches below the LSO, in offset order, and nothing else."""
    directory = str(tmp_path_factory.mktemp("rc") / "t-0")
    config = LogConfig.from_dict({"segment.bytes": 500})
    clock = FakeClock()
    log = Log(directory, config, clock)
    epochs = {p: 0 for p in PRODUCERS}
    sequences = {p: 0 for p in PRODUCERS}
    open_txn: dict[int, list[tuple[int, bytes]]] = {}
    committed: list[tuple[int, bytes]] = []
    serial = 0
    for op in operations:
        if op[0] == "plain":
            values = [b"plain-%d" % (serial + i) for i in range(op[1])]
            info = log.append_as_leader(batch(values), leader_epoch=0)
            committed += [(info.first_offset + i, v) for i, v in enumerate(values)]
        elif op[0] == "write":
            _, pid, count = op
            values = [b"p%d-%d" % (pid, serial + i) for i in range(count)]
            info = log.append_as_leader(txn_batch(values, pid, sequences[pid], epochs[pid]),
                                        leader_epoch=0)  # fmt: skip
            sequences[pid] += count
            open_txn.setdefault(pid, []).extend(
                (info.first_offset + i, v) for i, v in enumerate(values))
        elif op[0] == "end":
            _, pid, commit = op
            epochs[pid] += 1  # the coordinator bumps the epoch at every transaction end
            sequences[pid] = 0
            log.append_as_leader(marker(COMMIT if commit else ABORT, pid, epochs[pid]),
                                 leader_epoch=0, allow_control=True)  # fmt: skip
            records = open_txn.pop(pid, [])
            if commit:
                committed += records
        elif serial % reopen_every == 0:
            if op[1]:
                log.close()
            else:
                log.flush()
                log.abandon()
            log = Log(directory, config, clock)
        serial += 10
    log.update_high_watermark(log.log_end_offset)
    lso = log.last_stable_offset
    assert lso == min([r[0][0] for r in open_txn.values() if r] + [log.high_watermark])

    seen = []
    f = ReadCommittedFilter()
    offset = 0
    while offset < lso:
        answer = log.read(offset, fetch_bytes, max_offset=lso).records
        if not len(answer):
            break
        end = rb.next_offset(answer)
        f.add_aborted(log.aborted_transactions(offset, end))
        for position, _ in f.select(answer):
            records = rb.decode_records(answer, position)
            seen += [(o, v) for o, v in zip(records.offsets, records.values) if o >= offset]
        offset = end
    assert seen == sorted(r for r in committed if r[0] < lso)
    log.close()
