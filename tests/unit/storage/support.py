"""Helpers for storage tests: a fake clock, a batch builder and a whole-log reader."""

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


