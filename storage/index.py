"""Sparse indexes of one segment: offset -> position and timestamp -> offset.

On disk (big-endian, fixed-size entries, appended):

    .index       relative_offset uint32, position uint32            8 bytes an entry
    .timeindex   timestamp int64, relative_offset uint32            12 bytes an entry

``relative_offset`` is the entry's offset minus the segment's base offset. An offset-index
entry says "the batch whose base offset is O starts at byte P". A time-index entry says "the
largest timestamp in the segment up to offset O is T, and O is the first offset where it was
seen", so every record before O has a timestamp below T.

Indexes are not checksummed: they are loaded lazily, sanity-checked against the log when
loaded, and rebuilt from the log when the check fails or after an unclean shutdown.
Not thread-safe: the owning log serializes every call.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

from rafka.storage import files

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class IndexCorrupt(Exception):
    """An index file does not match its log; the caller rebuilds it."""


class _IndexFile:
    """An append-only file of fixed-size entries mirrored in memory as two columns.

    Every change (append, truncation, reset) marks the file unsynced; ``flush`` makes all of
    them durable at once, so a rebuilt or shortened index never reaches a power loss half
    old and half new after its segment was flushed."""

    entry: struct.Struct
    first_typecode: str

    def __init__(self, path: str, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._keys: array | None = None  # loaded lazily
        self._values: array | None = None
        self._fd: int | None = None  # opened for appending on the first write
        self._unsynced = False

    # -- loading -------------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if self._keys is not None:
            return
        keys, values = array(self.first_typecode), array("I")
        data = files.read_file(self.path) or b""
        whole = len(data) - len(data) % self.entry.size
        for a, b in self.entry.iter_unpack(memoryview(data)[:whole]):
            keys.append(a)
            values.append(b)
        self._keys, self._values = keys, values
        if whole != len(data):
            # A torn last entry; dropping it keeps the index a valid (sparser) prefix.
            self._truncate_file(whole)

    def create(self) -> None:
        """Start the file empty (a new segment's index)."""
        self._keys, self._values = array(self.first_typecode), array("I")
        self._fd = files.open_for_append(self.path)

    @property
    def exists(self) -> bool:
        return files.exists(self.path)

    def _append_entry(self, a: int, b: int) -> None:
        if self._fd is None:
            self._fd = files.open_for_append(self.path)
        files.write(self._fd, self.entry.pack(a, b))
        self._unsynced = True
        self._keys.append(a)
        self._values.append(b)

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        # Called on every append: an index that was never loaded has not grown either.
        return self._keys is not None and len(self._keys) >= self.max_entries

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._keys, self._values = array(self.first_typecode), array("I")
        self._truncate_file(0)

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self._keys):
            return
        del self._keys[keep:]
        del self._values[keep:]
        self._truncate_file(keep * self.entry.size)

    def _truncate_file(self, size: int) -> None:
        if self._fd is None:
            self._fd = files.open_for_append(self.path)
        files.ftruncate(self._fd, size)
        self._unsynced = True

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
        """Give the file a new name (the caller fsyncs the directory)."""
        self.close()
        if files.exists(self.path):
            files.rename(self.path, target)
        self.path = target

    def delete(self) -> None:
        self.close()
        files.unlink(self.path)


class OffsetIndex(_IndexFile):
    """Sparse map from a batch's base offset to its byte position in the segment's log."""

    entry = _OFFSET_ENTRY
    first_typecode = "I"

    def append(self, offset: int, position: int) -> None:
        """Record that the batch with base ``offset`` starts at ``position``; offsets and
        positions must increase."""
        self._ensure_loaded()
        relative = offset - self.base_offset
        if self._keys and (relative <= self._keys[-1] or position <= self._values[-1]):
            raise ValueError(
                f"offset index entry ({offset}, {position}) does not follow "
                f"({self._keys[-1] + self.base_offset}, {self._values[-1]})"
            )
        self._append_entry(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``, or (base, 0)."""
        self._ensure_loaded()
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._keys[i] + self.base_offset, self._values[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets at or above ``offset``."""
        self._ensure_loaded()
        self._truncate_entries(bisect_right(self._keys, offset - self.base_offset - 1))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position``."""
        self._ensure_loaded()
        self._truncate_entries(bisect_right(self._values, position - 1))

    def sanity_check(self, log_size: int) -> None:
        """Raise IndexCorrupt unless offsets and positions increase and stay inside the log."""
        self._ensure_loaded()
        keys, values = self._keys, self._values
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] <= values[i - 1]:
                raise IndexCorrupt(f"{self.path}: entry {i} does not increase")
        if values and values[-1] >= log_size:
            raise IndexCorrupt(
                f"{self.path}: last entry points at byte {values[-1]}, the log has {log_size}"
            )


class TimeIndex(_IndexFile):
    """Sparse map from the segment's running maximum timestamp to the offset that set it."""

    entry = _TIME_ENTRY
    first_typecode = "q"

    def append(self, timestamp: int, offset: int) -> None:
        """Record a new running maximum; ignored unless ``timestamp`` exceeds the last entry."""
        self._ensure_loaded()
        if self._keys and timestamp <= self._keys[-1]:
            return
        self._append_entry(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which a scan finds the first record at or after ``timestamp``:
        every record before it has a smaller timestamp."""
        self._ensure_loaded()
        # The last entry whose maximum is at or below the target: every record before its
        # offset is below its maximum, so below the target; the batch at the offset may not be.
        i = bisect_right(self._keys, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self._values[i] + self.base_offset

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        self._ensure_loaded()
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1] + self.base_offset

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets at or above ``offset``."""
        self._ensure_loaded()
        keep = len(self._values)
        while keep and self._values[keep - 1] + self.base_offset >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def sanity_check(self, last_offset: int) -> None:
        self._ensure_loaded()
        keys, values = self._keys, self._values
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
                raise IndexCorrupt(f"{self.path}: entry {i} does not increase")
        if values and values[-1] + self.base_offset > last_offset:
            raise IndexCorrupt(
                f"{self.path}: last entry names offset {values[-1] + self.base_offset}, "
                f"beyond the log's last offset {last_offset}"
            )
