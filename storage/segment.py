"""One segment of a partition log: a ``.log`` file of batches and its two sparse indexes.

Files (``NNNNNNNNNNNNNNNNNNNN`` is the base offset, 20 digits):

    NNNN.log        batches back to back, each as record_batch describes
    NNNN.index      offset -> position, an entry every ``index.interval.bytes``
    NNNN.timeindex  running max timestamp -> offset, alongside each offset-index entry
    NNNN.txnindex   the transactions aborted by markers in this segment (36 bytes each, see
                    transaction_index.py); present only once the segment holds such a marker

Only the log's last segment (the active one) is appended to. Not thread-safe: the owning
Log serializes every call. After a crash the tail may be torn; ``recover()`` re-validates
every batch, truncates at the first bad one and rebuilds both sparse indexes. The
transaction index needs producer state to rebuild, so the log does that (its entries are
deleted, renamed, flushed and truncated with the segment here).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Callable, Iterator

from rafka.errors import CorruptRecord, KafkaStorageError
from rafka.storage import files
from rafka.storage import record_batch as rb
from rafka.storage.index import IndexCorrupt, OffsetIndex, TimeIndex
from rafka.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"  # a compaction output being written
SWAP_SUFFIX = ".swap"  # a finished compaction output waiting to replace its inputs

_SCAN_CHUNK = 8 << 20  # bytes read at a time when walking a segment


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass
class RecoveryResult:
    """What ``Segment.recover`` found."""

    valid_bytes: int
    truncated_bytes: int
    batches: int
    reason: str | None  # why the tail was cut, None when nothing was


class Segment:
    """A ``.log`` file plus its indexes. ``next_offset`` is one past the last offset stored."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        max_index_entries: int,
        suffix: str = "",
        new: bool = False,
    ) -> None:
        """Open the segment at ``base_offset`` (its files carrying ``suffix``); with ``new``,
        start it empty, discarding any file already at its names."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._stem = os.path.join(directory, segment_name(base_offset))
        self.suffix = suffix
        self.log_path = self._stem + LOG_SUFFIX + suffix
        self.offset_index = OffsetIndex(
            self._stem + INDEX_SUFFIX + suffix, base_offset, max_index_entries
        )
        self.time_index = TimeIndex(
            self._stem + TIME_INDEX_SUFFIX + suffix, base_offset, max_index_entries
        )
        self.txn_index = TransactionIndex(self._stem + TXN_INDEX_SUFFIX + suffix, base_offset)
        try:
            if new:
                # Files left at these names by a deletion that a crash cut short must not be
                # adopted: a stale index would point into a log that no longer matches it.
                for path in (self.offset_index.path, self.time_index.path,
                             self.txn_index.path, self.log_path):  # fmt: skip
                    files.unlink(path)
            self._fd = files.open_for_append(self.log_path)
            if new:
                self.offset_index.create()
                self.time_index.create()
            self.size = files.file_size(self._fd)
        except OSError as e:
            raise _storage_error("open", self.log_path, e) from e
        self.next_offset = base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self._unflushed = False

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> RecoveryResult | None:
        """Open a segment that was sealed (rolled, or closed cleanly): trust the log, check the
        indexes against it (rebuilding them when they disagree), and find the next offset and
        max timestamp by reading only the batches after the last offset-index entry.
        Returns None when the indexes were sound, else what the rebuild found (a rebuild also
        cuts a torn tail, which the result reports)."""
        if self.size and not (self.offset_index.exists and self.time_index.exists):
            # Every segment is created with both indexes; one that is missing was lost to a
            # crash (a rename or a directory entry that never reached the disk).
            return self.rebuild_indexes()
        try:
            self.offset_index.sanity_check(self.size)
            indexed_offset, position = self.offset_index.lookup(2**63 - 1)
            entry = self.time_index.last_entry
            if entry is not None:
                # Sealing wrote the segment's largest timestamp as the last time-index entry.
                self.max_timestamp, self.offset_of_max_timestamp = entry
            last = None
            for i, (_, last) in enumerate(self.iter_headers(position)):
                if i == 0 and position and last.base_offset != indexed_offset:
                    raise IndexCorrupt(
                        f"{self.offset_index.path} maps offset {indexed_offset} to byte "
                        f"{position}, where the batch at offset {last.base_offset} starts"
                    )
                self.next_offset = last.next_offset
                self._observe_timestamp(last)
            if position and last is None:
                raise IndexCorrupt(f"{self.offset_index.path} points past the last batch")
            self.time_index.sanity_check(self.next_offset - 1)
        except (IndexCorrupt, CorruptRecord):
            return self.rebuild_indexes()
        self.first_batch_timestamp = self._read_first_batch_timestamp()
        self._bytes_since_index_entry = self.size - position
        return None

    def rebuild_indexes(self) -> RecoveryResult:
        """Rebuild both indexes by walking the (trusted) log. They are built under ``.tmp``
        names, fsynced, and renamed over the old ones (then the directory is fsynced): a crash
        part way leaves the old files, which the next open checks again, never a half-built
        index that a later open would trust."""
        final = (self.offset_index.path, self.time_index.path)
        self.offset_index.close()
        self.time_index.close()
        self.offset_index.path, self.time_index.path = (path + ".tmp" for path in final)
        result = self.recover(verify=False)
        try:
            self.offset_index.flush()
            self.time_index.flush()
            self.offset_index.rename(final[0])
            self.time_index.rename(final[1])
            files.fsync_directory(self.directory)
        except OSError as e:
            raise _storage_error("rebuild the indexes of", self.log_path, e) from e
        return result

    def recover(
        self,
        verify: bool = True,
        on_batch: Callable[[rb.BatchHeader], None] | None = None,
        contiguous: bool = False,
    ) -> RecoveryResult:
        """Walk every batch (checking CRCs when ``verify``), rebuild both indexes, and cut the
        log at the first batch that is torn or corrupt; ``on_batch`` sees each valid header.

        The base offset sits outside the CRC. Offsets never go backwards in any log, and with
        ``contiguous`` (a log that has never had a gap: see log_loader) each batch must start
        exactly where the previous one ended, so a damaged base offset is caught too.
        Returns what was found."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index_entry = 0
        file_size = self.size = files.file_size(self._fd)
        valid = 0
        batches = 0
        reason = None
        try:
            for position, header, _ in self.iter_batches(0, verify=verify):
                if header.base_offset < self.next_offset or (
                    contiguous and header.base_offset != self.next_offset
                ):
                    raise CorruptRecord(
                        f"batch at byte {position} has base offset {header.base_offset}, "
                        f"expected {'' if contiguous else 'at least '}{self.next_offset}"
                    )
                self._index_batch(position, header)
                if on_batch is not None:
                    on_batch(header)
                valid = position + header.size
                batches += 1
        except CorruptRecord as e:
            reason = f"{self.log_path}: {e}"
        truncated = file_size - valid
        if truncated:
            self._truncate_file(valid)
        self.size = valid
        self._seal_time_index()
        return RecoveryResult(valid, truncated, batches, reason)

    def _read_first_batch_timestamp(self) -> int | None:
        for _, header in self.iter_headers(0):
            return header.max_timestamp
        return None

    def _observe_timestamp(self, header: rb.BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset

    # -- appending -----------------------------------------------------------------------------

    def append(self, parts: list, headers: list[rb.BatchHeader]) -> None:
        """Append batches given as buffers whose concatenation is their bytes, in one writev;
        ``headers`` are their (already patched) headers, in order. On any error (I/O, or an
        index that cannot take an entry) the file, indexes and every field are put back as
        they were, so nothing half-written stays; an I/O error raises KafkaStorageError."""
        position = self.size
        state = self.append_state()
        try:
            for header in headers:
                self._index_batch(self.size, header)
            expected = self.size - position
            written = files.writev(self._fd, parts)
            if written < expected:  # short only when the disk fills up mid-write
                rest = b"".join(bytes(p) for p in parts)[written:]
                while rest:
                    n = files.write(self._fd, rest)
                    rest = rest[n:]
        except Exception as e:
            self.cut_back(position, headers[0].base_offset, state)
            if isinstance(e, OSError):
                raise _storage_error("append to", self.log_path, e) from e
            raise
        self._unflushed = True

    def append_state(self) -> tuple:
        """The fields an append changes besides the file and the indexes."""
        return (self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
                self.first_batch_timestamp, self._bytes_since_index_entry)  # fmt: skip

    def cut_back(self, position: int, base_offset: int, state: tuple) -> None:
        """Undo appends made since ``position`` (the file size then), whose first batch
        started at ``base_offset``; ``state`` is ``append_state()`` from then."""
        self._truncate_file(position)
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(base_offset)
        (self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
         self.first_batch_timestamp, self._bytes_since_index_entry) = state  # fmt: skip

    def _index_batch(self, position: int, header: rb.BatchHeader) -> None:
        """Account for a batch at ``position``: indexes, next offset, timestamps, size."""
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self._observe_timestamp(header)
        self.next_offset = header.next_offset
        self.size = position + header.size

    @property
    def index_is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # -- reading -------------------------------------------------------------------------------

    def read_at(self, position: int, size: int) -> bytes:
        try:
            return files.pread(self._fd, size, position)
        except OSError as e:
            raise _storage_error("read", self.log_path, e) from e

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, rb.BatchHeader]]:
        """Yield (position, header) of each batch from ``position``, reading headers only."""
        while position < self.size:
            buf = self.read_at(position, rb.HEADER_SIZE)
            if len(buf) < rb.HEADER_SIZE:
                raise CorruptRecord(f"{self.log_path}: torn header at byte {position}")
            header = rb.BatchHeader._make(rb.HEADER.unpack_from(buf))
            if header.magic != rb.MAGIC or header.batch_length < rb.HEADER_SIZE - 12:
                raise CorruptRecord(f"{self.log_path}: bad batch header at byte {position}")
            if position + header.size > self.size:
                raise CorruptRecord(f"{self.log_path}: batch at byte {position} is torn")
            yield position, header
            position += header.size

    def iter_batches(
        self, position: int = 0, verify: bool = True
    ) -> Iterator[tuple[int, rb.BatchHeader, memoryview]]:
        """Yield (position, header, batch bytes) from ``position``, reading large chunks.
        Raises CorruptRecord at the first torn or corrupt batch (after yielding the ones
        before it)."""
        check = _verified if verify else rb.read_header
        end = self.size
        while position < end:
            chunk = memoryview(self.read_at(position, min(_SCAN_CHUNK, end - position)))
            offset = 0
            while len(chunk) - offset >= rb.LENGTH_PREFIX_SIZE:
                _, length = rb.LENGTH_PREFIX.unpack_from(chunk, offset)
                if length + rb.LENGTH_PREFIX_SIZE > len(chunk) - offset:
                    break
                header = check(chunk, offset)
                yield position + offset, header, chunk[offset : offset + header.size]
                offset += header.size
            if offset == 0:
                # The batch at `position` does not fit in the chunk: larger than a chunk, or
                # torn. read_header raises with the details if it is torn.
                _, length = rb.LENGTH_PREFIX.unpack_from(chunk.tobytes().ljust(12, b"\0"))
                if length < 0 or position + length + rb.LENGTH_PREFIX_SIZE > end:
                    rb.read_header(chunk, 0)
                    raise CorruptRecord(f"{self.log_path}: torn batch at byte {position}")
                chunk = memoryview(self.read_at(position, length + rb.LENGTH_PREFIX_SIZE))
                header = check(chunk, 0)
                yield position, header, chunk
                offset = header.size
            position += offset

    def find_batch(self, offset: int) -> tuple[int, rb.BatchHeader] | None:
        """Position and header of the first batch holding ``offset`` or any later offset."""
        _, scan_from = self.offset_index.lookup(offset)
        for position, header in self.iter_headers(scan_from):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, position: int, max_bytes: int, max_offset: int | None = None) -> memoryview:
        """Whole batches from ``position``: at most ``max_bytes`` (but always the first batch,
        so a consumer makes progress), none whose base offset is at or past ``max_offset``."""
        want = max(max_bytes, rb.LENGTH_PREFIX_SIZE)  # enough to see the first batch's size
        data = memoryview(self.read_at(position, min(want, self.size - position)))
        cut = 0
        while cut + rb.LENGTH_PREFIX_SIZE <= len(data):
            base, length = rb.LENGTH_PREFIX.unpack_from(data, cut)
            if max_offset is not None and base >= max_offset:
                break
            if cut + length + rb.LENGTH_PREFIX_SIZE > len(data):
                if cut == 0:  # the first batch is bigger than max_bytes: send it whole
                    return memoryview(self.read_at(position, length + rb.LENGTH_PREFIX_SIZE))
                break
            cut += length + rb.LENGTH_PREFIX_SIZE
        return data[:cut]

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, bytes] | None:
        """The first batch whose max timestamp is at or after ``timestamp``, as (position,
        batch bytes); the caller decodes it to find the record."""
        _, scan_from = self.offset_index.lookup(self.time_index.lookup(timestamp))
        for position, header in self.iter_headers(scan_from):
            if header.max_timestamp >= timestamp:
                return position, self.read_at(position, header.size)
        return None

    # -- shrinking, flushing, closing ----------------------------------------------------------

    def truncate_to(self, offset: int) -> int | None:
        """Remove every batch whose last offset is at or above ``offset`` (a batch holding
        ``offset`` goes whole). Returns the base offset of the first batch removed (below
        ``offset`` when a batch spanned it), or None when nothing was."""
        found = self.find_batch(offset)
        if found is None:
            return None
        position, header = found
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._truncate_file(position)
        self.next_offset = self.base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        entry = self.time_index.last_entry
        if entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = entry
        for _, h in self.iter_headers(self.offset_index.lookup(2**63 - 1)[1]):
            self._observe_timestamp(h)
            self.next_offset = h.next_offset
        self.first_batch_timestamp = self._read_first_batch_timestamp()
        self._bytes_since_index_entry = self.size - self.offset_index.lookup(2**63 - 1)[1]
        return header.base_offset

    def _truncate_file(self, size: int) -> None:
        try:
            files.ftruncate(self._fd, size)
        except OSError as e:
            raise _storage_error("truncate", self.log_path, e) from e
        self.size = size
        # A shorter file is a change the next flush must sync like an append: otherwise a
        # power loss brings back records truncated as divergent.
        self._unflushed = True

    def seal(self) -> None:
        """Called when this segment stops being active: record the final max timestamp in the
        time index (so a clean reopen knows it without a scan) and flush everything."""
        self._seal_time_index()
        self.flush()

    def _seal_time_index(self) -> None:
        if self.max_timestamp != rb.NO_TIMESTAMP:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    def flush(self, force: bool = False) -> None:
        """fdatasync the log and its indexes (the log only if it was written since the last
        flush, unless ``force``: data recovered after a crash may still be only in the cache)."""
        try:
            if self._unflushed or force:
                files.fdatasync(self._fd)
                self._unflushed = False
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as e:
            raise _storage_error("flush", self.log_path, e) from e

    def close(self) -> None:
        if self._fd >= 0:
            files.close(self._fd)
            self._fd = -1
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Remove the segment's files, the ``.log`` last: a crash in between leaves either a
        whole segment or index files without a log, which the loader deletes."""
        self.close()
        try:
            self.offset_index.delete()
            self.time_index.delete()
            self.txn_index.delete()
            files.unlink(self.log_path)
        except OSError as e:
            raise _storage_error("delete", self.log_path, e) from e

    def rename_suffix(self, suffix: str) -> None:
        """Rename the segment's files to carry ``suffix`` (compaction's .cleaned -> .swap -> ""),
        the indexes first and the ``.log`` last, then fsync the directory. The loader goes by
        the ``.log``'s name, so a crash part way through redoes the whole step."""
        self.flush()
        try:
            self.offset_index.rename(self._stem + INDEX_SUFFIX + suffix)
            self.time_index.rename(self._stem + TIME_INDEX_SUFFIX + suffix)
            self.txn_index.rename(self._stem + TXN_INDEX_SUFFIX + suffix)
            target = self._stem + LOG_SUFFIX + suffix
            files.rename(self.log_path, target)
            self.log_path = target
            files.fsync_directory(self.directory)  # durable before any input is deleted
        except OSError as e:
            raise _storage_error("rename", self.log_path, e) from e
        self.suffix = suffix

    def __repr__(self) -> str:
        return f"Segment({self.log_path!r}, next_offset={self.next_offset}, size={self.size})"


def _storage_error(action: str, path: str, e: OSError) -> KafkaStorageError:
    hint = {
        errno.ENOSPC: "free space on the disk or lower retention",
        errno.EACCES: "make the data directory writable by this process",
        errno.EROFS: "mount the data disk read-write",
    }.get(e.errno, "check the data disk")
    return KafkaStorageError(f"cannot {action} {path}: {e.strerror}; {hint}")


def _verified(buf, pos: int) -> rb.BatchHeader:
    """``rb.verify_batch`` with the CRC checked before the codec: damage that flips a codec
    bit on disk is a corrupt batch (the valid prefix is kept), not an unsupported codec."""
    rb.verify_batch(buf, pos, check_codec=False)
    return rb.read_header(buf, pos)
