"""Reopen a crash image and check what the log serves against the ledger.

``check_image`` writes the image to a directory, opens the partition's log as a restarted
broker would, and returns the first problem found (None when the image is sound):

- the log opens;
- every batch it serves passes its CRC and decodes, offsets increase (and, without
  compaction, follow each other with no gap from the log start to the log end);
- every record the ledger says was flushed is there, at its offset, with its content;
- every record served was written at that offset before the crash;
- the indexes agree with the log: offset-index entries point at the batch they name,
  time-index entries name a batch that reached that timestamp first, every segment knows
  its largest timestamp, and timestamp lookups give what a scan of the records gives;
- leader epochs and producer state are those the batches imply, open transactions and the
  aborted-transaction indexes included;
- the log takes an append at its end and reopens cleanly with it.
"""

from __future__ import annotations

import os
import shutil

from rafka.storage import Log, LogConfig
from rafka.storage import record_batch as rb
from rafka.storage.leader_epoch import EpochEntry

from ..support import FakeClock
from .ledger import Ledger
from .images import materialize
from .model import Image
from .workloads import PARTITION


class Problem(Exception):
    """What is wrong with a reopened image."""


def check_image(
    image: Image, directory: str, config: dict, ledger: Ledger, point: int, contiguous: bool,
    reopen: bool = True,
) -> str | None:  # fmt: skip
    """The first problem with ``image`` taken at ``point``, or None."""
    materialize(image, directory)
    partition = os.path.join(directory, PARTITION)
    must = ledger.must(point)
    if not os.path.isdir(partition) and must:
        return f"the partition directory is gone though {len(must)} records were flushed"
    try:
        log = Log(partition, LogConfig.from_dict(config), FakeClock())
    except Exception as e:  # noqa: BLE001 - any failure to open is the finding
        return f"the log does not open: {type(e).__name__}: {e}"
    try:
        _check_no_leftovers(log)
        _check_log(log, config, ledger, point, contiguous)
        if reopen:
            _check_append_and_reopen(log, partition, config)
    except Problem as e:
        return str(e)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} while checking: {e}"
    finally:
        log.abandon()
    return None


# Files a log directory holds besides its segments' and producer snapshots.
_LOG_FILES = {"leader-epoch-checkpoint", "recovery-point", "log-start-offset", "high-watermark",
              "cleaner-offset-checkpoint", "offset-gaps"}  # fmt: skip


def _check_no_leftovers(log: Log) -> None:
    """After opening, nothing half done remains: no temporary, cleaned or swap file, and no
    index without its segment (a later segment at that base would adopt it)."""
    owned = set(_LOG_FILES)
    for segment in log.segments:
        owned.update(os.path.basename(p) for p in
                     (segment.log_path, segment.offset_index.path, segment.time_index.path,
                      segment.txn_index.path))  # fmt: skip
    for name in os.listdir(log.directory):
        if name not in owned and not name.endswith(".snapshot"):
            raise Problem(f"{name} is left in the log directory after opening")


def _batches(log: Log):
    """(segment, position, header, records) of every batch, oldest first, CRC checked."""
    for segment in log.segments:
        for position, header, data in segment.iter_batches(0, verify=True):
            yield segment, position, header, rb.decode_records(data)


def _check_log(log: Log, config: dict, ledger: Ledger, point: int, contiguous: bool) -> None:
    if log.log_start_offset < ledger.durable_log_start(point):
        raise Problem(f"the log start went back to {log.log_start_offset} from "
                      f"{ledger.durable_log_start(point)}, which a returned operation had "
                      "made durable")  # fmt: skip
    served: dict[int, tuple] = {}
    previous = -1
    headers = []
    markers: dict[int, rb.ControlType] = {}  # base offset -> type, of each marker
    for _, _, header, records in _batches(log):
        headers.append(header)
        if header.is_control and header.has_producer_id:
            markers[header.base_offset] = rb.parse_control_record(records.keys[0],
                                                                  records.values[0])[0]
        keys = records.keys or [None] * len(records)
        for offset, key, value, ts in zip(records.offsets, keys, records.values,
                                          records.timestamps):  # fmt: skip
            if offset <= previous:
                raise Problem(f"offset {offset} follows {previous}")
            previous = offset
            if log.log_start_offset <= offset:
                served[offset] = (key, value, ts)
    if served and max(served) >= log.log_end_offset:
        raise Problem(f"offset {max(served)} is at or past the log end {log.log_end_offset}")
    if contiguous and list(served) != list(range(log.log_start_offset, log.log_end_offset)):
        missing = sorted(set(range(log.log_start_offset, log.log_end_offset)) - set(served))
        raise Problem(f"offsets missing between the log start and end: {missing[:10]}")
    for offset, content in ledger.must(point).items():
        if served.get(offset) != content:
            raise Problem(
                f"flushed record at offset {offset} is "
                f"{'missing' if offset not in served else 'different'} (log start "
                f"{log.log_start_offset}, end {log.log_end_offset})"
            )
    for offset, content in served.items():
        if not ledger.may_hold(offset, content, point):
            raise Problem(f"offset {offset} serves a record never written there")
    _check_reads(log, served)
    _check_indexes(log)
    _check_timestamps(log, served)
    _check_leader_epochs(log, headers, contiguous)
    _check_producer_state(log, headers, ledger, point)
    _check_transactions(log, headers, markers, contiguous)


def _check_reads(log: Log, served: dict) -> None:
    for offset in served:
        data = log.read(offset, 1).records
        header = rb.read_header(data, 0)
        if not header.base_offset <= offset <= header.last_offset:
            raise Problem(f"a read at {offset} returned the batch {header.base_offset}.."
                          f"{header.last_offset}")  # fmt: skip


def _check_indexes(log: Log) -> None:
    for segment in log.segments:
        starts = {}
        maxima = []  # (base offset, batch max timestamp) in order
        for position, header in segment.iter_headers(0):
            starts[position] = header.base_offset
            maxima.append((header.base_offset, header.max_timestamp))
        index = segment.offset_index
        for i in range(len(index)):
            offset, position = index._keys[i] + index.base_offset, index._values[i]
            if starts.get(position) != offset:
                raise Problem(f"{index.path} maps offset {offset} to byte {position}, where "
                              f"{'no batch' if position not in starts else 'another batch'} "
                              "starts")  # fmt: skip
        largest = max((ts for _, ts in maxima), default=rb.NO_TIMESTAMP)
        if segment.max_timestamp != largest:
            raise Problem(f"{segment.log_path} reports largest timestamp "
                          f"{segment.max_timestamp}, its batches reach {largest}")  # fmt: skip
        times = segment.time_index
        for i in range(len(times)):
            ts, offset = times._keys[i], times._values[i] + times.base_offset
            reached = [base for base, batch_max in maxima if batch_max >= ts]
            if not reached or reached[0] != offset:
                raise Problem(f"{times.path} says offset {offset} first reached timestamp "
                              f"{ts}; the batches say {reached[:1] or 'none does'}")  # fmt: skip


def _check_timestamps(log: Log, served: dict) -> None:
    stamps = sorted({ts for _, _, ts in served.values()})
    for target in stamps[:: max(1, len(stamps) // 12)] + [stamps[-1] + 1 if stamps else 0]:
        expected = next(((o, ts) for o, (_, _, ts) in sorted(served.items()) if ts >= target),
                        None)  # fmt: skip
        found = log.offset_for_timestamp(target)
        if found != expected:
            raise Problem(f"offset_for_timestamp({target}) is {found}, the records say "
                          f"{expected}")  # fmt: skip


def _check_leader_epochs(log: Log, headers: list, contiguous: bool) -> None:
    """The cache names the epochs of the batches, in order, each from where its first batch
    starts (from at or before it when compaction may have removed that batch)."""
    expected: list[EpochEntry] = []
    for header in headers:
        if header.last_offset < log.log_start_offset or header.partition_leader_epoch < 0:
            continue
        if expected and header.partition_leader_epoch <= expected[-1].epoch:
            continue
        start = max(header.base_offset, log.log_start_offset)
        expected.append(EpochEntry(header.partition_leader_epoch, start))
    if expected:
        expected[0] = EpochEntry(expected[0].epoch, max(expected[0].start_offset,
                                                        log.log_start_offset))  # fmt: skip
    entries = log.epoch_cache.entries
    if [e.epoch for e in entries] != [e.epoch for e in expected] or not all(
        got.start_offset == want.start_offset
        or (not contiguous and got.start_offset < want.start_offset)
        for got, want in zip(entries, expected)
    ):
        raise Problem(f"leader epochs {entries}, the batches imply {expected}")


def _check_producer_state(log: Log, headers: list, ledger: Ledger, point: int) -> None:
    """Each producer's last batch is the last one the log holds for it; a producer the
    batches do not name may be remembered only for records below the log start that were
    not truncated away (retention and delete_records keep producer state, as in Kafka)."""
    last: dict[int, tuple | None] = {}
    epochs: dict[int, int] = {}
    for header in headers:
        if not header.has_producer_id:
            continue
        pid = header.producer_id
        if header.is_control:
            # A marker of a newer epoch starts the producer over with no batches.
            if header.producer_epoch > epochs.get(pid, header.producer_epoch):
                last[pid] = None
        else:
            last[pid] = (header.base_sequence, header.last_sequence,
                         header.base_offset, header.last_offset)  # fmt: skip
        epochs[pid] = max(epochs.get(pid, header.producer_epoch), header.producer_epoch)
    for pid, entry in log.producer_state.producers.items():
        if not entry.batches or pid in last:
            continue
        batch = entry.batches[-1]
        if batch.last_offset >= log.log_start_offset:
            raise Problem(f"producer {pid} remembers offsets {batch.first_offset}.."
                          f"{batch.last_offset}, where the log holds none of its batches")
        if any(ledger.truncated_for_good(o, point)
               for o in range(batch.first_offset, batch.last_offset + 1)):  # fmt: skip
            raise Problem(f"producer {pid} remembers offsets {batch.first_offset}.."
                          f"{batch.last_offset} of a log truncated away")  # fmt: skip
    for pid, expected in last.items():
        entry = log.producer_state.producers.get(pid)
        got = tuple(entry.batches[-1][:4]) if entry and entry.batches else None
        if got != expected:
            raise Problem(f"producer {pid}'s last batch is {got}, the log says {expected}")


def _check_transactions(log: Log, headers: list, markers: dict, contiguous: bool) -> None:
    """Open transactions and index entries are those the batches imply. Walking them in
    order, a producer's transaction opens at its first transactional batch after its last
    marker; an ABORT marker that ends one needs an entry (producer, first offset, marker) in
    its segment's index, with that first offset and the last stable offset of that moment
    (where compaction may have removed batches, a first offset at or before the walk's); an
    entry may name only an ABORT marker of its producer in its own segment, once. An abort
    whose records compaction removed may keep an entry the walk cannot derive."""
    open_first: dict[int, int] = {}
    required: dict[int, tuple] = {}  # marker offset -> (producer, first offset, LSO then)
    aborts: dict[int, int] = {}  # marker offset -> producer, of every ABORT marker
    for header in headers:
        if not header.has_producer_id:
            continue
        pid = header.producer_id
        if not header.is_control:
            if header.is_transactional:
                open_first.setdefault(pid, header.base_offset)
            continue
        first = open_first.pop(pid, None)
        if markers[header.base_offset] is rb.ControlType.ABORT:
            aborts[header.base_offset] = pid
            if first is not None:
                lso = min(open_first.values(), default=header.base_offset + 1)
                required[header.base_offset] = (pid, first, lso)
    ongoing = log.producer_state.ongoing_transactions()
    if ongoing != open_first:
        raise Problem(f"open transactions {ongoing}, the batches imply {open_first}")
    for segment in log.segments:
        for txn in segment.txn_index.entries:
            if not segment.base_offset <= txn.last_offset < segment.next_offset:
                raise Problem(f"{segment.txn_index.path} holds {txn}, whose marker is not in "
                              "its segment")  # fmt: skip
            if aborts.pop(txn.last_offset, None) != txn.producer_id:
                raise Problem(f"{segment.txn_index.path} holds {txn}, but the log has no "
                              "ABORT marker of that producer there (or indexes it twice)")
            want = required.pop(txn.last_offset, None)
            if want is None:
                continue
            # Compaction may have removed the transaction's first batches (aborted ones go
            # whole): its true first offset can then lie before the first batch left.
            if txn.first_offset > want[1] or (contiguous and txn.first_offset != want[1]):
                raise Problem(f"{txn} should begin at {want[1]}")
            if contiguous and txn.last_stable_offset != want[2]:
                raise Problem(f"{txn} should have last stable offset {want[2]}")
    if required:
        raise Problem(f"aborts without an index entry: {sorted(required.items())}")


def _check_append_and_reopen(log: Log, partition: str, config: dict) -> None:
    end = log.log_end_offset
    epoch = max(log.latest_epoch, 0)
    info = log.append_as_leader(rb.encode_batch([b"after the crash"], [b"key"], 1), epoch)
    if info.first_offset != end:
        raise Problem(f"an append after reopening got offset {info.first_offset}, the log "
                      f"end was {end}")  # fmt: skip
    log.close()
    again = Log(partition, LogConfig.from_dict(config), FakeClock())
    try:
        if again.log_end_offset != end + 1:
            raise Problem(f"after a clean close the log end is {again.log_end_offset}, "
                          f"expected {end + 1}")  # fmt: skip
    finally:
        again.abandon()
