"""The cluster at a glance (``rafka status``): brokers and their disks, topics and where their
partitions lie, partitions short of in-sync replicas or without a leader, and consumer groups
with their lag, gathered into plain data (dicts and lists, JSON-ready) by
``cluster_overview``. The command line only formats what it returns.

Cost: one ``describe_cluster`` call (the controller asks each node agent for its disk), one
``describe_topics`` call for every topic, and, when ``__consumer_offsets`` exists, one
``list_groups`` and one ``describe_groups`` covering every group (a round to the
coordinators, a round to the partition leaders for log end offsets). Without
``__consumer_offsets`` no group can exist, so the coordinators are not asked (asking would
create the topic: a status must change nothing). When ``describe_groups`` fails (a
coordinator restarting), the groups are described one by one and each that still fails is
reported with its error instead of a description.

Units: disk sizes in bytes; offsets and lag in offsets (records, give or take the markers
and gaps of compaction); partition and replica counts are plain counts.
"""

from __future__ import annotations

from typing import Any, Iterable, TypedDict

from rafka.cluster.topics import CONSUMER_OFFSETS


class BrokerStatus(TypedDict):
    """One data disk (broker). Fields the node agent did not report (its node is down) are
    None; ``replicas`` and ``leaders`` count every topic, internal ones included."""

    broker_id: int
    disk: str
    rack: str | None
    alive: bool  # its node agent answered the controller just now
    fenced: bool  # missed heartbeats: out of every ISR and leadership until it returns
    registered: bool  # False: named in a replica set, unknown to the controller
    node_ip: str | None
    directory: str | None
    disk_total_bytes: int | None
    disk_free_bytes: int | None
    disk_used_bytes: int | None
    replicas: int  # partition replicas it holds
    leaders: int  # partitions it leads (offline partitions not counted)


class TopicPlacement(TypedDict):
    """The partitions of one topic on one broker, by partition number."""

    broker_id: int
    replicas: list[int]
    leaders: list[int]


class TopicStatus(TypedDict):
    name: str
    internal: bool
    partitions: int
    replication_factor: int  # the largest of its partitions' (they differ during a move)
    under_replicated: int  # partitions with fewer in-sync replicas than replicas
    offline: int  # partitions without a live leader
    placement: list[TopicPlacement]  # by broker id


class PartitionProblem(TypedDict):
    """A partition that is under-replicated, offline, or both."""

    topic: str
    partition: int
    leader: int  # broker id, -1: none
    replicas: list[int]  # preferred leader first
    isr: list[int]
    under_replicated: bool
    offline: bool


class GroupPartitionLag(TypedDict):
    topic: str
    partition: int
    committed: int | None  # None: nothing committed
    log_end_offset: int | None  # high watermark; None: unknown (no leader, topic gone)
    lag: int | None  # log end offset - committed; None when either is unknown
    member_id: str | None  # the member that owns it now; None: unassigned


class GroupStatus(TypedDict):
    """A consumer group. ``error`` is None when it was described; otherwise it names the
    failure (``"CoordinatorLoadInProgress: ..."``), ``state`` and ``members`` come from the
    group listing, and ``total_lag`` is None with no ``offsets``."""

    group_id: str
    state: str
    protocol_type: str
    members: int
    total_lag: int | None  # sum of the known per-partition lags
    offsets: list[GroupPartitionLag]  # per partition it has committed or a member owns
    error: str | None


class ClusterOverview(TypedDict):
    controller_disk: str
    metadata_offset: int  # offset of the controller's metadata log
    brokers: list[BrokerStatus]  # by broker id
    topics: int  # topics other than internal ones
    partitions: int  # partitions of those topics
    internal_topics: int  # __consumer_offsets and the like
    internal_partitions: int
    topic_list: list[TopicStatus]  # topics by name, then internal topics by name
    under_replicated_partitions: int  # internal topics included
    offline_partitions: int  # internal topics included
    problem_partitions: list[PartitionProblem]  # under-replicated or offline, by topic
    groups: list[GroupStatus]  # by group id
    groups_error: str | None  # the groups could not be listed at all (then groups is [])
    bootstrap_servers: str  # Kafka clients' bootstrap.servers ("" without Kafka listeners)


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _broker(raw: dict[str, Any]) -> BrokerStatus:
    total = _int_or_none(raw.get("disk_total_bytes"))
    free = _int_or_none(raw.get("disk_free_bytes"))
    return {
        "broker_id": raw["broker_id"], "disk": raw["disk"], "rack": raw.get("rack"),
        "alive": bool(raw.get("alive")), "fenced": bool(raw.get("fenced")), "registered": True,
        "node_ip": raw.get("node_ip"), "directory": raw.get("directory"),
        "disk_total_bytes": total, "disk_free_bytes": free,
        "disk_used_bytes": None if total is None or free is None else total - free,
        "replicas": 0, "leaders": 0,
    }  # fmt: skip


def _unregistered(broker_id: int) -> BrokerStatus:
    return {
        "broker_id": broker_id, "disk": "?", "rack": None, "alive": False, "fenced": False,
        "registered": False, "node_ip": None, "directory": None, "disk_total_bytes": None,
        "disk_free_bytes": None, "disk_used_bytes": None, "replicas": 0, "leaders": 0,
    }  # fmt: skip


def _topic(description: Any) -> TopicStatus:
    placement: dict[int, TopicPlacement] = {}
    for p in description.partitions:
        for b in p.replicas:
            placement.setdefault(b, {"broker_id": b, "replicas": [], "leaders": []})
            placement[b]["replicas"].append(p.partition)
        if not p.offline and p.leader >= 0:
            placement.setdefault(p.leader, {"broker_id": p.leader, "replicas": [], "leaders": []})
            placement[p.leader]["leaders"].append(p.partition)
    return {
        "name": description.name, "internal": bool(description.internal),
        "partitions": len(description.partitions),
        "replication_factor": max((p.replication_factor for p in description.partitions),
                                  default=0),
        "under_replicated": sum(1 for p in description.partitions if p.under_replicated),
        "offline": sum(1 for p in description.partitions if p.offline),
        "placement": [placement[b] for b in sorted(placement)],
    }  # fmt: skip


def _problems(descriptions: Iterable[Any]) -> list[PartitionProblem]:
    return [
        {"topic": d.name, "partition": p.partition, "leader": p.leader,
         "replicas": list(p.replicas), "isr": list(p.isr),
         "under_replicated": bool(p.under_replicated), "offline": bool(p.offline)}
        for d in descriptions
        for p in d.partitions
        if p.under_replicated or p.offline
    ]  # fmt: skip


def _described_group(listing: Any, d: Any) -> GroupStatus:
    return {
        "group_id": d.group_id, "state": d.state,
        "protocol_type": d.protocol_type or listing.protocol_type or "",
        "members": len(d.members), "total_lag": d.total_lag,
        "offsets": [
            {"topic": o.topic, "partition": o.partition, "committed": o.committed,
             "log_end_offset": None if o.log_end_offset is None or o.log_end_offset < 0
             else o.log_end_offset,
             "lag": o.lag, "member_id": o.member_id}
            for o in d.offsets
        ],
        "error": None,
    }  # fmt: skip


def _failed_group(listing: Any, error: BaseException) -> GroupStatus:
    return {
        "group_id": listing.group_id, "state": listing.state,
        "protocol_type": listing.protocol_type or "", "members": listing.members,
        "total_lag": None, "offsets": [], "error": _error_text(error),
    }  # fmt: skip


def _groups(admin: Any) -> tuple[list[GroupStatus], str | None]:
    """Every group with its lag, and the error that kept them from being listed (if any)."""
    try:
        listings = list(admin.list_groups())
    except Exception as e:  # a status reports what it cannot see; it does not fail on it
        return [], _error_text(e)
    if not listings:
        return [], None
    try:
        described = admin.describe_groups([g.group_id for g in listings])
        return [_described_group(g, d) for g, d in zip(listings, described)], None
    except Exception:  # find out which group failed: one by one below
        pass
    out: list[GroupStatus] = []
    for listing in listings:
        try:
            (d,) = admin.describe_groups([listing.group_id])
            out.append(_described_group(listing, d))
        except Exception as e:  # shown on the group's row
            out.append(_failed_group(listing, e))
    return out, None


def cluster_overview(admin: Any) -> ClusterOverview:
    """The cluster at a glance, as JSON-ready plain data (see ``ClusterOverview``).

    ``admin`` is a ``rafka.clients.admin.Admin`` (or anything with its ``describe_cluster``,
    ``describe_topics``, ``list_groups`` and ``describe_groups``). Raises what
    ``describe_cluster`` and ``describe_topics`` raise (the controller is unreachable); a
    failure to list or describe groups is reported in the result instead."""
    cluster = admin.describe_cluster()
    descriptions = sorted(admin.describe_topics(None), key=lambda d: (bool(d.internal), d.name))
    brokers = {raw["broker_id"]: _broker(raw) for raw in cluster.get("brokers", ())}
    topics = [_topic(d) for d in descriptions]
    for t in topics:
        for place in t["placement"]:
            broker = brokers.setdefault(place["broker_id"], _unregistered(place["broker_id"]))
            broker["replicas"] += len(place["replicas"])
            broker["leaders"] += len(place["leaders"])
    user = [t for t in topics if not t["internal"]]
    internal = [t for t in topics if t["internal"]]
    if any(d.name == CONSUMER_OFFSETS for d in descriptions):
        groups, groups_error = _groups(admin)
    else:
        groups, groups_error = [], None
    return {
        "controller_disk": cluster.get("controller_disk", ""),
        "metadata_offset": cluster.get("metadata_offset", -1),
        "brokers": [brokers[b] for b in sorted(brokers)],
        "topics": len(user),
        "partitions": sum(t["partitions"] for t in user),
        "internal_topics": len(internal),
        "internal_partitions": sum(t["partitions"] for t in internal),
        "topic_list": topics,
        "under_replicated_partitions": sum(t["under_replicated"] for t in topics),
        "offline_partitions": sum(t["offline"] for t in topics),
        "problem_partitions": _problems(descriptions),
        "groups": groups,
        "groups_error": groups_error,
        "bootstrap_servers": cluster.get("bootstrap_servers", ""),
    }
