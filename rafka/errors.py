"""Typed errors, named after Kafka's error codes.

Every error carries Kafka's numeric ``errno`` and a ``retriable`` flag. Clients decide whether
to retry from the flag, never from the message. Messages say what was wrong and what to do.

This module imports nothing from the rest of rafka, so every layer (storage included) may
raise these errors without pulling in Ray.
"""

from __future__ import annotations


class RafkaError(Exception):
    """Base class of every rafka error."""

    errno: int = -1
    retriable: bool = False


class CorruptRecord(RafkaError):
    """A record batch failed a length, magic or CRC check."""

    errno = 2
    retriable = True


class OffsetOutOfRange(RafkaError):
    """The requested offset is below the log start offset or above the log end offset."""

    errno = 1


class UnknownTopicOrPartition(RafkaError):
    """The topic or partition does not exist."""

    errno = 3
    retriable = True


class InvalidFetchSize(RafkaError):
    """A fetch asked for a negative or zero number of bytes."""

    errno = 4


class NotLeaderOrFollower(RafkaError):
    """The replica asked is not the leader (or not a replica) of the partition."""

    errno = 6
    retriable = True


class RecordTooLarge(RafkaError):
    """A record or batch is larger than the limit that applies to it."""

    errno = 10


class InvalidTopic(RafkaError):
    """A topic name breaks Kafka's naming rules, or the topic is internal."""

    errno = 17


class RecordListTooLarge(RafkaError):
    """A request carries more bytes than ``segment.bytes`` can hold."""

    errno = 18


class NotEnoughReplicas(RafkaError):
    """The in-sync replica set is smaller than ``min.insync.replicas``."""

    errno = 19
    retriable = True


class NotEnoughReplicasAfterAppend(RafkaError):
    """The batch was written to the leader, but the ISR shrank below min.insync.replicas
    before it was replicated: it may or may not survive a failover. Retried by the producer
    (idempotence keeps the retry from writing it twice)."""

    errno = 20
    retriable = True


class InvalidTimestamp(RafkaError):
    """A timestamp is out of the accepted range."""

    errno = 32


class InvalidConfig(RafkaError):
    """A configuration name is unknown or its value is out of range."""

    errno = 40


class OutOfOrderSequence(RafkaError):
    """An idempotent producer's batch does not follow the last sequence the log holds."""

    errno = 45


class InvalidProducerEpoch(RafkaError):
    """A producer wrote with an epoch older than the one the log holds: it has been fenced."""

    errno = 47


class KafkaStorageError(RafkaError):
    """The data directory cannot be read or written."""

    errno = 56
    retriable = True


class UnsupportedCompressionType(RafkaError):
    """A batch names a compression codec rafka does not know."""

    errno = 76


class InvalidRecord(RafkaError):
    """A batch is well formed but breaks a rule of the log it is written to."""

    errno = 87


class ProducerFenced(InvalidProducerEpoch):
    """A newer producer with the same transactional id has taken over."""

    errno = 90


class InvalidTxnState(RafkaError):
    """A transactional call came in a state that does not allow it."""

    errno = 48


class GroupAuthorizationFailed(RafkaError):
    """The caller may not use the consumer group."""

    errno = 30


class LeaderNotAvailable(RafkaError):
    """The partition has no live leader right now (it is being created or moved)."""

    errno = 5
    retriable = True


class RequestTimedOut(RafkaError):
    """A request or a blocking client call did not finish within its time limit."""

    errno = 7
    retriable = True


class BrokerNotAvailable(RafkaError):
    """The cluster's services are not running, or a replica's actor cannot be reached."""

    errno = 8
    retriable = True


class TopicAlreadyExists(RafkaError):
    """A topic with that name exists already."""

    errno = 36


class InvalidPartitions(RafkaError):
    """A partition count is not positive, or would shrink a topic."""

    errno = 37


class InvalidReplicationFactor(RafkaError):
    """The replication factor is not positive or exceeds the number of brokers."""

    errno = 38


class IllegalState(RafkaError):
    """A client was used in a state that does not allow the call (for example after close)."""


class FencedLeaderEpoch(RafkaError):
    """A request carried an older leader epoch than the replica's: the sender's view of the
    partition is stale. Refresh metadata and retry."""

    errno = 74
    retriable = True


class UnknownLeaderEpoch(RafkaError):
    """A request carried a newer leader epoch than the replica knows yet: the replica has
    not heard of the latest election. Retry shortly."""

    errno = 75
    retriable = True


class InvalidReplicaAssignment(RafkaError):
    """A replica assignment or ISR names brokers that cannot hold the partition."""

    errno = 39


class InvalidUpdateVersion(RafkaError):
    """An ISR change was based on an older partition state than the controller's."""

    errno = 95
    retriable = True


class IneligibleReplica(RafkaError):
    """A replica that is not alive (or fenced) was proposed as an ISR member."""

    errno = 107
    retriable = True


class ElectionNotNeeded(RafkaError):
    """A preferred-leader election was asked for a partition already led by its preferred
    replica."""

    errno = 84


class EligibleLeadersNotAvailable(RafkaError):
    """No replica may lead the partition: none of its in-sync replicas is alive (and, for an
    unclean election, no replica at all is)."""

    errno = 83
    retriable = True


class PreferredLeaderNotAvailable(RafkaError):
    """The preferred replica is not alive or not in sync, so it cannot lead yet."""

    errno = 80
    retriable = True


_BY_ERRNO: dict[int, type[RafkaError]] = {}


def error_class(errno: int) -> type[RafkaError]:
    """The error class for a Kafka error code (RafkaError for unknown codes)."""
    if not _BY_ERRNO:
        for cls in _all_subclasses(RafkaError):
            if cls.errno >= 0:
                _BY_ERRNO.setdefault(cls.errno, cls)
    return _BY_ERRNO.get(errno, RafkaError)


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


__all__ = [
    "RafkaError",
    "CorruptRecord",
    "OffsetOutOfRange",
    "UnknownTopicOrPartition",
    "InvalidFetchSize",
    "NotLeaderOrFollower",
    "RecordTooLarge",
    "InvalidTopic",
    "RecordListTooLarge",
    "NotEnoughReplicas",
    "NotEnoughReplicasAfterAppend",
    "InvalidTimestamp",
    "InvalidConfig",
    "OutOfOrderSequence",
    "InvalidProducerEpoch",
    "KafkaStorageError",
    "UnsupportedCompressionType",
    "InvalidRecord",
    "ProducerFenced",
    "InvalidTxnState",
    "GroupAuthorizationFailed",
    "LeaderNotAvailable",
    "RequestTimedOut",
    "BrokerNotAvailable",
    "TopicAlreadyExists",
    "InvalidPartitions",
    "InvalidReplicationFactor",
    "IllegalState",
    "FencedLeaderEpoch",
    "UnknownLeaderEpoch",
    "InvalidReplicaAssignment",
    "InvalidUpdateVersion",
    "IneligibleReplica",
    "ElectionNotNeeded",
    "PreferredLeaderNotAvailable",
    "EligibleLeadersNotAvailable",
    "error_class",
]
