"""Topic administration over the Kafka protocol: CreateTopics, DeleteTopics,
CreatePartitions and DescribeConfigs, answered by the controller.

Each create, grow or delete carries a request id of its own (one per topic of one Kafka
request): the backend resends a call while the controller restarts, and the controller
answers a resent call as it answered the first (not TopicAlreadyExists for the topic this
request created). A Kafka client that retries sends a new request, judged afresh, as in
Kafka. rafka places replicas itself: explicit replica assignments are refused with
INVALID_REQUEST. ``validate_only`` checks what rafka can check without the controller's
lock (name, counts, configs, existence, live brokers); the controller may still refuse the
real request (a race with another creation, a replica that would not fit in memory).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.cluster.controller import MAX_PARTITIONS, validate_config
from rafka.cluster.settings import BROKER_SETTINGS, setting
from rafka.cluster.topics import collision_key, is_internal, validate_topic_name
from rafka.errors import (
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    RafkaError,
    TopicAlreadyExists,
    TopicAuthorizationFailed,
)
from rafka.storage.config import CONFIG_KEYS
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers import handles
from rafka.wire.session import Session

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 37
CLUSTER = "kafka-cluster"
CLUSTER_AUTHORIZATION_FAILED = 31
UNKNOWN_SERVER_ERROR = -1
#: DescribeConfigs resource types.
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: DescribeConfigs config sources.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
#: Broker settings whose value is never shown (Kafka's PASSWORD type).
SENSITIVE_SETTINGS = frozenset({"ssl.key.password"})


def _errno(error: BaseException) -> int:
    return error.errno if isinstance(error, RafkaError) and error.errno >= 0 else (
        UNKNOWN_SERVER_ERROR)  # fmt: skip


def _request_id() -> str:
    return uuid.uuid4().hex


def _duplicates(names: list) -> set:
    seen, twice = set(), set()
    for n in names:
        (twice if n in seen else seen).add(n)
    return twice


# -- CreateTopics ------------------------------------------------------------------------------


@handles(CREATE_TOPICS)
async def create_topics(session: Session, header: RequestHeader, body: dict) -> dict:
    """Per topic: its error code and message. -1 partitions / replication factor take the
    cluster's ``num.partitions`` / ``default.replication.factor``."""
    topics = body.get("topics", [])
    validate_only = bool(body.get("validate_only", False))
    twice = _duplicates([t["name"] for t in topics])
    may_create_any = session.authorize(Op.CREATE, Res.CLUSTER, CLUSTER)
    defaults: dict[str, Any] | Exception = {}
    if any(t.get("num_partitions", -1) == -1 or t.get("replication_factor", -1) == -1
           for t in topics):  # fmt: skip
        try:
            defaults = await session.backend.controller("settings_in_force")
        except Exception as e:  # noqa: BLE001 - the topics that need them answer the error
            defaults = e
    answers = []
    for t in topics:
        name = t["name"]
        if name in twice:
            answers.append(_created(name, InvalidRequest(
                f"topic {name!r} is named more than once in this request; name it once")))
            continue
        if not may_create_any and not session.authorize(Op.CREATE, Res.TOPIC, name):
            answers.append(_created(name, TopicAuthorizationFailed(
                f"creating topic {name!r} needs CREATE on the cluster or on the topic")))
            continue
        answers.append(_create_one(session, t, defaults, validate_only))
    done = await asyncio.gather(*(a for a in answers if not isinstance(a, dict)))
    results = iter(done)
    out = [a if isinstance(a, dict) else next(results) for a in answers]
    return {"throttle_time_ms": 0, "topics": out}


def _created(name: str, error: BaseException | None, described: dict | None = None) -> dict:
    answer: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
    if error is not None:
        answer.update(error_code=_errno(error), error_message=str(error))
    elif described is not None:
        partitions = described.get("partitions", [])
        answer.update(num_partitions=len(partitions),
                      replication_factor=len(partitions[0]["replicas"]) if partitions else -1)
    return answer


async def _create_one(session: Session, topic: dict, defaults: dict | Exception,
                      validate_only: bool) -> dict:  # fmt: skip
    """``defaults``: the cluster settings, or why they could not be read."""
    name = topic["name"]
    try:
        if topic.get("assignments"):
            raise InvalidRequest(
                f"topic {name!r}: rafka places replicas itself; give num_partitions and "
                "replication_factor instead of replica assignments"
            )
        partitions = topic.get("num_partitions", -1)
        factor = topic.get("replication_factor", -1)
        if isinstance(defaults, Exception) and -1 in (partitions, factor):
            raise defaults
        if partitions == -1:
            partitions = setting(defaults, "num.partitions")
        if factor == -1:
            factor = setting(defaults, "default.replication.factor")
        config = {c["name"]: c["value"] for c in topic.get("configs") or ()
                  if c.get("value") is not None}  # fmt: skip
        if validate_only:
            await _validate_creation(session, name, partitions, factor, config)
            return _created(name, None, None)
        described = await session.backend.controller(
            "create_topic", name, partitions, factor, config or None, False, _request_id()
        )
        return _created(name, None, described)
    except Exception as e:  # noqa: BLE001 - the topic's answer carries the error
        return _created(name, e)


async def _validate_creation(session: Session, name: str, partitions: int, factor: int,
                             config: dict) -> None:  # fmt: skip
    """Raise what the controller would refuse this creation with (the checks that do not
    need its lock)."""
    validate_topic_name(name)
    if is_internal(name):
        raise InvalidTopic(f"{name!r} is an internal topic; rafka creates it itself")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"partition count {partitions} is invalid; give an integer in [1, {MAX_PARTITIONS}]"
        )
    if factor < 1:
        raise InvalidReplicationFactor(f"replication factor {factor} must be at least 1")
    validate_config(config)
    existing = await session.backend.controller("list_topics", True)
    if name in existing:
        raise TopicAlreadyExists(f"topic {name!r} already exists; describe it or pick a new name")
    for other in existing:
        if collision_key(other) == collision_key(name):
            raise InvalidTopic(
                f"topic {name!r} collides with existing topic {other!r}: names that differ "
                "only in '.' and '_' are not allowed"
            )
    cluster = await session.backend.controller("describe_cluster")
    live = [b for b in cluster["brokers"] if b.get("alive") and not b.get("fenced")]
    if factor > len(live):
        raise InvalidReplicationFactor(
            f"replication factor {factor} is larger than the {len(live)} live broker(s)"
        )


# -- DeleteTopics ------------------------------------------------------------------------------


@handles(DELETE_TOPICS)
async def delete_topics(session: Session, header: RequestHeader, body: dict) -> dict:
    names = list(body.get("topic_names") or ())
    twice = _duplicates(names)

    async def delete(name: str) -> dict:
        answer = {"name": name, "error_code": 0, "error_message": None}
        try:
            if name in twice:
                raise InvalidRequest(f"topic {name!r} is named more than once in this request")
            if not session.authorize(Op.DELETE, Res.TOPIC, name):
                raise TopicAuthorizationFailed(f"deleting topic {name!r} needs DELETE on it")
            await session.backend.controller("delete_topic", name, _request_id())
            session.backend.forget(name)
        except Exception as e:  # noqa: BLE001 - the topic's answer carries the error
            answer.update(error_code=_errno(e), error_message=str(e))
        return answer

    unique = list(dict.fromkeys(names))
    answers = await asyncio.gather(*(delete(n) for n in unique))
    return {"throttle_time_ms": 0, "responses": answers}


# -- CreatePartitions --------------------------------------------------------------------------


@handles(CREATE_PARTITIONS)
async def create_partitions(session: Session, header: RequestHeader, body: dict) -> dict:
    topics = body.get("topics", [])
    validate_only = bool(body.get("validate_only", False))
    twice = _duplicates([t["name"] for t in topics])

    async def grow(topic: dict) -> dict:
        name, count = topic["name"], topic["count"]
        answer = {"name": name, "error_code": 0, "error_message": None}
        try:
            if name in twice:
                raise InvalidRequest(f"topic {name!r} is named more than once in this request")
            if not session.authorize(Op.ALTER, Res.TOPIC, name):
                raise TopicAuthorizationFailed(
                    f"adding partitions to topic {name!r} needs ALTER on it")
            if topic.get("assignments"):
                raise InvalidRequest(
                    f"topic {name!r}: rafka places new partitions itself; leave the replica "
                    "assignments out"
                )
            if validate_only:
                await _validate_growth(session, name, count)
            else:
                await session.backend.controller("create_partitions", name, count,
                                                 _request_id())  # fmt: skip
                session.backend.forget(name)
        except Exception as e:  # noqa: BLE001 - the topic's answer carries the error
            answer.update(error_code=_errno(e), error_message=str(e))
        return answer

    seen: set[str] = set()
    unique = [t for t in topics if not (t["name"] in seen or seen.add(t["name"]))]
    answers = await asyncio.gather(*(grow(t) for t in unique))
    return {"throttle_time_ms": 0, "results": answers}


async def _validate_growth(session: Session, name: str, count: int) -> None:
    described = (await session.backend.controller("describe_topics", [name]))[0]
    if described.get("internal"):
        raise InvalidTopic(f"{name!r} is an internal topic; it cannot be changed")
    current = len(described["partitions"])
    if not 1 <= count <= MAX_PARTITIONS:
        raise InvalidPartitions(
            f"partition count {count} is invalid; give an integer in [1, {MAX_PARTITIONS}]"
        )
    if count <= current:
        raise InvalidPartitions(
            f"topic {name!r} has {current} partitions; the new count must be larger (got "
            f"{count}): partitions can be added, never removed"
        )


# -- DescribeConfigs ---------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    """A config value as Kafka shows it: booleans lower case, lists comma-separated."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(sorted(str(v) for v in value))
    return str(value)


def _entry(name: str, value: Any, source: int, default: Any, read_only: bool,
           sensitive: bool, synonyms: bool) -> dict:  # fmt: skip
    shown = None if sensitive else _text(value)
    entry = {"name": name, "value": shown, "read_only": read_only, "config_source": source,
             "is_default": source == DEFAULT_CONFIG, "is_sensitive": sensitive,
             "synonyms": []}  # fmt: skip
    if synonyms:
        entry["synonyms"].append({"name": name, "value": shown, "source": source})
        if source != DEFAULT_CONFIG:
            entry["synonyms"].append({"name": name, "value": None if sensitive else _text(default),
                                      "source": DEFAULT_CONFIG})  # fmt: skip
    return entry


def _wanted(keys: list | None, names: list[str]) -> list[str]:
    return names if keys is None else [n for n in names if n in set(keys)]


async def _topic_configs(session: Session, name: str, keys: list | None,
                         synonyms: bool) -> list[dict]:  # fmt: skip
    described = (await session.backend.controller("describe_topics", [name]))[0]
    config, overrides = described["config"], described.get("overrides") or {}
    defaults = {k.name: k.default for k in CONFIG_KEYS}
    names = _wanted(keys, list(config))
    return [_entry(n, config[n], DYNAMIC_TOPIC_CONFIG if n in overrides else DEFAULT_CONFIG,
                   defaults.get(n), False, False, synonyms) for n in names]  # fmt: skip


async def _broker_configs(session: Session, name: str, keys: list | None,
                          synonyms: bool) -> list[dict]:  # fmt: skip
    if name and not (name.isdigit() and int(name) >= 0):
        raise InvalidRequest(f"broker resource name {name!r} is not a broker id")
    if name:
        answer = await session.backend.kafka_metadata([], False, session.endpoint.protocol)
        if int(name) not in {b[0] for b in answer["brokers"]}:
            raise InvalidRequest(f"broker {name} does not exist")
    given = await session.backend.controller("settings_in_force")
    out = []
    for setting_name in _wanted(keys, sorted(BROKER_SETTINGS)):
        default = BROKER_SETTINGS[setting_name][0]
        source = STATIC_BROKER_CONFIG if setting_name in given else DEFAULT_CONFIG
        out.append(_entry(setting_name, given.get(setting_name, default), source, default,
                          True, setting_name in SENSITIVE_SETTINGS, synonyms))  # fmt: skip
    return out


@handles(DESCRIBE_CONFIGS)
async def describe_configs(session: Session, header: RequestHeader, body: dict) -> dict:
    """TOPIC resources: every topic property, overrides as DYNAMIC_TOPIC_CONFIG. BROKER
    resources (name: a broker id, or "" for the cluster default): rafka's cluster settings,
    the same on every broker, read-only (they are fixed when the cluster starts)."""
    synonyms = bool(body.get("include_synonyms", False))

    async def describe(resource: dict) -> dict:
        rtype, name = resource["resource_type"], resource["resource_name"]
        keys = resource.get("configuration_keys")
        answer = {"error_code": 0, "error_message": None, "resource_type": rtype,
                  "resource_name": name, "configs": []}  # fmt: skip
        try:
            if rtype == TOPIC_RESOURCE:
                if not session.authorize(Op.DESCRIBE_CONFIGS, Res.TOPIC, name):
                    raise TopicAuthorizationFailed(
                        f"describing the configs of topic {name!r} needs DESCRIBE_CONFIGS on it")
                answer["configs"] = await _topic_configs(session, name, keys, synonyms)
            elif rtype == BROKER_RESOURCE:
                if not session.authorize(Op.DESCRIBE_CONFIGS, Res.CLUSTER, CLUSTER):
                    answer.update(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=(
                        "describing broker configs needs DESCRIBE_CONFIGS on the cluster"))
                    return answer
                answer["configs"] = await _broker_configs(session, name, keys, synonyms)
            else:
                raise InvalidRequest(
                    f"resource type {rtype} is not served; rafka describes topics (2) and "
                    "brokers (4)"
                )
        except Exception as e:  # noqa: BLE001 - the resource's answer carries the error
            answer.update(error_code=_errno(e), error_message=str(e))
        return answer

    results = await asyncio.gather(*(describe(r) for r in body.get("resources", [])))
    return {"throttle_time_ms": 0, "results": list(results)}
