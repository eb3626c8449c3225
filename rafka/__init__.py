"""rafka: a Kafka-class distributed commit log built as an actor cluster on Ray.

This package is the public API. It imports nothing heavy (no Ray) at import time, so the
storage engine and the CLI's offline tools load fast; ``connect`` loads Ray when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rafka import errors
from rafka.errors import RafkaError
from rafka.types import (
    AclBinding,
    AclBindingFilter,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    Record,
    RecordMetadata,
    TopicPartition,
)

if TYPE_CHECKING:
    from rafka.connection import Cluster

__version__ = "0.1.0"


def connect(address: str | None = None, **kwargs: Any) -> "Cluster":
    """Connect to (or start) a rafka cluster; see ``rafka.connection.connect``."""
    from rafka.connection import connect as _connect

    return _connect(address, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Cluster":
        from rafka.connection import Cluster

        return Cluster
    if name == "ConsumerRebalanceListener":
        from rafka.clients.rebalance_listener import ConsumerRebalanceListener

        return ConsumerRebalanceListener
    raise AttributeError(f"module 'rafka' has no attribute {name!r}")


__all__ = [
    "connect", "Cluster", "errors", "RafkaError", "TopicPartition", "Record", "RecordMetadata",
    "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerGroupMetadata",
    "ConsumerRebalanceListener", "AclBinding", "AclBindingFilter", "__version__",
]  # fmt: skip
