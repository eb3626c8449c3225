"""Kafka's rules for topic names, and the internal topics users may not touch."""

from __future__ import annotations

import re

from rafka.errors import InvalidTopic

MAX_NAME_LENGTH = 249
LEGAL_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})


def validate_topic_name(name: object) -> str:
    """Return ``name`` if Kafka would accept it as a topic name, else raise InvalidTopic
    naming the rule it breaks."""
    if not isinstance(name, str):
        raise InvalidTopic(f"topic name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidTopic("topic name is empty; give 1-249 characters from [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(
            f"topic name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    if not LEGAL_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not LEGAL_CHARS.fullmatch(c)})
        raise InvalidTopic(
            f"topic name {name!r} contains {''.join(bad)!r}; "
            "legal characters are ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def collision_key(name: str) -> str:
    """Kafka forbids two topics whose names differ only in '.' versus '_' (metric names
    would collide); topics with the same key collide."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
