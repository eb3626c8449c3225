"""Metadata, Produce, Fetch, ListOffsets and FindCoordinator handlers against a fake rafka."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rafka.errors import NotLeaderOrFollower
from rafka.storage.kafka_batches import accept_kafka_records
from rafka.wire.connection import CloseConnection
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers_core import fetch, find_coordinator, list_offsets, metadata, produce
from rafka.wire.listeners import Endpoint
from rafka.wire.security_view import SecurityCache
from rafka.wire.session import Session


def kafka_batch(values: list[bytes], producer_id: int = -1) -> bytes:
    """A genuine Kafka v2 batch, as a Kafka client sends it."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, producer_id, 0 if producer_id >= 0 else -1,
                                        0 if producer_id >= 0 else -1, 1 << 20)  # fmt: skip
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


class FakeBackend:
    """Answers as rafka's actors do; records what was asked."""

    def __init__(self):
        self.produced: list = []
        self.log = b""
        self.fetch_errno = 0
        self.fetches: list = []  # (topic, partition, max_bytes, min_bytes, max_wait_ms, offset)
        self.epoch_reads: list = []

    async def kafka_metadata(self, names, auto_create, protocol):
        topics = {"orders": {"topic_id": "x", "internal": False, "partitions": [
            {"partition": 0, "leader": 1, "leader_epoch": 4, "replicas": [1, 2],
             "isr": [1, 2], "offline": False}]}}
        wanted = topics if names is None else {
            n: topics.get(n, (3, f"{n} does not exist")) for n in names}
        return {"brokers": [(1, "127.0.0.1", 9092, None), (2, "127.0.0.1", 9093, "r2")],
                "controller_id": 1, "topics": wanted}

    async def produce(self, topic, partition, batches, acks, timeout_ms, client_key, number_of,
                      transactional_id, submitted=None):  # fmt: skip
        if submitted is not None:
            submitted()
        if topic == "moved":
            raise NotLeaderOrFollower("broker 1 no longer leads moved-0")
        self.produced.append((topic, partition, bytes(batches), acks, number_of("c")))
        self.log += bytes(batches)
        return (0, "", 0, [(0, "", 10, -1)])

    async def fetch(self, topic, partition, offset, max_bytes, min_bytes, max_wait_ms,
                    committed):  # fmt: skip
        self.fetches.append((topic, partition, max_bytes, min_bytes, max_wait_ms, offset))
        records = np.frombuffer(self.log, dtype=np.uint8) if offset == 0 else np.empty(0, np.uint8)
        base = (self.fetch_errno, "", 10, 0, 10, records)
        return base + (8, [(7, 3)]) if committed else base

    async def leader_epoch(self, topic, partition, newer_than=None):
        self.epoch_reads.append(newer_than)
        return 4

    async def list_offset(self, topic, partition, timestamp, committed):
        return (0, "", 42 if timestamp == -1 else 0, -1)

    async def controller(self, method, *args):
        assert method in ("group_coordinator", "transaction_coordinator")
        return {"name": "shard-0"}


def _session(allow: bool = True, backend=None) -> Session:
    security = SecurityCache({"allow.everyone.if.no.acl.found": allow})
    security.update({"version": 0, "users": {}, "acls": []})
    return Session(backend or FakeBackend(), security, Endpoint("PLAINTEXT", "127.0.0.1", 9092),
                   "127.0.0.1", {}, "test", node=(1, "127.0.0.1", 9092))  # fmt: skip


def _run(handler, session, api_key, version, body):
    return asyncio.run(handler(session, RequestHeader(api_key, version, 1, "c"), body))


def test_metadata_lists_brokers_and_partitions_with_epochs():
    answer = _run(metadata, _session(), 3, 8, {"topics": [{"name": "orders"}, {"name": "nope"}],
                                               "allow_auto_topic_creation": False})
    assert [b["node_id"] for b in answer["brokers"]] == [1, 2]
    orders, nope = answer["topics"]
    assert orders["partitions"][0]["leader_epoch"] == 4 and orders["error_code"] == 0
    assert nope["error_code"] == 3


def test_metadata_without_access_hides_the_topic_in_listings():
    session = _session(allow=False)
    listing = _run(metadata, session, 3, 8, {"topics": None})
    assert listing["topics"] == []
    named = _run(metadata, session, 3, 8, {"topics": [{"name": "orders"}]})
    assert named["topics"][0]["error_code"] == 29


def test_produce_passes_kafka_batches_to_the_leader_marked_and_answers_the_offset():
    backend = FakeBackend()
    batch = kafka_batch([b"a", b"b"])
    answer = _run(produce, _session(backend=backend), 0, 9, {
        "acks": -1, "timeout_ms": 1000, "transactional_id": None,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]})
    part = answer["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0 and part["base_offset"] == 10
    assert backend.produced[0][2] == accept_kafka_records(batch)


def test_produce_with_acks_zero_writes_but_sends_no_answer():
    backend = FakeBackend()
    answer = _run(produce, _session(backend=backend), 0, 7, {
        "acks": 0, "timeout_ms": 1000,
        "topic_data": [{"name": "orders", "partition_data": [
            {"index": 0, "records": kafka_batch([b"a"])}]}]})
    assert answer is None and len(backend.produced) == 1


def test_produce_errors_are_per_partition():
    answer = _run(produce, _session(), 0, 9, {
        "acks": 1, "timeout_ms": 1000,
        "topic_data": [
            {"name": "moved", "partition_data": [{"index": 0, "records": kafka_batch([b"a"])}]},
            {"name": "orders", "partition_data": [{"index": 0, "records": b"\x00garbage"}]},
        ]})  # fmt: skip
    moved, garbage = (r["partition_responses"][0] for r in answer["responses"])
    assert moved["error_code"] == 6 and "no longer leads" in moved["error_message"]
    assert garbage["error_code"] in (2, 87)  # CORRUPT_MESSAGE / INVALID_RECORD


def test_produce_with_bad_acks_or_without_access_is_refused():
    bad_acks = _run(produce, _session(), 0, 9, {"acks": 2, "timeout_ms": 1, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": kafka_batch([b"a"])}]}]})
    assert bad_acks["responses"][0]["partition_responses"][0]["error_code"] == 21
    denied = _run(produce, _session(allow=False), 0, 9, {"acks": 1, "timeout_ms": 1,
                  "topic_data": [{"name": "orders", "partition_data": [
                      {"index": 0, "records": kafka_batch([b"a"])}]}]})  # fmt: skip
    assert denied["responses"][0]["partition_responses"][0]["error_code"] == 29


def test_fetch_returns_kafka_format_records_and_read_committed_extras():
    backend = FakeBackend()
    batch = kafka_batch([b"a", b"b"])
    backend.log = accept_kafka_records(batch)
    body = {"max_wait_ms": 0, "min_bytes": 1, "isolation_level": 1, "topics": [
        {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0,
                                            "partition_max_bytes": 1 << 20}]}]}
    answer = _run(fetch, _session(backend=backend), 1, 11, body)
    part = answer["responses"][0]["partitions"][0]
    assert bytes(part["records"]) == batch
    assert part["last_stable_offset"] == 8
    assert part["aborted_transactions"] == [{"producer_id": 7, "first_offset": 3}]


def test_fetch_naming_a_session_is_told_to_start_over():
    answer = _run(fetch, _session(), 1, 11, {"session_id": 5, "max_wait_ms": 0,
                                             "min_bytes": 1, "topics": []})
    assert answer["error_code"] == 70


def test_list_offsets_and_find_coordinator():
    offsets = _run(list_offsets, _session(), 2, 4, {"isolation_level": 0, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert offsets["topics"][0]["partitions"][0]["offset"] == 42
    found = _run(find_coordinator, _session(), 10, 2, {"key": "g", "key_type": 0})
    assert (found["error_code"], found["node_id"], found["port"]) == (0, 1, 9092)


def _produce_body(name: str, records, acks: int = -1, transactional_id=None) -> dict:
    return {"acks": acks, "timeout_ms": 1000, "transactional_id": transactional_id,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": records}]}]}


class SlowLookupBackend(FakeBackend):
    """A leader lookup whose time varies per request (a cold cache asks the controller),
    numbering each request when it is sent, as the real backend does."""

    def __init__(self, delays):
        super().__init__()
        self.delays = list(delays)
        self.sent: list = []

    async def produce(self, topic, partition, batches, acks, timeout_ms, client_key, number_of,
                      transactional_id, submitted=None):  # fmt: skip
        await asyncio.sleep(self.delays.pop(0))
        self.sent.append((bytes(batches), number_of("c")))
        if submitted is not None:
            submitted()
        await asyncio.sleep(0.01)
        return (0, "", 0, [(0, "", 10, -1)])


def test_pipelined_produces_to_a_partition_are_numbered_in_the_order_they_came():
    backend = SlowLookupBackend([0.05, 0.04, 0.03, 0.02, 0.0])
    session = _session(backend=backend)
    batches = [kafka_batch([b"%d" % i]) for i in range(5)]

    async def run():
        tasks = [asyncio.ensure_future(produce(session, RequestHeader(0, 9, i, "c"),
                                               _produce_body("orders", b)))
                 for i, b in enumerate(batches)]  # fmt: skip
        await asyncio.gather(*tasks)

    asyncio.run(run())
    order = [batches.index(next(b for b in batches if accept_kafka_records(b) == sent))
             for sent, _ in backend.sent]  # fmt: skip
    assert order == [0, 1, 2, 3, 4]
    assert [number for _, number in backend.sent] == [0, 1, 2, 3, 4]


def test_transactional_batches_need_a_transactional_id_and_write_on_it():
    builder = DefaultRecordBatchBuilder(2, 0, True, 4242, 0, 0, 1 << 20)
    builder.append(0, timestamp=1, key=None, value=b"x", headers=[])
    backend = FakeBackend()
    answer = _run(produce, _session(backend=backend), 0, 9,
                  _produce_body("orders", bytes(builder.build())))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 53
    assert backend.produced == []


def test_kafka_clients_cannot_produce_to_internal_topics():
    backend = FakeBackend()
    answer = _run(produce, _session(backend=backend), 0, 9,
                  _produce_body("__consumer_offsets", kafka_batch([b"x"])))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 17
    assert backend.produced == []


def test_more_than_one_batch_for_a_partition_is_an_invalid_record():
    backend = FakeBackend()
    answer = _run(produce, _session(backend=backend), 0, 9,
                  _produce_body("orders", kafka_batch([b"a"]) + kafka_batch([b"b"])))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 87
    assert backend.produced == []


def test_a_failed_produce_with_acks_zero_closes_the_connection():
    with pytest.raises(CloseConnection):
        _run(produce, _session(), 0, 9, _produce_body("moved", kafka_batch([b"a"]), acks=0))


def test_produce_versions_before_three_close_the_connection():
    with pytest.raises(CloseConnection):
        _run(produce, _session(), 0, 2, _produce_body("orders", kafka_batch([b"a"])))


def test_fetch_keeps_to_the_requests_max_bytes_after_the_first_batch():
    backend = FakeBackend()
    batch = kafka_batch([b"x" * 500])
    backend.log = accept_kafka_records(batch)
    partitions = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                  for p in range(3)]
    answer = _run(fetch, _session(backend=backend), 1, 11, {
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": len(batch) + 10,
        "topics": [{"topic": "orders", "partitions": partitions}]})
    sizes = [len(p["records"]) for p in answer["responses"][0]["partitions"]]
    assert sizes == [len(batch), 0, 0]


def test_auto_creation_is_allowed_by_create_on_the_topic_alone():
    seen = {}

    class Recording(FakeBackend):
        async def kafka_metadata(self, names, auto_create, protocol):
            seen["auto_create"] = auto_create
            return await super().kafka_metadata(names, auto_create, protocol)

    security = SecurityCache({"allow.everyone.if.no.acl.found": False})
    security.update({"version": 1, "users": {}, "acls": [
        (2, "new-topic", 3, "User:ANONYMOUS", "*", 5, 3),  # CREATE on the topic
        (2, "new-topic", 3, "User:ANONYMOUS", "*", 8, 3),  # DESCRIBE on the topic
    ]})
    session = Session(Recording(), security, Endpoint("PLAINTEXT", "127.0.0.1", 9092),
                      "127.0.0.1", {}, "test", node=(1, "127.0.0.1", 9092))  # fmt: skip
    _run(metadata, session, 3, 8, {"topics": [{"name": "new-topic"}],
                                   "allow_auto_topic_creation": True})
    assert seen["auto_create"] is True


def test_a_fresh_security_cache_denies_all_but_super_users_until_loaded():
    cache = SecurityCache({"allow.everyone.if.no.acl.found": True, "super.users": "User:root"})
    assert not cache.authorize("User:ANONYMOUS", "h", 3, 2, "orders")
    assert cache.authorize("User:root", "h", 3, 2, "orders")
    cache.update({"version": 0, "users": {}, "acls": []})
    assert cache.authorize("User:ANONYMOUS", "h", 3, 2, "orders")


def _fetch_body(partitions: list[dict], max_bytes: int = 1 << 30, **extra) -> dict:
    return {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, **extra,
            "topics": [{"topic": "orders", "partitions": partitions}]}


def test_fetch_returns_only_the_first_batch_when_it_alone_exceeds_max_bytes():
    """KIP-74: a partition is read within what the request has left (the partition max or
    less), and only the first batch of the first partition may go past it."""
    backend = FakeBackend()
    batch = kafka_batch([b"x" * 500])
    backend.log = accept_kafka_records(batch) * 4
    answer = _run(fetch, _session(backend=backend), 1, 11, _fetch_body(
        [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4 << 20}], max_bytes=100))
    records = answer["responses"][0]["partitions"][0]["records"]
    assert bytes(records) == batch
    assert [f[2] for f in backend.fetches] == [100]


def test_fetch_keeps_whole_batches_within_a_partitions_max_bytes():
    """A partition's answer holds the whole batches that fit its partition_max_bytes, at
    least one; a batch cut short is not sent."""
    backend = FakeBackend()
    batch = kafka_batch([b"x" * 500])
    backend.log = accept_kafka_records(batch) * 4
    answer = _run(fetch, _session(backend=backend), 1, 11, _fetch_body(
        [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 2 * len(batch) + 7}]))
    assert bytes(answer["responses"][0]["partitions"][0]["records"]) == batch * 2


def test_fetch_answers_a_partition_named_twice_once():
    """A partition listed twice in one fetch is read and answered once, as Kafka's fetch
    request keeps one entry per partition (with the values named last)."""
    backend = FakeBackend()
    backend.log = accept_kafka_records(kafka_batch([b"a"]))
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    last = {**part, "fetch_offset": 7}
    answer = _run(fetch, _session(backend=backend), 1, 11, _fetch_body([part] * 49 + [last]))
    assert len(answer["responses"][0]["partitions"]) == 1
    assert [f[5] for f in backend.fetches] == [7]


def test_fetch_with_another_leader_epoch_is_fenced_or_told_the_epoch_is_unknown():
    """KIP-320: a current leader epoch below the leader's is FENCED_LEADER_EPOCH, above it
    UNKNOWN_LEADER_EPOCH (after the listener re-reads the epoch); -1 or the same epoch is
    served."""
    backend = FakeBackend()
    backend.log = accept_kafka_records(kafka_batch([b"a"]))

    def error_with(epoch: int) -> int:
        body = _fetch_body([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": epoch,
                             "partition_max_bytes": 1 << 20}])  # fmt: skip
        return _run(fetch, _session(backend=backend), 1, 11, body)[
            "responses"][0]["partitions"][0]["error_code"]

    assert [error_with(e) for e in (3, 5, 4, -1)] == [74, 75, 0, 0]
    assert backend.epoch_reads == [3, 5, 4]


def test_a_long_poll_waits_for_the_requests_min_bytes():
    """With nothing to read at once, the long poll asks the leader for the request's
    min_bytes, not for a single byte."""
    backend = FakeBackend()
    part = {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 20}
    _run(fetch, _session(backend=backend), 1, 11,
         _fetch_body([part], max_wait_ms=50, min_bytes=4096))  # fmt: skip
    assert backend.fetches[-1][3:5] == (4096, 50)


def test_a_fetch_with_max_bytes_zero_gets_the_first_batch():
    """Kafka takes fetch.max.bytes=0: the first batch of the first partition still goes out
    (the leader is asked for at least one byte, never zero)."""
    backend = FakeBackend()
    batch = kafka_batch([b"x" * 50])
    backend.log = accept_kafka_records(batch) * 2
    answer = _run(fetch, _session(backend=backend), 1, 11, _fetch_body(
        [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 0}], max_bytes=0))
    part = answer["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and bytes(part["records"]) == batch
    assert backend.fetches[0][2] == 1


def test_a_long_poll_counts_min_bytes_across_partitions():
    """Bytes count across partitions, as in Kafka's delayed fetch: each leader is asked for
    what the other partitions' first answers leave missing (its own bytes are read again)."""
    backend = FakeBackend()
    backend.log = accept_kafka_records(kafka_batch([b"x" * 100]))
    size = len(backend.log)
    parts = [{"partition": p, "fetch_offset": 0 if p == 0 else 5, "partition_max_bytes": 1 << 20}
             for p in (0, 1)]  # fmt: skip
    _run(fetch, _session(backend=backend), 1, 11,
         _fetch_body(parts, max_wait_ms=50, min_bytes=size + 100))  # fmt: skip
    waits = {f[1]: f[3] for f in backend.fetches if f[4] == 50}
    assert waits == {0: size + 100, 1: 100}
