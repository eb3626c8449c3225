"""What one replica keeps on disk in the simulation: its log of records, how much of it is
flushed, its leader-epoch cache and high-watermark checkpoint; and the producer state a
replica rebuilds from that log with the real ``ProducerStateManager``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from rafka.storage import record_batch as rb
from rafka.storage.leader_epoch import EpochEntry, LeaderEpochCache
from rafka.storage.producer_state import ProducerStateManager

PRODUCER_ID = 7  # one idempotent producer writes every partition
#: Producer state is never snapshotted here (nor expired within a run).
PRODUCER_EXPIRATION_MS = 10**12


class Entry(NamedTuple):
    """One record at one offset: the leader epoch it was written in, the record's id, and the
    batch it came in (producer epoch, base sequence, records in the batch, its index)."""

    epoch: int
    rid: int
    producer_epoch: int
    base_sequence: int
    count: int
    index: int


class BatchHeader(NamedTuple):
    """The fields of ``rafka.storage.record_batch.BatchHeader`` that the producer state
    reads, for an idempotent (not transactional) data batch."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    count: int

    has_producer_id = True
    is_control = False
    is_transactional = False

    @property
    def last_sequence(self) -> int:
        return rb.increment_sequence(self.base_sequence, self.count - 1)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1

    @property
    def max_timestamp(self) -> int:
        return 0


def header_of(log: list[Entry], last_offset: int) -> BatchHeader:
    """The header of the batch whose last record is at ``last_offset``."""
    e = log[last_offset]
    return BatchHeader(PRODUCER_ID, e.producer_epoch, e.base_sequence, last_offset - e.index,
                       e.count)  # fmt: skip


def producer_state_of(log: list[Entry]) -> ProducerStateManager:
    """Producer state rebuilt by replaying the log's whole batches, as ``Log`` does on load
    and after a truncation (with no snapshot to start from)."""
    state = ProducerStateManager("<memory>", PRODUCER_EXPIRATION_MS)
    for offset, e in enumerate(log):
        if e.index == e.count - 1:
            state.update(header_of(log, offset))
    return state


class MemoryEpochCache(LeaderEpochCache):
    """The real leader-epoch cache, written nowhere: "on disk" here means in ``Disk``."""

    def __init__(self) -> None:  # nothing to load
        self.path = "<memory>"
        self.entries = []

    def _persist(self) -> None:
        pass


class IgnoringEpochCache(MemoryEpochCache):
    """The cache as it was before bug G was fixed (rule MONOTONIC_EPOCH_CACHE off): an epoch
    not above the latest was ignored instead of replacing the entries it contradicts."""

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))


POWER = "power"  # removed by a power failure before it was flushed
TRUNCATED = "truncated"  # removed by a truncation (the follower diverged from its leader)


@dataclass
class Disk:
    """What survives a crash of one replica: the log (an ``Entry`` per offset), how much of
    it is flushed, the epoch cache (persisted on every change, like its checkpoint file) and
    the last checkpointed high watermark. With ``flush_every_append`` every write is flushed
    at once. The checker's bookkeeping: ``agree``, the length of the log's prefix known to
    equal the committed log, and ``gone``, how each (offset, entry) this log ever held and no
    longer holds left it the last time (POWER or TRUNCATED)."""

    log: list[Entry] = field(default_factory=list)
    flushed: int = 0
    cache: MemoryEpochCache = field(default_factory=MemoryEpochCache)
    hw_checkpoint: int = 0
    agree: int = 0
    gone: dict[tuple[int, Entry], str] = field(default_factory=dict)
    flush_every_append: bool = False

    def append(self, entry: Entry) -> None:
        self.cache.assign(entry.epoch, len(self.log))
        self.log.append(entry)
        if self.flush_every_append:
            self.flushed = len(self.log)

    def holds(self, offset: int, entry: Entry) -> bool:
        return offset < len(self.log) and self.log[offset] == entry

    def received(self, offset: int, entry: Entry) -> bool:
        """Holds it, or held it until a power failure took it (acks=all counts it)."""
        return self.holds(offset, entry) or self.gone.get((offset, entry)) == POWER

    def truncate(self, end: int, how: str = TRUNCATED) -> None:
        """``Log.truncate_to`` and then, as the follower always does, the epoch cache (it
        forgets epochs that start at ``end`` though nothing was written in them)."""
        if end < len(self.log):
            for offset in range(end, len(self.log)):
                self.gone[offset, self.log[offset]] = how
            del self.log[end:]
            self.flushed = min(self.flushed, end)
            self.agree = min(self.agree, end)
        self.cache.truncate_from_end(end)

    def lose_unflushed(self) -> None:
        """A power failure: the unflushed tail is gone."""
        self.truncate(self.flushed, POWER)
