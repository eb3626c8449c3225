"""Producer settings: Kafka's names (in snake case), defaults and checks, in one place."""

from __future__ import annotations

from typing import NamedTuple

from rafka.errors import InvalidConfig, RafkaError
from rafka.storage import record_batch as rb

MAX_IN_FLIGHT_IDEMPOTENT = 5  # the broker remembers the last five batches per producer

_ACKS = {"all": -1, -1: -1, "-1": -1, 1: 1, "1": 1, 0: 0, "0": 0}


class ProducerConfig(NamedTuple):
    acks: int = -1
    linger_ms: float = 5.0
    batch_size: int = 512 * 1024
    buffer_memory: int = 64 * 1024 * 1024
    max_block_ms: int = 60_000
    max_request_size: int = 4 * 1024 * 1024
    compression: rb.Codec = rb.Codec.NONE
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    max_in_flight: int = 5
    enable_idempotence: bool = True
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000


def make_config(
    acks: int | str = "all",
    linger_ms: float = 5.0,
    batch_size: int = 512 * 1024,
    buffer_memory: int = 64 * 1024 * 1024,
    max_block_ms: int = 60_000,
    max_request_size: int = 4 * 1024 * 1024,
    compression: str | None = "none",
    retries: int = 2**31 - 1,
    retry_backoff_ms: int = 100,
    request_timeout_ms: int = 30_000,
    delivery_timeout_ms: int = 120_000,
    max_in_flight: int = 5,
    enable_idempotence: bool | None = None,
    transactional_id: str | None = None,
    transaction_timeout_ms: int = 60_000,
) -> ProducerConfig:
    """Validate producer settings (Kafka's names, in snake case); InvalidConfig says which."""
    if isinstance(acks, bool) or acks not in _ACKS:
        raise InvalidConfig(f"acks={acks!r} is invalid; use 0, 1 or 'all'")
    acks_n = _ACKS[acks]
    for name, value, low in (
        ("linger_ms", linger_ms, 0), ("batch_size", batch_size, 1),
        ("buffer_memory", buffer_memory, 1), ("max_block_ms", max_block_ms, 0),
        ("max_request_size", max_request_size, 1), ("retries", retries, 0),
        ("retry_backoff_ms", retry_backoff_ms, 0), ("request_timeout_ms", request_timeout_ms, 1),
        ("delivery_timeout_ms", delivery_timeout_ms, 1), ("max_in_flight", max_in_flight, 1),
    ):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
            raise InvalidConfig(f"{name}={value!r} is invalid; give a number >= {low}")
    try:
        if compression is not None and not isinstance(compression, str):
            raise ValueError(compression)
        codec = rb.Codec.from_name(compression or "none")
    except (ValueError, RafkaError) as e:
        raise InvalidConfig(
            f"compression={compression!r} is not supported; use none, gzip, lz4 or zstd"
        ) from e
    if transactional_id is not None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidConfig(
                f"transactional_id={transactional_id!r} must be a non-empty string"
            )
        if enable_idempotence is False:
            raise InvalidConfig(
                "a transactional producer is idempotent: drop enable_idempotence=False or "
                "the transactional_id"
            )
        if isinstance(transaction_timeout_ms, bool) or not isinstance(
            transaction_timeout_ms, int
        ) or transaction_timeout_ms <= 0:
            raise InvalidConfig(
                f"transaction_timeout_ms={transaction_timeout_ms!r} must be a positive "
                "number of milliseconds"
            )
        enable_idempotence = True
    if enable_idempotence is None:  # Kafka's rule: on unless a setting conflicts with it
        enable_idempotence = acks_n == -1 and retries > 0 and max_in_flight <= 5
    elif enable_idempotence:
        if retries == 0:
            raise InvalidConfig(
                "enable_idempotence=True needs retries > 0 (got retries=0); the point of "
                "idempotence is that a retry writes once"
            )
        if acks_n != -1:
            raise InvalidConfig(
                f"enable_idempotence=True needs acks='all' (got acks={acks!r}); set acks='all' "
                "or enable_idempotence=False"
            )
        if max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT:
            raise InvalidConfig(
                f"enable_idempotence=True allows max_in_flight <= 5 (got {max_in_flight})"
            )
    return ProducerConfig(
        acks_n, linger_ms, batch_size, buffer_memory, max_block_ms, max_request_size, codec,
        retries, retry_backoff_ms, request_timeout_ms, delivery_timeout_ms, max_in_flight,
        bool(enable_idempotence), transactional_id, transaction_timeout_ms,
    )  # fmt: skip
