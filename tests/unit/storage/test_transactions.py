"""Transactions on the partition log: the last stable offset, markers, the aborted-transaction
index and how both survive reopening, truncation and removals."""

import os

import pytest

from rafka.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from rafka.storage import record_batch as rb
from rafka.storage.retention import delete_expired_segments
from rafka.storage.transaction_index import AbortedTxn

from .support import ABORT, COMMIT, batch, marker, txn_batch


def write_marker(log, kind, pid, epoch=0, coordinator_epoch=0):
    return log.append_as_leader(marker(kind, pid, epoch, coordinator_epoch), leader_epoch=0,
                                allow_control=True).first_offset  # fmt: skip


def committed_all(log):
    log.update_high_watermark(log.log_end_offset)


def txn_files(log):
    return sorted(n for n in os.listdir(log.directory) if n.endswith(".txnindex"))


# -- the last stable offset --------------------------------------------------------------------


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset(open_log):
    """The LSO stops at the first batch of the earliest open transaction, however far the
    high watermark goes."""
    log = open_log()
    log.append_as_leader(batch([b"plain"]), leader_epoch=0)
    log.append_as_leader(txn_batch([b"a", b"b"], pid=1, seq=0), leader_epoch=0)
    log.append_as_leader(txn_batch([b"c"], pid=2, seq=0), leader_epoch=0)
    log.append_as_leader(txn_batch([b"d"], pid=1, seq=2), leader_epoch=0)
    committed_all(log)
    assert (log.log_start_offset, log.last_stable_offset, log.high_watermark,
            log.log_end_offset) == (0, 1, 5, 5)  # fmt: skip
    assert log.producer_state.ongoing_transactions() == {1: 1, 2: 3}


def test_the_last_stable_offset_never_passes_the_high_watermark(open_log):
    """With no open transaction below it, the LSO is the high watermark."""
    log = open_log()
    log.append_as_leader(batch([b"a", b"b"]), leader_epoch=0)
    log.update_high_watermark(1)
    assert log.last_stable_offset == 1
    log.append_as_leader(txn_batch([b"t"], pid=1, seq=0), leader_epoch=0)
    assert log.last_stable_offset == 1  # the transaction begins above the high watermark
    committed_all(log)
    assert log.last_stable_offset == 2


def test_markers_release_the_last_stable_offset_transaction_by_transaction(open_log):
    """Ending the earliest transaction moves the LSO to the next open one, then to the high
    watermark once none is open."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)
    log.append_as_leader(txn_batch([b"b"], pid=2, seq=0), leader_epoch=0)
    write_marker(log, COMMIT, pid=1)
    committed_all(log)
    assert log.last_stable_offset == 1
    write_marker(log, ABORT, pid=2)
    committed_all(log)
    assert log.last_stable_offset == log.high_watermark == 4


def test_the_last_stable_offset_is_never_below_the_log_start(open_log):
    """delete_records past an open transaction's first offset: the LSO is the log start."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a", b"b", b"c"], pid=1, seq=0), leader_epoch=0)
    log.append_as_leader(batch([b"d"]), leader_epoch=0)
    committed_all(log)
    log.delete_records(2)
    assert log.last_stable_offset == log.log_start_offset == 2


def test_reads_report_the_last_stable_offset(open_log):
    """A read answers with the LSO beside the other offsets, for read_committed fetches."""
    log = open_log()
    log.append_as_leader(batch([b"a"]), leader_epoch=0)
    log.append_as_leader(txn_batch([b"t"], pid=1, seq=0), leader_epoch=0)
    committed_all(log)
    result = log.read(0, 1 << 20, max_offset=log.last_stable_offset)
    assert result.last_stable_offset == 1
    assert rb.next_offset(result.records) == 1


# -- markers and producer state ----------------------------------------------------------------


def test_a_non_transactional_batch_during_an_open_transaction_is_refused(open_log):
    """As Kafka does (INVALID_TXN_STATE): a producer's records inside its transaction must all
    be transactional; nothing is written."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)
    with pytest.raises(InvalidTxnState, match="commit or abort the transaction first"):
        log.append_as_leader(batch([b"b"], producer_id=1, producer_epoch=0, base_sequence=1),
                             leader_epoch=0)  # fmt: skip
    assert log.log_end_offset == 1


def test_a_marker_with_a_newer_epoch_fences_the_old_epoch_and_restarts_sequences(open_log):
    """Kafka 4 bumps the epoch at every transaction end: the next transaction starts at
    sequence 0 of the marker's epoch and a late batch of the old epoch is fenced."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a", b"b"], pid=1, seq=0, epoch=0), leader_epoch=0)
    write_marker(log, COMMIT, pid=1, epoch=1)
    assert log.producer_state.producers[1].epoch == 1
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(txn_batch([b"late"], pid=1, seq=2, epoch=0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequence, match="expected 0"):
        log.append_as_leader(txn_batch([b"c"], pid=1, seq=2, epoch=1), leader_epoch=0)
    assert log.append_as_leader(txn_batch([b"c"], pid=1, seq=0, epoch=1),
                                leader_epoch=0).first_offset == 3  # fmt: skip


def test_a_marker_of_an_older_producer_epoch_is_refused(open_log):
    """A delayed marker of a transaction that an epoch bump already ended must not end the
    producer's next one."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0, epoch=3), leader_epoch=0)
    with pytest.raises(InvalidProducerEpoch, match="do not retry"):
        write_marker(log, ABORT, pid=1, epoch=2)
    assert log.producer_state.ongoing_transactions() == {1: 0}


def test_a_marker_from_an_older_coordinator_epoch_is_refused(open_log):
    """A replaced coordinator (a zombie) cannot write markers once a newer one has."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)
    write_marker(log, COMMIT, pid=1, epoch=1, coordinator_epoch=5)
    log.append_as_leader(txn_batch([b"b"], pid=1, seq=0, epoch=1), leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFenced):
        write_marker(log, ABORT, pid=1, epoch=2, coordinator_epoch=4)
    assert write_marker(log, ABORT, pid=1, epoch=2, coordinator_epoch=5) == 3


def test_a_marker_must_be_appended_alone(open_log):
    """A marker shares no append with other batches (one per partition per request)."""
    log = open_log()
    with pytest.raises(InvalidRecord, match="alone"):
        log.append_as_leader(batch([b"a"]) + marker(COMMIT, pid=1), leader_epoch=0,
                             allow_control=True)  # fmt: skip


@pytest.mark.parametrize("kind", ["not-transactional", "two-records"])
def test_a_control_batch_that_is_not_a_single_transactional_marker_is_refused(open_log, kind):
    """Producer state reads a marker from its header and one record: a control batch must be
    transactional and hold exactly one record."""
    records = rb.decode_records(marker(COMMIT, pid=1))
    count = 2 if kind == "two-records" else 1
    bad = rb.encode_batch(records.values * count, records.keys * count, 1, producer_id=1,
                          producer_epoch=0, is_control=True,
                          is_transactional=kind != "not-transactional")  # fmt: skip
    log = open_log()
    with pytest.raises(InvalidRecord, match="control batch must be a transaction marker"):
        log.append_as_leader(bad, leader_epoch=0, allow_control=True)


def test_a_transactional_batch_without_a_producer_id_is_refused(open_log):
    log = open_log()
    with pytest.raises(InvalidRecord, match="producer id"):
        log.append_as_leader(batch([b"a"], is_transactional=True), leader_epoch=0)


def test_a_producer_with_an_open_transaction_never_expires(open_log, clock):
    """Expiring it would drop its transaction and let the LSO pass records not yet decided."""
    log = open_log({"producer.id.expiration.ms": 1000})
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0, timestamp=clock.now), leader_epoch=0)
    log.append_as_leader(batch([b"b"], producer_id=2, producer_epoch=0, base_sequence=0,
                               timestamp=clock.now), leader_epoch=0)  # fmt: skip
    clock.advance(5000)
    log.roll()
    assert set(log.producer_state.producers) == {1}
    committed_all(log)
    assert log.last_stable_offset == 0


# -- the aborted-transaction index -------------------------------------------------------------


def test_an_abort_is_indexed_in_the_segment_that_holds_its_marker(open_log):
    """The entry names the producer, the transaction's first offset, the marker's offset and
    the LSO just after the abort (the earliest transaction still open)."""
    log = open_log({"segment.bytes": 600})
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)  # 0
    log.append_as_leader(txn_batch([b"b"], pid=2, seq=0), leader_epoch=0)  # 1
    log.roll()
    log.append_as_leader(txn_batch([b"c"], pid=1, seq=1), leader_epoch=0)  # 2
    abort_at = write_marker(log, ABORT, pid=1)  # 3
    assert txn_files(log) == [f"{log.active_segment.base_offset:020d}.txnindex"]
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 0, abort_at, 1)]
    assert log.segments[0].txn_index.entries == []


def test_a_commit_or_an_abort_with_nothing_written_leaves_no_index_entry(open_log):
    """Only an abort that ends an open transaction is indexed: a marker with no records
    before it here aborts nothing a consumer could read."""
    log = open_log()
    write_marker(log, ABORT, pid=1)
    log.append_as_leader(txn_batch([b"a"], pid=2, seq=0), leader_epoch=0)
    write_marker(log, COMMIT, pid=2)
    assert txn_files(log) == []
    assert log.aborted_transactions(0, log.log_end_offset) == []


def test_aborted_transactions_lists_those_overlapping_the_range_by_first_offset(open_log):
    """(producer id, first offset) of each transaction aborted at or after the range's start
    and begun before its end."""
    log = open_log({"segment.bytes": 500})
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)  # 0
    write_marker(log, ABORT, pid=1, epoch=1)  # 1
    log.append_as_leader(txn_batch([b"b"], pid=2, seq=0), leader_epoch=0)  # 2
    log.append_as_leader(txn_batch([b"c"], pid=3, seq=0), leader_epoch=0)  # 3
    write_marker(log, ABORT, pid=3, epoch=1)  # 4
    log.append_as_leader(batch([b"x" * 300]), leader_epoch=0)  # 5, rolls
    write_marker(log, ABORT, pid=2, epoch=1)  # 6
    assert len(log.segments) > 1
    end = log.log_end_offset
    assert log.aborted_transactions(0, end) == [(1, 0), (2, 2), (3, 3)]
    assert log.aborted_transactions(2, end) == [(2, 2), (3, 3)]
    assert log.aborted_transactions(5, end) == [(2, 2)]
    assert log.aborted_transactions(0, 2) == [(1, 0)]
    assert log.aborted_transactions(7, 8) == []


def test_a_long_transaction_aborted_after_a_shorter_one_is_still_found(open_log):
    """The last stable offset stored with the shorter one's entry is the longer one's first
    offset (still open then), so the lookup does not stop before the longer one's entry,
    even in a later segment."""
    log = open_log({"segment.bytes": 400})
    log.append_as_leader(txn_batch([b"long"], pid=1, seq=0), leader_epoch=0)  # 0
    log.append_as_leader(txn_batch([b"short"], pid=2, seq=0), leader_epoch=0)  # 1
    write_marker(log, ABORT, pid=2, epoch=1)  # 2
    assert log.active_segment.txn_index.entries == [AbortedTxn(2, 1, 2, 0)]
    log.roll()
    log.append_as_leader(batch([b"x"]), leader_epoch=0)  # 3
    write_marker(log, ABORT, pid=1, epoch=1)  # 4
    assert log.aborted_transactions(1, 2) == [(1, 0), (2, 1)]
    assert log.aborted_transactions(3, 4) == [(1, 0)]


def test_a_follower_indexes_the_aborts_it_copies(open_log, tmp_path):
    """Producer state and the index are fed from the leader's batches as they are copied."""
    leader = open_log()
    leader.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)
    leader.append_as_leader(txn_batch([b"b"], pid=2, seq=0), leader_epoch=0)
    write_marker(leader, ABORT, pid=1)
    follower = open_log(directory=tmp_path / "follower-0")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert follower.aborted_transactions(0, 3) == [(1, 0)]
    assert follower.producer_state.ongoing_transactions() == {2: 1}


# -- reopening ---------------------------------------------------------------------------------


def build_transactions(log):
    """Two aborted transactions (one across a roll), one committed, one left open."""
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)  # 0
    log.append_as_leader(txn_batch([b"b"], pid=2, seq=0), leader_epoch=0)  # 1
    write_marker(log, ABORT, pid=2, epoch=1)  # 2
    log.roll()
    log.append_as_leader(txn_batch([b"c"], pid=3, seq=0), leader_epoch=0)  # 3
    write_marker(log, ABORT, pid=1, epoch=1)  # 4
    write_marker(log, COMMIT, pid=3, epoch=1)  # 5
    log.append_as_leader(txn_batch([b"d"], pid=4, seq=0), leader_epoch=0)  # 6


EXPECTED_ABORTED = [(1, 0), (2, 1)]


def test_open_transactions_and_aborts_survive_a_clean_reopen(open_log):
    """The snapshot at close carries the open transaction; the indexes stay as written."""
    log = open_log()
    build_transactions(log)
    committed_all(log)
    log.close()
    again = open_log()
    assert again.producer_state.ongoing_transactions() == {4: 6}
    assert again.last_stable_offset == 6
    assert again.aborted_transactions(0, 7) == EXPECTED_ABORTED


def test_open_transactions_and_aborts_survive_a_crash_without_duplicate_entries(open_log):
    """Without a snapshot at the log end, the replay rebuilds the open transactions and the
    index entries of the aborts it meets, replacing (not repeating) those on disk."""
    log = open_log()
    build_transactions(log)
    entries = [list(s.txn_index.entries) for s in log.segments]
    log.flush()
    log.abandon()
    again = open_log()
    assert again.producer_state.ongoing_transactions() == {4: 6}
    assert [s.txn_index.entries for s in again.segments] == entries
    assert again.aborted_transactions(0, 7) == EXPECTED_ABORTED


def test_a_lost_index_entry_is_rebuilt_and_one_without_its_marker_dropped(open_log):
    """After a crash the index may have lost entries the log kept, or kept entries whose
    marker the log lost; the reopened index matches the log either way."""
    log = open_log()
    build_transactions(log)
    active = log.active_segment
    log.flush()
    log.abandon()
    # The index loses its entry, as if its write never reached the disk.
    os.truncate(active.txn_index.path, 0)
    again = open_log()
    assert again.aborted_transactions(0, 7) == EXPECTED_ABORTED
    position = next(p for p, h in again.active_segment.iter_headers(0) if h.base_offset == 4)
    again.abandon()
    # The log loses its tail from the marker at offset 4 on; the index keeps the entry.
    os.truncate(again.active_segment.log_path, position)
    third = open_log()
    assert third.log_end_offset == 4
    assert third.aborted_transactions(0, 4) == [(2, 1)]
    assert third.active_segment.txn_index.entries == []
    assert third.producer_state.ongoing_transactions() == {1: 0, 3: 3}


def test_a_torn_index_tail_is_cut_on_open(open_log):
    """A partly written or zero-filled entry fails its CRC: the valid prefix stays."""
    log = open_log()
    build_transactions(log)
    log.close()
    first = log.segments[0].txn_index.path
    with open(first, "ab") as f:
        f.write(b"\0" * 36 + b"\x01\x02")
    again = open_log()
    assert again.aborted_transactions(0, 7) == EXPECTED_ABORTED
    assert os.path.getsize(first) == 36


def test_a_version_1_snapshot_is_still_read(open_log):
    """A snapshot written before transactions (no open-transaction field) loads as producers
    with none open."""
    import msgpack

    from rafka.storage.checkpoint import write_atomically

    log = open_log()
    log.append_as_leader(batch([b"a"], producer_id=9, producer_epoch=2, base_sequence=0),
                         leader_epoch=0)  # fmt: skip
    log.close()
    body = msgpack.packb([1, [[9, 2, 1_700_000_000_000, [[0, 0, 0, 0, 1_700_000_000_000]]]]])
    path = log.producer_state.snapshot_path(1)
    write_atomically(path, rb.CRC.pack(rb.crc32c(body)) + body)
    again = open_log()
    assert again.append_as_leader(batch([b"a"], producer_id=9, producer_epoch=2,
                                        base_sequence=0), leader_epoch=0).duplicate  # fmt: skip
    assert again.producer_state.ongoing_transactions() == {}


# -- removals ----------------------------------------------------------------------------------


def test_truncation_reopens_a_transaction_whose_marker_went_and_drops_its_entry(open_log):
    """A follower truncating below an abort marker: the transaction is open again and the
    index no longer lists it."""
    log = open_log()
    build_transactions(log)
    log.truncate_to(4)
    assert log.producer_state.ongoing_transactions() == {1: 0, 3: 3}
    assert log.aborted_transactions(0, 4) == [(2, 1)]
    log.truncate_to(1)
    assert log.producer_state.ongoing_transactions() == {1: 0}
    assert [s.txn_index.entries for s in log.segments] == [[]]


def test_a_full_truncation_deletes_every_transaction_index(open_log):
    log = open_log()
    build_transactions(log)
    log.truncate_fully_and_start_at(100)
    assert txn_files(log) == []
    assert log.producer_state.ongoing_transactions() == {}
    assert log.last_stable_offset == 100


def test_retention_deletes_a_segment_with_its_transaction_index(open_log, clock):
    """The index goes with its segment; a later segment's entries stay."""
    log = open_log({"retention.ms": 1000})
    build_transactions(log)
    log.roll()
    committed_all(log)
    clock.advance(10_000_000_000)
    delete_expired_segments(log, clock.now)
    assert log.log_start_offset == log.active_segment.base_offset
    assert txn_files(log) == []
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []


def test_delete_records_keeps_the_index_of_the_segment_it_keeps(open_log):
    log = open_log()
    build_transactions(log)
    committed_all(log)
    log.delete_records(3)
    assert txn_files(log) == [f"{log.segments[0].base_offset:020d}.txnindex"]
    assert log.aborted_transactions(3, 7) == [(1, 0)]


def test_a_read_committed_fetch_stops_at_the_lso_with_the_aborts_of_its_range(open_log):
    """read_committed returns batches below the LSO and the aborted transactions of exactly
    the range they cover."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a"], pid=1, seq=0), leader_epoch=0)  # 0
    write_marker(log, ABORT, pid=1, epoch=1)  # 1
    log.append_as_leader(batch([b"b"]), leader_epoch=0)  # 2
    log.append_as_leader(txn_batch([b"c"], pid=2, seq=0), leader_epoch=0)  # 3, open
    log.append_as_leader(batch([b"d"]), leader_epoch=0)  # 4
    committed_all(log)
    result, aborted = log.read_committed(0, 1 << 20)
    assert rb.next_offset(result.records) == result.last_stable_offset == 3
    assert aborted == [(1, 0)]
    result, aborted = log.read_committed(2, 1 << 20)
    assert (rb.next_offset(result.records), aborted) == (3, [])
    result, aborted = log.read_committed(3, 1 << 20)
    assert (len(result.records), aborted) == (0, [])


# -- what a failover may take back ---------------------------------------------------------------


def test_a_transaction_whose_marker_is_not_replicated_yet_still_holds_the_last_stable_offset(
    open_log,
):
    """A marker above the high watermark may be truncated away by a new leader, which would
    find the transaction open again: until the high watermark passes the marker, its
    records stay unstable (Kafka's unreplicated transactions)."""
    log = open_log()
    log.append_as_leader(txn_batch([b"a", b"b"], pid=1, seq=0), leader_epoch=0)
    committed_all(log)
    at = write_marker(log, COMMIT, pid=1, epoch=1)
    assert log.high_watermark == at  # the marker is not replicated yet
    assert log.last_stable_offset == 0
    log.update_high_watermark(at + 1)
    assert log.last_stable_offset == at + 1


def test_a_newer_epochs_transactional_batch_is_refused_while_an_older_epochs_is_open(open_log):
    """The older transaction's marker has not arrived (it will, or the transaction hangs):
    the newer epoch's batch must not join it and take on its outcome."""
    from rafka.errors import ConcurrentTransactions

    log = open_log()
    log.append_as_leader(txn_batch([b"t1"], pid=1, seq=0, epoch=0), leader_epoch=0)
    with pytest.raises(ConcurrentTransactions):
        log.append_as_leader(txn_batch([b"t2"], pid=1, seq=0, epoch=1), leader_epoch=0)
    assert log.producer_state.ongoing_transactions() == {1: 0}


def test_a_transactional_first_batch_of_an_unknown_producer_must_start_at_sequence_0(open_log):
    """A later batch of a transaction whose first batch was lost must not open it here."""
    log = open_log()
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(txn_batch([b"late"], pid=1, seq=3), leader_epoch=0)
    log.append_as_leader(txn_batch([b"first"], pid=1, seq=0), leader_epoch=0)
