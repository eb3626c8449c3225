"""Producer state with Kafka clients of transaction version 1: the producer keeps its epoch
across transactions, so a marker at the producer's current epoch ends the transaction and the
next transaction's batches continue the epoch's sequence, also after a reopen."""

import pytest

from rafka.errors import InvalidProducerEpoch, OutOfOrderSequence

from .support import ABORT, COMMIT, marker, txn_batch

PID, EPOCH = 7, 3


def write(log, data: bytes) -> int:
    return log.append_as_leader(data, leader_epoch=0).first_offset


def write_marker(log, kind, epoch=EPOCH) -> int:
    return log.append_as_leader(marker(kind, PID, epoch), leader_epoch=0,
                                allow_control=True).first_offset  # fmt: skip


def two_transactions_at_one_epoch(log) -> None:
    """Transaction 1 (sequences 0-2) committed, transaction 2 (3-4) aborted, both at EPOCH."""
    write(log, txn_batch([b"a", b"b"], pid=PID, seq=0, epoch=EPOCH))
    write(log, txn_batch([b"c"], pid=PID, seq=2, epoch=EPOCH))
    write_marker(log, COMMIT)
    write(log, txn_batch([b"d", b"e"], pid=PID, seq=3, epoch=EPOCH))
    write_marker(log, ABORT)


def test_the_next_transaction_at_the_same_epoch_continues_the_sequence(open_log):
    """After a marker at the producer's own epoch, the next transactional batch at the next
    sequence is written and opens a new transaction at its own offset."""
    log = open_log()
    write(log, txn_batch([b"a", b"b"], pid=PID, seq=0, epoch=EPOCH))
    assert write_marker(log, COMMIT) == 2
    assert log.producer_state.ongoing_transactions() == {}
    assert write(log, txn_batch([b"c"], pid=PID, seq=2, epoch=EPOCH)) == 3
    assert log.producer_state.ongoing_transactions() == {PID: 3}
    entry = log.producer_state.producers[PID]
    assert (entry.epoch, entry.last_seq) == (EPOCH, 2)


def test_a_second_transaction_at_the_same_epoch_is_indexed_from_its_own_first_offset(open_log):
    """The aborted second transaction is (producer, its first offset), not the first's."""
    log = open_log()
    two_transactions_at_one_epoch(log)
    assert log.aborted_transactions(0, log.log_end_offset) == [(PID, 4)]
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset


def test_the_same_epoch_still_refuses_a_gap_or_a_restart_at_zero(open_log):
    """Keeping the epoch keeps its sequence checks: the next transaction may not skip or
    start again at 0 (that is a new epoch's right only)."""
    log = open_log()
    write(log, txn_batch([b"a"], pid=PID, seq=0, epoch=EPOCH))
    write_marker(log, COMMIT)
    with pytest.raises(OutOfOrderSequence):
        write(log, txn_batch([b"b"], pid=PID, seq=5, epoch=EPOCH))
    assert write(log, txn_batch([b"a"], pid=PID, seq=0, epoch=EPOCH)) == 0  # a duplicate
    with pytest.raises(InvalidProducerEpoch):
        write_marker(log, COMMIT, epoch=EPOCH - 1)


@pytest.mark.parametrize("clean", [True, False], ids=["snapshot", "replay"])
def test_after_a_reopen_the_next_transaction_continues_the_sequence(open_log, clean):
    """Reopened from a snapshot or by replaying the log, the producer's epoch and last
    sequence survive two markers at that epoch, and its third transaction goes on from them."""
    log = open_log()
    two_transactions_at_one_epoch(log)
    log.flush()
    log.close() if clean else log.abandon()
    again = open_log()
    assert again.producer_state.ongoing_transactions() == {}
    assert (again.producer_state.producers[PID].epoch,
            again.producer_state.producers[PID].last_seq) == (EPOCH, 4)  # fmt: skip
    first = write(again, txn_batch([b"f"], pid=PID, seq=5, epoch=EPOCH))
    assert again.producer_state.ongoing_transactions() == {PID: first}
    assert again.aborted_transactions(0, again.log_end_offset) == [(PID, 4)]
