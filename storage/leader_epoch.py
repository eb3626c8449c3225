"""Leader-epoch cache: the start offset of every leader epoch in a partition's log.

File ``leader-epoch-checkpoint`` (text, Kafka's layout):

    0                      version
    N                      number of entries
    <epoch> <start offset> N lines, epochs and start offsets strictly increasing

Used for KIP-101/279 truncation: a follower asks the leader for the end offset of its last
epoch and truncates to it. The checkpoint is rewritten atomically on every change; after an
unclean shutdown the log re-assigns epochs from the batches it recovers and drops entries past
its end. A checkpoint that is missing or malformed (unknown version, wrong count, entries not
strictly increasing) leaves ``needs_rebuild`` set, and the log rebuilds the cache from its
batch headers (each batch carries the epoch of the leader that wrote it). Not thread-safe: the
owning Log serializes calls.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Iterable, NamedTuple

from rafka.storage.checkpoint import read_text, write_atomically

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries, persisted to ``path`` on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        loaded = self._load()
        # True when the checkpoint could not be trusted: the owner must call ``rebuild``.
        self.needs_rebuild = loaded is None
        self.entries: list[EpochEntry] = loaded or []

    def _load(self) -> list[EpochEntry] | None:
        """The checkpointed entries, or None when the file is missing or malformed."""
        try:
            text = read_text(self.path)
        except (UnicodeDecodeError, ValueError):
            text = ""  # not even text: malformed
        if text is None:
            return None
        try:
            entries = _parse(text)
        except ValueError as e:
            log.warning("%s is malformed (%s); rebuilding it from the log", self.path, e)
            return None
        return entries

    def _persist(self) -> None:
        body = "".join(f"{e.epoch} {e.start_offset}\n" for e in self.entries)
        write_atomically(self.path, f"{CHECKPOINT_VERSION}\n{len(self.entries)}\n{body}".encode())

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``. Repeating the latest epoch is a
        no-op. Otherwise, as Kafka's cache does, trailing entries that would break the
        order (an epoch as new or newer, or starting at or after ``start_offset``) are
        dropped first: they were recorded for records this log does not hold, such as an
        epoch recorded at an election and never written to."""
        if self._assign_in_memory(epoch, start_offset):
            self._persist()

    def _assign_in_memory(self, epoch: int, start_offset: int) -> bool:
        """``assign`` without the write; True when the entries changed."""
        if epoch < 0:
            return False
        if self.entries and epoch == self.latest_epoch and (
            start_offset >= self.entries[-1].start_offset
        ):
            return False
        while self.entries and (
            self.entries[-1].epoch >= epoch or self.entries[-1].start_offset >= start_offset
        ):
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        return True

    def rebuild(self, batch_epochs: Iterable[tuple[int, int]]) -> None:
        """Replace every entry with those implied by (partition leader epoch, base offset) of
        each batch of the log, in offset order, and write the checkpoint once."""
        self.entries = []
        for epoch, base_offset in batch_epochs:
            self._assign_in_memory(epoch, base_offset)
        if self.entries or os.path.exists(self.path):  # a new, empty log writes nothing yet
            self._persist()
        self.needs_rebuild = False

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


def _parse(text: str) -> list[EpochEntry]:
    """Entries of a checkpoint's text; ValueError says what is wrong with it."""
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"expected version {CHECKPOINT_VERSION} on the first line")
    count = int(lines[1])
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise ValueError(f"declares {count} entries but holds {len(body)}")
    entries = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"entry {line!r} is not '<epoch> <start offset>'")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"entry {line!r} is negative")
        if entries and (
            entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset
        ):
            raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append(entry)
    return entries
