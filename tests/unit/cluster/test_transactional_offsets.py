"""Offsets pending in transactions: kept per producer, visible to nobody, resolved whole."""

from __future__ import annotations

from rafka.cluster.group_types import CommittedOffset
from rafka.cluster.transactional_offsets import PendingOffsets


def offset(n: int) -> CommittedOffset:
    return CommittedOffset(n, -1, "", 0)


def test_a_later_commit_of_the_same_partition_in_a_transaction_replaces_the_earlier():
    pending = PendingOffsets()
    pending.add(7, "g", {("t", 0): offset(5)})
    pending.add(7, "g", {("t", 0): offset(9), ("t", 1): offset(2)})
    assert pending.of(7) == {("g", ("t", 0)): offset(9), ("g", ("t", 1)): offset(2)}


def test_pending_offsets_are_asked_for_by_group_and_partition():
    pending = PendingOffsets()
    pending.add(7, "g", {("t", 0): offset(5)})
    assert pending.is_pending("g", [("t", 0)])
    assert pending.is_pending("g", None)
    assert not pending.is_pending("g", [("t", 1)])
    assert not pending.is_pending("other", None)


def test_a_resolved_producer_has_nothing_pending_and_others_keep_theirs():
    pending = PendingOffsets()
    pending.add(7, "g", {("t", 0): offset(5)})
    pending.add(8, "g", {("t", 1): offset(3)})
    pending.resolved(7)
    assert pending.of(7) == {}
    assert not pending.is_pending("g", [("t", 0)])
    assert pending.is_pending("g", [("t", 1)])


def test_replayed_tombstones_remove_single_pending_records():
    pending = PendingOffsets()
    pending.add(7, "g", {("t", 0): offset(5), ("t", 1): offset(6)})
    pending.remove(7, "g", ("t", 0))
    assert pending.of(7) == {("g", ("t", 1)): offset(6)}
    pending.remove(7, "g", ("t", 1))
    assert 7 not in pending.by_producer
