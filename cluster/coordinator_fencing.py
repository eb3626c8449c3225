"""Fencing the earlier lives of a group coordinator out of its ``__consumer_offsets`` partition.

A coordinator shard is a detached Ray actor that Ray restarts when its process dies, so one
shard has a sequence of incarnations, and a write an earlier one sent just before dying can
still reach the leader replica after a later one has read the partition back. The replica
refuses such a write the way it refuses a fenced idempotent producer
(``rafka.storage.producer_state.ProducerStateManager.check``): every incarnation of shard
``k`` writes as the same producer id, ``coordinator_producer_id(k)``, each with an epoch of
its own, and a batch whose epoch is below the producer's current epoch is refused with
InvalidProducerEpoch. Producer state is rebuilt on followers from the replicated batches, so
the fence survives a leader change.

How an incarnation takes its epoch (``CoordinatorLog.load`` does the reading and writing):

1. Read the partition to the high watermark, noting the highest epoch any batch of the
   producer id carries (``saw``).
2. Claim that epoch + 1 (``claim``): write one epoch marker record (``offsets_records``,
   kind 3) with the claimed epoch at sequence 0 and the claim's random token, acks=all.
3. Once it is acknowledged, read on from where step 1 ended to the new high watermark, so
   records that landed between the two reads are loaded too, and look at the marker at the
   offset the answer gave (``claimed``). It must carry the claim's token: the replica
   answers a batch that repeats one of the producer's last five (same epoch, same
   sequences) with the original's offsets, so a marker of another incarnation that took the
   same epoch first would otherwise pass for ours. If it is not ours, or the marker was
   refused (``claim_refused``), claim again above that epoch.

From then on every batch carries (producer id, epoch, next sequence) (``next_batch``), the
sequence advancing by the batch's record count and wrapping at 2**31 - 1 as the replica
expects; a retry of a batch resends it unchanged, so a batch whose answer was lost is
answered as a duplicate instead of being written twice.

Invariant: every write with epoch E happens after a marker with epoch E is in the log
(acknowledged by every in-sync replica). A later incarnation reads that marker, or a newer
one, before it claims, so its epoch is higher than every epoch an earlier incarnation wrote
with, and once its own marker is in the log the replica refuses the earlier one's late
writes. Markers of a shard share one key, so compaction keeps the newest, which has the
highest epoch: the epoch read back never goes down.

When a write finally fails (its error reaches the callers) the producer's sequence at the
replica is unknown, since the batch may or may not be in the log: before the next write the
incarnation fences again (``write_failed``) with a marker at its epoch + 1, sequence 0,
checked the same way; that keeps the invariant. A fence write that fails is retried with
the same claim (same epoch and token), so an outage does not use up epochs. Losing that
claim, or InvalidProducerEpoch on any write, means a later incarnation has fenced this one:
it is a zombie (``CoordinatorFenced``) and every write it tries from then on fails.

Epochs are the batch header's int16: a shard can take at most 32,768 epochs (0 to 32767),
one per load and one per failed write, after which ``claim`` raises
``CoordinatorEpochExhausted``.

Not thread-safe; the owning CoordinatorLog calls it from its event loop, between awaits.
Nothing is persisted here: the log is the record, and a restart reads it back.
"""

from __future__ import annotations

import enum
import logging
import secrets
from typing import Callable, NamedTuple

from rafka.errors import (
    CoordinatorEpochExhausted,
    CoordinatorFenced,
    CoordinatorLoadInProgress,
    RafkaError,
)
from rafka.storage import record_batch as rb
from rafka.storage.producer_state import INTERNAL_PRODUCER_IDS_FROM

log = logging.getLogger(__name__)

#: Producer ids of the coordinators' writes: shard ``k`` writes as ``2**62 + k``. The
#: controller hands producer ids to clients from 0 upward, in blocks of PRODUCER_ID_BLOCK
#: (``cluster.controller.allocate_producer_ids``); reaching 2**62 would take 4.6e18 ids, so
#: these never collide with a client's. They are fixed per shard, so every incarnation of a
#: shard is the same producer to the replica, which is what lets a later one fence an
#: earlier one.
#: The replica never expires these ids (``storage.producer_state``), so a write delayed
#: past producer.id.expiration.ms is still refused.
COORDINATOR_PRODUCER_ID_BASE = INTERNAL_PRODUCER_IDS_FROM
#: The largest producer epoch: the batch header's epoch field is an int16.
MAX_PRODUCER_EPOCH = (1 << 15) - 1


#: Transaction coordinator shard ``k`` writes to ``__transaction_state`` as ``2**62 + 2**32
#: + k``: clear of the group coordinators' ids, as there are never 2**32 shards.
TRANSACTION_COORDINATOR_PRODUCER_ID_BASE = INTERNAL_PRODUCER_IDS_FROM + (1 << 32)


def coordinator_producer_id(shard: int) -> int:
    """The producer id group coordinator shard ``shard`` writes ``__consumer_offsets`` as."""
    return COORDINATOR_PRODUCER_ID_BASE + shard


def transaction_coordinator_producer_id(shard: int) -> int:
    """The producer id transaction coordinator shard ``shard`` writes
    ``__transaction_state`` as."""
    return TRANSACTION_COORDINATOR_PRODUCER_ID_BASE + shard


class Claim(NamedTuple):
    """An epoch marker to write: its epoch, and a token that tells it from another
    incarnation's marker of the same epoch."""

    epoch: int
    token: str
    at_load: bool  # claimed by a load (may claim again if lost) or by a re-fence (may not)


class Phase(enum.Enum):
    LOADING = "loading"  # reading the partition, noting epochs; moves to CLAIMING
    CLAIMING = "claiming"  # a marker is being written; to ACTIVE, LOADING (a load lost the
    #                        epoch: claim again) or ZOMBIE (a re-fence lost it)
    ACTIVE = "active"  # writes carry the epoch and the next sequence; to SUSPECT or ZOMBIE
    SUSPECT = "suspect"  # a write failed, its sequences' fate unknown; to CLAIMING
    ZOMBIE = "zombie"  # a later incarnation fenced this one; final


#: The phases each phase may be entered from (None: the start).
_ENTERED_FROM = {
    Phase.LOADING: {None, Phase.LOADING, Phase.CLAIMING, Phase.ACTIVE, Phase.SUSPECT},
    Phase.CLAIMING: {Phase.LOADING, Phase.SUSPECT, Phase.CLAIMING},
    Phase.ACTIVE: {Phase.CLAIMING},
    Phase.SUSPECT: {Phase.ACTIVE},
    Phase.ZOMBIE: {Phase.CLAIMING, Phase.ACTIVE, Phase.SUSPECT},
}


class CoordinatorFencing:
    """The producer epoch and sequences of one incarnation of coordinator shard ``shard``:
    which epoch to claim, what each batch carries, when to fence again. Decisions only;
    ``CoordinatorLog`` does the I/O."""

    def __init__(
        self, shard: int, new_token: Callable[[], str] = lambda: secrets.token_hex(8),
        producer_id: int | None = None,
    ) -> None:  # fmt: skip
        self.shard = shard
        self.producer_id = coordinator_producer_id(shard) if producer_id is None else producer_id
        self.new_token = new_token
        self.phase: Phase | None = None
        self.highest_seen = rb.NO_PRODUCER_EPOCH  # highest epoch of producer_id read or lost
        self.epoch: int | None = None  # the epoch this incarnation writes with, once claimed
        self.next_sequence = 0
        self.pending: Claim | None = None  # the claim being written
        self._why = ""  # how this incarnation learnt it was fenced
        self._move(Phase.LOADING)

    def _move(self, to: Phase) -> None:
        if self.phase not in _ENTERED_FROM[to]:
            raise AssertionError(f"coordinator fencing: {self.phase} -> {to} is not a move")
        if to is not self.phase:
            log.debug("shard %d fencing: %s -> %s", self.shard, self.phase, to)
        self.phase = to

    # -- loading -------------------------------------------------------------------------------

    def begin_load(self) -> None:
        """A load starts reading the partition from its log start."""
        self._check_not_fenced()
        self._move(Phase.LOADING)
        self.highest_seen = rb.NO_PRODUCER_EPOCH
        self.epoch = None
        self.pending = None

    def saw(self, header: rb.BatchHeader) -> None:
        """A batch the load read (in log order)."""
        if header.producer_id == self.producer_id:
            self.highest_seen = max(self.highest_seen, header.producer_epoch)

    # -- claiming an epoch ---------------------------------------------------------------------

    @property
    def needs_fence(self) -> bool:
        """Whether a marker must be written and checked before the next write."""
        return self.phase in (Phase.SUSPECT, Phase.CLAIMING)

    def claim(self) -> Claim:
        """The marker to write now: the claim being written if its write failed (retry it
        unchanged), else a new one above every epoch read (a load) or above this
        incarnation's epoch (a re-fence)."""
        self._check_not_fenced()
        if self.phase is Phase.CLAIMING and self.pending is not None:
            return self.pending
        at_load = self.phase is Phase.LOADING
        if not at_load and self.phase is not Phase.SUSPECT:
            raise AssertionError(f"coordinator fencing: no claim while {self.phase}")
        epoch = max(self.highest_seen, -1 if self.epoch is None else self.epoch) + 1
        if epoch > MAX_PRODUCER_EPOCH:
            raise CoordinatorEpochExhausted(
                f"group coordinator shard {self.shard} cannot fence its earlier incarnations "
                f"any more: its writes to __consumer_offsets (producer id {self.producer_id}) "
                f"have reached epoch {epoch - 1}, and a producer epoch is a 16-bit field of the "
                f"batch header, so {MAX_PRODUCER_EPOCH} is the last one. Every load of the "
                "shard and every failed write takes one epoch: look for what restarted it or "
                "failed its writes so often. Its records are intact; to serve the shard's "
                "groups again the shard needs a producer id of its own that is new, which "
                "this version does not assign"
            )
        self.pending = Claim(epoch, self.new_token(), at_load)
        self._move(Phase.CLAIMING)
        return self.pending

    def claimed(self, claim: Claim, token_found: str | None) -> bool:
        """The marker of ``claim`` was acknowledged, and the marker the log holds at the
        offset of the answer carries ``token_found`` (None: no marker of this producer
        there). True: this incarnation now writes with ``claim.epoch``. False: another
        incarnation holds that epoch and a load must claim again. Raises CoordinatorFenced
        when a re-fence loses its claim."""
        self._check_claim(claim)
        if token_found == claim.token:
            self.pending = None
            self.epoch = claim.epoch
            self.next_sequence = 1  # the marker was sequence 0
            self._move(Phase.ACTIVE)
            return True
        return self._lost(
            claim, f"the epoch marker at its offset is not this incarnation's ({token_found})"
        )

    def claim_refused(self, claim: Claim, error: RafkaError) -> None:
        """The replica refused the marker (InvalidProducerEpoch: a higher epoch is in the
        log; OutOfOrderSequence: this epoch already has later batches). A load claims again
        above it; a re-fence raises CoordinatorFenced."""
        self._check_claim(claim)
        self._lost(claim, str(error))

    def _lost(self, claim: Claim, why: str) -> bool:
        self.pending = None
        self.highest_seen = max(self.highest_seen, claim.epoch)  # someone else has it
        if claim.at_load:
            self._move(Phase.LOADING)
            return False
        raise self._zombie(f"its fence at epoch {claim.epoch} lost: {why}")

    def _check_claim(self, claim: Claim) -> None:
        self._check_not_fenced()
        if self.phase is not Phase.CLAIMING or claim != self.pending:
            raise AssertionError(f"coordinator fencing: {claim} is not the pending claim")

    # -- writing -------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Raises when this incarnation may not write: fenced, or not loaded yet."""
        self._check_not_fenced()
        loading = self.phase is Phase.CLAIMING and self.pending.at_load
        if self.phase is Phase.LOADING or loading:
            raise CoordinatorLoadInProgress(
                f"group coordinator shard {self.shard} is loading its groups; retry"
            )

    def next_batch(self, record_count: int) -> tuple[int, int]:
        """(epoch, base sequence) of the next batch, of ``record_count`` records."""
        self.check_writable()
        if self.phase is not Phase.ACTIVE:
            raise AssertionError(f"coordinator fencing: fence before writing ({self.phase})")
        sequence = self.next_sequence
        self.next_sequence = rb.increment_sequence(sequence, record_count)
        return self.epoch, sequence

    def write_failed(self) -> None:
        """A write failed for good: fence again before the next one."""
        if self.phase is Phase.ACTIVE:
            self._move(Phase.SUSPECT)

    def write_refused(self, error: RafkaError) -> CoordinatorFenced:
        """The replica refused a batch with InvalidProducerEpoch: this incarnation is fenced.
        Returns the error to raise."""
        return self._zombie(f"a write at epoch {self.epoch} was refused: {error}")

    # -- fenced --------------------------------------------------------------------------------

    def _zombie(self, why: str) -> CoordinatorFenced:
        if self.phase is not Phase.ZOMBIE:
            self._move(Phase.ZOMBIE)
            self._why = why
        return self._fenced_error()

    def _check_not_fenced(self) -> None:
        if self.phase is Phase.ZOMBIE:
            raise self._fenced_error()

    def _fenced_error(self) -> CoordinatorFenced:
        return CoordinatorFenced(
            f"group coordinator shard {self.shard} was fenced by a later incarnation of "
            f"itself ({self._why}); this one may no longer write to __consumer_offsets-"
            f"{self.shard}: find the coordinator again"
        )
