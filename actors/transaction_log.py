"""A transaction coordinator's partition of ``__transaction_state``: one record per
transactional id (``rafka.cluster.transaction_records``), read back by a load and written
with acks=all through ``CoordinatorLog``, which also fences the shard's earlier incarnations
with epoch markers of the same kind ``__consumer_offsets`` holds."""

from __future__ import annotations

from typing import NamedTuple

import msgpack

from rafka.actors.coordinator_log import CoordinatorLog, RecordCodec
from rafka.cluster.coordinator_fencing import transaction_coordinator_producer_id
from rafka.cluster.offsets_records import EPOCH_MARKER, EpochMarkerKey
from rafka.cluster.topics import TRANSACTION_STATE
from rafka.cluster.transaction_records import decode
from rafka.cluster.transaction_state import TxnMetadata


class TxnKey(NamedTuple):
    """A transactional id's key, still encoded: ``decode`` reads key and value together."""

    raw: bytes


def _decode_key(key: bytes) -> EpochMarkerKey | TxnKey:
    fields = msgpack.unpackb(key)
    if isinstance(fields, list) and len(fields) == 2 and fields[0] == EPOCH_MARKER:
        return EpochMarkerKey(fields[1])
    return TxnKey(key)


TRANSACTION_CODEC = RecordCodec(TRANSACTION_STATE, _decode_key, lambda value: value)


class LoadedTransactions:
    """What a load found: the newest metadata of every transactional id (Dead ones gone)."""

    def __init__(self) -> None:
        self.transactions: dict[str, TxnMetadata] = {}

    def replay(self, key: TxnKey, value: bytes | None) -> None:
        transactional_id, meta = decode(key.raw, value)
        if meta is None:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = meta


class TransactionLog(CoordinatorLog):
    """Partition ``shard`` of ``__transaction_state`` for transaction coordinator ``shard``;
    its ``load`` returns a ``LoadedTransactions``."""

    def __init__(self, namespace: str, shard: int, commit_timeout_s: float, logger) -> None:
        super().__init__(
            namespace, shard, commit_timeout_s, logger, codec=TRANSACTION_CODEC,
            new_state=LoadedTransactions,
            producer_id=transaction_coordinator_producer_id(shard),
            role="transaction coordinator",
        )  # fmt: skip
