"""Opening a partition directory: finish interrupted compactions, recover what may be torn.

Files the loader reads besides the segments:

    clean-shutdown       present only between a clean close and the next open (its creation
                         and removal are both made durable with a directory fsync)
    recovery-point       offset below which every batch was fsynced (written at roll and close)
    log-start-offset     the log start offset when it moved inside a segment (delete_records)

After a clean shutdown every segment is trusted and only its indexes are sanity-checked
(rebuilt when they disagree with the log). After an unclean one, every segment from the one
holding the recovery point onwards is re-read batch by batch with its CRC checked: the first
torn or corrupt batch and everything after it is cut (segments after a cut are deleted, since
a log must stay a contiguous prefix), and the indexes of those segments are rebuilt.
Either way, a leader-epoch checkpoint that is missing or malformed is rebuilt from the batch
headers (``rebuild_leader_epochs``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable

from rafka.errors import CorruptRecord, KafkaStorageError
from rafka.storage import files
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import read_offset, remove_durably
from rafka.storage.leader_epoch import LeaderEpochCache
from rafka.storage.log_segments import LogSegments
from rafka.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    Segment,
    segment_name,
)
from rafka.storage.transaction_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"


@dataclass
class RecoveryReport:
    """What opening a log found and changed. Empty lists and zeros mean nothing was wrong."""

    clean_shutdown: bool
    created: bool = False  # the directory held no segments: a new, empty log
    segments_checked: int = 0
    batches_checked: int = 0
    bytes_truncated: int = 0
    segments_deleted: list[str] = field(default_factory=list)
    indexes_rebuilt: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def dropped_data(self) -> bool:
        return bool(self.bytes_truncated or self.segments_deleted)

    def summary(self) -> str:
        if self.created:
            return "created a new, empty log"
        if not (self.dropped_data or self.indexes_rebuilt or self.problems):
            state = "clean" if self.clean_shutdown else "unclean, nothing lost"
            return f"opened ({state}; {self.segments_checked} segments checked)"
        text = (
            f"recovered after {'a clean' if self.clean_shutdown else 'an unclean'} shutdown: "
            f"{self.bytes_truncated} bytes truncated, {len(self.segments_deleted)} segments "
            f"deleted, {len(self.indexes_rebuilt)} indexes rebuilt"
        )
        return "; ".join([text, *self.problems])


def ensure_writable_directory(directory: str) -> None:
    """Create ``directory`` if needed (each new directory's entry fsynced in its parent) and
    prove that files can be created in it."""
    try:
        for created in files.make_directories(directory):
            files.fsync_directory(os.path.dirname(created))
        probe = os.path.join(directory, ".write-probe")
        files.create_file(probe, b"\0", sync=False)
        files.unlink(probe)
    except OSError as e:
        raise KafkaStorageError(
            f"data directory {directory!r} cannot be written: {e.strerror}; "
            "point the log at a writable directory (RAFKA_DATA_DIR) or fix its permissions"
        ) from e


def _base_offset_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    return int(stem) if stem.isdigit() and len(stem) == 20 else None


def complete_interrupted_swaps(
    directory: str, make_segment: Callable[[int, str], Segment]
) -> None:
    """Finish or undo compactions cut short by a crash, and remove what a crash left half done.

    ``.cleaned`` files were never finished: deleted, as are ``.tmp`` files. A ``.swap``
    segment was finished and fsynced before its inputs were touched: every input segment it
    covers (base offsets from the swap's base up to its last offset) is deleted and the swap
    renamed into place (indexes first, the ``.log`` last, so a crash during this redoes it).
    Its transaction index is the one file of it that cannot be rebuilt from its batches
    alone, and a power loss may keep the ``.log``'s renames but not the index's (a file
    system may persist renames in any order): the index is then found under its earlier or
    final name (``_adopt_txn_indexes``; it was complete and synced before any rename).
    Index files without a ``.log`` (a segment deletion cut short) are deleted last.
    """
    _adopt_txn_indexes(directory)
    names = files.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX) or name.endswith(".tmp"):
            files.unlink(os.path.join(directory, name))
    for name in names:
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = _base_offset_of(name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
        if base is None:
            continue
        swap = make_segment(base, SWAP_SUFFIX)
        swap.rebuild_indexes()
        last = swap.next_offset - 1
        swap.close()
        for other in files.listdir(directory):
            other_base = _base_offset_of(other, LOG_SUFFIX)
            if other_base is not None and base <= other_base <= last:
                segment = make_segment(other_base, "")
                segment.delete()
        files.fsync_directory(directory)  # see LogRemovals.replace_segments
        swap = make_segment(base, SWAP_SUFFIX)
        swap.rename_suffix("")
        swap.close()
        log.info("completed an interrupted compaction of %s at base offset %d", directory, base)
    _delete_orphaned_indexes(directory)


def _adopt_txn_indexes(directory: str) -> None:
    """Give each ``.swap`` segment without a ``.txnindex.swap`` the transaction index a crash
    left under another name: ``.cleaned`` (its rename to ``.swap`` did not persist), else the
    final name (its rename into place did; or the file is the input's at the same base, whose
    entries the swap holds too). See ``complete_interrupted_swaps``."""
    names = set(files.listdir(directory))
    for name in names:
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = _base_offset_of(name, LOG_SUFFIX + SWAP_SUFFIX)
        if base is None:
            continue
        index = segment_name(base) + TXN_INDEX_SUFFIX
        if index + SWAP_SUFFIX in names:
            continue
        for found in (index + CLEANED_SUFFIX, index):
            if found in names:
                files.rename(os.path.join(directory, found),
                             os.path.join(directory, index + SWAP_SUFFIX))  # fmt: skip
                break


def _delete_orphaned_indexes(directory: str) -> None:
    """Delete index files whose ``.log`` is gone, and swap indexes whose swap never got its
    ``.log`` renamed (every complete swap has been put in place by now)."""
    names = set(files.listdir(directory))
    for name in names:
        if name.endswith(tuple(s + SWAP_SUFFIX for s in _INDEX_SUFFIXES)):
            files.unlink(os.path.join(directory, name))
            continue
        for suffix in _INDEX_SUFFIXES:
            base = _base_offset_of(name, suffix) if name.endswith(suffix) else None
            if base is not None and segment_name(base) + LOG_SUFFIX not in names:
                files.unlink(os.path.join(directory, name))


def load_segments(
    directory: str,
    make_segment: Callable[[int, str], Segment],
    on_recovered_batch: Callable[[rb.BatchHeader], None],
    gaps_allowed: bool,
) -> tuple[list[Segment], RecoveryReport, int | None]:
    """Open every segment of ``directory`` (which must exist), recovering those that may be
    torn.

    Returns (segments in offset order, report, checkpointed log start offset or None).
    ``on_recovered_batch`` sees each batch header re-read during recovery, in order, so the
    caller can rebuild state (leader epochs) derived from them. Recovery takes a gap between
    batches for damage unless ``gaps_allowed``: a compacted topic, or one whose directory holds
    the ``offset-gaps`` marker (the log got gaps once: a topic compacted before its policy
    became delete keeps them).
    """
    complete_interrupted_swaps(directory, make_segment)
    marker = os.path.join(directory, CLEAN_SHUTDOWN_FILE)
    clean = files.exists(marker)
    report = RecoveryReport(clean_shutdown=clean)
    recovery_point = read_offset(os.path.join(directory, RECOVERY_POINT_FILE)) or 0
    log_start = read_offset(os.path.join(directory, LOG_START_OFFSET_FILE))

    bases = sorted(
        b
        for b in (_base_offset_of(n, LOG_SUFFIX) for n in files.listdir(directory))
        if b is not None
    )
    report.created = not bases
    segments = [make_segment(base, "") for base in bases]
    # The first segment that may hold unflushed data: the one containing the recovery point.
    first_unflushed = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first_unflushed = i

    kept: list[Segment] = []
    cut = False
    for i, segment in enumerate(segments):
        if cut:
            report.segments_deleted.append(segment.log_path)
            segment.delete()
            continue
        report.segments_checked += 1
        if clean or i < first_unflushed:
            rebuilt = segment.load()
            if rebuilt is not None:
                report.indexes_rebuilt.append(segment.offset_index.path)
                if rebuilt.reason is not None:
                    report.bytes_truncated += rebuilt.truncated_bytes
                    report.problems.append(rebuilt.reason)
                    cut = True
        else:
            result = segment.recover(
                verify=True, on_batch=on_recovered_batch, contiguous=not gaps_allowed
            )
            segment.flush(force=True)
            report.batches_checked += result.batches
            report.indexes_rebuilt.append(segment.offset_index.path)
            if result.reason is not None:
                report.bytes_truncated += result.truncated_bytes
                report.problems.append(result.reason)
                cut = True
        kept.append(segment)
    if clean:
        # Durably gone before anything is appended: a power loss after this open must not
        # find the marker again and skip recovery of what the next run writes.
        remove_durably(marker)
    return kept, report, log_start


def rebuild_leader_epochs(
    cache: LeaderEpochCache, segments: LogSegments, log_start_offset: int
) -> None:
    """Rebuild a cache whose checkpoint was missing or malformed from the partition leader
    epoch that every batch header carries (one small read per batch), from the batch holding
    the log start offset on. A damaged batch ends the scan: the epochs before it are kept."""
    pairs: list[tuple[int, int]] = []
    try:
        for header in segments.headers_from(log_start_offset):
            pairs.append((header.partition_leader_epoch, header.base_offset))
    except CorruptRecord as e:
        log.warning("%s: leader epochs rebuilt up to a damaged batch: %s", cache.path, e)
    cache.rebuild(pairs)
    cache.truncate_from_start(log_start_offset)
    if pairs:
        log.warning(
            "%s rebuilt from %d batch headers: %s", cache.path, len(pairs), cache.entries
        )
