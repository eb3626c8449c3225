"""The cluster's metadata image and the records that change it.

The controller never edits the image directly: every change is a record, appended to the
metadata log first and then applied here, so replaying the log (after a snapshot) rebuilds
exactly the same image. Records are plain dicts (msgpack-friendly) with a ``type`` field:

    broker      {broker_id, disk, rack}                a disk joined (or re-joined)
    topic       {topic_id, name, config, internal,     a topic was created (``created_at``:
                 created_at}                           the offset of this record, so of two
                                                       topics of one name the later is known)
    partition   {topic_id, partition, replicas, isr,   a partition was created or its
                 leader, leader_epoch,                 leadership, ISR or replica set
                 partition_epoch, adding, removing,    changed (whole state)
                 elr, unclean_logs}
    config      {topic_id, config}                     a topic's overrides were replaced
    delete      {topic_id}                             a topic was deleted
    deleted_topics {topic_ids}                         topics deleted before a snapshot
    producer_ids {next}                                ids below ``next`` are handed out
    replica_epoch {topic_id, partition, broker_id,     a replica (re)started and checked in:
                   epoch, node}                        its new replica epoch, its Ray node
    replica_epochs {next}                              replica epochs below ``next`` are used
    broker_node {broker_id, node}                      a broker's node agent runs on this Ray
                                                       node (a new one after a node restart)
    replica_nodes {node, replicas: [[topic_id,         these replicas run on this Ray node
                   partition, broker_id], ...]}        with their log intact (created, or seen)
    fenced      {broker_id, fenced}                    a broker was fenced (missed its
                                                       heartbeats) or came back
    drain       {broker_id, draining, by}              an admin (or, ``by`` "autoscaler", the
                                                       autoscaler) asked for a broker to be
                                                       emptied (or no longer)
    retire      {broker_id}                            an emptied broker was removed for good
                                                       (its node given back to Ray); its id
                                                       and disk are never used again
    controller  {epoch}                                a controller process took over the log
    settings    {settings}                             the cluster settings now in force
    host_slots  {broker_id, next}                      host slots below ``next`` were used
    request     {request_id, kind, topic_id}           an admin request was carried out on
                                                       this topic (a retry is answered, not
                                                       redone)
    hosted      {topic_id, partition, broker_id, slot} this replica lives in host actor
                                                       ``slot`` of its broker (see
                                                       ``rafka.cluster.hosting``)
    user, user_delete, acl_create, acl_delete          users' SCRAM credentials and ACLs
                                                       (``rafka.cluster.security_state``)

Replica epochs play the part of KRaft's broker epochs, per replica: a number the controller
hands a replica each time it starts, from one counter that only grows and is persisted here,
so neither a clock that steps back nor a controller restart can make a replica that lost data
look like the one that caught up (KIP-903).

``check`` runs the records of one append against the image before they are written: a record
that could not be applied (a partition of a topic deleted meanwhile, a malformed state) is
refused then, never written, so the log always replays.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable

from rafka.cluster.security_state import SECURITY_KINDS, SecurityState, check_record
from rafka.errors import InvalidRecord, UnknownTopicOrPartition

NO_LEADER = -1

#: Admin request ids remembered for answering retries (oldest forgotten first). A retry
#: comes within seconds of its first attempt; this covers thousands of requests since.
REMEMBERED_REQUESTS = 4096


#: A replica's log as it reported it at an unclean restart: (last leader epoch, log end offset).
LogPosition = tuple[int, int]


@dataclass
class PartitionState:
    """Leadership of one partition. Invariants: ``isr`` is a non-empty subset of ``replicas``;
    ``leader`` is in ``isr`` or is NO_LEADER; ``leader_epoch`` grows by one per election (so
    a log's epochs say which leader wrote what); ``partition_epoch`` grows by one per change
    of any kind, so a stale ISR proposal can be refused. ``adding`` and ``removing`` are
    the replicas a reassignment brings in and takes out; both are in ``replicas`` until it
    completes. ``replicas[0]`` is the preferred leader.

    ``elr`` (eligible leader replicas, Kafka's KIP-966) are replicas outside the ISR that
    still hold every committed record: they left the ISR while it was below
    ``min.insync.replicas``, and a leader does not advance its high watermark then, so
    nothing was committed without them. ``isr`` and ``elr`` are disjoint; together they are
    the *candidates* for leadership. ``unclean_logs`` are the replicas that restarted after an
    unclean shutdown while the partition had no leader (so they may have lost their unflushed
    tail), with the log position each reported: candidates among them are not preferred, and
    once every candidate is among them the longest of all their logs leads."""

    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    elr: list[int] = field(default_factory=list)
    unclean_logs: dict[int, LogPosition] = field(default_factory=dict)

    def to_record(self, topic_id: str) -> dict[str, Any]:
        return {
            "type": "partition", "topic_id": topic_id, "partition": self.partition,
            "replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
            "adding": list(self.adding), "removing": list(self.removing),
            "elr": list(self.elr),
            # msgpack maps need string keys: a list of [broker, epoch, end] instead.
            "unclean_logs": [[b, e, o] for b, (e, o) in self.unclean_logs.items()],
        }  # fmt: skip

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "PartitionState":
        return cls(
            record["partition"], list(record["replicas"]), list(record["isr"]),
            record["leader"], record["leader_epoch"], record.get("partition_epoch", 0),
            list(record.get("adding", ())), list(record.get("removing", ())),
            list(record.get("elr", ())),
            {b: (e, o) for b, e, o in record.get("unclean_logs", ())},
        )  # fmt: skip

    @property
    def candidates(self) -> list[int]:
        """Replicas that may lead: the ISR, then the eligible leader replicas."""
        return self.isr + [b for b in self.elr if b not in self.isr]

    @property
    def target_replicas(self) -> list[int]:
        """The replica set once any reassignment in progress completes."""
        return [b for b in self.replicas if b not in self.removing]


@dataclass
class TopicState:
    topic_id: str
    name: str
    config: dict[str, Any]  # overrides only; defaults come from LogConfig
    internal: bool
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    created_at: int = -1  # metadata offset of its creation: later topics have larger ones


@dataclass(frozen=True)
class BrokerState:
    """A data disk known to the cluster. The broker id belongs to the disk, not to a Ray node."""

    broker_id: int
    disk: str
    rack: str | None = None


class MetadataImage:
    """Everything the controller knows, rebuilt from records. ``offset`` is the metadata-log
    offset of the last record applied (-1 for an empty image)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}  # by topic id
        self.topic_ids: dict[str, str] = {}  # name -> topic id
        self.brokers: dict[int, BrokerState] = {}
        self.next_producer_id = 0
        # (topic id, partition) -> broker -> the replica epoch of that replica's current life.
        self.replica_epochs: dict[tuple[str, int], dict[int, int]] = {}
        self.next_replica_epoch = 1  # 0: replicas created before replica epochs existed
        # Ray node of each broker's agent, and of each replica as of its last check-in (or
        # creation): see ``rafka.cluster.node_restarts``.
        self.broker_nodes: dict[int, str] = {}
        self.replica_nodes: dict[tuple[str, int, int], str] = {}
        self.fenced_brokers: set[int] = set()
        self.draining_brokers: set[int] = set()  # the balancer empties them
        self.retired_brokers: dict[int, str] = {}  # broker id -> disk, removed for good
        self.autoscaler_drains: set[int] = set()  # draining to be retired (by autoscaling)
        # Ids of deleted topics: only their leftovers are deleted; a replica of a topic id
        # this metadata never knew may belong to another cluster's metadata, and is kept.
        self.deleted_topics: set[str] = set()
        # Grows by one each time a controller process opens the log; replicas refuse
        # states from an older one (another controller took over since).
        self.controller_epoch = 0
        self.settings: dict[str, Any] = {}
        # request id -> (kind, topic id), oldest first
        self.requests: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        # (topic id, partition, broker) -> host slot; kept while the topic exists.
        self.hosts: dict[tuple[str, int, int], int] = {}
        self.next_host_slot: dict[int, int] = {}  # broker -> a slot number never used
        self.security = SecurityState()  # users' SCRAM credentials and the ACLs
        self.offset = -1

    # -- reading -------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicState:
        topic_id = self.topic_ids.get(name)
        if topic_id is None:
            raise UnknownTopicOrPartition(
                f"topic {name!r} does not exist; create it with admin.create_topic({name!r}, "
                "partitions=...) or `rafka topics create`"
            )
        return self.topics[topic_id]

    def broker_for_disk(self, disk: str) -> BrokerState | None:
        for broker in self.brokers.values():
            if broker.disk == disk:
                return broker
        return None

    def knows_topic(self, topic_id: str) -> bool:
        """True for a topic that exists or was deleted here (not one of another metadata)."""
        return topic_id in self.topics or topic_id in self.deleted_topics

    def replicas_on(self, broker_id: int) -> list[tuple[TopicState, PartitionState]]:
        return [
            (topic, p)
            for topic in self.topics.values()
            for p in topic.partitions.values()
            if broker_id in p.replicas
        ]

    # -- changing ------------------------------------------------------------------------------

    def apply(self, record: dict[str, Any], offset: int) -> None:
        kind = record["type"]
        if kind == "broker":
            self.brokers[record["broker_id"]] = BrokerState(
                record["broker_id"], record["disk"], record.get("rack")
            )
        elif kind == "topic":
            topic = TopicState(
                record["topic_id"], record["name"], dict(record["config"]), record["internal"],
                created_at=record.get("created_at", offset),
            )
            self.topics[topic.topic_id] = topic
            self.topic_ids[topic.name] = topic.topic_id
        elif kind == "partition":
            topic = self.topics[record["topic_id"]]
            topic.partitions[record["partition"]] = PartitionState.from_record(record)
        elif kind == "config":
            self.topics[record["topic_id"]].config = dict(record["config"])
        elif kind == "delete":
            topic = self.topics.pop(record["topic_id"])
            del self.topic_ids[topic.name]
            self.deleted_topics.add(topic.topic_id)
            for key in [k for k in self.replica_epochs if k[0] == topic.topic_id]:
                del self.replica_epochs[key]
            for key in [k for k in self.replica_nodes if k[0] == topic.topic_id]:
                del self.replica_nodes[key]
            for key in [k for k in self.hosts if k[0] == topic.topic_id]:
                del self.hosts[key]
        elif kind == "producer_ids":
            self.next_producer_id = max(self.next_producer_id, record["next"])
        elif kind == "replica_epoch":
            key = (record["topic_id"], record["partition"])
            self.replica_epochs.setdefault(key, {})[record["broker_id"]] = record["epoch"]
            self.next_replica_epoch = max(self.next_replica_epoch, record["epoch"] + 1)
            if record.get("node") is not None:
                self.replica_nodes[(*key, record["broker_id"])] = record["node"]
        elif kind == "replica_epochs":
            self.next_replica_epoch = max(self.next_replica_epoch, record["next"])
        elif kind == "broker_node":
            self.broker_nodes[record["broker_id"]] = record["node"]
        elif kind == "replica_nodes":
            for topic_id, partition, broker_id in record["replicas"]:
                self.replica_nodes[(topic_id, partition, broker_id)] = record["node"]
        elif kind == "deleted_topics":
            self.deleted_topics.update(record["topic_ids"])
        elif kind == "fenced":
            if record["fenced"]:
                self.fenced_brokers.add(record["broker_id"])
            else:
                self.fenced_brokers.discard(record["broker_id"])
        elif kind == "drain":
            if record["draining"]:
                self.draining_brokers.add(record["broker_id"])
                if record.get("by") == "autoscaler":
                    self.autoscaler_drains.add(record["broker_id"])
            else:
                self.draining_brokers.discard(record["broker_id"])
                self.autoscaler_drains.discard(record["broker_id"])
        elif kind == "retire":
            broker = self.brokers.pop(record["broker_id"])
            self.retired_brokers[broker.broker_id] = broker.disk
            self.draining_brokers.discard(broker.broker_id)
            self.autoscaler_drains.discard(broker.broker_id)
            self.fenced_brokers.discard(broker.broker_id)
            self.broker_nodes.pop(broker.broker_id, None)
        elif kind == "controller":
            self.controller_epoch = max(self.controller_epoch, record["epoch"])
        elif kind == "settings":
            self.settings = dict(record["settings"])
        elif kind == "hosted":
            broker, slot = record["broker_id"], record["slot"]
            self.hosts[(record["topic_id"], record["partition"], broker)] = slot
            self.next_host_slot[broker] = max(self.next_host_slot.get(broker, 0), slot + 1)
        elif kind == "host_slots":
            broker = record["broker_id"]
            self.next_host_slot[broker] = max(self.next_host_slot.get(broker, 0), record["next"])
        elif kind == "request":
            self.requests[record["request_id"]] = (record["kind"], record.get("topic_id"))
            while len(self.requests) > REMEMBERED_REQUESTS:
                self.requests.popitem(last=False)
        elif kind in SECURITY_KINDS:
            self.security.apply(record, offset)
        else:
            raise ValueError(f"unknown metadata record type {kind!r} at offset {offset}")
        self.offset = offset

    # -- snapshots -----------------------------------------------------------------------------

    def to_records(self) -> list[dict[str, Any]]:
        """Records that rebuild this image from empty (the body of a snapshot)."""
        out: list[dict[str, Any]] = [
            {"type": "broker", "broker_id": b.broker_id, "disk": b.disk, "rack": b.rack}
            for b in self.brokers.values()
        ]
        for broker_id, disk in self.retired_brokers.items():
            out += [{"type": "broker", "broker_id": broker_id, "disk": disk, "rack": None},
                    {"type": "retire", "broker_id": broker_id}]  # fmt: skip
        for topic in self.topics.values():
            out.append({
                "type": "topic", "topic_id": topic.topic_id, "name": topic.name,
                "config": topic.config, "internal": topic.internal,
                "created_at": topic.created_at,
            })  # fmt: skip
            out.extend(p.to_record(topic.topic_id) for p in topic.partitions.values())
        out.append({"type": "producer_ids", "next": self.next_producer_id})
        out.extend(
            {"type": "replica_epoch", "topic_id": t, "partition": p, "broker_id": b, "epoch": e}
            for (t, p), by_broker in self.replica_epochs.items()
            for b, e in by_broker.items()
        )
        out.append({"type": "replica_epochs", "next": self.next_replica_epoch})
        out.extend(
            {"type": "broker_node", "broker_id": b, "node": n} for b, n in self.broker_nodes.items()
        )
        by_node: dict[str, list] = {}
        for key, node in self.replica_nodes.items():
            by_node.setdefault(node, []).append(list(key))
        out.extend({"type": "replica_nodes", "node": n, "replicas": r} for n, r in by_node.items())
        out.extend({"type": "hosted", "topic_id": t, "partition": p, "broker_id": b, "slot": s}
                   for (t, p, b), s in self.hosts.items())  # fmt: skip
        # Slots of hosts emptied since are never used again (see rafka.cluster.hosting).
        out.extend({"type": "host_slots", "broker_id": b, "next": n}
                   for b, n in self.next_host_slot.items())  # fmt: skip
        out.extend({"type": "fenced", "broker_id": b, "fenced": True}
                   for b in sorted(self.fenced_brokers))  # fmt: skip
        out.extend({"type": "drain", "broker_id": b, "draining": True,
                    "by": "autoscaler" if b in self.autoscaler_drains else "admin"}
                   for b in sorted(self.draining_brokers))  # fmt: skip
        if self.deleted_topics:
            out.append({"type": "deleted_topics", "topic_ids": sorted(self.deleted_topics)})
        out.append({"type": "controller", "epoch": self.controller_epoch})
        out.append({"type": "settings", "settings": self.settings})
        out.extend({"type": "request", "request_id": r, "kind": k, "topic_id": t}
                   for r, (k, t) in self.requests.items())  # fmt: skip
        out.extend(self.security.to_records())
        return out

    # -- checking ------------------------------------------------------------------------------

    def check(self, records: Iterable[dict[str, Any]]) -> None:
        """Refuse (InvalidRecord) records that could not all be applied, in order, to this
        image: one naming a topic that does not exist (or no longer does), a partition
        state breaking its invariants, an unknown type. Nothing is changed."""
        topics = {t: set(topic.partitions) for t, topic in self.topics.items()}
        names = dict(self.topic_ids)
        for record in records:
            kind = record.get("type")
            topic_id = record.get("topic_id")
            if kind == "topic":
                if topic_id in topics or record["name"] in names:
                    raise InvalidRecord(f"topic {record['name']!r} ({topic_id}) already exists")
                topics[topic_id] = set()
                names[record["name"]] = topic_id
            elif kind in ("partition", "config", "delete", "replica_epoch", "hosted"):
                if topic_id not in topics:
                    raise InvalidRecord(
                        f"a {kind} record names topic id {topic_id}, which does not exist"
                    )
                if kind == "partition":
                    _check_partition(PartitionState.from_record(record))
                    topics[topic_id].add(record["partition"])
                elif kind in ("replica_epoch", "hosted") and (
                    record["partition"] not in topics[topic_id]
                ):
                    raise InvalidRecord(
                        f"a {kind} record for partition {record['partition']} of topic id "
                        f"{topic_id}, which has no such partition"
                    )
                elif kind == "delete":
                    del topics[topic_id]
                    names = {n: t for n, t in names.items() if t != topic_id}
            elif kind == "retire":
                broker_id = record.get("broker_id")
                if broker_id not in self.brokers:
                    raise InvalidRecord(f"retire names broker {broker_id}, which is not registered")
                held = [f"{t.name}-{p.partition}" for t, p in self.replicas_on(broker_id)]
                if held:
                    raise InvalidRecord(f"broker {broker_id} still holds replicas of {held[:5]}: "
                                        "drain it before retiring it")  # fmt: skip
            elif kind == "replica_nodes":
                missing = [k for k in record["replicas"] if k[0] not in topics]
                if missing:
                    raise InvalidRecord(f"replica nodes recorded for unknown topics: {missing}")
            elif kind in SECURITY_KINDS:
                check_record(record)
            elif kind not in _OTHER_KINDS:
                raise InvalidRecord(f"unknown metadata record type {kind!r}")


_OTHER_KINDS = frozenset({
    "broker", "producer_ids", "replica_epochs", "broker_node", "fenced", "drain",
    "controller", "settings", "request", "deleted_topics", "host_slots",
})  # fmt: skip


def _check_partition(p: PartitionState) -> None:
    """PartitionState's invariants (see its docstring), as InvalidRecord."""
    where = f"partition {p.partition}"
    if not p.replicas or len(set(p.replicas)) != len(p.replicas):
        raise InvalidRecord(f"{where}: replica list {p.replicas} is empty or repeats a broker")
    if not p.isr or any(b not in p.replicas for b in p.isr):
        raise InvalidRecord(f"{where}: ISR {p.isr} is empty or not within {p.replicas}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise InvalidRecord(f"{where}: leader {p.leader} is not in the ISR {p.isr}")
    if any(b not in p.replicas for b in p.adding + p.removing + p.elr):
        raise InvalidRecord(f"{where}: adding, removing or eligible replicas outside "
                            f"{p.replicas}")  # fmt: skip
