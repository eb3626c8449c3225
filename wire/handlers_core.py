"""Metadata, Produce, Fetch, ListOffsets and FindCoordinator over the Kafka protocol.

Records pass through: a Kafka client's batches are stored as they came (marked as Kafka's
records format), and fetched batches go back out in Kafka's format
(``rafka.storage.kafka_batches``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.cluster.topics import is_internal
from rafka.errors import (
    FencedLeaderEpoch,
    InvalidRecord,
    InvalidRequest,
    RafkaError,
    TopicAuthorizationFailed,
    UnknownLeaderEpoch,
)
from rafka.storage import record_batch as rb
from rafka.storage.kafka_batches import accept_kafka_records, to_kafka_wire
from rafka.wire.connection import CloseConnection
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers import handles
from rafka.wire.session import Session

PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR = 0, 1, 2, 3, 10
INVALID_TOPIC = 17
INVALID_REQUIRED_ACKS = 21
CLUSTER_AUTHORIZATION_FAILED = 31
GROUP_AUTHORIZATION_FAILED = 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
FETCH_SESSION_ID_NOT_FOUND = 70
#: Kafka's "authorized operations were not asked for".
OPERATIONS_NOT_ASKED = -(2**31)
CLUSTER = "kafka-cluster"
LATEST, EARLIEST = -1, -2


def _errno(error: BaseException) -> int:
    return error.errno if isinstance(error, RafkaError) and error.errno >= 0 else -1


# -- Metadata ----------------------------------------------------------------------------------


@handles(METADATA)
async def metadata(session: Session, header: RequestHeader, body: dict) -> dict:
    asked = body.get("topics")
    names = None if asked is None else [t["name"] for t in asked if t.get("name") is not None]
    if names is not None and not names and header.api_version == 0:
        names = None  # v0: an empty list meant every topic
    allowed = names
    if names is not None:
        allowed = [n for n in names if session.authorize(Op.DESCRIBE, Res.TOPIC, n)]
    # Kafka: CREATE on the cluster, or on each topic to create (checked per name here:
    # a name the principal may not create is simply not created).
    auto_create = bool(body.get("allow_auto_topic_creation", True)) and (
        session.authorize(Op.CREATE, Res.CLUSTER, CLUSTER)
        or bool(allowed) and all(session.authorize(Op.CREATE, Res.TOPIC, n) for n in allowed)
    )
    answer = await session.backend.kafka_metadata(allowed, auto_create, session.endpoint.protocol)
    topics = []
    for name, described in answer["topics"].items():
        if names is None and not session.authorize(Op.DESCRIBE, Res.TOPIC, name):
            continue  # a listing shows only what the principal may see
        topics.append(_topic_metadata(name, described))
    for name in names or ():
        if name not in answer["topics"]:
            topics.append({"error_code": TopicAuthorizationFailed.errno, "name": name,
                           "partitions": []})  # fmt: skip
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b, "host": h, "port": p, "rack": r}
                    for b, h, p, r in answer["brokers"]],
        "cluster_id": session.cluster_id,
        "controller_id": answer["controller_id"],
        "topics": topics,
        "cluster_authorized_operations": OPERATIONS_NOT_ASKED,
    }  # fmt: skip


def _topic_metadata(name: str, described: Any) -> dict:
    if not isinstance(described, dict):
        errno, _ = described
        return {"error_code": errno, "name": name, "partitions": []}
    partitions = []
    for p in described["partitions"]:
        offline = [b for b in p["replicas"] if p["offline"] and b == p["leader"]]
        partitions.append({
            "error_code": 5 if p["leader"] < 0 else 0,  # LEADER_NOT_AVAILABLE
            "partition_index": p["partition"], "leader_id": p["leader"],
            "leader_epoch": p["leader_epoch"], "replica_nodes": list(p["replicas"]),
            "isr_nodes": list(p["isr"]), "offline_replicas": offline,
        })  # fmt: skip
    return {"error_code": 0, "name": name, "is_internal": bool(described.get("internal")),
            "partitions": partitions,
            "topic_authorized_operations": OPERATIONS_NOT_ASKED}  # fmt: skip


# -- Produce -----------------------------------------------------------------------------------


@handles(PRODUCE)
async def produce(session: Session, header: RequestHeader, body: dict) -> dict | None:
    """Kafka's rules (KafkaApis.handleProduceRequest, ReplicaManager.appendRecords): v3+
    only; acks 0, 1 or -1; one batch per partition; transactional batches need the request's
    transactional id and WRITE on it; no client writes to an internal topic. A produce with
    acks=0 that fails closes the connection, so the client learns of it."""
    if header.api_version < 3:
        raise CloseConnection(
            f"Produce v{header.api_version} is not served: rafka takes record batch v2 "
            "(Produce v3+, Kafka 0.11+)"
        )
    acks = body["acks"]
    transactional_id = body.get("transactional_id")
    refused = 0
    if acks not in (0, 1, -1):
        refused = INVALID_REQUIRED_ACKS
    elif transactional_id is not None and not session.authorize(
        Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id
    ):
        refused = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    jobs = []
    for topic in body["topic_data"]:
        name = topic["name"]
        topic_refused = refused or _topic_refusal(session, name)
        for part in topic["partition_data"]:
            # Taken here, in arrival order, before anything waits (see _produce_partition).
            gate = session.produce_gate((name, part["index"]))
            jobs.append((name, part["index"], part["records"], topic_refused, gate))
    answers = await asyncio.gather(*(
        _produce_partition(session, name, index, records, refused_with, acks,
                           body["timeout_ms"], transactional_id, gate)
        for name, index, records, refused_with, gate in jobs
    ))  # fmt: skip
    if acks == 0:
        failed = [a for a in answers if a["error_code"]]
        if failed:
            raise CloseConnection(f"a produce with acks=0 failed: {failed[0].get('error_message')}")
        return None
    by_topic: dict[str, list] = {}
    for (name, *_), answer in zip(jobs, answers):
        by_topic.setdefault(name, []).append(answer)
    return {
        "responses": [{"name": n, "partition_responses": ps} for n, ps in by_topic.items()],
        "throttle_time_ms": 0,
    }


def _topic_refusal(session: Session, name: str) -> int:
    if is_internal(name):
        return INVALID_TOPIC  # ReplicaManager: "Cannot append to internal topic"
    if not session.authorize(Op.WRITE, Res.TOPIC, name):
        return TopicAuthorizationFailed.errno
    return 0


def _batch_facts(batches: bytes) -> tuple[int, bool]:
    """(number of batches, whether any is transactional) of checked, back-to-back batches."""
    count, transactional, pos = 0, False, 0
    while pos < len(batches):
        _, length = rb.LENGTH_PREFIX.unpack_from(batches, pos)
        (attributes,) = rb.ATTRIBUTES.unpack_from(batches, pos + rb.ATTRIBUTES_POS)
        transactional = transactional or bool(attributes & rb.TRANSACTIONAL_BIT)
        count += 1
        pos += rb.LENGTH_PREFIX_SIZE + length
    return count, transactional


async def _produce_partition(session: Session, topic: str, index: int, records, refused: int,
                             acks: int, timeout_ms: int, transactional_id: str | None,
                             gate: tuple) -> dict:  # fmt: skip
    """One partition's append. ``gate`` = (the previous request's send to this partition on
    this connection, this one's): a request is numbered and sent only after the one before
    it was, so the leader appends a connection's pipelined requests in the order they came
    (Kafka serves one request per connection at a time; rafka overlaps them but keeps the
    order where it matters)."""
    previous, mine = gate
    answer: dict[str, Any] = {"index": index, "error_code": refused, "base_offset": -1,
                              "log_append_time_ms": -1, "log_start_offset": -1}  # fmt: skip
    try:
        if refused:
            return answer
        if records is None or len(records) == 0:
            raise InvalidRecord(f"produce to {topic}-{index} carries no record batch")
        batches = accept_kafka_records(records)
        count, transactional = _batch_facts(batches)
        if count != 1:
            raise InvalidRecord(
                f"produce to {topic}-{index} carries {count} record batches; Produce v3+ "
                "takes exactly one per partition"
            )
        if transactional and transactional_id is None:
            answer["error_code"] = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            answer["error_message"] = "transactional records need the request's transactional id"
            return answer
        if previous is not None:
            await asyncio.shield(previous)
        errno, message, log_start, results = await session.backend.produce(
            topic, index, batches, acks, timeout_ms, session.client_key,
            lambda client_id: session.next_produce_number((client_id, topic, index)),
            transactional_id, lambda: _open(mine),
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - the partition's answer carries the error
        answer.update(error_code=_errno(e), error_message=str(e))
        return answer
    finally:
        _open(mine)
    answer["log_start_offset"] = log_start
    if errno:
        answer.update(error_code=errno, error_message=message)
        return answer
    failed = [(i, r) for i, r in enumerate(results) if r[0]]
    if failed:
        answer.update(error_code=failed[0][1][0], error_message=failed[0][1][1],
                      record_errors=[{"batch_index": i, "batch_index_error_message": r[1]}
                                     for i, r in failed])  # fmt: skip
        return answer
    answer["base_offset"] = results[0][2]
    answer["log_append_time_ms"] = results[0][3]
    return answer


def _open(gate: asyncio.Future) -> None:
    if not gate.done():
        gate.set_result(None)


# -- Fetch -------------------------------------------------------------------------------------


@handles(FETCH)
async def fetch(session: Session, header: RequestHeader, body: dict) -> dict:
    if body.get("session_id", 0) != 0:
        # rafka never creates fetch sessions (it answers session id 0), so a client naming
        # one is mistaken: Kafka's answer makes it start over with full fetches.
        return {"throttle_time_ms": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND,
                "session_id": 0, "responses": []}  # fmt: skip
    committed = body.get("isolation_level", 0) == 1
    max_bytes = max(0, body.get("max_bytes", 0x7FFFFFFF))
    # One entry per partition, where it was first named, as the last naming asked (Kafka's
    # request is a map: a later entry replaces an earlier one's values).
    wanted: dict[tuple[str, int], tuple] = {}
    for topic in body["topics"]:
        readable = session.authorize(Op.READ, Res.TOPIC, topic["topic"])
        for part in topic["partitions"]:
            wanted[(topic["topic"], part["partition"])] = (
                topic["topic"], part["partition"], part["fetch_offset"],
                # at least 1: a leader reads the first batch whole however small the limit
                # (KIP-74), and _keep_to trims the rest
                max(1, min(part["partition_max_bytes"], max_bytes)), readable,
                part.get("current_leader_epoch", -1),
            )  # fmt: skip
    partitions = list(wanted.values())
    # First a look without waiting at every partition; if that finds less than min_bytes,
    # one long poll per partition, answered as soon as any of them has records.
    answers = await asyncio.gather(*(_fetch_partition(session, w, 0, 0, committed)
                                     for w in partitions))  # fmt: skip
    found = sum(len(a["records"]) for a in answers)
    has_errors = any(a["error_code"] for a in answers)
    min_bytes = body["min_bytes"]
    if not has_errors and found < max(min_bytes, 1) and body["max_wait_ms"] > 0 and partitions \
            and min_bytes > 0:  # fmt: skip
        answers = await _long_poll(session, partitions, answers, body["max_wait_ms"],
                                   min_bytes, committed)  # fmt: skip
    _keep_to(answers, [w[3] for w in partitions], max_bytes)
    by_topic: dict[str, list] = {}
    for (name, *_), answer in zip(partitions, answers):
        by_topic.setdefault(name, []).append(answer)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]}


def _keep_to(answers: list[dict], partition_limits: list[int], max_bytes: int) -> None:
    """Keep each answer to the whole batches that fit what the request has left, as Kafka
    reads partition after partition with min(partition_max_bytes, bytes left) (KIP-74): the
    first batch of the first partition with records goes out however large; every other
    partition keeps the batches within its limit and the rest are fetched again next time.
    The reads ran concurrently with each partition's own limit, so this only trims."""
    left = max_bytes
    first = True
    for answer, limit in zip(answers, partition_limits):
        records = answer["records"]
        if not records:
            continue
        kept = _whole_batches_within(records, min(limit, left), at_least_one=first)
        if kept < len(records):
            answer["records"] = records[:kept]
        if kept:
            first = False
        left = max(0, left - kept)


def _whole_batches_within(records: bytes, limit: int, at_least_one: bool) -> int:
    """The length of the longest prefix of Kafka-format ``records`` made of whole batches and
    at most ``limit`` bytes long (the first whole batch regardless when ``at_least_one``)."""
    pos, end = 0, len(records)
    while pos + rb.LENGTH_PREFIX_SIZE <= end:
        size = rb.LENGTH_PREFIX.unpack_from(records, pos)[1] + rb.LENGTH_PREFIX_SIZE
        if pos + size > end or (pos + size > limit and not (at_least_one and pos == 0)):
            break
        pos += size
    return pos


async def _long_poll(session: Session, wanted: list, answers: list, max_wait_ms: int,
                     min_bytes: int, committed: bool) -> list:  # fmt: skip
    """One long poll per partition until the answers hold ``min_bytes`` together, or the
    leaders' ``max_wait_ms`` ran out, or an error came: as Kafka's delayed fetch, bytes count
    across partitions. Each partition's leader is asked for what is missing once the other
    partitions' first answers are counted (its own answer rereads its own bytes)."""
    found = sum(len(a["records"]) for a in answers)
    tasks = [asyncio.ensure_future(_fetch_partition(
        session, w, max(1, min_bytes - (found - len(a["records"]))), max_wait_ms, committed))
        for w, a in zip(wanted, answers)]  # fmt: skip
    latest = list(answers)
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            latest[tasks.index(t)] = t.result()
        if any(t.result()["error_code"] for t in done) or \
                sum(len(a["records"]) for a in latest) >= min_bytes:  # fmt: skip
            break
    for t in pending:
        t.cancel()  # the replicas' long polls end by themselves at max_wait_ms
    return latest


async def _fetch_partition(session: Session, wanted: tuple, min_bytes: int, max_wait_ms: int,
                           committed: bool) -> dict:  # fmt: skip
    topic, index, offset, max_bytes, readable, current_leader_epoch = wanted
    answer: dict[str, Any] = {"partition_index": index, "error_code": 0, "high_watermark": -1,
                              "last_stable_offset": -1, "log_start_offset": -1,
                              "aborted_transactions": None, "preferred_read_replica": -1,
                              "records": b""}  # fmt: skip
    if not readable:
        answer["error_code"] = TopicAuthorizationFailed.errno
        return answer
    try:
        if current_leader_epoch >= 0:
            _check_leader_epoch(
                topic, index, current_leader_epoch,
                await session.backend.leader_epoch(topic, index, current_leader_epoch),
            )  # fmt: skip
        got = await session.backend.fetch(topic, index, offset, max_bytes, min_bytes,
                                          max_wait_ms, committed)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - the partition's answer carries the error
        answer["error_code"] = _errno(e)
        return answer
    errno, _, high_watermark, log_start, _, records = got[:6]
    answer.update(error_code=errno, high_watermark=high_watermark, log_start_offset=log_start,
                  last_stable_offset=high_watermark)  # fmt: skip
    if committed and not errno:
        answer["last_stable_offset"] = got[6]
        answer["aborted_transactions"] = [{"producer_id": p, "first_offset": o}
                                          for p, o in got[7]]  # fmt: skip
    if not errno and len(records):
        answer["records"] = to_kafka_wire(records)
    return answer


def _check_leader_epoch(topic: str, index: int, client_epoch: int, leader_epoch: int) -> None:
    """KIP-320: a client whose metadata names an older leader epoch is fenced (it must
    refresh and may have to truncate); one naming a newer epoch than the listener knows is
    told it is unknown (retriable: the listener's view catches up)."""
    if client_epoch < leader_epoch:
        raise FencedLeaderEpoch(
            f"{topic}-{index}: the request names leader epoch {client_epoch}, the leader is at "
            f"{leader_epoch}; refresh metadata"
        )
    if client_epoch > leader_epoch:
        raise UnknownLeaderEpoch(
            f"{topic}-{index}: the request names leader epoch {client_epoch}, newer than the "
            f"leader's {leader_epoch}; retry"
        )


# -- ListOffsets -------------------------------------------------------------------------------


@handles(LIST_OFFSETS)
async def list_offsets(session: Session, header: RequestHeader, body: dict) -> dict:
    committed = body.get("isolation_level", 0) == 1
    jobs = []
    for topic in body["topics"]:
        readable = session.authorize(Op.DESCRIBE, Res.TOPIC, topic["name"])
        for part in topic["partitions"]:
            jobs.append((topic["name"], part["partition_index"], part["timestamp"], readable))
    answers = await asyncio.gather(*(_list_offset(session, j, committed) for j in jobs))
    by_topic: dict[str, list] = {}
    for (name, *_), answer in zip(jobs, answers):
        by_topic.setdefault(name, []).append(answer)
    return {"throttle_time_ms": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def _list_offset(session: Session, job: tuple, committed: bool) -> dict:
    topic, index, timestamp, readable = job
    answer = {"partition_index": index, "error_code": 0, "timestamp": -1, "offset": -1,
              "leader_epoch": -1}  # fmt: skip
    if not readable:
        answer["error_code"] = TopicAuthorizationFailed.errno
        return answer
    try:
        errno, _, offset, found_timestamp = await session.backend.list_offset(
            topic, index, timestamp, committed
        )
    except Exception as e:  # noqa: BLE001 - the partition's answer carries the error
        answer["error_code"] = _errno(e)
        return answer
    answer.update(error_code=errno, offset=offset, timestamp=found_timestamp)
    return answer


# -- FindCoordinator ---------------------------------------------------------------------------


@handles(FIND_COORDINATOR)
async def find_coordinator(session: Session, header: RequestHeader, body: dict) -> dict:
    """Group and transaction coordinators are Ray actors, reachable through every listener:
    the client is pointed back at the broker it asked, which forwards to the right shard."""
    key_type = body.get("key_type", 0)
    key = body.get("key", "")
    resource = Res.GROUP if key_type == 0 else Res.TRANSACTIONAL_ID
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "node_id": -1,
              "host": "", "port": -1}  # fmt: skip
    if key_type not in (0, 1):
        answer.update(error_code=InvalidRequest.errno,
                      error_message=f"key type {key_type} is not 0 (group) or 1 (transaction)")
        return answer
    if not session.authorize(Op.DESCRIBE, resource, key):
        errno = GROUP_AUTHORIZATION_FAILED if key_type == 0 else (
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # fmt: skip
        answer.update(error_code=errno, error_message="not authorized")
        return answer
    try:
        if key_type == 0:
            await session.backend.controller("group_coordinator", key)
        else:
            await session.backend.controller("transaction_coordinator", key)
    except Exception as e:  # noqa: BLE001 - answered as Kafka's error code
        answer.update(error_code=_errno(e) if _errno(e) > 0 else 15, error_message=str(e))
        return answer
    broker_id, host, port = session.node
    answer.update(node_id=broker_id, host=host, port=port)
    return answer
