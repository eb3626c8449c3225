"""What the admin tooling of transactions (KIP-664: list, describe) reads of the
coordinator's metadata."""

from __future__ import annotations

from typing import Any, Iterable

from rafka.cluster.transaction_types import TxnMetadata, TxnState

_S = TxnState


def describe(meta: TxnMetadata) -> dict[str, Any]:
    """DescribeTransactions' answer for one id. The producer id and epoch are the record's,
    those the transaction's writes and markers use (as in Kafka)."""
    return {
        "transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch, "state": meta.state.value,
        "timeout_ms": meta.timeout_ms, "partitions": sorted(meta.partitions),
        "start_ms": meta.start_ms, "last_update_ms": meta.last_update_ms,
    }  # fmt: skip


def list_transactions(
    metas: Iterable[TxnMetadata],
    now_ms: int,
    states: Iterable[str] | None = None,
    producer_ids: Iterable[int] | None = None,
    min_duration_ms: int = -1,
) -> list[dict[str, Any]]:
    """ListTransactions: (transactional id, producer id, state) of each id whose state
    name is in ``states``, whose producer id is in ``producer_ids`` (None: any), and whose
    transaction has run for at least ``min_duration_ms`` (-1: any, with or without one)."""
    wanted_states = None if states is None else set(states)
    wanted_ids = None if producer_ids is None else set(producer_ids)
    out = []
    for meta in metas:
        if meta.state == _S.DEAD:
            continue
        if wanted_states is not None and meta.state.value not in wanted_states:
            continue
        if wanted_ids is not None and meta.producer_id not in wanted_ids:
            continue
        running_ms = now_ms - meta.start_ms if meta.start_ms >= 0 else -1
        if min_duration_ms >= 0 and running_ms < min_duration_ms:
            continue
        out.append({"transactional_id": meta.transactional_id,
                    "producer_id": meta.producer_id,
                    "state": meta.state.value})  # fmt: skip
    return sorted(out, key=lambda entry: entry["transactional_id"])
