"""Idempotence bookkeeping of one partition: which stamp (producer id, epoch, base sequence)
each batch carries, what may be sent next, and what a failed batch becomes.

A plain-Python state machine with no threads, I/O or clock: the sender thread owns one per
partition and calls it with the producer's lock held.

The leader writes an idempotent batch only if its sequence follows the last one it holds for
that producer and epoch, and answers a resend of one of the producer's last five batches with
the original offsets (``rafka.storage.producer_state``). The rules here are those of Kafka's
client since KIP-360 (``TransactionManager``, ``Sender``), stricter where a record could
otherwise be acknowledged without being written or written out of order:

- A batch is stamped when it is first sent, with the next sequence of the partition's epoch,
  and keeps its stamp for as long as it may be on the leader.
- A batch that fails for good ends the epoch (its sequences can be neither reused nor
  skipped). Nothing is stamped until no request of the partition is in flight and every
  batch that may have been written is resolved; then the epoch is bumped locally (a new
  producer id from the controller once the epoch would pass 32767, as Kafka does), and the
  batches still waiting are stamped from sequence 0 under it.
- At most five batches are sent from the oldest one whose outcome is unknown on (in flight,
  or with no clear answer yet): the leader remembers its last five batches per producer, so
  a resend of any batch that may have been written is still recognised there. (Counting
  unacknowledged batches is not enough: answers can arrive out of order, and batches
  acknowledged after an unanswered one were still written after it.)
- A batch whose attempt ended with no clear answer (a request-level error, a lost answer, a
  timeout) may have been written. It is resent alone, under its old stamp, with nothing else
  of the partition in flight; the leader answers it as a duplicate, or refuses it with
  OutOfOrderSequence, which proves it is not written (by the rule above it would be among
  the producer's last five batches). Only when its delivery timeout passes (or the leader
  refuses the resend for another reason that no resend can change) does it fail, saying it
  may or may not have been written.
- OutOfOrderSequence proves a batch is not written. It is resent as it is while a batch
  stamped before it in its epoch is still unresolved (in flight or waiting to be resent: it
  may fill the gap); otherwise the epoch ends and the batch is stamped again under the next.
- A batch of several records the leader refuses as too large is split into halves that
  take over its sequences (Kafka splits such batches too); only a record too large on its own
  fails.
- Until a batch of the epoch is acknowledged the leader may not know the producer, and a
  leader that does not know a producer accepts any sequence (Kafka's broker rule since
  KIP-360). So one batch goes at a time until then: a later batch cannot be written ahead of
  a first batch that the leader refused or that is resent (Kafka's client pipelines here and
  can reorder).
"""

from __future__ import annotations

import enum
import logging
from typing import Iterable

from rafka.errors import IllegalState, OutOfOrderSequence, RafkaError, RecordTooLarge
from rafka.storage import record_batch as rb
from rafka.storage.producer_state import BATCHES_KEPT

log = logging.getLogger(__name__)

MAX_EPOCH = 32767  # the epoch is an int16 in the batch header


class EpochState(enum.Enum):
    OPEN = "open"
    """Does: stamps batches under (producer id, epoch). Moves to ENDING when a batch fails
    for good or a sequence gap shows."""
    ENDING = "ending"
    """Does: stamps nothing; only batches that may have been written are sent, under their
    old stamps. Moves to OPEN (the bump) once nothing is in flight and none is unresolved."""


_PREVIOUS = {EpochState.OPEN: {EpochState.ENDING}, EpochState.ENDING: {EpochState.OPEN}}


class Verdict(enum.Enum):
    """What becomes of a batch whose attempt failed."""

    RESEND = "send it again under the same stamp"
    RESTAMP = "not written: send it again under the next epoch's stamp"
    SPLIT = "refused as too large: send its two halves in its place"
    FAIL = "failed for good"


class SendMode(enum.Enum):
    """What the sender may take from the partition's ready queue now."""

    NOTHING = "send nothing"
    RESOLVE = "send the chosen batch alone (nothing else is in flight)"
    PROBE = "send the first ready batch alone, once nothing else is in flight"
    PIPELINE = "send ready batches in order, several requests in flight"


class PartitionIdempotence:
    """The stamps of one partition's batches. Batches are ProducerBatch objects (or any
    object with ``order``, ``count``, ``producer_id``, ``producer_epoch``, ``sequence``,
    ``maybe_written`` and ``encoded``); this class writes their stamps and ``maybe_written``.

    ``in_flight``: batches sent and not answered. ``stamped``: batches holding a stamp of the
    current epoch and not done (in flight, or waiting to be resent). ``window``: the batches
    sent in this epoch, oldest first, from the oldest whose outcome is unknown (in flight,
    or may have been written); at most BATCHES_KEPT. Not thread-safe."""

    def __init__(self, producer_id: int, epoch: int, name: str = "") -> None:
        self.name = name  # "topic-partition", for the log
        self.producer_id = producer_id
        self.epoch = epoch
        self.state = EpochState.OPEN
        self.next_sequence = 0
        # A batch of this epoch was acknowledged, so the leader checks its sequences.
        self.confirmed = False
        self.in_flight: set = set()
        self.stamped: set = set()
        self.window: dict = {}  # an ordered set: batch -> None, in order of first send

    # -- sending -------------------------------------------------------------------------------

    def next_send(self) -> tuple[SendMode, object | None]:
        """What may be sent now; with RESOLVE, the batch to resend alone."""
        if any(b.maybe_written for b in self.in_flight):
            return SendMode.NOTHING, None  # resolving: nothing else until it answers
        waiting = [b for b in self.stamped if b not in self.in_flight]
        if any(b.maybe_written for b in waiting):
            if self.in_flight:
                return SendMode.NOTHING, None
            if self.state is EpochState.ENDING:
                waiting = [b for b in waiting if b.maybe_written]
            # A batch that may have been written keeps its place in the window, so one of
            # them always fits; should none, waiting for answers beats failing the thread.
            chosen = min(filter(self.may_send, waiting), key=_order, default=None)
            return (SendMode.NOTHING, None) if chosen is None else (SendMode.RESOLVE, chosen)
        if self.state is EpochState.ENDING:
            return SendMode.NOTHING, None
        if not self.confirmed:
            return (SendMode.NOTHING, None) if self.in_flight else (SendMode.PROBE, None)
        return SendMode.PIPELINE, None

    def stamp(self, batch) -> None:
        """Give ``batch`` the next sequences of the epoch (it is about to be sent first)."""
        if self.state is not EpochState.OPEN:
            raise IllegalState(f"{self.name}: epoch {self.epoch} is ending; nothing is stamped")
        batch.producer_id, batch.producer_epoch = self.producer_id, self.epoch
        batch.sequence = self.next_sequence
        batch.encoded = None
        self.next_sequence = rb.increment_sequence(self.next_sequence, batch.count)
        self.stamped.add(batch)

    def may_send(self, batch) -> bool:
        """Whether sending ``batch`` keeps the window within BATCHES_KEPT."""
        return batch in self.window or len(self.window) < BATCHES_KEPT

    def sent(self, batch) -> None:
        if not self.may_send(batch):
            raise IllegalState(
                f"{self.name}: {len(self.window)} batches sent since the oldest unanswered "
                f"one; the leader would not recognise a resend of it after another"
            )
        self.in_flight.add(batch)
        self.window.setdefault(batch)

    # -- answers -------------------------------------------------------------------------------

    def acknowledged(self, batch) -> None:
        """The leader holds ``batch`` (written now, or a duplicate of an earlier attempt)."""
        self.in_flight.discard(batch)
        self.stamped.discard(batch)
        if (batch.producer_id, batch.producer_epoch) == (self.producer_id, self.epoch):
            self.confirmed = True
        self._trim_window()

    def failed(
        self, batch, error: BaseException, *, maybe_written: bool, out_of_time: bool
    ) -> Verdict:
        """An attempt of ``batch`` failed with ``error``. ``maybe_written``: the attempt
        ended with no clear answer (otherwise the leader's append refused it, or it never
        left the client). ``out_of_time``: the batch may not be retried any more (delivery
        timeout, retries spent, producer closed)."""
        self.in_flight.discard(batch)
        if maybe_written:
            batch.maybe_written = True
        elif isinstance(error, OutOfOrderSequence):
            batch.maybe_written = False  # see the module docstring: a proof it is not written
        verdict = self._verdict(batch, error, maybe_written, out_of_time)
        self._trim_window()
        return verdict

    def _verdict(
        self, batch, error: BaseException, maybe_written: bool, out_of_time: bool
    ) -> Verdict:
        if batch.maybe_written:
            if out_of_time or not (maybe_written or _retriable(error)):
                return self._fail(batch)
            return Verdict.RESEND
        if out_of_time:
            return self._fail(batch)
        if isinstance(error, RecordTooLarge) and batch.count > 1:
            return Verdict.SPLIT
        if isinstance(error, OutOfOrderSequence):
            if self.state is EpochState.OPEN and self._stamped_before(batch):
                return Verdict.RESEND
            self._end_epoch(f"the leader found a sequence gap before {_describe(batch)}")
            return self._unstamp(batch)
        if not _retriable(error):
            return self._fail(batch)
        if self.state is EpochState.OPEN:
            return Verdict.RESEND
        return self._unstamp(batch)

    def split(self, batch, halves: Iterable) -> None:
        """``halves`` (in order) replace ``batch``, which the leader refused as too large:
        they take over its sequences, or wait for the next epoch if this one is ending."""
        held = batch in self.stamped
        self.stamped.discard(batch)
        sequence = batch.sequence
        for half in halves:
            if held and self.state is EpochState.OPEN:
                half.producer_id, half.producer_epoch = batch.producer_id, batch.producer_epoch
                half.sequence = sequence
                sequence = rb.increment_sequence(sequence, half.count)
                self.stamped.add(half)

    # -- the bump ------------------------------------------------------------------------------

    @property
    def bump_due(self) -> bool:
        """The epoch has ended and nothing of it may still be written: nothing in flight,
        and no batch that may have been written waits to be resolved."""
        return (
            self.state is EpochState.ENDING
            and not self.in_flight
            and not any(b.maybe_written for b in self.stamped)
        )

    @property
    def needs_producer_id(self) -> bool:
        """The bump needs a new producer id: the epoch cannot grow past MAX_EPOCH."""
        return self.epoch >= MAX_EPOCH

    def bump(self, new_producer: tuple[int, int] | None = None) -> None:
        """Start the next epoch at sequence 0 (or ``new_producer``'s (id, epoch) when
        ``needs_producer_id``); batches still waiting give up their stamps."""
        if not self.bump_due:
            raise IllegalState(
                f"{self.name}: epoch {self.epoch} cannot be bumped now ({self.state.value}, "
                f"{len(self.in_flight)} in flight); wait until bump_due"
            )
        if self.needs_producer_id:
            if new_producer is None:
                raise IllegalState(
                    f"{self.name}: epoch {MAX_EPOCH} is the last one; bump with a new "
                    "producer id from the controller"
                )
            self.producer_id, self.epoch = new_producer
        else:
            self.epoch += 1
        for batch in list(self.stamped):
            self._unstamp(batch)
        self.window.clear()
        self.next_sequence = 0
        self.confirmed = False
        self._move(EpochState.OPEN)
        log.info("%s: now producer %d epoch %d", self.name, self.producer_id, self.epoch)

    # -- internals -----------------------------------------------------------------------------

    def _fail(self, batch) -> Verdict:
        if batch in self.stamped:
            self.stamped.discard(batch)
            self._end_epoch(f"{_describe(batch)} failed for good")
        return Verdict.FAIL

    def _unstamp(self, batch) -> Verdict:
        self.stamped.discard(batch)
        batch.producer_id, batch.producer_epoch = rb.NO_PRODUCER_ID, rb.NO_PRODUCER_EPOCH
        batch.sequence = rb.NO_SEQUENCE
        batch.encoded = None
        return Verdict.RESTAMP

    def _trim_window(self) -> None:
        """Drop batches from the front of the window while their outcome is known."""
        for batch in list(self.window):
            if batch in self.in_flight or (batch.maybe_written and batch in self.stamped):
                return
            del self.window[batch]

    def _stamped_before(self, batch) -> bool:
        return any(b.order < batch.order for b in self.stamped if b is not batch)

    def _end_epoch(self, reason: str) -> None:
        if self.state is EpochState.OPEN:
            log.info("%s: epoch %d of producer %d ends: %s",
                     self.name, self.epoch, self.producer_id, reason)  # fmt: skip
            self._move(EpochState.ENDING)

    def _move(self, to: EpochState) -> None:
        if self.state not in _PREVIOUS[to]:
            raise IllegalState(f"{self.name}: no move from {self.state.value} to {to.value}")
        self.state = to


def _order(batch) -> tuple:
    return batch.order


def _retriable(error: BaseException) -> bool:
    return isinstance(error, RafkaError) and error.retriable


def _describe(batch) -> str:
    return f"the batch at sequence {batch.sequence} ({batch.count} records)"
