"""Helpers for storage tests: a fake clock, batch and marker builders and a whole-log reader."""

from __future__ import annotations

from rafka.storage import Log
from rafka.storage import record_batch as rb


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(values, keys=None, timestamp=1_700_000_000_000, **kw) -> bytes:
    values = [v if v is None or isinstance(v, bytes) else str(v).encode() for v in values]
    if keys is not None:
        keys = [k if k is None or isinstance(k, bytes) else str(k).encode() for k in keys]
    return rb.encode_batch(values, keys, timestamp, **kw)


def read_all(log: Log, start: int | None = None, max_offset: int | None = None):
    """Every record from ``start`` (default: log start) as (offset, key, value, timestamp)."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, max_offset).records
        if not data:
            break
        for pos, header in rb.iter_batches(data):
            records = rb.decode_records(data, pos)
            keys = records.keys or [None] * len(records)
            for o, k, v, t in zip(records.offsets, keys, records.values, records.timestamps):
                if o >= offset:
                    out.append((o, k, v, t))
            next_offset = header.next_offset
        offset = next_offset
    return out




def txn_batch(values, pid: int, seq: int, epoch: int = 0, **kw) -> bytes:
    """A transactional producer's data batch."""
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                 is_transactional=True, **kw)  # fmt: skip


def marker(kind: rb.ControlType, pid: int, epoch: int = 0, coordinator_epoch: int = 0,
           timestamp: int = 1_700_000_000_000) -> bytes:  # fmt: skip
    """A transaction marker as a coordinator writes it."""
    return rb.encode_control_batch(
        kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
        timestamp=timestamp,
    )  # fmt: skip


COMMIT, ABORT = rb.ControlType.COMMIT, rb.ControlType.ABORT
