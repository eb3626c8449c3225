"""Plain value types shared by the public API: what users pass in and get back."""

from __future__ import annotations

from typing import NamedTuple

# Kafka's ACL model, re-exported for Admin.create_acls and the like.
from rafka.cluster.acls import (  # noqa: F401
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rafka.errors import RafkaError


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
    """One partition as the controller sees it. ``leader`` is a broker id (-1: none);
    ``leader_epoch`` grows by one per election; ``replicas`` lists the replica set with the
    preferred leader first, ``isr`` those in sync. While a reassignment runs, ``adding`` and
    ``removing`` name the replicas it brings in and takes out (both are in ``replicas``
    until it completes; empty tuples otherwise). ``offline`` is True when the partition has
    no live leader, so it can be neither written nor read. ``starting`` names the brokers
    whose replica is still starting (a new topic's, say): until its leader's replica runs,
    writes and reads wait (retriable LeaderNotAvailable)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: list
    isr: list
    adding: list | tuple = ()
    removing: list | tuple = ()
    offline: bool = False
    starting: list | tuple = ()

    @property
    def replication_factor(self) -> int:
        """The replicas the partition is meant to have now: those a reassignment is still
        adding do not count until it completes (as Kafka counts)."""
        return len(self.replicas) - len(self.adding)

    @property
    def under_replicated(self) -> bool:
        """Fewer replicas in sync than the replication factor (Kafka's under-replicated
        partition; without a reassignment, fewer in sync than ``replicas``)."""
        return len(self.isr) < self.replication_factor

    @property
    def reassigning(self) -> bool:
        """A reassignment of this partition is in progress."""
        return bool(self.adding or self.removing)


class TopicDescription(NamedTuple):
    name: str
    topic_id: str
    internal: bool
    partitions: list  # of PartitionDescription, by partition number
    config: dict  # Kafka-named properties, defaults included


class BrokerDescription(NamedTuple):
    """A data disk of the cluster. ``rack`` comes from its node's ``rafka-rack`` label
    (None: no rack). A ``fenced`` broker missed its heartbeats and a probe: the controller
    has taken it out of every ISR and leadership until its next heartbeat unfences it."""

    broker_id: int
    disk: str
    alive: bool
    rack: str | None = None
    fenced: bool = False


class ElectionResult(NamedTuple):
    """The outcome of a leader election for one partition (``Admin.elect_leaders``).
    ``leader`` is the partition's leader afterwards (-1: none); ``error`` is None when a
    leader was elected, else the typed error: ElectionNotNeeded when the preferred replica
    leads already, PreferredLeaderNotAvailable when it is not alive and in sync, ..."""

    topic: str
    partition: int
    leader: int
    error: RafkaError | None


class OffsetAndMetadata(NamedTuple):
    """A committed position: ``offset`` is the next record the group will read; ``metadata``
    is the caller's string stored with it; ``leader_epoch`` is -1 when unknown."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """What a consumer tells a transactional producer of its group membership
    (``consumer.group_metadata()``), so offsets sent in a transaction are refused once the
    member is fenced by a newer generation (KIP-447). ``generation_id`` is -1 and
    ``member_id`` "" for a consumer that is not a member of a generation."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class GroupListing(NamedTuple):
    """One consumer group as ``Admin.list_groups`` sees it. ``state`` is Kafka's: Empty,
    PreparingRebalance, CompletingRebalance or Stable."""

    group_id: str
    state: str
    protocol_type: str
    members: int


class MemberDescription(NamedTuple):
    """A member of a group: its member id, its static ``group_instance_id`` (None when
    dynamic), the client's id and host, and the partitions assigned to it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list  # of TopicPartition


class GroupPartitionOffsets(NamedTuple):
    """Progress of a group on one partition: the committed offset (None when it has none),
    the partition's log end offset (its high watermark), the lag between them (None without
    a commit), and the member that owns the partition now (None when unassigned)."""

    topic: str
    partition: int
    committed: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None
    metadata: str = ""


class GroupDescription(NamedTuple):
    """A consumer group (``Admin.describe_group``): its state, protocol (the assignor in
    use), generation, leader, members and, per partition it has committed or owns, its
    offsets and lag."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str | None
    members: list  # of MemberDescription
    offsets: list  # of GroupPartitionOffsets, sorted by topic and partition

    @property
    def total_lag(self) -> int:
        return sum(o.lag or 0 for o in self.offsets)


class TransactionListing(NamedTuple):
    """One transactional id as ``Admin.list_transactions`` sees it. ``state`` is Kafka's name:
    Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or
    PrepareEpochFence."""

    transactional_id: str
    producer_id: int
    state: str


class TransactionDescription(NamedTuple):
    """A transactional id's record at its coordinator (``Admin.describe_transactions``): the
    producer id and epoch its transaction writes with, its state, its timeout, the partitions
    the transaction holds (TopicPartition, sorted; empty unless Ongoing or Prepare*), when the
    current transaction began (``start_ms``, ms since the epoch; -1 when none runs) and when
    the record last changed."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    partitions: list  # of TopicPartition
    start_ms: int
    last_update_ms: int


class ProducerState(NamedTuple):
    """A producer as a partition's leader knows it (``Admin.describe_producers``, Kafka's
    DescribeProducers): its epoch there, the sequence of its last batch (-1: none kept), that
    batch's timestamp, the coordinator epoch of the last marker it got (-1: none), and the
    first offset of its open transaction in the partition (-1: none open)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int


class HangingTransaction(NamedTuple):
    """An open transaction in a partition that no coordinator will end
    (``Admin.find_hanging_transactions``): the partition, the producer as its leader knows
    it, and the first offset of the transaction there. It holds the partition's last stable
    offset, so read_committed consumers wait at ``start_offset`` until
    ``Admin.abort_transaction`` ends it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


class BalancerMove(NamedTuple):
    """A replica move the balancer planned: ``(topic, partition)`` goes to ``replicas``, the
    replica on ``source`` replaced by one on ``destination``, for ``goal``."""

    topic: str
    partition: int
    replicas: list[int]
    source: int
    destination: int
    goal: str


class BalancerPlan(NamedTuple):
    """What a balancer plan moves (replicas, and leaderships as (topic, partition, leader,
    goal)) and what it leaves wrong (goal -> descriptions)."""

    moves: list[BalancerMove]
    leader_moves: list[tuple[str, int, int, str]]
    violations: dict[str, list[str]]


class BalancerStatus(NamedTuple):
    """The balancer: its mode and the goals it pursues now, draining brokers, dead ones
    (broker -> ms since it was last live) and the healing delay, reassignments in flight,
    replicas and leaders per broker, and ``pending``: what a rebalance would do now.

    Per broker, from its load reports (every ``broker.load.report.interval.ms``): its disk's
    ``disk_used`` and ``disk_capacity`` in bytes (capacity 0: not reported yet), and its
    traffic as the balancer's goals count it, in bytes/s: ``bytes_in_per_s`` the producers'
    bytes in of every partition it holds a replica of (a follower stores what its leader
    takes in), ``bytes_out_per_s`` the bytes consumers fetch from the partitions it leads."""

    mode: str
    goals: list[str]
    balancing_node_add: bool
    draining: list[int]
    dead: dict[int, int]
    heal_after_ms: int
    in_flight: list[dict]
    replicas: dict[int, int]
    leaders: dict[int, int]
    moves_started: int
    pending: BalancerPlan
    disk_used: dict[int, int]
    disk_capacity: dict[int, int]
    bytes_in_per_s: dict[int, float]
    bytes_out_per_s: dict[int, float]
    #: The autoscaler (``partition.autoscaling.enable``): ``enabled``, brokers ``wanted`` and
    #: why (``reasons``), disk nodes ``requested`` of Ray, the broker it is ``retiring``,
    #: those ``retired``, and the ``removable`` ones (on ephemeral disks).
    autoscaling: dict | None = None
    #: Replicas moved between host actors by load (``replicas.per.actor`` > 1).
    host_packing: dict | None = None


class UserDescription(NamedTuple):
    """A user the cluster authenticates (SASL/SCRAM and PLAIN): its mechanisms, each with
    its PBKDF2 iterations (Kafka's DescribeUserScramCredentials answer)."""

    name: str
    mechanisms: dict[str, int]
