"""Producer state: idempotent duplicates answered with original offsets, gaps and fencing
refused; open transactions tracked and ended by markers."""

import os

import pytest

from rafka.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from rafka.storage import record_batch as rb
from rafka.storage.producer_state import CompletedTxn, ProducerStateManager
from rafka.storage.transaction_markers import read_marker

from .support import ABORT, COMMIT, batch, marker, read_all, txn_batch


def pbatch(values, pid=7, epoch=0, seq=0):
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_retried_batch_is_written_once_and_answered_with_original_offsets(open_log):
    """A batch repeated after a lost answer returns its first offsets and writes nothing."""
    log = open_log()
    first = log.append_as_leader(pbatch([1, 2, 3], seq=0), leader_epoch=0)
    log.append_as_leader(pbatch([4], seq=3), leader_epoch=0)
    again = log.append_as_leader(pbatch([1, 2, 3], seq=0), leader_epoch=0)
    assert again.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4


def test_only_the_last_five_batches_are_remembered(open_log):
    """A retry older than the producer's last five batches is a sequence error, not a duplicate."""
    log = open_log()
    for i in range(6):
        log.append_as_leader(pbatch([i], seq=i), leader_epoch=0)
    assert log.append_as_leader(pbatch([1], seq=1), leader_epoch=0).duplicate
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(pbatch([0], seq=0), leader_epoch=0)


def test_sequence_gap_raises_out_of_order_sequence(open_log):
    """A batch that skips sequences is refused, saying which sequence was expected."""
    log = open_log()
    log.append_as_leader(pbatch([1, 2], seq=0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequence, match="sent sequence 5, expected 2"):
        log.append_as_leader(pbatch([3], seq=5), leader_epoch=0)
    assert log.log_end_offset == 2


def test_older_epoch_is_fenced_and_newer_epoch_restarts_at_zero(open_log):
    """A bumped epoch must start at sequence 0; the old epoch is then fenced."""
    log = open_log()
    log.append_as_leader(pbatch([1], epoch=1, seq=0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequence, match="new epoch starts at sequence 0"):
        log.append_as_leader(pbatch([2], epoch=2, seq=4), leader_epoch=0)
    log.append_as_leader(pbatch([2], epoch=2, seq=0), leader_epoch=0)
    with pytest.raises(InvalidProducerEpoch, match="fenced"):
        log.append_as_leader(pbatch([3], epoch=1, seq=1), leader_epoch=0)


def test_producers_are_independent(open_log):
    """Sequences are tracked per producer id."""
    log = open_log()
    log.append_as_leader(pbatch([1], pid=1, seq=0), leader_epoch=0)
    log.append_as_leader(pbatch([2], pid=2, seq=0), leader_epoch=0)
    log.append_as_leader(pbatch([3], pid=1, seq=1), leader_epoch=0)
    assert log.log_end_offset == 3


def test_idempotent_batches_must_come_alone(open_log):
    """Two idempotent batches in one append are refused (one batch per partition per request)."""
    log = open_log()
    with pytest.raises(InvalidRecord, match="alone"):
        log.append_as_leader(pbatch([1], seq=0) + pbatch([2], seq=1), leader_epoch=0)


def test_producer_state_survives_a_clean_restart(open_log):
    """After close and reopen, a retried batch is still recognised as a duplicate."""
    log = open_log()
    log.append_as_leader(pbatch([1, 2], seq=0), leader_epoch=0)
    log.close()
    again = open_log()
    assert again.append_as_leader(pbatch([1, 2], seq=0), leader_epoch=0).duplicate
    with pytest.raises(OutOfOrderSequence):
        again.append_as_leader(pbatch([3], seq=9), leader_epoch=0)


def test_producer_state_survives_a_crash_by_replaying_the_log(open_log):
    """Without a snapshot at the log end, state is rebuilt from batch headers on open."""
    log = open_log({"segment.bytes": 400})
    for i in range(10):
        log.append_as_leader(pbatch([i], seq=i), leader_epoch=0)
    log.flush()
    log.abandon()  # no close: the newest snapshot is behind the log end
    again = open_log({"segment.bytes": 400})
    assert again.append_as_leader(pbatch([9], seq=9), leader_epoch=0).duplicate
    assert again.append_as_leader(pbatch([10], seq=10), leader_epoch=0).first_offset == 10


def test_corrupt_snapshot_is_discarded_and_state_replayed(open_log):
    """A snapshot that fails its CRC is deleted; the log rebuilds the state from its batches."""
    log = open_log()
    log.append_as_leader(pbatch([1], seq=0), leader_epoch=0)
    log.close()
    [snap] = [n for n in os.listdir(log.directory) if n.endswith(".snapshot")]
    path = os.path.join(log.directory, snap)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    again = open_log()
    assert again.append_as_leader(pbatch([1], seq=0), leader_epoch=0).duplicate


def test_truncation_rewinds_producer_state(open_log):
    """After truncating a producer's last batch, its sequence continues from the one before."""
    log = open_log()
    log.append_as_leader(pbatch([1], seq=0), leader_epoch=0)
    log.append_as_leader(pbatch([2], seq=1), leader_epoch=0)
    log.truncate_to(1)
    assert log.append_as_leader(pbatch([2], seq=1), leader_epoch=0).first_offset == 1
    assert [r[2] for r in read_all(log)] == [b"1", b"2"]


def test_expired_producers_are_forgotten_at_roll(open_log, clock):
    """A producer idle past producer.id.expiration.ms loses its state (any sequence accepted)."""
    log = open_log({"producer.id.expiration.ms": 1000})
    log.append_as_leader(batch([1], producer_id=3, producer_epoch=0, base_sequence=0,
                               timestamp=clock.now), leader_epoch=0)
    clock.advance(5000)
    log.roll()
    assert 3 not in log.producer_state.producers
    log.append_as_leader(batch([2], producer_id=3, producer_epoch=0, base_sequence=50,
                               timestamp=clock.now), leader_epoch=0)


def test_transaction_markers_are_not_sequence_checked(open_log):
    """A commit marker after a producer's data batches is appended without a sequence error."""
    from rafka.storage import record_batch as rb
    log = open_log()
    log.append_as_leader(pbatch([1], seq=0), leader_epoch=0)
    marker = rb.encode_control_batch(rb.ControlType.COMMIT, producer_id=7, producer_epoch=0,
                                     coordinator_epoch=0, timestamp=1)
    assert log.append_as_leader(marker, leader_epoch=0, allow_control=True).first_offset == 1
    assert log.append_as_leader(pbatch([2], seq=1), leader_epoch=0).first_offset == 2



def test_a_producer_the_log_does_not_know_may_start_at_any_epoch_and_sequence(open_log):
    """Kafka's rule since KIP-360: with no state for a producer there is no epoch or
    sequence check; from its first batch on, its sequences are checked."""
    log = open_log()
    log.append_as_leader(pbatch([1], pid=5, epoch=3, seq=17), leader_epoch=0)
    second = log.append_as_leader(pbatch([2], pid=5, epoch=3, seq=18), leader_epoch=0)
    assert second.first_offset == 1
    with pytest.raises(OutOfOrderSequence, match="sent sequence 20, expected 19"):
        log.append_as_leader(pbatch([3], pid=5, epoch=3, seq=20), leader_epoch=0)


def test_a_new_epoch_must_start_at_sequence_zero_even_right_after_the_old_ones_last(open_log):
    """A bumped epoch does not continue the old epoch's sequences: it starts at 0."""
    log = open_log()
    log.append_as_leader(pbatch([1, 2], epoch=0, seq=0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequence, match="new epoch starts at sequence 0"):
        log.append_as_leader(pbatch([3], epoch=1, seq=2), leader_epoch=0)
    assert log.append_as_leader(pbatch([3], epoch=1, seq=0), leader_epoch=0).first_offset == 2


def test_after_a_new_epoch_a_resend_from_the_old_epoch_is_fenced_not_a_duplicate(open_log):
    """Once a producer wrote under a new epoch, its old epoch's batches are refused, even
    one the log holds: the old epoch's duplicates are no longer answered."""
    log = open_log()
    log.append_as_leader(pbatch([1], epoch=0, seq=0), leader_epoch=0)
    log.append_as_leader(pbatch([2], epoch=1, seq=0), leader_epoch=0)
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(pbatch([1], epoch=0, seq=0), leader_epoch=0)
    assert log.log_end_offset == 2


def test_a_producer_known_only_from_a_marker_starts_its_epoch_at_sequence_zero(open_log):
    """A transaction marker makes the producer known with no batches: its data must then
    start at sequence 0 of that epoch."""
    from rafka.storage import record_batch as rb
    log = open_log()
    marker = rb.encode_control_batch(rb.ControlType.ABORT, producer_id=7, producer_epoch=2,
                                     coordinator_epoch=0, timestamp=1)
    log.append_as_leader(marker, leader_epoch=0, allow_control=True)
    with pytest.raises(OutOfOrderSequence, match="expected 0"):
        log.append_as_leader(pbatch([1], epoch=2, seq=4), leader_epoch=0)
    assert log.append_as_leader(pbatch([1], epoch=2, seq=0), leader_epoch=0).first_offset == 1


def test_sequences_wrap_from_the_largest_int_to_zero(open_log):
    """After sequence 2**31 - 1 the next batch starts at 0, as in Kafka."""
    log = open_log()
    log.append_as_leader(pbatch([1, 2], seq=2**31 - 2), leader_epoch=0)
    assert log.append_as_leader(pbatch([3], seq=0), leader_epoch=0).first_offset == 2


def test_the_clusters_own_writers_never_expire_so_their_fencing_holds():
    """Producer ids from INTERNAL_PRODUCER_IDS_FROM up (the group coordinators) are kept
    however long they are idle: an older epoch stays refused."""
    from rafka.storage import record_batch as rb
    from rafka.storage.producer_state import INTERNAL_PRODUCER_IDS_FROM, ProducerStateManager

    state = ProducerStateManager("/nonexistent", expiration_ms=1000)
    internal, client = INTERNAL_PRODUCER_IDS_FROM + 3, 7
    for pid in (internal, client):
        data = rb.encode_batch([b"v"], None, 0, producer_id=pid, producer_epoch=5,
                               base_sequence=0)  # fmt: skip
        state.update(next(rb.iter_batches(data))[1])
    state.remove_expired(now_ms=10_000_000)
    assert internal in state.producers and client not in state.producers
    stale = rb.encode_batch([b"v"], None, 0, producer_id=internal, producer_epoch=4,
                            base_sequence=0)  # fmt: skip
    with pytest.raises(InvalidProducerEpoch):
        state.check(next(rb.iter_batches(stale))[1])


# -- transactions ------------------------------------------------------------------------------


def header_of(data: bytes, base_offset: int):
    data = bytearray(data)
    rb.set_base_offset(data, base_offset)
    return rb.read_header(data), bytes(data)


def txn_header(pid, base_offset, epoch=0, seq=0, count=1):
    return header_of(txn_batch([b"v"] * count, pid, seq, epoch), base_offset)[0]


def marker_header(kind, pid, base_offset, epoch=0, coordinator_epoch=0):
    header, data = header_of(marker(kind, pid, epoch, coordinator_epoch), base_offset)
    return header, read_marker(data)


def test_a_marker_ends_the_open_transaction_and_says_how(tmp_path):
    """update returns CompletedTxn(producer, first offset, marker offset, aborted) for a
    marker that ends a transaction, None for one that ends nothing."""
    state = ProducerStateManager(str(tmp_path), expiration_ms=10**9)
    assert state.update(txn_header(1, 10, count=2)) is None
    assert state.update(txn_header(1, 12, seq=2)) is None
    assert state.first_unstable_offset() == 10
    assert state.update(*marker_header(ABORT, 1, 13, epoch=1)) == CompletedTxn(1, 10, 13, True)
    assert state.first_unstable_offset() is None
    assert state.update(*marker_header(COMMIT, 1, 14, epoch=2)) is None
    assert state.producers[1].epoch == 2
    state.update(txn_header(1, 15, epoch=2))
    assert state.update(*marker_header(COMMIT, 1, 16, epoch=3)) == CompletedTxn(1, 15, 16, False)


def test_the_first_unstable_offset_is_the_earliest_open_transaction(tmp_path):
    state = ProducerStateManager(str(tmp_path), expiration_ms=10**9)
    for pid, offset in ((3, 5), (1, 6), (2, 7)):
        state.update(txn_header(pid, offset))
    state.update(*marker_header(COMMIT, 3, 8))
    assert state.first_unstable_offset() == 6
    assert state.ongoing_transactions() == {1: 6, 2: 7}


def test_a_data_batch_of_a_new_epoch_keeps_the_open_transaction(tmp_path):
    """Only a marker ends a transaction: a new epoch's batch (a hanging transaction the
    coordinator never ended here) must not let the LSO pass the old one's records."""
    state = ProducerStateManager(str(tmp_path), expiration_ms=10**9)
    state.update(txn_header(1, 0, epoch=0))
    state.update(txn_header(1, 1, epoch=1))
    assert state.ongoing_transactions() == {1: 0}
    assert state.producers[1].epoch == 1


def test_a_control_batch_without_its_marker_is_refused(tmp_path):
    header, _ = marker_header(ABORT, 1, 0)
    with pytest.raises(ValueError, match="read_marker"):
        ProducerStateManager(str(tmp_path), expiration_ms=10**9).update(header)


def test_snapshots_carry_open_transactions_and_coordinator_epochs(tmp_path):
    """A version-2 snapshot brings back each open transaction (in first-offset order) and
    the coordinator epoch that fences older coordinators."""
    state = ProducerStateManager(str(tmp_path), expiration_ms=10**9)
    state.update(txn_header(2, 0))
    state.update(*marker_header(COMMIT, 2, 1, epoch=1, coordinator_epoch=7))
    state.update(txn_header(2, 3, epoch=1))
    state.update(txn_header(1, 2))
    state.take_snapshot(4)
    again = ProducerStateManager(str(tmp_path), expiration_ms=10**9)
    assert again.load_latest_snapshot(4) == 4
    assert again.ongoing_transactions() == {1: 2, 2: 3}
    assert again.first_unstable_offset() == 2
    with pytest.raises(TransactionCoordinatorFenced):
        again.check(*marker_header(COMMIT, 2, 4, epoch=1, coordinator_epoch=6))
