"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

One pass:
 1. The cleanable range is the oldest whole segments below ``Log.cleanable_end_offset`` (the
    last stable offset, and never the active segment) whose records are all older than
    ``min.compaction.lag.ms``. Records at or above the high watermark may still be truncated
    by a follower, and records at or above the last stable offset may belong to a
    transaction that has not ended, so they neither get cleaned nor count as a newer value
    of their key.
 2. An offset map (key -> offset of its latest record) is built over that range, ignoring
    the records of aborted transactions: an aborted value must never make compaction drop
    a committed one. Which batches aborted is found as a read_committed consumer finds it
    (read_committed.py), from the transaction indexes' entries for the range.
 3. Each group of adjacent segments (up to ``segment.bytes``) is rewritten into one
    ``.cleaned`` segment keeping, in offset order: records whose offset is the latest for their
    key, records without a key, transaction markers, and tombstones younger than
    ``delete.retention.ms`` (measured from the tombstone's timestamp). Batches of aborted
    transactions go whole. Markers are all kept (Kafka removes a marker once
    ``delete.retention.ms`` has passed and its transaction's records are gone; here it
    stays, one small batch per transaction). Offsets never change: a batch that loses
    records keeps its base offset and last offset delta, with explicit offset deltas for
    the records that stay. The cleaned segment's transaction index holds the entries of
    every segment it replaces, so a transaction aborted there stays known to consumers and
    to later passes.
 4. The finished segment is fsynced, renamed ``.swap``, its inputs deleted, and renamed into
    place. A crash at any step is resolved on open (log_loader.complete_interrupted_swaps).

``cleaner-offset-checkpoint`` remembers where the last pass ended, so the share of bytes not
yet cleaned (the dirty ratio) can be compared with ``min.cleanable.dirty.ratio``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import read_offset, write_offset
from rafka.storage.read_committed import ReadCommittedFilter
from rafka.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, Segment
from rafka.storage.transaction_markers import marker_of

if TYPE_CHECKING:
    from rafka.storage.log import Log

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_MAX_RELATIVE_OFFSET = 2**32 - 1


@dataclass
class CompactionResult:
    segments_in: int = 0
    segments_out: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    aborted_records_dropped: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


def cleanable_segments(log: "Log", now_ms: int) -> list[Segment]:
    """The oldest segments wholly below the cleanable end offset whose newest record is past
    the compaction lag."""
    horizon = now_ms - log.config.min_compaction_lag_ms
    out = []
    for segment in log.segments_below(log.cleanable_end_offset):
        if segment.max_timestamp > horizon:
            break
        out.append(segment)
    return out


def dirty_ratio(log: "Log") -> float:
    """Cleanable bytes (written since the last pass ended, below the cleanable end offset)
    over those plus the bytes already cleaned, as Kafka's cleaner measures it."""
    first_dirty = read_offset(os.path.join(log.directory, CLEANER_CHECKPOINT_FILE)) or 0
    below = log.segments_below(log.cleanable_end_offset)
    clean = sum(s.size for s in below if s.base_offset < first_dirty)
    dirty = sum(s.size for s in below if s.base_offset >= first_dirty)
    return dirty / (clean + dirty) if clean + dirty else 0.0


def compact(log: "Log", now_ms: int, force: bool = False) -> CompactionResult:
    """Run one compaction pass over ``log`` if its policy includes compact and (unless
    ``force``) its dirty ratio reaches ``min.cleanable.dirty.ratio``."""
    result = CompactionResult()
    if not log.config.compact:
        return result
    if not force and dirty_ratio(log) < log.config.min_cleanable_dirty_ratio:
        return result
    segments = cleanable_segments(log, now_ms)
    if not segments:
        return result
    log.allow_offset_gaps()
    aborted = log.aborted_transactions(segments[0].base_offset, segments[-1].next_offset)
    latest = _build_offset_map(segments, _filter(aborted))
    tombstone_horizon = now_ms - log.config.delete_retention_ms
    committed = _filter(aborted)  # one walk over every group, in offset order
    for group in _group_segments(segments, log.config.segment_bytes):
        _clean_group(log, group, latest, tombstone_horizon, committed, result)
    write_offset(os.path.join(log.directory, CLEANER_CHECKPOINT_FILE), segments[-1].next_offset)
    return result


def _filter(aborted: list[tuple[int, int]]) -> ReadCommittedFilter:
    committed = ReadCommittedFilter()
    committed.add_aborted(aborted)
    return committed


def _is_committed(committed: ReadCommittedFilter, header: rb.BatchHeader, batch) -> bool:
    """Feed the next batch of the walk to ``committed``: whether a read_committed consumer
    would return it (never a marker, which only moves the walk on)."""
    marker = marker_of(header, batch)
    return committed.accept(header, None if marker is None else marker.control_type)


def _build_offset_map(
    segments: list[Segment], committed: ReadCommittedFilter
) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for segment in segments:
        for _, header, batch in segment.iter_batches(0, verify=False):
            if not _is_committed(committed, header, batch):
                continue
            records = rb.decode_records(batch, verify=False)
            if records.keys is None:
                continue
            for key, offset in zip(records.keys, records.offsets):
                if key is not None:
                    latest[key] = offset
    return latest


def _group_segments(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Adjacent segments whose total size fits one segment and whose offsets fit its index."""
    groups: list[list[Segment]] = []
    for segment in segments:
        current = groups[-1] if groups else None
        if (
            current is not None
            and sum(s.size for s in current) + segment.size <= max_bytes
            and segment.next_offset - current[0].base_offset <= _MAX_RELATIVE_OFFSET
        ):
            current.append(segment)
        else:
            groups.append([segment])
    return groups


def _clean_group(
    log: "Log",
    group: list[Segment],
    latest: dict[bytes, int],
    tombstone_horizon: int,
    committed: ReadCommittedFilter,
    result: CompactionResult,
) -> None:
    # new=True: a ``.cleaned`` file left by an earlier pass is discarded, never appended to.
    out = log.files.make_segment(group[0].base_offset, CLEANED_SUFFIX, new=True)
    try:
        for segment in group:
            result.segments_in += 1
            result.bytes_in += segment.size
            for _, header, batch in segment.iter_batches(0, verify=True):
                returned = _is_committed(committed, header, batch)
                if header.is_control:
                    kept = bytes(batch)  # markers stay: see the module docstring
                elif not returned:
                    result.records_in += header.record_count
                    result.aborted_records_dropped += header.record_count
                    kept = None
                else:
                    kept = _filter_batch(batch, latest, tombstone_horizon, result)
                if kept is not None:
                    out.append([kept], [rb.read_header(kept)])
        for segment in group:
            for txn in segment.txn_index.entries:
                out.txn_index.append(txn)
        out.seal()
        out.rename_suffix(SWAP_SUFFIX)
    except BaseException:
        # Nothing of the log has changed yet: drop the partial output so no later pass or
        # open can take it for a finished one.
        out.delete()
        raise
    result.segments_out += 1
    result.bytes_out += out.size
    # The rename to .swap was the commit point: from here a crash is finished on open.
    log.replace_segments(group, out)


def _filter_batch(
    batch: memoryview,
    latest: dict[bytes, int],
    tombstone_horizon: int,
    result: CompactionResult,
) -> bytes | None:
    """The batch with its superseded records (and expired tombstones) removed; the original
    bytes when nothing goes, None when everything does."""
    records = rb.decode_records(batch, verify=False)
    keys = records.keys or [None] * len(records)
    keep = []
    for i, (key, offset, value) in enumerate(zip(keys, records.offsets, records.values)):
        if key is not None and latest.get(key, offset) != offset:
            continue
        if value is None and key is not None and records.timestamps[i] < tombstone_horizon:
            result.tombstones_dropped += 1
            continue
        keep.append(i)
    result.records_in += len(records)
    result.records_out += len(keep)
    if len(keep) == len(records):
        return bytes(batch)
    if not keep:
        return None
    return rb.reencode(records, keep)
