"""Cluster-wide (broker) settings, with Kafka's property names.

They are given once, when the services start (``rafka.connect(settings=...)`` or
``rafka up --set NAME=VALUE``), and the controller hands the replicas what they need. Topic
properties live in ``rafka.storage.config`` instead.
"""

from __future__ import annotations

from typing import Any, Mapping

from rafka.cluster.group import GroupConfig
from rafka.cluster.hosting import MAX_REPLICAS_PER_ACTOR
from rafka.cluster.liveness import BROKER_HEARTBEAT_INTERVAL_MS, BROKER_SESSION_TIMEOUT_MS
from rafka.cluster.replication import REPLICA_LAG_TIME_MAX_MS
from rafka.errors import InvalidConfig

#: name -> (default, type, least allowed value, what it does)
BROKER_SETTINGS: dict[str, tuple[Any, type, int, str]] = {
    "auto.create.topics.enable": (False, bool, 0, "create unknown topics on first use"),
    "num.partitions": (1, int, 1, "partitions of an auto-created topic"),
    "default.replication.factor": (1, int, 1, "replication factor of an auto-created topic"),
    "broker.heartbeat.interval.ms": (BROKER_HEARTBEAT_INTERVAL_MS, int, 10,
                                     "how often node agents heartbeat"),
    "broker.session.timeout.ms": (BROKER_SESSION_TIMEOUT_MS, int, 100,
                                  "silence after which a broker is probed and fenced"),
    "replica.lag.time.max.ms": (REPLICA_LAG_TIME_MAX_MS, int, 1,
                                "a follower not caught up for this long leaves the ISR"),
    "replica.fetch.wait.max.ms": (500, int, 0, "long-poll time of a follower fetch"),
    "replica.fetch.max.bytes": (1 << 20, int, 1, "bytes a follower fetch asks for"),
    "replicas.per.actor": (1, int, 1,
                           "partition replicas one Ray actor process hosts (at most "
                           f"{MAX_REPLICAS_PER_ACTOR}); 1 gives each replica a process"),
    "metadata.reconcile.interval.ms": (10_000, int, 10,
                                       "how often the controller re-pushes every partition "
                                       "state and creates or deletes replica actors to "
                                       "match the metadata"),
    "auto.leader.rebalance.enable": (True, bool, 0,
                                     "move leadership back to preferred replicas"),
    # Kafka checks every 300 s; moving a leader back here costs one metadata record and one
    # call per replica, so rafka checks every 30 s.
    "leader.imbalance.check.interval.seconds": (30, int, 1,
                                                "how often preferred leaders are restored"),
    # Consumer groups. Kafka creates 50 offsets partitions. Unpacked, each partition here is a
    # replica actor per copy (about 58 MiB each), so rafka then starts with 4; with
    # replicas.per.actor > 1 a replica costs next to nothing and it takes Kafka's 50 (see
    # offsets_topic_partitions). A coordinator actor starts per shard in use either way.
    "offsets.topic.num.partitions": (4, int, 1,
                                     "partitions of __consumer_offsets = coordinator shards "
                                     "(default 4, or Kafka's 50 when replicas.per.actor > 1)"),
    "offsets.topic.replication.factor": (3, int, 1,
                                         "copies of __consumer_offsets (at most the brokers)"),
    "offsets.commit.timeout.ms": (5_000, int, 1,
                                  "how long a commit waits for __consumer_offsets"),
    "offsets.retention.minutes": (10_080, int, 1,
                                  "offsets of a group empty this long are deleted"),
    "offset.metadata.max.bytes": (4096, int, 0, "longest metadata string of a commit"),
    "group.initial.rebalance.delay.ms": (3_000, int, 0,
                                         "wait for more members before a new group's first "
                                         "rebalance"),
    "group.min.session.timeout.ms": (6_000, int, 1, "shortest session_timeout_ms allowed"),
    "group.max.session.timeout.ms": (1_800_000, int, 1, "longest session_timeout_ms allowed"),
    "group.max.size": (2**31 - 1, int, 1, "most members a group may have"),
    # Transactions: __transaction_state is sized as __consumer_offsets is (see there).
    "transaction.state.log.num.partitions": (4, int, 1,
                                             "partitions of __transaction_state = transaction "
                                             "coordinator shards (default 4, or Kafka's 50 "
                                             "when replicas.per.actor > 1)"),
    "transaction.state.log.replication.factor": (3, int, 1,
                                                 "copies of __transaction_state (at most the "
                                                 "brokers)"),
    "transaction.state.log.min.isr": (2, int, 1,
                                      "min.insync.replicas of __transaction_state (at most "
                                      "its copies)"),
    "transaction.max.timeout.ms": (900_000, int, 1,
                                   "longest transaction_timeout_ms a producer may ask for"),
    "transactional.id.expiration.ms": (604_800_000, int, 1,
                                       "a transactional id idle this long is forgotten"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        10_000, int, 1, "how often transactions past their timeout are looked for (and "
        "aborted)"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        3_600_000, int, 1, "how often expired transactional ids are looked for"),
    # The balancer (rafka.cluster.balancer); the names are Redpanda's where it has one.
    "partition.autobalancing.mode": ("node_add", str, 0,
                                     "off | node_add | continuous: what the balancer moves "
                                     "by itself (drains and rebalance requests always run)"),
    "partition.autobalancing.tick.interval.ms": (10_000, int, 100,
                                                 "how often the balancer plans"),
    "partition.autobalancing.node.availability.timeout.sec": (
        600, int, 1, "a broker dead this long is replaced from the in-sync replicas "
        "(not in mode off)"),
    "partition.autobalancing.concurrent.moves.per.broker": (
        2, int, 1, "replica moves in flight per broker, as source or destination"),
    "partition.autobalancing.concurrent.moves": (50, int, 1, "replica moves in flight"),
    # Moves copy the log by follower fetch; Redpanda's recovery rate defaults to 100 MiB/s.
    "replication.throttled.rate": (100 << 20, int, 0,
                                   "bytes/s a broker sends to, and takes in for, replicas "
                                   "being added by a move (0: no limit)"),
    "broker.load.report.interval.ms": (5_000, int, 100,
                                       "how often node agents report disk use and "
                                       "partition traffic to the controller"),
    # A partition this busy gets a host actor of its own when replicas are packed.
    "partition.hot.bytes.per.sec": (1 << 20, int, 1,
                                    "bytes/s in plus out above which a packed replica gets a "
                                    "host actor of its own (replicas.per.actor > 1)"),
    # Autoscaling (rafka.cluster.autoscaling): asks Ray for disk nodes, gives idle ones back.
    "partition.autoscaling.enable": (False, bool, 0,
                                     "ask Ray's autoscaler for disk nodes when brokers are "
                                     "full, and drain and release idle autoscaled ones"),
    "partition.autoscaling.min.brokers": (1, int, 1, "brokers never scaled below"),
    "partition.autoscaling.max.brokers": (16, int, 1, "brokers never scaled above"),
    "partition.autoscaling.max.replicas.per.broker": (
        200, int, 1, "replicas one broker may hold before another node is asked for"),
    "partition.autoscaling.max.bytes.in.per.broker": (
        64 << 20, int, 1, "bytes/s one broker may take in before another node is asked for"),
    "partition.autoscaling.max.bytes.out.per.broker": (
        128 << 20, int, 1, "bytes/s one broker may send before another node is asked for"),
    "partition.autoscaling.scale.down.delay.ms": (
        600_000, int, 0, "how long load must stay low before an autoscaled broker is "
        "drained and its node given back"),
    # The Kafka listener (rafka.actors.kafka_listener): Kafka's names and syntax.
    "listeners": ("", str, 0,
                  "Kafka listeners every broker node opens, comma-separated "
                  "PROTOCOL://host:port (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; port 0 "
                  "picks a free port); empty: no Kafka listener"),
    "advertised.listeners": ("", str, 0,
                             "what Kafka clients are told to connect to, same syntax; empty: "
                             "the listeners, with the node's address for 0.0.0.0 and the "
                             "bound port for 0"),
    "socket.request.max.bytes": (100 << 20, int, 1024,
                                 "largest Kafka request frame; a larger one closes the "
                                 "connection"),
    "connections.max.idle.ms": (600_000, int, 1,
                                "a Kafka client connection with no request for this long is "
                                "closed"),
    "sasl.enabled.mechanisms": ("PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", str, 0,
                                "SASL mechanisms the SASL_ listeners offer"),
    "allow.everyone.if.no.acl.found": (True, bool, 0,
                                       "allow a listener request on a resource no ACL "
                                       "names (false: deny it)"),
    "super.users": ("", str, 0,
                    "principals every ACL check allows, e.g. User:admin;User:ops"),
    "ssl.keystore.location": ("", str, 0,
                              "PEM file with the listener's certificate chain and private "
                              "key (SSL and SASL_SSL listeners)"),
    "ssl.key.password": ("", str, 0, "password of the private key in the keystore, if any"),
    "ssl.truststore.location": ("", str, 0,
                                "PEM file of CA certificates that client certificates "
                                "must chain to"),
    "ssl.client.auth": ("none", str, 0, "none | requested | required: client certificates"),
}  # fmt: skip

#: The values a text setting may take (None: free text, checked where it is used).
CHOICES: dict[str, tuple[str, ...] | None] = {
    "partition.autobalancing.mode": ("off", "node_add", "continuous"),
    "ssl.client.auth": ("none", "requested", "required"),
    "listeners": None,
    "advertised.listeners": None,
    "sasl.enabled.mechanisms": None,
    "super.users": None,
    "ssl.keystore.location": None,
    "ssl.key.password": None,
    "ssl.truststore.location": None,
}


#: Upper bounds of the settings that have one.
MOST_ALLOWED: dict[str, int] = {"replicas.per.actor": MAX_REPLICAS_PER_ACTOR}


def group_config(settings: Mapping[str, Any]) -> GroupConfig:
    """The group coordinator's limits from the cluster settings."""
    return GroupConfig(
        min_session_timeout_ms=setting(settings, "group.min.session.timeout.ms"),
        max_session_timeout_ms=setting(settings, "group.max.session.timeout.ms"),
        initial_rebalance_delay_ms=setting(settings, "group.initial.rebalance.delay.ms"),
        max_size=setting(settings, "group.max.size"),
        offset_metadata_max_bytes=setting(settings, "offset.metadata.max.bytes"),
        offsets_retention_ms=setting(settings, "offsets.retention.minutes") * 60_000,
    )


#: Kafka's default partition count of __consumer_offsets (and of __transaction_state), taken
#: when replicas are packed.
KAFKA_OFFSETS_PARTITIONS = 50


def offsets_topic_partitions(settings: Mapping[str, Any]) -> int:
    """Partitions of __consumer_offsets: the setting when given; otherwise Kafka's 50 when
    replicas are packed (``replicas.per.actor`` > 1), and 4 when each is a process."""
    if "offsets.topic.num.partitions" in settings:
        return int(settings["offsets.topic.num.partitions"])
    if setting(settings, "replicas.per.actor") > 1:
        return KAFKA_OFFSETS_PARTITIONS
    return setting(settings, "offsets.topic.num.partitions")


def transaction_topic_partitions(settings: Mapping[str, Any]) -> int:
    """Partitions of __transaction_state, chosen as ``offsets_topic_partitions`` chooses."""
    if "transaction.state.log.num.partitions" in settings:
        return int(settings["transaction.state.log.num.partitions"])
    if setting(settings, "replicas.per.actor") > 1:
        return KAFKA_OFFSETS_PARTITIONS
    return setting(settings, "transaction.state.log.num.partitions")


def validate_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``settings`` checked against BROKER_SETTINGS: InvalidConfig names an unknown property
    or a bad value. Returns only what was given (defaults apply where used)."""
    out: dict[str, Any] = {}
    for name, value in (settings or {}).items():
        spec = BROKER_SETTINGS.get(name)
        if spec is None:
            raise InvalidConfig(
                f"unknown cluster setting {name!r}; known: {', '.join(sorted(BROKER_SETTINGS))}"
            )
        default, kind, least, _ = spec
        if kind is bool:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise InvalidConfig(f"cluster setting {name}={value!r} must be true or false")
        elif kind is str:
            if not isinstance(value, str):
                raise InvalidConfig(f"cluster setting {name}={value!r} must be a string")
            if CHOICES[name] is not None and value not in CHOICES[name]:
                raise InvalidConfig(
                    f"cluster setting {name}={value!r} must be one of {', '.join(CHOICES[name])}"
                )
        else:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise InvalidConfig(
                    f"cluster setting {name}={value!r} must be an integer >= {least}"
                ) from None
            if value < least:
                raise InvalidConfig(f"cluster setting {name}={value} must be >= {least}")
            most = MOST_ALLOWED.get(name)
            if most is not None and value > most:
                raise InvalidConfig(f"cluster setting {name}={value} must be <= {most}")
        out[name] = value
    return out


def setting(settings: Mapping[str, Any], name: str) -> Any:
    """The value of ``name`` in ``settings``, or its default."""
    return settings.get(name, BROKER_SETTINGS[name][0])
