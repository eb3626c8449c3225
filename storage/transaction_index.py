"""The aborted-transaction index of one segment (Kafka's ``.txnindex``).

File ``NNNNNNNNNNNNNNNNNNNN.txnindex`` beside the segment's ``.log`` (the same 20-digit base
offset), created when the first ABORT marker that ends a transaction is written into the
segment: most segments never abort anything and have no file. One entry per aborted
transaction whose marker the segment holds, in marker order, 36 bytes each, big-endian:

    producer_id         int64
    first_offset        int64   offset of the transaction's first batch in this partition
    last_offset         int64   offset of its ABORT marker (a record of this segment)
    last_stable_offset  int64   the partition's last stable offset right after the abort,
                                from its open transactions alone (no high watermark)
    crc                 uint32  CRC32C of the 32 bytes before it

Invariants: ``first_offset <= last_offset``; ``last_offset`` is at or above the segment's
base and strictly increases from entry to entry; ``last_stable_offset`` is at most the first
offset of every transaction still open at the abort. That last one lets a lookup stop early:
once an entry's last stable offset reaches the end of the range asked about, no transaction
aborted later can have begun inside the range (it would have been open, holding that
offset below its first offset).

Crash: entries are written with their marker and synced with the segment (``Segment.flush``).
A torn or zero-filled tail fails the CRC and is cut when the file is loaded; entries that no
longer match the log (its tail lost, or truncated) are replaced on open and after truncation
by the log's replay of its batches (``Log._rebuild_producer_state``), so the index lists
exactly the aborted transactions whose markers the log holds. Not thread-safe: the owning log
serializes every call.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import NamedTuple

from rafka.storage import files
from rafka.storage import record_batch as rb

TXN_INDEX_SUFFIX = ".txnindex"
_FIELDS = struct.Struct(">qqqq")
_CRC = struct.Struct(">I")
ENTRY_SIZE = _FIELDS.size + _CRC.size  # 36


class AbortedTxn(NamedTuple):
    """One entry; the fields are described in the module docstring."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entry(txn: AbortedTxn) -> bytes:
    fields = _FIELDS.pack(*txn)
    return fields + _CRC.pack(rb.crc32c(fields))


def decode_entries(data, base_offset: int) -> tuple[list[AbortedTxn], int]:
    """The valid prefix of a file's bytes: its entries and their length in bytes. An entry
    that is torn, fails its CRC or breaks an invariant ends it."""
    entries: list[AbortedTxn] = []
    view = memoryview(data)
    valid = 0
    previous = base_offset - 1
    while valid + ENTRY_SIZE <= len(view):
        (crc,) = _CRC.unpack_from(view, valid + _FIELDS.size)
        if rb.crc32c(view[valid : valid + _FIELDS.size]) != crc:
            break
        txn = AbortedTxn(*_FIELDS.unpack_from(view, valid))
        if txn.last_offset <= previous or txn.first_offset > txn.last_offset:
            break
        entries.append(txn)
        previous = txn.last_offset
        valid += ENTRY_SIZE
    return entries, valid


class TransactionIndex:
    """The ``.txnindex`` file at ``path`` of the segment at ``base_offset``, mirrored in
    memory once read. Missing until the first entry is appended."""

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # read lazily
        self._last_offsets: list[int] = []
        self._exists = False  # known once loaded
        self._fd: int | None = None
        self._unsynced = False

    # -- reading -------------------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            data = files.read_file(self.path)
            self._exists = data is not None
            self._entries, valid = decode_entries(data or b"", self.base_offset)
            self._last_offsets = [t.last_offset for t in self._entries]
            if data is not None and valid != len(data):
                # A torn or damaged tail (only ever unsynced entries): keep the valid prefix.
                self._truncate_file(valid)
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order (a copy)."""
        return list(self._load())

    def collect(self, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        """Entries of transactions that overlap [start, end): ``last_offset >= start`` and
        ``first_offset < end``; and whether the search is complete, so later segments need
        not be read (an entry's last stable offset reached ``end``)."""
        entries = self._load()
        found = []
        for txn in entries[bisect_left(self._last_offsets, start) :]:
            if txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                return found, True
        return found, False

    # -- changing ------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> bool:
        """Add the entry of a marker written after every indexed one. Returns True when this
        created the file: its directory entry is durable only once the directory is synced."""
        entries = self._load()
        if txn.last_offset < self.base_offset or (
            entries and txn.last_offset <= entries[-1].last_offset
        ):
            raise ValueError(f"{self.path}: entry {txn} does not follow {entries[-1:]}")
        created = not self._exists
        self._write(encode_entry(txn))
        entries.append(txn)
        self._last_offsets.append(txn.last_offset)
        return created

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        self._load()
        self._keep(bisect_left(self._last_offsets, offset))

    def replace_from(self, offset: int, txns: list[AbortedTxn]) -> bool:
        """Make ``txns`` (in marker order, each marker at or after ``offset``) the entries
        whose markers are at or after ``offset``. The file is written only if they differ
        from those it holds. Returns True when this created the file."""
        entries = self._load()
        keep = bisect_left(self._last_offsets, offset)
        if entries[keep:] == txns:
            return False
        self._keep(keep)
        created = False
        for txn in txns:
            created = self.append(txn) or created
        return created

    def _keep(self, count: int) -> None:
        if count >= len(self._entries):
            return
        del self._entries[count:]
        del self._last_offsets[count:]
        self._truncate_file(count * ENTRY_SIZE)

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = files.open_for_append(self.path)
            self._exists = True
        files.write(self._fd, data)
        self._unsynced = True

    def _truncate_file(self, size: int) -> None:
        if self._fd is None:
            self._fd = files.open_for_append(self.path)
        files.ftruncate(self._fd, size)
        self._unsynced = True

    # -- files ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """fdatasync every change made since the last flush."""
        if self._unsynced:
            files.fdatasync(self._fd)
            self._unsynced = False

    def close(self) -> None:
        if self._fd is not None:
            files.close(self._fd)
            self._fd = None

    def rename(self, target: str) -> None:
        """Give the file a new name, if it exists (the caller fsyncs the directory)."""
        self.close()
        if files.exists(self.path):
            files.rename(self.path, target)
        else:
            # Renamed already (a swap finished after a crash): what the target holds counts.
            self._entries = None
        self.path = target

    def delete(self) -> None:
        self.close()
        files.unlink(self.path)
        self._entries, self._last_offsets, self._exists = [], [], False
