"""The idempotent producer, after ``rafka.clients.producer`` with Kafka's KIP-360 rules, one
partition's worth per ``PartitionProducer``; acks=all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rafka.cluster.metadata import NO_LEADER
from rafka.storage import record_batch as rb

if TYPE_CHECKING:
    from tests.unit.cluster.sim.runner import Simulation

#: Errors of the whole produce call, as ``PartitionReplica.produce`` raises them: the client
#: cannot tell whether the batch was written (a leader that steps down while waiting for
#: acks=all answers NotLeaderOrFollower after the write), so it counts it as maybe written.
#: Per-batch errors (OutOfOrderSequence, InvalidProducerEpoch, RecordTooLarge) mean refused.
REQUEST_LEVEL = frozenset({
    "NotLeaderOrFollower", "NotEnoughReplicas", "NotEnoughReplicasAfterAppend", "ActorDied",
})  # fmt: skip


class Batch:
    """A few records under one (producer epoch, base sequence). ``maybe_written``: some
    attempt's outcome is unknown (its answer was lost, or it was written and then failed
    NotEnoughReplicasAfterAppend), so its sequence numbers may be in a log."""

    __slots__ = ("rids", "sequence", "epoch", "created", "too_large", "maybe_written", "req")

    def __init__(self, rids: tuple[int, ...], created: int, too_large: bool) -> None:
        self.rids = rids
        self.sequence = rb.NO_SEQUENCE
        self.epoch = 0
        self.created = created
        self.too_large = too_large
        self.maybe_written = False
        self.req: int | None = None  # the attempt in flight

    def __repr__(self) -> str:
        return f"batch(e{self.epoch} s{self.sequence} {list(self.rids)})"


class PartitionProducer:
    """One partition's sequence numbers and batches. Invariants: ``waiting`` and
    ``in_flight`` together hold every unfinished batch, numbered consecutively in the current
    epoch; at most ``max_in_flight`` are in flight; a batch is resent under the same epoch
    and sequence until its outcome is known (a resend of a written batch is answered as a
    duplicate), and fails after ``delivery_timeout_ms``. A batch that fails for good stops
    sending until nothing is in flight; then the epoch is bumped and the waiting batches
    that were certainly not written are renumbered from 0, the others failed (a resend
    under the new epoch could write them twice)."""

    def __init__(self, sim: "Simulation", p: int) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.p = p
        self.epoch = 0
        self.next_sequence = 0
        self.waiting: list[Batch] = []  # in sequence order
        self.in_flight: dict[int, Batch] = {}  # request id -> batch
        self.bump = False

    def send(self, rids: tuple[int, ...]) -> None:
        too_large = self.sim.rng.random() < self.cfg.too_large
        batch = Batch(rids, self.sim.scheduler.now, too_large)
        batch.epoch, batch.sequence = self.epoch, self.next_sequence
        self.next_sequence = rb.increment_sequence(self.next_sequence, len(rids))
        self.waiting.append(batch)
        self.pump()

    def pump(self) -> None:
        if self.bump:
            if not self.in_flight:
                self._bump_epoch()
            else:
                return
        leader = self.sim.controller.states[self.p].leader  # the client's metadata
        if leader == NO_LEADER:
            return
        while self.waiting and len(self.in_flight) < self.cfg.max_in_flight:
            batch = self.waiting.pop(0)
            batch.req = self.sim.next_id()
            self.in_flight[batch.req] = batch
            self.sim.network.send(leader, "produce", self.p, batch.epoch, batch.sequence,
                                  batch.rids, batch.too_large, batch.req)  # fmt: skip
            self.sim.scheduler.after(self.cfg.request_timeout_ms, self.request_timeout,
                                     batch.req)  # fmt: skip

    def request_timeout(self, req: int) -> None:
        batch = self.in_flight.pop(req, None)
        if batch is None:
            return
        self.sim.stats["produce_timeouts"] += 1
        batch.maybe_written = True
        self._retry_or_fail(batch, "RequestTimedOut")

    def on_produce_answer(self, req: int, error: str | None, base_offset: int) -> None:
        batch = self.in_flight.pop(req, None)
        if batch is None:
            return  # an answer to an attempt given up on
        if error is None:
            self.sim.checker.on_acknowledged(self.p, base_offset, batch.rids)
            self.pump()
            return
        if error == "RecordTooLarge":
            self._fail(batch, error)
            return
        if error in REQUEST_LEVEL:
            batch.maybe_written = True
        elif error == "OutOfOrderSequence" and not self.bump and not self._earlier_pending(batch):
            # The leader lacks an earlier batch this producer believes done (KIP-360): bump
            # the epoch; this batch is renumbered then unless it may have been written.
            self.sim.stats["sequence_resets"] += 1
            self.bump = True
        elif error != "OutOfOrderSequence":
            self._fail(batch, error)  # InvalidProducerEpoch: a fenced attempt
            return
        self._retry_or_fail(batch, error)

    def _earlier_pending(self, batch: Batch) -> bool:
        return any(b.epoch == batch.epoch and b.sequence < batch.sequence
                   for b in (*self.waiting, *self.in_flight.values()))  # fmt: skip

    def _retry_or_fail(self, batch: Batch, error: str) -> None:
        if self.sim.scheduler.now - batch.created > self.cfg.delivery_timeout_ms:
            self._fail(batch, "delivery timeout after " + error)
            return
        self.waiting.append(batch)
        self.waiting.sort(key=lambda b: (b.epoch, b.sequence))
        # Resend on the next tick (retry.backoff.ms), to the leader the metadata names then.
        self.sim.scheduler.after(self.cfg.heartbeat_ms // 2, self.pump)

    def _fail(self, batch: Batch, why: str) -> None:
        self.sim.stats["produce_failed"] += 1
        self.sim.note(f"producer p{self.p}: {batch!r} fails: {why}")
        self.bump = True
        self.pump()

    def _bump_epoch(self) -> None:
        self.bump = False
        self.epoch += 1
        self.sim.stats["epoch_bumps"] += 1
        sequence = 0
        kept = []
        for batch in self.waiting:
            if batch.maybe_written:
                self.sim.stats["produce_failed"] += 1
                continue
            batch.epoch, batch.sequence = self.epoch, sequence
            sequence = rb.increment_sequence(sequence, len(batch.rids))
            kept.append(batch)
        self.waiting = kept
        self.next_sequence = sequence
        self.sim.note(f"producer p{self.p}: epoch {self.epoch}, {len(kept)} batches renumbered")


class Producers:
    """The client: one ``PartitionProducer`` per partition, at the ``CLIENT`` address."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.partitions = {p: PartitionProducer(sim, p) for p in sim.partitions}

    def send(self, p: int, rids: tuple[int, ...]) -> None:
        self.partitions[p].send(rids)

    def tick(self) -> None:
        """The sender's loop: batches waiting for a leader go out once one is named."""
        for producer in self.partitions.values():
            producer.pump()
        self.sim.scheduler.after(self.sim.cfg.heartbeat_ms, self.tick)

    def on_produce_answer(self, p: int, req: int, error: str | None, base_offset: int) -> None:
        self.partitions[p].on_produce_answer(req, error, base_offset)
