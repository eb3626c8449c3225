"""Topic configuration: Kafka's names, defaults and ranges, validated in one place.

``LogConfig.from_dict({"retention.ms": "3600000"})`` accepts Kafka's property names with int or
string values and raises InvalidConfig naming the property, the value and the allowed range.
Properties that belong to replication (``min.insync.replicas``, ...) are validated here too, so a
topic's whole config is checked once; the log itself ignores them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from rafka.errors import InvalidConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class ConfigKey:
    """One topic property: its Kafka name, the LogConfig field it fills, and its check."""

    name: str
    field: str
    default: Any
    parse: Callable[[str, Any], Any]
    doc: str


def _integer(low: int, high: int, unit: str = "") -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, bool):
            raise InvalidConfig(f"{name}={value!r} is a bool; give an integer{unit}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise InvalidConfig(
                f"{name}={value!r} is not an integer; give an integer in [{low}, {high}]{unit}"
            ) from None
        if isinstance(value, float) and value != number:
            raise InvalidConfig(f"{name}={value!r} is not a whole number{unit}")
        if not low <= number <= high:
            raise InvalidConfig(f"{name}={number} is out of range; allowed: [{low}, {high}]{unit}")
        return number

    return parse


def _ratio(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidConfig(f"{name}={value!r} is not a number; give a ratio in [0, 1]") from None
    if not 0.0 <= number <= 1.0:
        raise InvalidConfig(f"{name}={number} is out of range; allowed: [0, 1]")
    return number


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise InvalidConfig(f"{name}={value!r} is not allowed; allowed: {', '.join(choices)}")
        return text

    return parse


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfig(f"{name}={value!r} is not a boolean; allowed: true, false")


def _cleanup_policy(name: str, value: Any) -> frozenset[str]:
    parts = value if isinstance(value, (list, tuple, set, frozenset)) else str(value).split(",")
    policy = frozenset(str(p).strip() for p in parts if str(p).strip())
    if not policy or not policy <= {"delete", "compact"}:
        raise InvalidConfig(
            f"{name}={value!r} is not allowed; allowed: delete, compact, or compact,delete"
        )
    return policy


_MS = " ms"
_BYTES = " bytes"

CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", "segment_bytes", 1073741824, _integer(128, INT_MAX, _BYTES),
              "size at which the active segment is rolled"),
    ConfigKey("segment.ms", "segment_ms", 604800000, _integer(1, LONG_MAX, _MS),
              "age at which the active segment is rolled, even if not full"),
    ConfigKey("segment.index.bytes", "segment_index_bytes", 10485760,
              _integer(8, INT_MAX, _BYTES), "size at which a full offset index rolls the segment"),
    ConfigKey("index.interval.bytes", "index_interval_bytes", 4096,
              _integer(0, INT_MAX, _BYTES), "log bytes between two offset-index entries"),
    ConfigKey("flush.messages", "flush_messages", LONG_MAX, _integer(1, LONG_MAX),
              "records appended between two fsyncs"),
    ConfigKey("flush.ms", "flush_ms", LONG_MAX, _integer(0, LONG_MAX, _MS),
              "longest time data stays appended but not fsynced"),
    ConfigKey("retention.ms", "retention_ms", 604800000, _integer(-1, LONG_MAX, _MS),
              "age after which whole segments are deleted (-1: never)"),
    ConfigKey("retention.bytes", "retention_bytes", -1, _integer(-1, LONG_MAX, _BYTES),
              "log size past which the oldest segments are deleted (-1: never)"),
    ConfigKey("cleanup.policy", "cleanup_policy", frozenset({"delete"}), _cleanup_policy,
              "delete, compact, or both"),
    ConfigKey("delete.retention.ms", "delete_retention_ms", 86400000,
              _integer(0, LONG_MAX, _MS), "how long compaction keeps tombstones"),
    ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", 0, _integer(0, LONG_MAX, _MS),
              "records younger than this are never compacted"),
    ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", 0.5, _ratio,
              "share of uncompacted bytes that makes a log worth compacting"),
    ConfigKey("max.message.bytes", "max_message_bytes", 1048588, _integer(0, INT_MAX, _BYTES),
              "largest batch (after compression) the log accepts"),
    ConfigKey("message.timestamp.type", "message_timestamp_type", "CreateTime",
              _choice("CreateTime", "LogAppendTime"), "whose clock stamps the records"),
    ConfigKey("compression.type", "compression_type", "producer",
              _choice("producer", "uncompressed", "none", "gzip", "lz4", "zstd"),
              "codec the log stores batches in; 'producer' keeps the producer's"),
    ConfigKey("producer.id.expiration.ms", "producer_id_expiration_ms", 86400000,
              _integer(1, LONG_MAX, _MS), "idle time after which a producer's state is dropped"),
    ConfigKey("min.insync.replicas", "min_insync_replicas", 1, _integer(1, INT_MAX),
              "in-sync replicas an acks=all write needs"),
    ConfigKey("unclean.leader.election.enable", "unclean_leader_election_enable", False,
              _boolean, "whether an out-of-sync replica may become leader"),
)  # fmt: skip

_BY_NAME = {key.name: key for key in CONFIG_KEYS}


@dataclass(frozen=True)
class LogConfig:
    """A topic's validated configuration. Field docs: ``CONFIG_KEYS``."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: frozenset = frozenset({"delete"})
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    producer_id_expiration_ms: int = 86400000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_dict(cls, props: Mapping[str, Any] | None = None) -> "LogConfig":
        """Validate Kafka-named properties; unknown names and bad values raise InvalidConfig."""
        return cls().with_overrides(props or {})

    def with_overrides(self, props: Mapping[str, Any]) -> "LogConfig":
        changes = {}
        for name, value in props.items():
            key = _BY_NAME.get(name)
            if key is None:
                raise InvalidConfig(
                    f"unknown topic config {name!r}; known configs: {', '.join(sorted(_BY_NAME))}"
                )
            changes[key.field] = key.parse(name, value)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Kafka-named properties, in a form that ``from_dict`` reads back."""
        out = {}
        for key in CONFIG_KEYS:
            value = getattr(self, key.field)
            out[key.name] = ",".join(sorted(value)) if isinstance(value, frozenset) else value
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy
