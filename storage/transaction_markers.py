"""Transaction markers: reading the one control record of a control batch.

A marker is a control batch (transactional and control attribute bits set) that a
transaction coordinator writes to every partition of a transaction when it ends; it holds
exactly one record, whose key is (version int16, type int16: ABORT=0, COMMIT=1) and whose
value is (version int16, coordinator epoch int32), as ``record_batch.encode_control_batch``
writes them. Markers take an offset like any batch, so a transactional partition's offsets
are sparse for its consumers.

Only control batches are decoded here, and only their single small record: they are rare
(one per transaction and partition), so the append and fetch paths stay header-only for
every other batch.
"""

from __future__ import annotations

from typing import NamedTuple

from rafka.errors import CorruptRecord
from rafka.storage import record_batch as rb


class TxnMarker(NamedTuple):
    """What a marker says: how its transaction ended, and the epoch of the coordinator that
    wrote it (a marker from an older coordinator epoch is a zombie's)."""

    control_type: rb.ControlType
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type is rb.ControlType.ABORT


def read_marker(batch, pos: int = 0) -> TxnMarker:
    """The marker held by the control batch at ``pos`` of ``batch`` (bytes-like, the whole
    batch). The CRC is not checked here: callers read batches that were checked on their
    way in. Raises CorruptRecord when the batch holds no readable control record."""
    records = rb.decode_records(batch, pos, verify=False)
    if not records.header.is_control:
        raise ValueError(
            f"batch at base offset {records.header.base_offset} is not a control batch"
        )
    if not len(records) or records.keys is None:
        raise CorruptRecord(
            f"control batch at base offset {records.header.base_offset} holds no marker record"
        )
    control_type, coordinator_epoch = rb.parse_control_record(records.keys[0], records.values[0])
    return TxnMarker(control_type, coordinator_epoch)


def marker_of(header: rb.BatchHeader, batch, pos: int = 0) -> TxnMarker | None:
    """The marker of a control batch written by a producer, else None (data batches are not
    decoded)."""
    if header.is_control and header.has_producer_id:
        return read_marker(batch, pos)
    return None
