"""Leader-epoch cache: the start offset of every leader epoch in a partition's log.

File ``leader-epoch-checkpoint`` (text, Kafka's layout):

    0                      version
    N                      number of entries
    <epoch> <start offset> N lines, epochs and start offsets strictly increasing

Used for KIP-101/279 truncation: a follower asks the leader for the end offset of its last
epoch and truncates to it. The checkpoint is rewritten atomically on every change; after an
unclean shutdown the log re-assigns epochs from the batches it recovers and drops entries past
its end. Not thread-safe: the owning Log serializes calls.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import NamedTuple

from rafka.storage.checkpoint import read_text, write_atomically

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries, persisted to ``path`` on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[EpochEntry] = self._load()

    def _load(self) -> list[EpochEntry]:
        text = read_text(self.path)
        if not text:
            return []
        lines = text.split("\n")
        try:
            count = int(lines[1])
            entries = [EpochEntry(*map(int, line.split())) for line in lines[2 : 2 + count]]
        except (ValueError, IndexError, TypeError):
            log.warning("%s is malformed; rebuilding it from the log", self.path)
            return []
        if len(entries) != count:
            return []
        return entries

    def _persist(self) -> None:
        body = "".join(f"{e.epoch} {e.start_offset}\n" for e in self.entries)
        write_atomically(self.path, f"0\n{len(self.entries)}\n{body}".encode())

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``. Repeating the latest epoch is a
        no-op. Otherwise, as Kafka's cache does, trailing entries that would break the
        order (an epoch as new or newer, or starting at or after ``start_offset``) are
        dropped first: they were recorded for records this log does not hold, such as an
        epoch recorded at an election and never written to."""
        if epoch < 0:
            return
        if self.entries and epoch == self.latest_epoch and (
            start_offset >= self.entries[-1].start_offset
        ):
            return
        while self.entries and (
            self.entries[-1].epoch >= epoch or self.entries[-1].start_offset >= start_offset
        ):
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._persist()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower whose last epoch is ``requested_epoch``: the
        largest epoch at or below it and the offset where the next epoch starts (or the log end
        offset). (UNDEFINED_EPOCH, UNDEFINED_OFFSET) when no answer exists."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch >= self.latest_epoch:
            if requested_epoch > self.latest_epoch:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            return self.latest_epoch, log_end_offset
        epochs = [e.epoch for e in self.entries]
        higher = bisect_right(epochs, requested_epoch)  # first entry with a larger epoch
        if higher == 0:
            # Older than anything we know: the follower keeps nothing past our first epoch.
            return requested_epoch, self.entries[0].start_offset
        return self.entries[higher - 1].epoch, self.entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (the log was truncated there)."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].start_offset >= end_offset:
            keep -= 1
        if keep != len(self.entries):
            del self.entries[keep:]
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before ``start_offset`` (the log start moved there)."""
        starts = [e.start_offset for e in self.entries]
        floor = bisect_right(starts, start_offset) - 1
        if floor < 0:
            return
        if floor == 0 and self.entries[0].start_offset == start_offset:
            return
        kept = self.entries[floor:]
        kept[0] = EpochEntry(kept[0].epoch, start_offset)
        self.entries = kept
        self._persist()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._persist()
