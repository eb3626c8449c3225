"""Offsets pending in transactions: kept per producer with the epoch that wrote them,
visible to nobody, resolved by the marker of their transaction only."""

from __future__ import annotations

from rafka.cluster.group_types import CommittedOffset
from rafka.cluster.transactional_offsets import PendingOffsets


def offset(n: int) -> CommittedOffset:
    return CommittedOffset(n, -1, "", 0)


def test_a_later_commit_of_the_same_partition_in_a_transaction_replaces_the_earlier():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): offset(5)})
    pending.add(7, 0, "g", {("t", 0): offset(9), ("t", 1): offset(2)})
    assert pending.to_resolve(7, 1) == {("g", ("t", 0)): offset(9), ("g", ("t", 1)): offset(2)}


def test_pending_offsets_are_asked_for_by_group_and_partition():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): offset(5)})
    assert pending.is_pending("g", [("t", 0)])
    assert pending.is_pending("g", None)
    assert not pending.is_pending("g", [("t", 1)])
    assert not pending.is_pending("other", None)


def test_a_marker_resolves_its_transactions_offsets_and_not_the_next_ones():
    """Transaction 1 wrote at epoch 0 and ended with markers at epoch 1; transaction 2 of
    the same producer writes at epoch 1: the marker at epoch 1 leaves it pending."""
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): offset(5)})
    pending.add(7, 1, "g", {("t", 1): offset(3)})
    assert pending.to_resolve(7, 1) == {("g", ("t", 0)): offset(5)}
    pending.resolved(7, 1)
    assert not pending.is_pending("g", [("t", 0)])
    assert pending.is_pending("g", [("t", 1)])


def test_a_repeated_or_stale_marker_resolves_nothing():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): offset(5)})
    pending.resolved(7, 1)
    pending.add(7, 1, "g", {("t", 0): offset(8)})
    assert pending.to_resolve(7, 1) == {}  # a repeat of the marker already applied
    assert pending.to_resolve(7, 0) == {}


def test_offsets_of_a_transaction_that_ended_here_are_refused():
    """A slow write of transaction 1's offsets that ends after its abort marker."""
    pending = PendingOffsets()
    pending.resolved(7, 1)
    assert pending.ended(7, 0)
    assert not pending.ended(7, 1)


def test_replayed_tombstones_remove_single_pending_records():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): offset(5), ("t", 1): offset(6)})
    pending.remove(7, "g", ("t", 0))
    assert pending.to_resolve(7, 1) == {("g", ("t", 1)): offset(6)}
    pending.remove(7, "g", ("t", 1))
    assert 7 not in pending.by_producer
