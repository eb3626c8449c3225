"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit handlers
against a fake controller and fake coordinators."""

from __future__ import annotations

import asyncio

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import AclPermissionType as Perm
from rafka.cluster.acls import PatternType
from rafka.cluster.acls import ResourceType as Res
from rafka.errors import (
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    IllegalGeneration,
    InvalidProducerEpoch,
    ProducerFenced,
    TransactionAbortable,
)
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers_transactions import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    init_producer_id,
    txn_offset_commit,
)
from rafka.wire.listeners import Endpoint
from rafka.wire.security_view import SecurityCache
from rafka.wire.session import ANONYMOUS, Session

TID = "tx-1"


class FakeBackend:
    """Answers as the controller, transaction coordinator and group coordinator do: the
    coordinators' tuples (errno, message, ...), the group coordinator's error or None."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.txn_answer: tuple | None = None  # overrides the coordinator's answer
        self.group_error = None
        self.unreachable = False

    async def controller(self, method, *args):
        self.calls.append(("controller", method, args))
        if method == "allocate_producer_id":
            return (4000, 0)
        if method == "group_coordinator":
            return {"shard": 3, "name": "gc-3", "shards": 4}
        if method == "metadata":
            return {n: {"partitions": [{}, {}]} if n in ("orders", "audit") else
                    (3, f"{n} does not exist") for n in args[0]}  # fmt: skip
        raise AssertionError(method)

    async def transaction(self, transactional_id, method, *args):
        self.calls.append(("transaction", method, args))
        if self.unreachable:
            raise CoordinatorNotAvailable("transaction coordinator 1 is restarting; retry")
        if self.txn_answer is not None:
            return self.txn_answer
        if method == "init_producer_id":
            return (0, "", 77, 5)
        if method == "add_partitions":
            return (0, "")
        if method == "end_txn":
            return (0, "", 77, 6)
        raise AssertionError(method)

    async def group(self, group_id, method, *args):
        self.calls.append(("group", method, args))
        return self.group_error

    def asked(self, kind: str, method: str) -> list[tuple]:
        return [args for k, m, args in self.calls if k == kind and m == method]


def _security(acls=(), allow_all: bool = True) -> SecurityCache:
    cache = SecurityCache({"allow.everyone.if.no.acl.found": allow_all})
    cache.update({"version": 1, "users": {}, "acls": list(acls)})
    return cache


def _allow(rtype: Res, name: str, op: Op, pattern=PatternType.LITERAL) -> tuple:
    return (int(rtype), name, int(pattern), ANONYMOUS, "*", int(op), int(Perm.ALLOW))


def _session(backend, security=None) -> Session:
    return Session(backend, security or _security(), Endpoint("PLAINTEXT", "127.0.0.1", 9092),
                   "127.0.0.1", {}, "test", node=(1, "127.0.0.1", 9092))  # fmt: skip


def _call(handler, backend, api_key: int, version: int, body: dict, security=None) -> dict:
    return asyncio.run(handler(_session(backend, security),
                               RequestHeader(api_key, version, 7, "client"), body))  # fmt: skip


# -- InitProducerId ----------------------------------------------------------------------------


def test_init_producer_id_without_transactional_id_allocates_an_idempotent_producer_id():
    backend = FakeBackend()
    answer = _call(init_producer_id, backend, 22, 4,
                   {"transactional_id": None, "transaction_timeout_ms": -1})  # fmt: skip
    assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (0, 4000, 0)
    assert backend.asked("transaction", "init_producer_id") == []


def test_idempotent_producer_ids_need_idempotent_write_or_write_on_some_topic():
    backend = FakeBackend()
    body = {"transactional_id": None, "transaction_timeout_ms": -1}
    nothing = _security([_allow(Res.TOPIC, "orders", Op.READ)], allow_all=False)
    assert _call(init_producer_id, backend, 22, 4, body, nothing)["error_code"] == 31
    writer = _security([_allow(Res.TOPIC, "logs-", Op.WRITE, PatternType.PREFIXED)],
                       allow_all=False)  # fmt: skip
    assert _call(init_producer_id, backend, 22, 4, body, writer)["error_code"] == 0
    idempotent = _security([_allow(Res.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)],
                           allow_all=False)  # fmt: skip
    assert _call(init_producer_id, backend, 22, 4, body, idempotent)["producer_id"] == 4000


def test_init_producer_id_with_transactional_id_goes_to_its_coordinator():
    backend = FakeBackend()
    answer = _call(init_producer_id, backend, 22, 1,
                   {"transactional_id": TID, "transaction_timeout_ms": 30_000})  # fmt: skip
    assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (0, 77, 5)
    assert backend.asked("transaction", "init_producer_id") == [(TID, 30_000, None)]


def test_init_producer_id_v3_passes_the_identity_the_producer_holds():
    backend = FakeBackend()
    _call(init_producer_id, backend, 22, 3, {"transactional_id": TID,
          "transaction_timeout_ms": 30_000, "producer_id": 77, "producer_epoch": 4})  # fmt: skip
    _call(init_producer_id, backend, 22, 4, {"transactional_id": TID,
          "transaction_timeout_ms": 30_000, "producer_id": -1, "producer_epoch": -1})  # fmt: skip
    assert backend.asked("transaction", "init_producer_id") == [
        (TID, 30_000, (77, 4)), (TID, 30_000, None)]  # fmt: skip


def test_init_producer_id_errors_are_translated_for_older_versions():
    backend = FakeBackend()
    body = {"transactional_id": TID, "transaction_timeout_ms": 30_000}
    backend.txn_answer = (ProducerFenced.errno, "fenced", -1, -1)
    assert _call(init_producer_id, backend, 22, 4, body)["error_code"] == ProducerFenced.errno
    assert _call(init_producer_id, backend, 22, 3, body)["error_code"] == InvalidProducerEpoch.errno
    backend.txn_answer = (ConcurrentTransactions.errno, "aborting", -1, -1)
    answer = _call(init_producer_id, backend, 22, 4, body)
    assert (answer["error_code"], answer["producer_id"]) == (ConcurrentTransactions.errno, -1)
    backend.txn_answer, backend.unreachable = None, True
    assert _call(init_producer_id, backend, 22, 4, body)["error_code"] == 15


def test_init_producer_id_needs_write_on_the_transactional_id():
    backend = FakeBackend()
    security = _security([_allow(Res.TRANSACTIONAL_ID, "other", Op.WRITE)], allow_all=False)
    answer = _call(init_producer_id, backend, 22, 4,
                   {"transactional_id": TID, "transaction_timeout_ms": 30_000}, security)
    assert answer["error_code"] == 53
    assert backend.asked("transaction", "init_producer_id") == []
    assert _call(init_producer_id, backend, 22, 4, {"transactional_id": "",
                 "transaction_timeout_ms": 1})["error_code"] == 42  # fmt: skip


# -- AddPartitionsToTxn ------------------------------------------------------------------------


def _add_body(topics: dict) -> dict:
    return {"v3_and_below_transactional_id": TID, "v3_and_below_producer_id": 77,
            "v3_and_below_producer_epoch": 5,
            "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}


def _partition_codes(answer: dict) -> dict:
    return {(t["name"], r["partition_index"]): r["partition_error_code"]
            for t in answer["results_by_topic_v3_and_below"] for r in t["results_by_partition"]}


def test_add_partitions_to_txn_adds_every_partition_in_one_coordinator_call():
    backend = FakeBackend()
    answer = _call(add_partitions_to_txn, backend, 24, 3, _add_body({"orders": [0, 1],
                                                                     "audit": [1]}))
    assert _partition_codes(answer) == {("orders", 0): 0, ("orders", 1): 0, ("audit", 1): 0}
    assert backend.asked("transaction", "add_partitions") == [
        (TID, 77, 5, [["orders", 0], ["orders", 1], ["audit", 1]])]  # fmt: skip


def test_add_partitions_to_txn_refuses_unknown_partitions_and_attempts_no_other():
    backend = FakeBackend()
    answer = _call(add_partitions_to_txn, backend, 24, 3,
                   _add_body({"orders": [0, 7], "ghost": [0], "audit": [0]}))  # fmt: skip
    assert _partition_codes(answer) == {("orders", 0): 55, ("orders", 7): 3, ("ghost", 0): 3,
                                        ("audit", 0): 55}  # fmt: skip
    assert backend.asked("transaction", "add_partitions") == []


def test_add_partitions_to_txn_checks_write_on_each_topic_and_on_the_transactional_id():
    backend = FakeBackend()
    security = _security([_allow(Res.TRANSACTIONAL_ID, TID, Op.WRITE),
                          _allow(Res.TOPIC, "orders", Op.WRITE)], allow_all=False)  # fmt: skip
    answer = _call(add_partitions_to_txn, backend, 24, 3,
                   _add_body({"orders": [0], "audit": [0]}), security)  # fmt: skip
    assert _partition_codes(answer) == {("orders", 0): 55, ("audit", 0): 29}
    no_id = _security([_allow(Res.TOPIC, "orders", Op.WRITE)], allow_all=False)
    answer = _call(add_partitions_to_txn, backend, 24, 3, _add_body({"orders": [0, 1]}), no_id)
    assert set(_partition_codes(answer).values()) == {53}
    assert backend.asked("transaction", "add_partitions") == []


def test_add_partitions_to_txn_answers_the_coordinators_error_for_every_partition():
    backend = FakeBackend()
    backend.txn_answer = (TransactionAbortable.errno, "that transaction ended")
    answer = _call(add_partitions_to_txn, backend, 24, 3, _add_body({"orders": [0, 1]}))
    # v3 clients do not know TRANSACTION_ABORTABLE: answered as Kafka 3 answered
    assert set(_partition_codes(answer).values()) == {InvalidProducerEpoch.errno}
    backend.txn_answer = (ProducerFenced.errno, "fenced")
    answer = _call(add_partitions_to_txn, backend, 24, 2, _add_body({"orders": [0]}))
    assert set(_partition_codes(answer).values()) == {ProducerFenced.errno}
    answer = _call(add_partitions_to_txn, backend, 24, 1, _add_body({"orders": [0]}))
    assert set(_partition_codes(answer).values()) == {InvalidProducerEpoch.errno}
    backend.txn_answer, backend.unreachable = None, True
    answer = _call(add_partitions_to_txn, backend, 24, 3, _add_body({"orders": [0]}))
    assert set(_partition_codes(answer).values()) == {15}


# -- AddOffsetsToTxn ---------------------------------------------------------------------------


def _offsets_body(group: str = "readers") -> dict:
    return {"transactional_id": TID, "producer_id": 77, "producer_epoch": 5, "group_id": group}


def test_add_offsets_to_txn_adds_the_groups_offsets_partition():
    backend = FakeBackend()
    answer = _call(add_offsets_to_txn, backend, 25, 3, _offsets_body())
    assert answer["error_code"] == 0
    assert backend.asked("controller", "group_coordinator") == [("readers",)]
    assert backend.asked("transaction", "add_partitions") == [
        (TID, 77, 5, [["__consumer_offsets", 3]])]  # fmt: skip


def test_add_offsets_to_txn_errors_and_acls():
    backend = FakeBackend()
    backend.txn_answer = (ConcurrentTransactions.errno, "completing")
    assert _call(add_offsets_to_txn, backend, 25, 3, _offsets_body())["error_code"] == 51
    backend.txn_answer = None
    no_group = _security([_allow(Res.TRANSACTIONAL_ID, TID, Op.WRITE)], allow_all=False)
    assert _call(add_offsets_to_txn, backend, 25, 3, _offsets_body(),
                 no_group)["error_code"] == 30  # fmt: skip
    no_id = _security([_allow(Res.GROUP, "readers", Op.READ)], allow_all=False)
    assert _call(add_offsets_to_txn, backend, 25, 3, _offsets_body(), no_id)["error_code"] == 53
    assert len(backend.asked("transaction", "add_partitions")) == 1


# -- EndTxn ------------------------------------------------------------------------------------


def _end_body(committed: bool = True) -> dict:
    return {"transactional_id": TID, "producer_id": 77, "producer_epoch": 5,
            "committed": committed}


def test_end_txn_commits_or_aborts_at_the_coordinator():
    backend = FakeBackend()
    answer = _call(end_txn, backend, 26, 3, _end_body(True))
    assert answer["error_code"] == 0
    assert (answer["producer_id"], answer["producer_epoch"]) == (77, 6)  # v5+ carries them
    _call(end_txn, backend, 26, 0, _end_body(False))
    # below v5 the client keeps its epoch (transaction version 1): no bump is asked for
    assert backend.asked("transaction", "end_txn") == [(TID, 77, 5, True, False),
                                                       (TID, 77, 5, False, False)]


def test_end_txn_below_v5_answers_the_identity_the_client_keeps():
    """EndTxn v0-3 asks the coordinator not to bump, and answers the same epoch."""
    backend = FakeBackend()
    backend.txn_answer = (0, "", 77, 5)
    answer = _call(end_txn, backend, 26, 3, _end_body(True))
    assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (0, 77, 5)
    assert backend.asked("transaction", "end_txn")[-1][-1] is False


def test_end_txn_errors_per_version_and_acl():
    backend = FakeBackend()
    backend.txn_answer = (ProducerFenced.errno, "fenced", -1, -1)
    assert _call(end_txn, backend, 26, 2, _end_body())["error_code"] == ProducerFenced.errno
    assert _call(end_txn, backend, 26, 1, _end_body())["error_code"] == InvalidProducerEpoch.errno
    backend.txn_answer = (48, "no transaction to commit", -1, -1)
    assert _call(end_txn, backend, 26, 3, _end_body())["error_code"] == 48
    security = _security([_allow(Res.TRANSACTIONAL_ID, "other", Op.WRITE)], allow_all=False)
    assert _call(end_txn, backend, 26, 3, _end_body(), security)["error_code"] == 53
    assert len(backend.asked("transaction", "end_txn")) == 3


# -- TxnOffsetCommit ---------------------------------------------------------------------------


def _commit_body(version: int = 3, topics: dict | None = None) -> dict:
    topics = topics if topics is not None else {"orders": [(0, 10), (1, 20)]}
    body = {"transactional_id": TID, "group_id": "readers", "producer_id": 77,
            "producer_epoch": 5, "topics": [
                {"name": n, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_leader_epoch": 2,
                     "committed_metadata": None} for p, o in ps]}
                for n, ps in topics.items()]}  # fmt: skip
    if version >= 3:
        body.update(generation_id=4, member_id="m-1", group_instance_id=None)
    return body


def _commit_codes(answer: dict) -> dict:
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in answer["topics"] for p in t["partitions"]}


def test_txn_offset_commit_goes_to_the_group_coordinator_with_the_members_generation():
    backend = FakeBackend()
    answer = _call(txn_offset_commit, backend, 28, 3, _commit_body())
    assert _commit_codes(answer) == {("orders", 0): 0, ("orders", 1): 0}
    assert backend.asked("group", "commit_offsets_in_transaction") == [(
        TID, 77, 5, "readers", "m-1", None, 4,
        {("orders", 0): (10, 2, ""), ("orders", 1): (20, 2, "")})]  # fmt: skip


def test_txn_offset_commit_v0_commits_as_no_member():
    backend = FakeBackend()
    _call(txn_offset_commit, backend, 28, 0, _commit_body(0))
    [args] = backend.asked("group", "commit_offsets_in_transaction")
    assert args[4:7] == ("", None, -1)


def test_txn_offset_commit_errors_per_partition():
    backend = FakeBackend()
    backend.group_error = IllegalGeneration("member m-1 is of generation 4; the group is at 5")
    answer = _call(txn_offset_commit, backend, 28, 3,
                   _commit_body(topics={"orders": [(0, 1), (9, 1)], "ghost": [(0, 1)]}))
    assert _commit_codes(answer) == {("orders", 0): 22, ("orders", 9): 3, ("ghost", 0): 3}
    backend.group_error = TransactionAbortable("the transaction ended")
    answer = _call(txn_offset_commit, backend, 28, 3, _commit_body())
    assert set(_commit_codes(answer).values()) == {InvalidProducerEpoch.errno}


def test_txn_offset_commit_acls():
    backend = FakeBackend()
    all_but_topic = _security([_allow(Res.TRANSACTIONAL_ID, TID, Op.WRITE),
                               _allow(Res.GROUP, "readers", Op.READ),
                               _allow(Res.TOPIC, "orders", Op.READ)], allow_all=False)
    answer = _call(txn_offset_commit, backend, 28, 3,
                   _commit_body(topics={"orders": [(0, 1)], "audit": [(0, 1)]}), all_but_topic)
    assert _commit_codes(answer) == {("orders", 0): 0, ("audit", 0): 29}
    [args] = backend.asked("group", "commit_offsets_in_transaction")
    assert list(args[7]) == [("orders", 0)]
    no_group = _security([_allow(Res.TRANSACTIONAL_ID, TID, Op.WRITE)], allow_all=False)
    answer = _call(txn_offset_commit, backend, 28, 3, _commit_body(), no_group)
    assert set(_commit_codes(answer).values()) == {30}
    no_id = _security([_allow(Res.GROUP, "readers", Op.READ)], allow_all=False)
    answer = _call(txn_offset_commit, backend, 28, 3, _commit_body(), no_id)
    assert set(_commit_codes(answer).values()) == {53}
    assert len(backend.asked("group", "commit_offsets_in_transaction")) == 1


def test_txn_offset_commit_of_a_partition_not_the_members_makes_the_client_rejoin():
    from rafka.errors import CommitFailed

    backend = FakeBackend()
    backend.group_error = CommitFailed("partition orders-1 is not assigned to member m-1")
    answer = _call(txn_offset_commit, backend, 28, 3, _commit_body())
    assert set(_commit_codes(answer).values()) == {22}  # ILLEGAL_GENERATION
