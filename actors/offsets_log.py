"""A group coordinator's partition of ``__consumer_offsets``: committed offsets and each
group's metadata, read back by a load and written with acks=all through ``CoordinatorLog``
(which also fences the shard's earlier incarnations)."""

from __future__ import annotations

from typing import Any

from rafka.actors.coordinator_log import RECORDS_PER_BATCH, CoordinatorLog, RecordCodec
from rafka.cluster.coordinator_fencing import coordinator_producer_id
from rafka.cluster.group_types import CommittedOffset
from rafka.cluster.offsets_records import (
    GroupKey,
    OffsetKey,
    PendingOffsetKey,
    decode_key,
    decode_value,
)
from rafka.cluster.transactional_offsets import PendingOffsets
from rafka.cluster.topics import CONSUMER_OFFSETS

__all__ = ["Loaded", "OffsetsLog", "RECORDS_PER_BATCH"]

OFFSETS_CODEC = RecordCodec(CONSUMER_OFFSETS, decode_key, decode_value)


class Loaded:
    """What a load found: committed offsets, the newest metadata record of each group, and
    the offsets pending in transactions that have not ended."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.metadata: dict[str, dict[str, Any] | None] = {}
        self.pending = PendingOffsets()

    def replay(self, key, value) -> None:
        """Apply one record of __consumer_offsets, in log order."""
        if isinstance(key, OffsetKey):
            group_offsets = self.offsets.setdefault(key.group_id, {})
            if value is None:
                group_offsets.pop((key.topic, key.partition), None)
            else:
                group_offsets[(key.topic, key.partition)] = CommittedOffset(
                    value["offset"], value["leader_epoch"], value["metadata"],
                    value["commit_ms"],
                )  # fmt: skip
        elif isinstance(key, GroupKey):
            self.metadata[key.group_id] = value
        elif isinstance(key, PendingOffsetKey):
            tp = (key.topic, key.partition)
            if value is None:
                self.pending.remove(key.producer_id, key.group_id, tp)
            else:
                self.pending.add(key.producer_id, value["producer_epoch"], key.group_id, {
                    tp: CommittedOffset(value["offset"], value["leader_epoch"],
                                        value["metadata"], value["commit_ms"])
                })  # fmt: skip

    def group_ids(self) -> set[str]:
        return set(self.offsets) | set(self.metadata)


class OffsetsLog(CoordinatorLog):
    """Partition ``shard`` of ``__consumer_offsets`` for group coordinator ``shard``; its
    ``load`` returns a ``Loaded``."""

    def __init__(self, namespace: str, shard: int, commit_timeout_s: float, logger) -> None:
        super().__init__(
            namespace, shard, commit_timeout_s, logger, codec=OFFSETS_CODEC, new_state=Loaded,
            producer_id=coordinator_producer_id(shard), role="group coordinator",
        )  # fmt: skip
