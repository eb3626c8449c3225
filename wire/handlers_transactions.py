"""Producer ids and transactions over the Kafka protocol: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit, mapped onto the transaction coordinators and
group coordinators exactly as rafka's own transactional Producer calls them
(``rafka.clients.producer_transactions``).

rafka's coordinator follows Kafka 4's transaction version 2: data partitions are added by
their leaders on the first transactional write (a client's AddPartitionsToTxn is still
carried out: adding a partition twice is harmless), and EndTxn v5+ bumps the producer epoch.
EndTxn v0-4 has no field for a bumped epoch: its client is of transaction version 1 and goes
on with the epoch it had, so the coordinator ends its transactions without a bump, as Kafka
does for such clients. (A fence or a timeout abort still bumps it; an InitProducerId v3+
carrying the old identity is then answered the bumped one.)

Error codes a request version does not know are answered as Kafka answers older clients:
PRODUCER_FENCED (90) as INVALID_PRODUCER_EPOCH (47) below the version that added it, and
TRANSACTION_ABORTABLE (120, "this transaction already ended; abort and begin again") as
INVALID_PRODUCER_EPOCH too, which is what Kafka's version-1 coordinator answers a producer
whose transaction was ended under it (Java clients abort and re-initialise on it).
"""

from __future__ import annotations

from typing import Any

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.cluster.topics import CONSUMER_OFFSETS
from rafka.errors import (
    ClusterAuthorizationFailed,
    CommitFailed,
    CoordinatorNotAvailable,
    GroupAuthorizationFailed,
    InvalidProducerEpoch,
    InvalidRequest,
    ProducerFenced,
    RafkaError,
    TopicAuthorizationFailed,
    TransactionAbortable,
    TransactionalIdAuthorizationFailed,
    UnknownTopicOrPartition,
)
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers import handles
from rafka.wire.session import Session

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
TXN_OFFSET_COMMIT = 28
CLUSTER = "kafka-cluster"
UNKNOWN_SERVER_ERROR = -1
ILLEGAL_GENERATION = 22
OPERATION_NOT_ATTEMPTED = 55
#: The first version of each API whose clients know PRODUCER_FENCED / TRANSACTION_ABORTABLE.
_FENCED_FROM = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2,
                END_TXN: 2, TXN_OFFSET_COMMIT: 3}  # fmt: skip
_ABORTABLE_FROM = {INIT_PRODUCER_ID: 5, ADD_PARTITIONS_TO_TXN: 5, ADD_OFFSETS_TO_TXN: 4,
                   END_TXN: 4, TXN_OFFSET_COMMIT: 4}  # fmt: skip


def kafka_errno(header: RequestHeader, errno: int) -> int:
    """``errno`` as a client of this request's version understands it."""
    version = header.api_version
    if errno == TransactionAbortable.errno and version < _ABORTABLE_FROM[header.api_key]:
        return InvalidProducerEpoch.errno
    if errno == ProducerFenced.errno and version < _FENCED_FROM[header.api_key]:
        return InvalidProducerEpoch.errno
    return errno


def _errno(error: BaseException) -> int:
    if isinstance(error, CommitFailed):
        return ILLEGAL_GENERATION  # a partition not the member's: Kafka clients rejoin on it
    if isinstance(error, RafkaError):
        return error.errno if error.errno >= 0 else UNKNOWN_SERVER_ERROR
    return CoordinatorNotAvailable.errno  # the coordinator could not be asked: retriable


async def _coordinator_call(session: Session, transactional_id: str, method: str,
                            *args) -> tuple:  # fmt: skip
    """The transaction coordinator's answer tuple (errno, message, ...); a call that could
    not be made answers its error code the same way."""
    try:
        return tuple(await session.backend.transaction(transactional_id, method, *args))
    except Exception as e:  # noqa: BLE001 - answered as Kafka's error code
        return (_errno(e), str(e))


# -- InitProducerId ----------------------------------------------------------------------------


def _may_write_idempotently(session: Session) -> bool:
    """Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
    if session.authorize(Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER):
        return True
    authorizer = getattr(session.security, "authorizer", None)
    by_type = getattr(authorizer, "authorize_by_resource_type", None)
    return bool(by_type and by_type(session.principal, session.client_host, Op.WRITE,
                                    Res.TOPIC))  # fmt: skip


@handles(INIT_PRODUCER_ID)
async def init_producer_id(session: Session, header: RequestHeader, body: dict) -> dict:
    """Without a transactional id: a new producer id at epoch 0 for an idempotent producer
    (a producer that asks again, v3+, gets a new one too, as from Kafka). With one: the
    coordinator's InitProducerId, which fences older producers of the id; v3+ sends the
    identity the producer holds (KIP-360) so its own retry or epoch bump is recognised."""
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1,
                              "producer_epoch": -1}  # fmt: skip
    transactional_id = body.get("transactional_id")
    if transactional_id is None:
        if not _may_write_idempotently(session):
            answer["error_code"] = ClusterAuthorizationFailed.errno
            return answer
        try:
            producer_id, epoch = await session.backend.controller("allocate_producer_id")
        except Exception as e:  # noqa: BLE001 - answered as Kafka's error code
            answer["error_code"] = _errno(e)
            return answer
        answer.update(producer_id=producer_id, producer_epoch=epoch)
        return answer
    if not transactional_id:
        answer["error_code"] = InvalidRequest.errno
        return answer
    if not session.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        answer["error_code"] = TransactionalIdAuthorizationFailed.errno
        return answer
    expected = None
    if body.get("producer_id", -1) >= 0:
        expected = (body["producer_id"], body.get("producer_epoch", -1))
    errno, _, *identity = await _coordinator_call(
        session, transactional_id, "init_producer_id", transactional_id,
        body.get("transaction_timeout_ms", 60_000), expected,
    )  # fmt: skip
    if errno:
        answer["error_code"] = kafka_errno(header, errno)
        return answer
    answer.update(producer_id=identity[0], producer_epoch=identity[1])
    return answer


# -- AddPartitionsToTxn ------------------------------------------------------------------------


@handles(ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(session: Session, header: RequestHeader, body: dict) -> dict:
    """v0-3 (a producer's request). Per partition: TOPIC_AUTHORIZATION_FAILED without WRITE
    on its topic, UNKNOWN_TOPIC_OR_PARTITION when it does not exist; when any partition is
    refused so, the others are OPERATION_NOT_ATTEMPTED, as in Kafka."""
    transactional_id = body["v3_and_below_transactional_id"]
    producer_id = body["v3_and_below_producer_id"]
    epoch = body["v3_and_below_producer_epoch"]
    wanted = [(t["name"], list(t["partitions"])) for t in body["v3_and_below_topics"]]
    codes: dict[tuple[str, int], int] = {}
    if not session.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        return _partition_results(wanted, lambda tp: TransactionalIdAuthorizationFailed.errno)
    counts, failed = await _partition_counts(session, [n for n, _ in wanted])
    for name, partitions in wanted:
        writable = session.authorize(Op.WRITE, Res.TOPIC, name)
        for p in partitions:
            if not writable:
                codes[(name, p)] = TopicAuthorizationFailed.errno
            elif name in failed:
                codes[(name, p)] = failed[name]
            elif not 0 <= p < counts.get(name, 0):
                codes[(name, p)] = UnknownTopicOrPartition.errno
    if codes:
        return _partition_results(wanted, lambda tp: codes.get(tp, OPERATION_NOT_ATTEMPTED))
    partitions = [[name, p] for name, ps in wanted for p in ps]
    errno, *_ = await _coordinator_call(session, transactional_id, "add_partitions",
                                        transactional_id, producer_id, epoch, partitions)
    errno = kafka_errno(header, errno)
    return _partition_results(wanted, lambda tp: errno)


async def _partition_counts(session: Session,
                            names: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """({topic: its partition count}, {topic: the error code its lookup got})."""
    try:
        described = await session.backend.controller("metadata", list(dict.fromkeys(names)),
                                                     False)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - every topic answers the error
        return {}, {n: _errno(e) for n in names}
    counts = {n: len(d["partitions"]) for n, d in described.items() if isinstance(d, dict)}
    failed = {n: d[0] for n, d in described.items() if not isinstance(d, dict)}
    return counts, failed


def _partition_results(wanted: list, code_of) -> dict:
    by_topic: dict[str, list] = {}
    for name, partitions in wanted:
        by_topic.setdefault(name, []).extend(
            {"partition_index": p, "partition_error_code": code_of((name, p))}
            for p in partitions
        )
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": n, "results_by_partition": rs} for n, rs in by_topic.items()]}  # fmt: skip


# -- AddOffsetsToTxn ---------------------------------------------------------------------------


@handles(ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(session: Session, header: RequestHeader, body: dict) -> dict:
    """The group's ``__consumer_offsets`` partition joins the transaction, so the group
    coordinator accepts the TxnOffsetCommit that follows."""
    transactional_id, group_id = body["transactional_id"], body["group_id"]
    answer = {"throttle_time_ms": 0, "error_code": 0}
    if not session.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        answer["error_code"] = TransactionalIdAuthorizationFailed.errno
        return answer
    if not session.authorize(Op.READ, Res.GROUP, group_id):
        answer["error_code"] = GroupAuthorizationFailed.errno
        return answer
    try:
        shard = (await session.backend.controller("group_coordinator", group_id))["shard"]
    except Exception as e:  # noqa: BLE001 - answered as Kafka's error code
        answer["error_code"] = _errno(e)
        return answer
    errno, *_ = await _coordinator_call(
        session, transactional_id, "add_partitions", transactional_id, body["producer_id"],
        body["producer_epoch"], [[CONSUMER_OFFSETS, shard]],
    )  # fmt: skip
    answer["error_code"] = kafka_errno(header, errno)
    return answer


# -- EndTxn ------------------------------------------------------------------------------------


@handles(END_TXN)
async def end_txn(session: Session, header: RequestHeader, body: dict) -> dict:
    """Commit or abort; answered once the coordinator's Prepare* record is durable. v5+
    (transaction version 2): the coordinator bumps the epoch and the answer's
    producer_id/producer_epoch carry the new identity. Below v5 (transaction version 1) the
    epoch is kept and the answer names the same identity (those versions drop the fields)."""
    transactional_id = body["transactional_id"]
    answer = {"throttle_time_ms": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if not session.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        answer["error_code"] = TransactionalIdAuthorizationFailed.errno
        return answer
    errno, _, *identity = await _coordinator_call(
        session, transactional_id, "end_txn", transactional_id, body["producer_id"],
        body["producer_epoch"], bool(body["committed"]), header.api_version >= 5,
    )  # fmt: skip
    if errno:
        answer["error_code"] = kafka_errno(header, errno)
    elif identity:
        answer.update(producer_id=identity[0], producer_epoch=identity[1])
    return answer


# -- TxnOffsetCommit ---------------------------------------------------------------------------


@handles(TXN_OFFSET_COMMIT)
async def txn_offset_commit(session: Session, header: RequestHeader, body: dict) -> dict:
    """Offsets committed inside the transaction (pending until it ends), by the group's
    coordinator. v3+ carries the consumer's member id and generation (KIP-447): a member
    fenced by a newer generation is refused. v0-2 carry none: rafka then accepts the commit
    only while the group has no members."""
    transactional_id, group_id = body["transactional_id"], body["group_id"]
    wanted = [(t["name"], t["partitions"]) for t in body.get("topics", [])]
    if not session.authorize(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        return _commit_results(wanted, lambda tp: TransactionalIdAuthorizationFailed.errno)
    if not session.authorize(Op.READ, Res.GROUP, group_id):
        return _commit_results(wanted, lambda tp: GroupAuthorizationFailed.errno)
    codes: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], tuple[int, int, str]] = {}
    counts, failed = await _partition_counts(session, [n for n, _ in wanted]) if wanted else (
        {}, {})  # fmt: skip
    for name, partitions in wanted:
        readable = session.authorize(Op.READ, Res.TOPIC, name)
        for p in partitions:
            index = p["partition_index"]
            if not readable:
                codes[(name, index)] = TopicAuthorizationFailed.errno
            elif name in failed:
                codes[(name, index)] = failed[name]
            elif not 0 <= index < counts.get(name, 0):
                codes[(name, index)] = UnknownTopicOrPartition.errno
            else:
                offsets[(name, index)] = (p["committed_offset"],
                                          p.get("committed_leader_epoch", -1),
                                          p.get("committed_metadata") or "")  # fmt: skip
    if offsets:
        errno = await _commit(session, header, body, offsets)
        for tp in offsets:
            codes[tp] = errno
    return _commit_results(wanted, lambda tp: codes[tp])


async def _commit(session: Session, header: RequestHeader, body: dict, offsets: dict) -> int:
    group_id = body["group_id"]
    try:
        error = await session.backend.group(
            group_id, "commit_offsets_in_transaction", body["transactional_id"],
            body["producer_id"], body["producer_epoch"], group_id, body.get("member_id", ""),
            body.get("group_instance_id"), body.get("generation_id", -1), offsets,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - answered as Kafka's error code
        error = e
    return 0 if error is None else kafka_errno(header, _errno(error))


def _commit_results(wanted: list, code_of) -> dict:
    by_topic: dict[str, list] = {}
    for name, partitions in wanted:
        by_topic.setdefault(name, []).extend(
            {"partition_index": p["partition_index"],
             "error_code": code_of((name, p["partition_index"]))}
            for p in partitions
        )  # fmt: skip
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps}
                                              for n, ps in by_topic.items()]}  # fmt: skip
