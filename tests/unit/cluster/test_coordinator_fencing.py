"""The decisions of rafka.cluster.coordinator_fencing: which epoch a coordinator incarnation
claims, what each batch carries, when it fences again and when it is fenced."""

from __future__ import annotations

import itertools

import pytest

from rafka.cluster.coordinator_fencing import (
    COORDINATOR_PRODUCER_ID_BASE,
    MAX_PRODUCER_EPOCH,
    CoordinatorFencing,
    Phase,
    coordinator_producer_id,
)
from rafka.cluster.controller import PRODUCER_ID_BLOCK
from rafka.errors import (
    CoordinatorEpochExhausted,
    CoordinatorFenced,
    CoordinatorLoadInProgress,
    InvalidProducerEpoch,
    NotCoordinator,
    OutOfOrderSequence,
    error_class,
)
from rafka.storage import record_batch as rb

SHARD = 2


def _fencing() -> CoordinatorFencing:
    tokens = (f"t{i}" for i in itertools.count())
    return CoordinatorFencing(SHARD, new_token=lambda: next(tokens))


def _header(producer_id: int, epoch: int) -> rb.BatchHeader:
    data = rb.encode_batch([b"v"], [b"k"], 0, producer_id=producer_id, producer_epoch=epoch,
                           base_sequence=0)  # fmt: skip
    return rb.read_header(data)


def _active(fencing: CoordinatorFencing, seen: tuple[int, ...] = ()) -> CoordinatorFencing:
    for epoch in seen:
        fencing.saw(_header(fencing.producer_id, epoch))
    claim = fencing.claim()
    assert fencing.claimed(claim, claim.token)
    return fencing


def test_producer_ids_are_per_shard_and_far_above_the_ones_clients_get():
    """Each shard has its own fixed producer id, out of reach of the controller's blocks."""
    assert coordinator_producer_id(0) == COORDINATOR_PRODUCER_ID_BASE == 2**62
    assert coordinator_producer_id(SHARD) == 2**62 + SHARD
    assert COORDINATOR_PRODUCER_ID_BASE // PRODUCER_ID_BLOCK > 10**12  # blocks before a clash
    assert coordinator_producer_id(49) < 2**63  # an int64


def test_a_load_claims_one_above_the_highest_epoch_of_its_producer_id():
    """Epochs of other producers are ignored; a log without the shard's batches gives 0."""
    fencing = _fencing()
    assert fencing.claim().epoch == 0

    fencing = _fencing()
    fencing.saw(_header(fencing.producer_id, 4))
    fencing.saw(_header(fencing.producer_id, 2))  # compaction may leave them in any order
    fencing.saw(_header(7, 30))
    fencing.saw(_header(coordinator_producer_id(SHARD + 1), 30))
    claim = fencing.claim()
    assert (claim.epoch, claim.at_load) == (5, True)


def test_writes_start_after_the_marker_and_advance_by_record_count_with_wrap():
    """The marker is sequence 0; each batch takes as many sequences as it has records, and
    sequences wrap from 2**31 - 1 to 0 as the replica expects."""
    fencing = _active(_fencing(), seen=(3,))
    assert fencing.next_batch(10) == (4, 1)
    assert fencing.next_batch(1) == (4, 11)
    assert fencing.next_batch(5) == (4, 12)
    fencing.next_sequence = 2**31 - 3
    assert fencing.next_batch(5) == (4, 2**31 - 3)
    assert fencing.next_batch(1) == (4, 2)


def test_no_write_before_the_load_has_claimed_its_epoch():
    """Writing while loading (or while the load's marker is outstanding) is refused."""
    fencing = _fencing()
    with pytest.raises(CoordinatorLoadInProgress):
        fencing.next_batch(1)
    fencing.claim()
    with pytest.raises(CoordinatorLoadInProgress):
        fencing.check_writable()


def test_a_load_whose_marker_is_not_its_own_claims_again_higher():
    """Another incarnation's marker at the answered offset (the replica took ours as a
    duplicate of it) means that epoch is taken: claim the next, with a new token."""
    fencing = _fencing()
    first = fencing.claim()
    assert fencing.claimed(first, "someone else's") is False
    assert fencing.claimed(fencing.claim(), None) is False  # no marker found at all
    third = fencing.claim()
    assert (third.epoch, third.token) == (2, "t2")
    assert fencing.claimed(third, "t2")
    assert (fencing.phase, fencing.epoch) == (Phase.ACTIVE, 2)


@pytest.mark.parametrize("refusal", [InvalidProducerEpoch, OutOfOrderSequence])
def test_a_load_whose_marker_is_refused_claims_again_higher(refusal):
    """A higher epoch, or later batches of this epoch, are in the log: go above it."""
    fencing = _fencing()
    claim = fencing.claim()
    fencing.claim_refused(claim, refusal("refused"))
    assert fencing.claim().epoch == claim.epoch + 1


def test_a_failed_write_fences_again_at_the_next_epoch_before_writing():
    """After a failed write the next write needs a marker at epoch + 1, sequence 0; once it
    is found in the log writes go on at sequence 1 of the new epoch."""
    fencing = _active(_fencing())
    fencing.next_batch(3)
    fencing.write_failed()
    assert fencing.needs_fence and fencing.phase is Phase.SUSPECT
    fencing.check_writable()  # the write may go ahead, fencing first
    claim = fencing.claim()
    assert (claim.epoch, claim.at_load) == (1, False)
    assert fencing.claimed(claim, claim.token)
    assert not fencing.needs_fence
    assert fencing.next_batch(2) == (1, 1)


def test_a_fence_whose_write_failed_is_retried_with_the_same_claim():
    """An outage does not use up epochs: the unacknowledged marker is resent as it was (a
    duplicate if it did land)."""
    fencing = _active(_fencing())
    fencing.write_failed()
    claim = fencing.claim()
    fencing.write_failed()  # the fence's own write failed
    assert fencing.claim() == claim


@pytest.mark.parametrize("how", ["not ours", "refused"])
def test_a_refence_that_loses_its_claim_makes_the_incarnation_a_zombie(how):
    """Only a later incarnation can hold the epoch a re-fence claims, or a higher one: the
    writer is fenced for good, and says so with NotCoordinator's errno."""
    fencing = _active(_fencing())
    fencing.write_failed()
    claim = fencing.claim()
    with pytest.raises(CoordinatorFenced, match="later incarnation"):
        if how == "not ours":
            fencing.claimed(claim, "a newer incarnation's token")
        else:
            fencing.claim_refused(claim, InvalidProducerEpoch("epoch 3 has taken over"))
    assert fencing.phase is Phase.ZOMBIE
    for call in (fencing.check_writable, fencing.claim, fencing.begin_load):
        with pytest.raises(CoordinatorFenced):
            call()
    assert error_class(CoordinatorFenced.errno) is NotCoordinator
    assert CoordinatorFenced.retriable  # clients find the coordinator again


def test_a_refused_write_makes_the_incarnation_a_zombie():
    """InvalidProducerEpoch on a data batch: a newer incarnation has fenced this one."""
    fencing = _active(_fencing())
    error = fencing.write_refused(InvalidProducerEpoch("epoch 1 has taken over"))
    assert isinstance(error, CoordinatorFenced) and "epoch 1 has taken over" in str(error)
    with pytest.raises(CoordinatorFenced):
        fencing.next_batch(1)


def test_the_epoch_stops_at_the_int16_limit_with_a_typed_error():
    """32767 is the last epoch a batch header holds: a shard that reached it cannot claim
    another, whether loading or fencing again, and the message says why."""
    fencing = _fencing()
    fencing.saw(_header(fencing.producer_id, MAX_PRODUCER_EPOCH - 1))
    claim = fencing.claim()
    assert claim.epoch == MAX_PRODUCER_EPOCH == 32767
    assert fencing.claimed(claim, claim.token)
    fencing.write_failed()
    with pytest.raises(CoordinatorEpochExhausted, match="16-bit field") as raised:
        fencing.claim()
    assert not raised.value.retriable

    fencing = _fencing()
    fencing.saw(_header(fencing.producer_id, MAX_PRODUCER_EPOCH))
    with pytest.raises(CoordinatorEpochExhausted, match=f"shard {SHARD}"):
        fencing.claim()


def test_a_new_load_starts_over():
    """A load that failed half-way is run again from the log start: what it saw is
    forgotten and read again."""
    fencing = _fencing()
    fencing.saw(_header(fencing.producer_id, 5))
    fencing.claim()
    fencing.begin_load()
    assert (fencing.phase, fencing.highest_seen, fencing.pending) == (Phase.LOADING, -1, None)
    fencing.saw(_header(fencing.producer_id, 6))
    assert fencing.claim().epoch == 7
