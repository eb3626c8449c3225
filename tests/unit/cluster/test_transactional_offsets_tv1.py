"""Offsets pending in transactions of Kafka clients of transaction version 1: the producer
keeps its epoch, so its marker resolves the offsets written at that epoch, and its next
transaction's offsets at the same epoch are resolved by the next marker."""

from __future__ import annotations

from rafka.cluster.transactional_offsets import PendingOffsets

from .test_transactional_offsets import offset


def test_a_version_1_marker_resolves_offsets_written_at_its_epoch():
    pending = PendingOffsets()
    pending.add(7, 4, "g", {("t", 0): offset(5)})
    assert pending.to_resolve(7, 4) == {}  # version 2's rule: only below the marker
    assert pending.to_resolve(7, 4, 1) == {("g", ("t", 0)): offset(5)}
    pending.resolved(7, 4, 1)
    assert not pending.is_pending("g", None)


def test_the_next_version_1_transaction_at_the_same_epoch_is_taken_and_resolved():
    """Not ended by the last marker (same epoch), and resolved by its own."""
    pending = PendingOffsets()
    pending.add(7, 4, "g", {("t", 0): offset(5)})
    pending.resolved(7, 4, 1)
    assert not pending.ended(7, 4)
    pending.add(7, 4, "g", {("t", 0): offset(9)})
    assert pending.to_resolve(7, 4, 1) == {("g", ("t", 0)): offset(9)}
    pending.resolved(7, 4, 1)
    assert not pending.is_pending("g", None)


def test_a_version_1_marker_below_the_last_one_is_stale():
    """An older epoch's marker resolves nothing; a later bump (a fence, version 2) ends the
    epoch for good."""
    pending = PendingOffsets()
    pending.resolved(7, 5, 2)
    pending.add(7, 5, "g", {("t", 0): offset(5)})
    assert pending.to_resolve(7, 4, 1) == {}
    assert pending.to_resolve(7, 5, 1) == {("g", ("t", 0)): offset(5)}
    pending.resolved(7, 6, 2)
    assert pending.ended(7, 5) and not pending.is_pending("g", None)
