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


class UnsupportedForMessageFormat(RafkaError):
    """A batch's magic (message format version) is not 2, the only one rafka stores."""

    errno = 43


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


class InvalidProducerIdMapping(RafkaError):
    """The producer id is not the one the transaction coordinator holds for this
    transactional id (it expired, or another producer took the id over)."""

    errno = 49


class InvalidTransactionTimeout(RafkaError):
    """``transaction_timeout_ms`` is not positive or is above the cluster's
    ``transaction.max.timeout.ms``."""

    errno = 50


class ConcurrentTransactions(RafkaError):
    """The transactional id's previous transaction is still completing (its markers are being
    written); the client retries after a short wait."""

    errno = 51
    retriable = True


class TransactionCoordinatorFenced(RafkaError):
    """A transaction coordinator that lost its shard wrote a marker; the new coordinator's
    markers win."""

    errno = 52


class UnstableOffsetCommit(RafkaError):
    """The group has offsets committed inside a transaction that has not ended yet; asked
    with ``require_stable``, the fetch is retried until it ends."""

    errno = 88
    retriable = True


class TransactionalIdNotFound(RafkaError):
    """No transaction coordinator holds this transactional id."""

    errno = 105


class TransactionAbortable(RafkaError):
    """The current transaction cannot commit (a write to it failed, or it timed out and the
    coordinator aborted it): call ``abort_transaction()``, then begin a new one."""

    errno = 120


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


class PolicyViolation(RafkaError):
    """A request the cluster could carry out only by breaking one of its limits (a topic
    whose replicas would not fit in the memory of their brokers' nodes, say)."""

    errno = 44


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


class NoReassignmentInProgress(RafkaError):
    """A reassignment was cancelled for a partition that is not being reassigned."""

    errno = 85


class StaleControllerEpoch(RafkaError):
    """A request came from a controller older than one the replica already heard from:
    another controller has taken over since."""

    errno = 11


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


# -- consumer groups ---------------------------------------------------------------------------


class OffsetMetadataTooLarge(RafkaError):
    """The metadata string of an offset commit is longer than offset.metadata.max.bytes."""

    errno = 12


class CoordinatorLoadInProgress(RafkaError):
    """The group coordinator is still reading its groups back from __consumer_offsets."""

    errno = 14
    retriable = True


class CoordinatorNotAvailable(RafkaError):
    """The group coordinator cannot be reached, or the group is being removed. Retry."""

    errno = 15
    retriable = True


class NotCoordinator(RafkaError):
    """The request went to a coordinator that does not own the group. Find it again."""

    errno = 16
    retriable = True


class CoordinatorFenced(NotCoordinator):
    """A later incarnation of this group coordinator has taken over its partition of
    __consumer_offsets, so this one may no longer write there. Clients find the coordinator
    again (NotCoordinator's errno), which reaches the current incarnation."""


class CoordinatorEpochExhausted(RafkaError):
    """A coordinator shard has used every producer epoch its writes can carry."""


class IllegalGeneration(RafkaError):
    """A heartbeat, sync or commit came from an older generation of the group: the member
    missed a rebalance and must rejoin."""

    errno = 22


class InconsistentGroupProtocol(RafkaError):
    """The member's protocol type or assignors share nothing with the group's members."""

    errno = 23


class InvalidGroupId(RafkaError):
    """The group id is empty or not a string."""

    errno = 24


class UnknownMemberId(RafkaError):
    """The group does not know this member id (its session expired or it left): rejoin."""

    errno = 25


class InvalidSessionTimeout(RafkaError):
    """session_timeout_ms is outside the cluster's group.min/max.session.timeout.ms."""

    errno = 26


class RebalanceInProgress(RafkaError):
    """The group is rebalancing: the member must rejoin before it can sync or commit."""

    errno = 27


class NonEmptyGroup(RafkaError):
    """The group has active members, so it cannot be deleted or have its offsets reset."""

    errno = 68


class GroupIdNotFound(RafkaError):
    """No group with this id exists (it has no members and no committed offsets)."""

    errno = 69


class GroupMaxSizeReached(RafkaError):
    """The group already has group.max.size members."""

    errno = 81


class MemberIdRequired(RafkaError):
    """KIP-394: a dynamic member's first join is answered with the member id it must join
    with (``member_id``); the client joins again naming it."""

    errno = 79

    def __init__(self, message: str = "", member_id: str = "") -> None:
        super().__init__(message)
        self.member_id = member_id

    def __reduce__(self):  # keep the id across processes (Ray pickles errors)
        return (type(self), (str(self), self.member_id))


class FencedInstanceId(RafkaError):
    """Another consumer joined with the same group_instance_id, replacing this one."""

    errno = 82


class CommitFailed(RafkaError):
    """An offset commit was refused and cannot be retried as it is: the member was removed
    from the group or the partition is not assigned to it (Kafka's CommitFailedException)."""


class TopicAuthorizationFailed(RafkaError):
    """The principal may not do this to the topic (Kafka's ACLs)."""

    errno = 29


class ClusterAuthorizationFailed(RafkaError):
    """The principal may not do this to the cluster (Kafka's ACLs)."""

    errno = 31


class UnsupportedSaslMechanism(RafkaError):
    """The client asked for a SASL mechanism the listener does not enable."""

    errno = 33


class IllegalSaslState(RafkaError):
    """A SASL request came out of order (authenticate before handshake, or twice)."""

    errno = 34


class UnsupportedVersion(RafkaError):
    """The request's API version is outside the range the listener advertises."""

    errno = 35


class InvalidRequest(RafkaError):
    """A request frame could not be decoded, or broke the protocol's rules."""

    errno = 42


class TransactionalIdAuthorizationFailed(RafkaError):
    """The principal may not use the transactional id (Kafka's ACLs)."""

    errno = 53


class SecurityDisabled(RafkaError):
    """A security request reached a listener that has no security set up."""

    errno = 54


class SaslAuthenticationFailed(RafkaError):
    """Wrong SASL credentials (or an unknown user): the connection is closed after this."""

    errno = 58


class InvalidPrincipalType(RafkaError):
    """An ACL names a principal that is not ``User:<name>`` (or ``User:*``)."""

    errno = 67


class ResourceNotFound(RafkaError):
    """The user (or its credential for that mechanism) does not exist."""

    errno = 91


class UnacceptableCredential(RafkaError):
    """A SCRAM credential was refused: an unknown mechanism, iterations out of range, or a
    malformed salt or key."""

    errno = 93


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
    "UnsupportedForMessageFormat",
    "InvalidProducerEpoch",
    "KafkaStorageError",
    "UnsupportedCompressionType",
    "InvalidRecord",
    "ProducerFenced",
    "InvalidTxnState",
    "InvalidProducerIdMapping",
    "InvalidTransactionTimeout",
    "ConcurrentTransactions",
    "TransactionCoordinatorFenced",
    "UnstableOffsetCommit",
    "TransactionalIdNotFound",
    "TransactionAbortable",
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
    "NoReassignmentInProgress",
    "StaleControllerEpoch",
    "PreferredLeaderNotAvailable",
    "EligibleLeadersNotAvailable",
    "OffsetMetadataTooLarge",
    "CoordinatorLoadInProgress",
    "CoordinatorNotAvailable",
    "NotCoordinator",
    "CoordinatorFenced",
    "CoordinatorEpochExhausted",
    "IllegalGeneration",
    "InconsistentGroupProtocol",
    "InvalidGroupId",
    "UnknownMemberId",
    "InvalidSessionTimeout",
    "RebalanceInProgress",
    "NonEmptyGroup",
    "GroupIdNotFound",
    "GroupMaxSizeReached",
    "FencedInstanceId",
    "CommitFailed",
    "TopicAuthorizationFailed",
    "ClusterAuthorizationFailed",
    "UnsupportedSaslMechanism",
    "IllegalSaslState",
    "UnsupportedVersion",
    "InvalidRequest",
    "TransactionalIdAuthorizationFailed",
    "SecurityDisabled",
    "SaslAuthenticationFailed",
    "InvalidPrincipalType",
    "ResourceNotFound",
    "UnacceptableCredential",
    "error_class",
]
