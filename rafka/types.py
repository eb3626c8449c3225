"""Plain value types shared by the public API: what users pass in and get back."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 with ``acks=0`` (the producer
    does not wait for an answer). ``timestamp`` is ms since the epoch: the record's own, or
    the log-append time for topics with ``message.timestamp.type=LogAppendTime``."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Record(NamedTuple):
    """One consumed record. ``headers`` is a sequence of (str, bytes | None) pairs (an empty
    tuple when the record has none); ``key`` and ``value`` are deserialized when the consumer has
    deserializers, else bytes (or None)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: object
    value: object
    headers: list | tuple


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class PartitionDescription(NamedTuple):
    partition: int
    leader: int
    leader_epoch: int
    replicas: list
    isr: list


class TopicDescription(NamedTuple):
    name: str
    topic_id: str
    internal: bool
    partitions: list  # of PartitionDescription, by partition number
    config: dict  # Kafka-named properties, defaults included


class BrokerDescription(NamedTuple):
    broker_id: int
    disk: str
    alive: bool
