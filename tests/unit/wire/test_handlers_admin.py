"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs handlers against a fake
controller."""

from __future__ import annotations

import asyncio
import logging
import threading

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import AclPermissionType as Perm
from rafka.cluster.acls import PatternType
from rafka.cluster.acls import ResourceType as Res
from rafka.errors import (
    CoordinatorNotAvailable,
    InvalidConfig,
    InvalidPartitions,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from rafka.storage.config import LogConfig
from rafka.wire import frames
from rafka.wire.connection import Connection
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers_admin import (
    create_partitions,
    create_topics,
    delete_topics,
    describe_configs,
)
from rafka.wire.handlers_core import metadata
from rafka.wire.listeners import Endpoint
from rafka.wire.security_view import SecurityCache
from rafka.wire.session import ANONYMOUS, Session


def _described(name: str, partitions: int, factor: int, overrides: dict | None = None) -> dict:
    overrides = overrides or {}
    return {"name": name, "topic_id": "id-" + name, "internal": name.startswith("__"),
            "config": LogConfig.from_dict(overrides).to_dict(), "overrides": overrides,
            "partitions": [{"partition": p, "leader": 1, "leader_epoch": 0,
                            "replicas": list(range(1, factor + 1)), "isr": [1]}
                           for p in range(partitions)]}  # fmt: skip


class FakeController:
    """Answers as the controller actor does (raising its typed errors); records calls."""

    def __init__(self, settings: dict | None = None):
        self.calls: list[tuple] = []
        self.topics = {"orders": _described("orders", 3, 2, {"retention.ms": 3600000}),
                       "__consumer_offsets": _described("__consumer_offsets", 4, 1)}
        self.settings = settings if settings is not None else {"num.partitions": 6,
                                                               "ssl.key.password": "hush"}
        self.forgotten: list[str] = []

    async def controller(self, method, *args):
        self.calls.append((method, args))
        if method == "settings_in_force":
            return dict(self.settings)
        if method == "create_topic":
            name, partitions, factor, config, _internal, _rid = args
            if name in self.topics:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            LogConfig.from_dict(config)  # InvalidConfig, as the controller checks
            self.topics[name] = _described(name, partitions, factor, config)
            return self.topics[name]
        if method == "delete_topic":
            if args[0] not in self.topics:
                raise UnknownTopicOrPartition(f"topic {args[0]!r} does not exist")
            del self.topics[args[0]]
            return None
        if method == "create_partitions":
            name, total, _rid = args
            if name not in self.topics:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
            if total <= len(self.topics[name]["partitions"]):
                raise InvalidPartitions("partitions can be added, never removed")
            self.topics[name] = _described(name, total, 2)
            return self.topics[name]
        if method == "describe_topics":
            if args[0][0] not in self.topics:
                raise UnknownTopicOrPartition(f"topic {args[0][0]!r} does not exist")
            return [self.topics[args[0][0]]]
        if method == "list_topics":
            return sorted(self.topics)
        if method == "describe_cluster":
            return {"brokers": [{"broker_id": 1, "alive": True}, {"broker_id": 2, "alive": True},
                                {"broker_id": 3, "alive": False}]}  # fmt: skip
        raise AssertionError(method)

    async def kafka_metadata(self, names, auto_create, protocol):
        return {"brokers": [(1, "127.0.0.1", 9092, None), (2, "127.0.0.1", 9093, None)],
                "controller_id": 1, "topics": {}}  # fmt: skip

    def forget(self, topic):
        self.forgotten.append(topic)

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]


def _security(acls: list[tuple] = (), allow_all: bool = True) -> SecurityCache:
    cache = SecurityCache({"allow.everyone.if.no.acl.found": allow_all})
    cache.update({"version": 1, "users": {}, "acls": list(acls)})
    return cache


def _allow(rtype: Res, name: str, op: Op) -> tuple:
    return (int(rtype), name, int(PatternType.LITERAL), ANONYMOUS, "*", int(op),
            int(Perm.ALLOW))  # fmt: skip


def _session(backend, security=None) -> Session:
    return Session(backend, security or _security(), Endpoint("PLAINTEXT", "127.0.0.1", 9092),
                   "127.0.0.1", {}, "test", node=(1, "127.0.0.1", 9092))  # fmt: skip


def _call(handler, session, api_key: int, version: int, body: dict) -> dict:
    return asyncio.run(handler(session, RequestHeader(api_key, version, 7, "client"), body))


def _topic(name: str, partitions: int = 1, factor: int = 1, configs=(), assignments=()) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": factor,
            "assignments": list(assignments),
            "configs": [{"name": k, "value": v} for k, v in configs]}  # fmt: skip


# -- CreateTopics ------------------------------------------------------------------------------


def test_create_topics_creates_each_topic_with_its_configs_and_a_request_id():
    backend = FakeController()
    answer = _call(create_topics, _session(backend), 19, 4, {
        "topics": [_topic("a", 3, 2, [("retention.ms", "1000")]), _topic("b")],
        "timeout_ms": 1000, "validate_only": False})  # fmt: skip
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [("a", 0), ("b", 0)]
    creates = [args for m, args in backend.calls if m == "create_topic"]
    assert creates[0][:5] == ("a", 3, 2, {"retention.ms": "1000"}, False)
    assert creates[1][:5] == ("b", 1, 1, None, False)
    assert creates[0][5] and creates[0][5] != creates[1][5]  # one request id per creation
    assert backend.topics["a"]["overrides"] == {"retention.ms": "1000"}


def test_minus_one_partitions_and_replication_factor_take_the_cluster_defaults():
    backend = FakeController(settings={"num.partitions": 6})
    _call(create_topics, _session(backend), 19, 4, {"topics": [_topic("a", -1, -1)]})
    create = next(args for m, args in backend.calls if m == "create_topic")
    assert create[1:3] == (6, 1)  # default.replication.factor not given: its default, 1


def test_each_topic_gets_its_own_error_code_and_message():
    backend = FakeController()
    answer = _call(create_topics, _session(backend), 19, 2, {"topics": [
        _topic("orders"), _topic("bad", configs=[("retention.ms", "soon")]),
        _topic("placed", 2, 1, assignments=[{"partition_index": 0, "broker_ids": [1]}]),
        _topic("fine"),
    ]})  # fmt: skip
    by_name = {t["name"]: t for t in answer["topics"]}
    assert by_name["orders"]["error_code"] == TopicAlreadyExists.errno
    assert by_name["bad"]["error_code"] == InvalidConfig.errno
    assert "retention.ms" in by_name["bad"]["error_message"]
    assert by_name["placed"]["error_code"] == 42  # INVALID_REQUEST: rafka places replicas
    assert by_name["fine"]["error_code"] == 0 and by_name["fine"]["error_message"] is None


def test_a_topic_named_twice_in_one_request_is_refused_and_not_created():
    backend = FakeController()
    answer = _call(create_topics, _session(backend), 19, 4,
                   {"topics": [_topic("dup"), _topic("dup")]})  # fmt: skip
    assert [t["error_code"] for t in answer["topics"]] == [42, 42]
    assert "create_topic" not in backend.methods()


def test_validate_only_checks_without_creating():
    backend = FakeController()
    answer = _call(create_topics, _session(backend), 19, 4, {"validate_only": True, "topics": [
        _topic("new", 3, 2), _topic("orders"), _topic("wide", 1, 3), _topic("bad name!"),
        _topic("zero", 0), _topic("orders.x", configs=[("cleanup.policy", "shred")]),
    ]})  # fmt: skip
    codes = {t["name"]: t["error_code"] for t in answer["topics"]}
    assert codes == {"new": 0, "orders": 36, "wide": 38, "bad name!": 17, "zero": 37,
                     "orders.x": 40}  # fmt: skip
    assert "create_topic" not in backend.methods()
    assert "new" not in backend.topics


def test_creation_needs_create_on_the_cluster_or_on_the_topic():
    backend = FakeController()
    security = _security([_allow(Res.TOPIC, "mine", Op.CREATE)], allow_all=False)
    answer = _call(create_topics, _session(backend, security), 19, 4,
                   {"topics": [_topic("mine"), _topic("theirs")]})  # fmt: skip
    codes = {t["name"]: t["error_code"] for t in answer["topics"]}
    assert codes == {"mine": 0, "theirs": 29}
    assert [args[0] for m, args in backend.calls if m == "create_topic"] == ["mine"]
    cluster_wide = _security([_allow(Res.CLUSTER, "kafka-cluster", Op.CREATE)], allow_all=False)
    answer = _call(create_topics, _session(backend, cluster_wide), 19, 4,
                   {"topics": [_topic("theirs")]})  # fmt: skip
    assert answer["topics"][0]["error_code"] == 0


# -- DeleteTopics ------------------------------------------------------------------------------


def test_delete_topics_answers_per_topic_and_forgets_cached_leaders():
    backend = FakeController()
    answer = _call(delete_topics, _session(backend), 20, 4,
                   {"topic_names": ["orders", "ghost"], "timeout_ms": 1000})  # fmt: skip
    codes = {r["name"]: r["error_code"] for r in answer["responses"]}
    assert codes == {"orders": 0, "ghost": UnknownTopicOrPartition.errno}
    assert "orders" not in backend.topics and backend.forgotten == ["orders"]
    ids = [args[1] for m, args in backend.calls if m == "delete_topic"]
    assert all(ids) and len(set(ids)) == 2


def test_deleting_needs_delete_on_the_topic():
    backend = FakeController()
    security = _security([_allow(Res.TOPIC, "orders", Op.READ)], allow_all=False)
    answer = _call(delete_topics, _session(backend, security), 20, 1,
                   {"topic_names": ["orders"], "timeout_ms": 0})  # fmt: skip
    assert answer["responses"][0]["error_code"] == 29
    assert "orders" in backend.topics


# -- CreatePartitions --------------------------------------------------------------------------


def _grow(name: str, count: int, assignments=None) -> dict:
    return {"name": name, "count": count, "assignments": assignments}


def test_create_partitions_grows_topics_and_answers_errors_per_topic():
    backend = FakeController()
    answer = _call(create_partitions, _session(backend), 37, 2, {"topics": [
        _grow("orders", 5), _grow("ghost", 2), _grow("__consumer_offsets", 2),
        _grow("orders", 9)], "timeout_ms": 1000, "validate_only": False})  # fmt: skip
    results = answer["results"]
    assert [(r["name"], r["error_code"]) for r in results] == [
        ("orders", 42), ("ghost", 3), ("__consumer_offsets", 37)]  # fmt: skip
    assert len(backend.topics["orders"]["partitions"]) == 3  # named twice: not grown
    answer = _call(create_partitions, _session(backend), 37, 0,
                   {"topics": [_grow("orders", 5)], "timeout_ms": 0, "validate_only": False})
    assert answer["results"][0]["error_code"] == 0
    assert len(backend.topics["orders"]["partitions"]) == 5 and "orders" in backend.forgotten


def test_create_partitions_refuses_assignments_and_validates_only_when_asked():
    backend = FakeController()
    answer = _call(create_partitions, _session(backend), 37, 1, {"topics": [
        _grow("orders", 5, [{"broker_ids": [1]}, {"broker_ids": [2]}])],
        "timeout_ms": 0, "validate_only": False})  # fmt: skip
    assert answer["results"][0]["error_code"] == 42
    answer = _call(create_partitions, _session(backend), 37, 1, {"topics": [
        _grow("orders", 5), _grow("orders2", 5)], "timeout_ms": 0, "validate_only": True})
    assert [r["error_code"] for r in answer["results"]] == [0, 3]
    answer = _call(create_partitions, _session(backend), 37, 1, {"topics": [_grow("orders", 2)],
                   "timeout_ms": 0, "validate_only": True})  # fmt: skip
    assert answer["results"][0]["error_code"] == 37
    assert "create_partitions" not in backend.methods()


def test_adding_partitions_needs_alter_on_the_topic():
    backend = FakeController()
    security = _security([_allow(Res.TOPIC, "orders", Op.WRITE)], allow_all=False)
    answer = _call(create_partitions, _session(backend, security), 37, 2,
                   {"topics": [_grow("orders", 5)], "timeout_ms": 0, "validate_only": False})
    assert answer["results"][0]["error_code"] == 29
    assert "create_partitions" not in backend.methods()


# -- DescribeConfigs ---------------------------------------------------------------------------


def _describe(backend, resources, synonyms=False, security=None, version=2) -> list[dict]:
    body = {"resources": resources, "include_synonyms": synonyms}
    return _call(describe_configs, _session(backend, security), 32, version, body)["results"]


def test_topic_configs_show_every_property_with_overrides_as_dynamic():
    [result] = _describe(FakeController(), [{"resource_type": 2, "resource_name": "orders",
                                             "configuration_keys": None}])  # fmt: skip
    assert result["error_code"] == 0
    configs = {c["name"]: c for c in result["configs"]}
    assert set(configs) == set(LogConfig().to_dict())
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == 1
    assert configs["segment.bytes"]["config_source"] == 5
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["unclean.leader.election.enable"]["value"] == "false"
    assert not any(c["read_only"] or c["is_sensitive"] for c in configs.values())


def test_configuration_keys_and_synonyms():
    [result] = _describe(FakeController(), [{"resource_type": 2, "resource_name": "orders",
                                             "configuration_keys": ["retention.ms",
                                                                    "segment.ms"]}],
                         synonyms=True)  # fmt: skip
    configs = {c["name"]: c for c in result["configs"]}
    assert set(configs) == {"retention.ms", "segment.ms"}
    assert configs["retention.ms"]["synonyms"] == [
        {"name": "retention.ms", "value": "3600000", "source": 1},
        {"name": "retention.ms", "value": "604800000", "source": 5}]  # fmt: skip
    assert configs["segment.ms"]["synonyms"] == [
        {"name": "segment.ms", "value": "604800000", "source": 5}]


def test_broker_configs_are_the_cluster_settings_with_sensitive_ones_hidden():
    [result] = _describe(FakeController(), [{"resource_type": 4, "resource_name": "1",
                                             "configuration_keys": None}])  # fmt: skip
    assert result["error_code"] == 0
    configs = {c["name"]: c for c in result["configs"]}
    assert configs["num.partitions"]["value"] == "6"
    assert configs["num.partitions"]["config_source"] == 4
    assert configs["auto.create.topics.enable"] == {
        **configs["auto.create.topics.enable"], "value": "false", "config_source": 5}
    assert configs["ssl.key.password"]["value"] is None
    assert configs["ssl.key.password"]["is_sensitive"] is True
    assert all(c["read_only"] for c in configs.values())


def test_describe_configs_errors_are_per_resource():
    results = _describe(FakeController(), [
        {"resource_type": 2, "resource_name": "ghost", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "9", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "one", "configuration_keys": None},
        {"resource_type": 8, "resource_name": "1", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "orders", "configuration_keys": ["segment.ms"]},
    ])  # fmt: skip
    assert [r["error_code"] for r in results] == [3, 42, 42, 42, 0]
    assert all(r["error_message"] for r in results[:4])


def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster():
    security = _security([_allow(Res.TOPIC, "orders", Op.READ)], allow_all=False)
    results = _describe(FakeController(), [
        {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
    ], security=security)  # fmt: skip
    assert [r["error_code"] for r in results] == [29, 31]
    assert results[0]["configs"] == [] and results[1]["configs"] == []


# -- a Kafka admin client against these handlers -----------------------------------------------


class _ServedController(FakeController):
    """The fake controller, plus the Metadata answer a Kafka client bootstraps from."""

    def __init__(self, port: int = 0):
        super().__init__()
        self.port = port

    async def kafka_metadata(self, names, auto_create, protocol):
        topics = self.topics if names is None else {
            n: self.topics.get(n, (3, f"{n} does not exist")) for n in names}
        return {"brokers": [(1, "127.0.0.1", self.port, None)], "controller_id": 1,
                "topics": {n: {**d, "partitions": [{**p, "replicas": [1], "isr": [1],
                                                    "offline": False}
                                                   for p in d["partitions"]]}
                           if isinstance(d, dict) else d for n, d in topics.items()}}


def _serve_in_thread(backend: _ServedController):
    """A loopback listener with these handlers (and Metadata, ApiVersions) on a thread of
    its own; returns (port, stop)."""
    served = {19: create_topics, 20: delete_topics, 32: describe_configs,
              37: create_partitions, 3: metadata}  # fmt: skip

    async def api_versions(session, header, body):
        keys = sorted([*served, 18])
        return {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
            {"api_key": k, "min_version": frames.SUPPORTED[k][0],
             "max_version": frames.SUPPORTED[k][1]} for k in keys]}  # fmt: skip

    dispatch = {**served, 18: api_versions}.get
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict = {}

    async def on_client(reader, writer):
        session = _session(backend)
        await Connection(reader, writer, session, dispatch, 1 << 20,
                         logging.getLogger("test")).serve()  # fmt: skip

    async def start():
        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        state["server"] = server
        backend.port = server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()),
                                              loop.run_forever()), daemon=True)  # fmt: skip
    thread.start()
    started.wait(5)

    async def shutdown():
        state["server"].close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop():
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()

    return backend.port, stop


def test_kafka_pythons_admin_client_creates_describes_grows_and_deletes_topics():
    backend = _ServedController()
    port, stop = _serve_in_thread(backend)
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=5000,
                             api_version=(3, 0))
    try:
        admin.create_topics([NewTopic("events", 4, 1, topic_configs={"retention.ms": "5000"})])
        assert len(backend.topics["events"]["partitions"]) == 4
        try:
            admin.create_topics([NewTopic("events", 1, 1)])
            raise AssertionError("a second creation must be refused")
        except TopicAlreadyExistsError:
            pass
        topic = ConfigResource(ConfigResourceType.TOPIC, "events")
        described = admin.describe_configs([topic])["topic"]["events"]
        assert described == {"retention.ms": {"value": "5000", "read_only": False,
                                              "config_source": "DYNAMIC_TOPIC_CONFIG",
                                              "is_sensitive": False, "synonyms": []}}
        described = admin.describe_configs([topic], config_filter="all")["topic"]["events"]
        assert described["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
        broker = ConfigResource(ConfigResourceType.BROKER, "1")
        described = admin.describe_configs([broker], config_filter="all")["broker"]["1"]
        assert described["num.partitions"]["value"] == "6"
        assert described["ssl.key.password"]["value"] is None
        # (kafka-python 3.0 cannot send NewPartitions without assignments; its dict form can)
        admin.create_partitions({"events": {"count": 6, "assignments": []}})
        assert len(backend.topics["events"]["partitions"]) == 6
        admin.delete_topics(["events"])
        assert "events" not in backend.topics
    finally:
        admin.close()
        stop()


def test_cluster_defaults_that_cannot_be_read_fail_only_the_topics_that_need_them():
    class NoSettings(FakeController):
        async def controller(self, method, *args):
            if method == "settings_in_force":
                raise CoordinatorNotAvailable("the rafka controller is restarting; retry")
            return await super().controller(method, *args)

    backend = NoSettings()
    answer = _call(create_topics, _session(backend), 19, 4,
                   {"topics": [_topic("a", -1, 1), _topic("b", 2, 1)]})  # fmt: skip
    assert [t["error_code"] for t in answer["topics"]] == [15, 0]
    assert "b" in backend.topics and "a" not in backend.topics
