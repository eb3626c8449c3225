"""Consumer-group handlers (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups) against a fake coordinator that
answers as rafka's GroupCoordinator does."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KafkaSubscription

from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.cluster.consumer_protocol import encode_assignment, encode_subscription
from rafka.cluster.group_types import JoinResult, SyncResult
from rafka.errors import (
    CommitFailed,
    CoordinatorNotAvailable,
    GroupIdNotFound,
    IllegalGeneration,
    MemberIdRequired,
    NonEmptyGroup,
    RebalanceInProgress,
    RecordListTooLarge,
    RequestTimedOut,
    UnknownMemberId,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
)
from rafka.wire import handlers_groups as h
from rafka.wire.frames import (
    SUPPORTED,
    RequestHeader,
    encode_request,
    encode_response,
    read_request,
)
from rafka.wire.listeners import Endpoint
from rafka.wire.session import Session

from ._samples import kp_class

# kafka-python loads its JSON schemas with a deprecated importlib.resources call.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class FakeCoordinator:
    """The GroupCoordinator methods the handlers call, answering in its shapes: (error,
    result) pairs for join, sync, fetch and describe; an error or None for the rest."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.join_answer = None
        self.sync_answer = (None, SyncResult("range", encode_assignment([("orders", 0)])))
        self.error = None  # returned by heartbeat, leave, commit and delete
        self.offsets = {("orders", 0): (42, 3, "m"), ("orders", 1): (7, -1, ""),
                        ("secret", 0): (9, -1, "")}  # fmt: skip
        self.unstable = False
        self.descriptions: dict[str, dict] = {}

    async def join_group(self, group_id, member_id, instance_id, client_id, client_host,
                         protocol_type, protocols, session_timeout_ms,
                         rebalance_timeout_ms, require_known_member_id=False):  # fmt: skip
        if self.join_answer is not None:
            return self.join_answer
        new_id = member_id or f"{client_id}-1"
        members = [(new_id, instance_id, protocols[0][1]), ("rafka-2", None,
                                                            encode_subscription(["orders"]))]
        return None, JoinResult(new_id, 5, protocols[0][0], new_id, members)

    async def sync_group(self, group_id, member_id, instance_id, generation, assignments):
        return self.sync_answer

    async def heartbeat(self, group_id, member_id, instance_id, generation):
        return self.error

    async def leave_group(self, group_id, members):
        return self.error

    async def commit_offsets(self, group_id, member_id, instance_id, generation, offsets,
                             outside_group=False):  # fmt: skip
        return self.error

    async def fetch_offsets(self, group_id, partitions=None, require_stable=False):
        if require_stable and self.unstable:
            return UnstableOffsetCommit("a transaction is pending"), None
        if partitions is None:
            return None, dict(self.offsets)
        return None, {tuple(tp): self.offsets[tuple(tp)] for tp in partitions
                      if tuple(tp) in self.offsets}  # fmt: skip

    async def describe_group(self, group_id):
        if group_id not in self.descriptions:
            return GroupIdNotFound(f"consumer group {group_id!r} does not exist"), None
        return None, self.descriptions[group_id]

    async def list_groups(self):
        return [{"group_id": "b-group", "state": "Stable", "protocol_type": "consumer",
                 "members": 2},
                {"group_id": "a-group", "state": "Empty", "protocol_type": "", "members": 0}]

    async def delete_group(self, group_id):
        return self.error


class FakeBackend:
    """KafkaBackend's group calls over one FakeCoordinator (recording every call), and the
    controller's topic metadata."""

    def __init__(self):
        self.coordinator = FakeCoordinator()
        self.raise_on_group: Exception | None = None
        self.raise_on_controller: Exception | None = None
        self.topics = {"orders": 4, "secret": 1}  # name -> partition count
        self.controller_calls: list[tuple] = []

    async def group(self, group_id, method, *args):
        assert args[0] == group_id  # the shard is the group's; every method takes its id
        self.coordinator.calls.append((method,) + args)
        if self.raise_on_group is not None:
            raise self.raise_on_group
        return await getattr(self.coordinator, method)(*args)

    async def groups(self, method, *args):
        return [await getattr(self.coordinator, method)(*args), []]

    async def partition_count(self, topic, covering=0):
        """The listener's cached partition count; raises as the controller would."""
        self.controller_calls.append(("partition_count", topic, covering))
        if self.raise_on_controller is not None:
            raise self.raise_on_controller
        if topic not in self.topics:
            raise UnknownTopicOrPartition(f"topic {topic} does not exist")
        return self.topics[topic]


class FakeSecurity:
    """Allows everything but the (operation, resource type, name) triples in ``denied``."""

    def __init__(self, denied=()):
        self.denied = set(denied)

    def authorize(self, principal, host, operation, resource_type, name):
        return (operation, resource_type, name) not in self.denied


def _session(denied=(), backend=None) -> Session:
    return Session(backend or FakeBackend(), FakeSecurity(denied),
                   Endpoint("PLAINTEXT", "127.0.0.1", 9092), "10.1.2.3", {}, "test",
                   node=(1, "127.0.0.1", 9092))  # fmt: skip


def _run(handler, session, api_key, version, body):
    return asyncio.run(handler(session, RequestHeader(api_key, version, 1, "client-a"), body))


def _calls(session, method=None):
    calls = session.backend.coordinator.calls
    return [c for c in calls if method is None or c[0] == method]


KAFKA_SUBSCRIPTION = KafkaSubscription(version=0, topics=["orders"], user_data=b"").encode()


def _join_body(**over):
    body = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 30_000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": KAFKA_SUBSCRIPTION}]}  # fmt: skip
    body.update(over)
    return body


# -- JoinGroup ---------------------------------------------------------------------------------


def test_join_passes_the_member_to_the_coordinator_and_the_leader_gets_every_subscription():
    """The join carries client id, client host and timeouts; the leader's answer lists each
    member's metadata for the chosen protocol, a Kafka client's and a rafka consumer's."""
    session = _session()
    answer = _run(h.join_group, session, 11, 5, _join_body(group_instance_id="static-1"))
    (call,) = _calls(session, "join_group")
    assert call[1:] == ("g", "", "static-1", "client-a", "10.1.2.3", "consumer",
                        [("range", KAFKA_SUBSCRIPTION)], 10_000, 30_000, True)  # fmt: skip
    assert answer["error_code"] == 0
    assert (answer["generation_id"], answer["protocol_name"]) == (5, "range")
    assert answer["member_id"] == answer["leader"] == "client-a-1"
    assert [m["member_id"] for m in answer["members"]] == ["client-a-1", "rafka-2"]
    assert answer["members"][0]["group_instance_id"] == "static-1"
    assert answer["members"][1]["metadata"] == encode_subscription(["orders"])


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout():
    """JoinGroup v0 has no rebalance timeout: the session timeout stands in, as in Kafka."""
    session = _session()
    body = _join_body()
    del body["rebalance_timeout_ms"]
    _run(h.join_group, session, 11, 0, body)
    assert _calls(session, "join_group")[0][-3:-1] == (10_000, 10_000)


def test_a_v4_join_without_member_id_gets_its_new_id_at_once():
    """No MEMBER_ID_REQUIRED round trip: the coordinator names the member in the answer."""
    answer = _run(h.join_group, _session(), 11, 4, _join_body())
    assert answer["error_code"] == 0 and answer["member_id"] == "client-a-1"


def test_a_refused_join_answers_the_coordinator_s_error_code():
    """The coordinator's refusal becomes the error code, with generation -1."""
    session = _session()
    session.backend.coordinator.join_answer = (UnknownMemberId("gone"), None)
    answer = _run(h.join_group, session, 11, 5, _join_body(member_id="old"))
    assert (answer["error_code"], answer["generation_id"], answer["member_id"]) == (25, -1, "old")


def test_join_without_read_on_the_group_is_refused_without_calling_the_coordinator():
    """GROUP_AUTHORIZATION_FAILED, and the coordinator never hears of it."""
    session = _session(denied=[(Op.READ, Res.GROUP, "g")])
    assert _run(h.join_group, session, 11, 5, _join_body())["error_code"] == 30
    assert _calls(session) == []


def test_an_unreachable_coordinator_answers_coordinator_not_available():
    """A coordinator that cannot be reached (a timeout) is a retriable
    COORDINATOR_NOT_AVAILABLE, never an unknown error that a client gives up on."""
    session = _session()
    session.backend.raise_on_group = RequestTimedOut("no answer")
    assert _run(h.join_group, session, 11, 5, _join_body())["error_code"] == 15


# -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------------


def test_sync_hands_the_leader_s_assignments_over_and_answers_the_member_s_own():
    """The leader's list becomes {member id: bytes}; the answer is the member's bytes."""
    session = _session()
    body = {"group_id": "g", "generation_id": 5, "member_id": "m1", "group_instance_id": None,
            "assignments": [{"member_id": "m1", "assignment": memoryview(b"\x00\x01")},
                            {"member_id": "m2", "assignment": b""}]}  # fmt: skip
    answer = _run(h.sync_group, session, 14, 3, body)
    assert _calls(session, "sync_group")[0][1:] == (
        "g", "m1", None, 5, {"m1": b"\x00\x01", "m2": b""})
    assert answer == {"throttle_time_ms": 0, "error_code": 0, "protocol_name": "range",
                      "assignment": encode_assignment([("orders", 0)])}  # fmt: skip


def test_a_sync_refused_by_a_rebalance_answers_rebalance_in_progress():
    """REBALANCE_IN_PROGRESS (27) with an empty assignment: the member rejoins."""
    session = _session()
    session.backend.coordinator.sync_answer = (RebalanceInProgress("rejoin"), None)
    body = {"group_id": "g", "generation_id": 5, "member_id": "m1", "assignments": []}
    assert _run(h.sync_group, session, 14, 0, body) == {
        "throttle_time_ms": 0, "error_code": 27, "assignment": b""}


def test_heartbeat_answers_the_coordinator_s_error():
    """None is NONE; ILLEGAL_GENERATION passes as 22."""
    session = _session()
    body = {"group_id": "g", "generation_id": 4, "member_id": "m1"}
    assert _run(h.heartbeat, session, 12, 0, body)["error_code"] == 0
    session.backend.coordinator.error = IllegalGeneration("old generation")
    assert _run(h.heartbeat, session, 12, 3, body)["error_code"] == 22
    assert _calls(session, "heartbeat")[0][1:] == ("g", "m1", None, 4)


def test_leave_names_the_member_and_needs_read_on_the_group():
    """v0-v2 leave one member; without READ on the group the coordinator is not called."""
    session = _session()
    answer = _run(h.leave_group, session, 13, 1, {"group_id": "g", "member_id": "m1"})
    assert answer["error_code"] == 0
    assert _calls(session, "leave_group") == [("leave_group", "g", [("m1", None)])]
    refused = _session(denied=[(Op.READ, Res.GROUP, "g")])
    assert _run(h.leave_group, refused, 13, 0, {"group_id": "g", "member_id": "m1"})[
        "error_code"] == 30
    assert _calls(refused) == []


def test_leave_v3_names_several_members_by_id_or_instance():
    """A members list (v3+) passes every (member id, instance id) through."""
    session = _session()
    body = {"group_id": "g", "members": [{"member_id": "m1"},
                                         {"member_id": "", "group_instance_id": "i2"}]}
    answer = _run(h.leave_group, session, 13, 3, body)
    assert _calls(session, "leave_group")[0][2] == [("m1", None), ("", "i2")]
    assert [m["error_code"] for m in answer["members"]] == [0, 0]


# -- OffsetCommit ------------------------------------------------------------------------------


def _commit_body(**over):
    body = {"group_id": "g", "generation_id_or_member_epoch": 5, "member_id": "m1",
            "retention_time_ms": -1, "topics": [
                {"name": "orders", "partitions": [
                    {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 2,
                     "committed_metadata": "meta"},
                    {"partition_index": 1, "committed_offset": 20,
                     "committed_metadata": None}]}]}  # fmt: skip
    body.update(over)
    return body


def test_commit_sends_offsets_with_leader_epochs_and_metadata():
    """(offset, leader epoch, metadata) per partition; a missing epoch (v2-v5) is -1 and
    null metadata is empty."""
    session = _session()
    answer = _run(h.offset_commit, session, 8, 7, _commit_body(group_instance_id="i1"))
    (call,) = _calls(session, "commit_offsets")
    assert call[1:] == ("g", "m1", "i1", 5, {("orders", 0): (10, 2, "meta"),
                                              ("orders", 1): (20, -1, "")}, False)
    assert answer["topics"] == [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0}]}]


def test_a_commit_with_no_member_and_generation_minus_one_is_from_outside_the_group():
    """Kafka's "simple" commit (an assign()-ing consumer) goes as outside_group."""
    session = _session()
    _run(h.offset_commit, session, 8, 2,
         _commit_body(member_id="", generation_id_or_member_epoch=-1))
    (call,) = _calls(session, "commit_offsets")
    assert call[2:5] == ("", None, -1) and call[-1] is True


def test_a_commit_from_outside_a_group_that_has_members_answers_unknown_member_id():
    """A "simple" commit (generation -1, no member id) the coordinator refuses because the
    group has members answers UNKNOWN_MEMBER_ID, as Kafka's classic group coordinator does;
    NON_EMPTY_GROUP is not an OffsetCommit error code and Kafka clients do not know it."""
    session = _session()
    session.backend.coordinator.error = NonEmptyGroup("group g is Stable with 2 member(s)")
    answer = _run(h.offset_commit, session, 8, 8,
                  _commit_body(member_id="", generation_id_or_member_epoch=-1))
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [25, 25]


def test_commit_errors_go_to_every_partition_of_the_commit():
    """The coordinator accepts or refuses the commit whole; its error is each partition's."""
    session = _session()
    session.backend.coordinator.error = IllegalGeneration("rejoin")
    answer = _run(h.offset_commit, session, 8, 5, _commit_body())
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [22, 22]


def test_a_commit_of_partitions_not_the_member_s_answers_illegal_generation():
    """rafka refuses a member's commit of a partition outside its assignment; Kafka has no
    such refusal, so it answers the code on which Kafka clients rejoin (not a retriable
    one they would repeat forever)."""
    session = _session()
    session.backend.coordinator.error = CommitFailed("t-2 not assigned to member m1")
    answer = _run(h.offset_commit, session, 8, 8, _commit_body())
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [22, 22]


def test_a_commit_too_large_to_write_answers_invalid_commit_offset_size():
    """A write refused for its size maps to INVALID_COMMIT_OFFSET_SIZE, as Kafka maps it."""
    session = _session()
    session.backend.coordinator.error = RecordListTooLarge("too big")
    answer = _run(h.offset_commit, session, 8, 5, _commit_body())
    assert answer["topics"][0]["partitions"][0]["error_code"] == 28


def test_commit_refuses_topics_without_read_and_unknown_topics_per_partition():
    """Only the partitions the principal may READ, of topics that exist, are committed;
    the rest answer TOPIC_AUTHORIZATION_FAILED or UNKNOWN_TOPIC_OR_PARTITION."""
    session = _session(denied=[(Op.READ, Res.TOPIC, "secret")])
    body = _commit_body(topics=[
        {"name": "secret", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                           "committed_metadata": ""}]},
        {"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                         "committed_metadata": ""}]},
        {"name": "orders", "partitions": [{"partition_index": 3, "committed_offset": 1,
                                           "committed_metadata": ""}]},
    ])  # fmt: skip
    answer = _run(h.offset_commit, session, 8, 6, body)
    assert [(t["name"], t["partitions"][0]["error_code"]) for t in answer["topics"]] == [
        ("secret", 29), ("nope", 3), ("orders", 0)]
    assert list(_calls(session, "commit_offsets")[0][5]) == [("orders", 3)]


def test_commit_of_a_partition_the_topic_lacks_answers_unknown_topic_or_partition():
    """As Kafka: a partition index outside the topic's partitions (negative too) answers
    UNKNOWN_TOPIC_OR_PARTITION, and the request's other partitions are still committed."""
    session = _session()
    body = _commit_body(topics=[
        {"name": "orders", "partitions": [
            {"partition_index": p, "committed_offset": 1, "committed_metadata": ""}
            for p in (0, 4, -1, 3)]},
        {"name": "secret", "partitions": [
            {"partition_index": p, "committed_offset": 1, "committed_metadata": ""}
            for p in (1, 0)]},
    ])  # fmt: skip
    answer = _run(h.offset_commit, session, 8, 8, body)
    assert [[(p["partition_index"], p["error_code"]) for p in t["partitions"]]
            for t in answer["topics"]] == [
        [(0, 0), (4, 3), (-1, 3), (3, 0)], [(1, 3), (0, 0)]]  # fmt: skip
    assert session.backend.controller_calls == [
        ("partition_count", "orders", 4), ("partition_count", "secret", 1)]
    assert list(_calls(session, "commit_offsets")[0][5]) == [
        ("orders", 0), ("orders", 3), ("secret", 0)]


def test_commit_of_only_missing_partitions_does_not_reach_the_coordinator():
    """Nothing left to commit: every partition answers UNKNOWN_TOPIC_OR_PARTITION."""
    session = _session()
    body = _commit_body(topics=[{"name": "secret", "partitions": [
        {"partition_index": 7, "committed_offset": 1, "committed_metadata": ""}]}])
    answer = _run(h.offset_commit, session, 8, 8, body)
    assert answer["topics"][0]["partitions"] == [{"partition_index": 7, "error_code": 3}]
    assert _calls(session) == []


def test_commit_goes_ahead_when_the_controller_cannot_say_which_partitions_exist():
    """An unreachable controller does not fail the commit (rafka's own consumers commit
    without asking it either); only a negative partition index, which never exists, is
    refused."""
    session = _session()
    session.backend.raise_on_controller = RequestTimedOut("controller restarting")
    body = _commit_body(topics=[{"name": "orders", "partitions": [
        {"partition_index": p, "committed_offset": 1, "committed_metadata": ""}
        for p in (9, -1)]}])  # fmt: skip
    answer = _run(h.offset_commit, session, 8, 8, body)
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [0, 3]
    assert list(_calls(session, "commit_offsets")[0][5]) == [("orders", 9)]


def test_commit_without_read_on_the_group_refuses_every_partition():
    """GROUP_AUTHORIZATION_FAILED in each partition; nothing reaches the coordinator."""
    session = _session(denied=[(Op.READ, Res.GROUP, "g")])
    answer = _run(h.offset_commit, session, 8, 3, _commit_body())
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [30, 30]
    assert _calls(session) == []


# -- OffsetFetch -------------------------------------------------------------------------------


def test_fetch_answers_committed_offsets_and_minus_one_where_none_is_committed():
    """Offsets with their leader epochs and metadata; an uncommitted partition is -1."""
    session = _session()
    body = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0, 9]}]}
    answer = _run(h.offset_fetch, session, 9, 5, body)
    assert answer["error_code"] == 0
    assert answer["topics"] == [{"name": "orders", "partitions": [
        {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3,
         "metadata": "m", "error_code": 0},
        {"partition_index": 9, "committed_offset": -1, "committed_leader_epoch": -1,
         "metadata": "", "error_code": 0}]}]  # fmt: skip
    assert _calls(session, "fetch_offsets") == [
        ("fetch_offsets", "g", [("orders", 0), ("orders", 9)], False)]


def test_fetch_needs_describe_not_read_on_the_group_and_its_topics():
    """As Kafka: a principal that may DESCRIBE the group and topics (a monitoring tool,
    ``kafka-consumer-groups --describe``) reads committed offsets without READ."""
    no_read = [(Op.READ, Res.GROUP, "g"), (Op.READ, Res.TOPIC, "orders"),
               (Op.READ, Res.TOPIC, "secret")]  # fmt: skip
    body = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0]}]}
    answer = _run(h.offset_fetch, _session(no_read), 9, 5, body)
    assert answer["error_code"] == 0
    assert answer["topics"][0]["partitions"][0]["committed_offset"] == 42
    everything = _run(h.offset_fetch, _session(no_read), 9, 7, {"group_id": "g",
                                                                "topics": None})
    assert [t["name"] for t in everything["topics"]] == ["orders", "secret"]


def test_fetch_with_null_topics_answers_every_partition_the_principal_may_describe():
    """v2+ "all partitions": the group's every commit, topics without DESCRIBE left out."""
    session = _session(denied=[(Op.DESCRIBE, Res.TOPIC, "secret")])
    answer = _run(h.offset_fetch, session, 9, 7, {"group_id": "g", "topics": None})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in answer["topics"]] == [("orders", [0, 1])]  # fmt: skip
    assert _calls(session, "fetch_offsets")[0][2] is None


def test_fetch_refuses_topics_without_describe_per_partition():
    """TOPIC_AUTHORIZATION_FAILED for those partitions; the others are fetched."""
    session = _session(denied=[(Op.DESCRIBE, Res.TOPIC, "secret")])
    body = {"group_id": "g", "topics": [{"name": "secret", "partition_indexes": [0]},
                                        {"name": "orders", "partition_indexes": [1]}]}
    answer = _run(h.offset_fetch, session, 9, 3, body)
    assert [(t["name"], t["partitions"][0]["error_code"], t["partitions"][0]["committed_offset"])
            for t in answer["topics"]] == [("secret", 29, -1), ("orders", 0, 7)]  # fmt: skip


def test_require_stable_passes_through_and_pending_offsets_answer_unstable():
    """v7's require_stable reaches the coordinator; while a transaction holds offsets,
    each partition answers UNSTABLE_OFFSET_COMMIT (retriable), the top level NONE."""
    session = _session()
    session.backend.coordinator.unstable = True
    body = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0]}],
            "require_stable": True}
    answer = _run(h.offset_fetch, session, 9, 7, body)
    assert answer["error_code"] == 0
    assert answer["topics"][0]["partitions"][0]["error_code"] == 88
    assert answer["topics"][0]["partitions"][0]["committed_offset"] == -1
    assert _calls(session, "fetch_offsets")[0][-1] is True
    everything = _run(h.offset_fetch, session, 9, 7, {"group_id": "g", "topics": None,
                                                       "require_stable": True})
    assert {p["error_code"] for t in everything["topics"] for p in t["partitions"]} == {88}


def test_fetch_group_errors_are_per_partition_in_v1_and_top_level_from_v2():
    """As Kafka: v1 has no top-level error code, so each partition carries it."""
    denied = [(Op.DESCRIBE, Res.GROUP, "g")]
    body = {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}
    v1 = _run(h.offset_fetch, _session(denied), 9, 1, body)
    assert [p["error_code"] for p in v1["topics"][0]["partitions"]] == [30, 30]
    v2 = _run(h.offset_fetch, _session(denied), 9, 2, body)
    assert (v2["error_code"], v2["topics"]) == (30, [])
    session = _session()
    session.backend.raise_on_group = CoordinatorNotAvailable("moving")
    assert _run(h.offset_fetch, session, 9, 4, body)["error_code"] == 15


# -- DescribeGroups, ListGroups, DeleteGroups --------------------------------------------------


def _description(state: str) -> dict:
    return {"group_id": "g", "state": state, "protocol_type": "consumer", "protocol": "range",
            "generation": 5, "leader": "m1",
            "members": [{"member_id": "m1", "group_instance_id": "i1", "client_id": "c1",
                         "client_host": "/10.0.0.1", "subscription": KAFKA_SUBSCRIPTION,
                         "assignment": encode_assignment([("orders", 0)])}],
            "offsets": {}}  # fmt: skip


def test_describe_shows_a_stable_group_s_members_with_subscriptions_and_assignments():
    """State, protocol and each member's metadata and assignment bytes; groups in order."""
    session = _session()
    session.backend.coordinator.descriptions["g"] = _description("Stable")
    answer = _run(h.describe_groups, session, 15, 5, {"groups": ["g", "unknown"],
                                                      "include_authorized_operations": True})
    g, unknown = answer["groups"]
    assert (g["error_code"], g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        0, "Stable", "consumer", "range")
    (member,) = g["members"]
    assert (member["member_id"], member["group_instance_id"], member["client_host"]) == (
        "m1", "i1", "/10.0.0.1")
    assert member["member_metadata"] == KAFKA_SUBSCRIPTION
    assert member["member_assignment"] == encode_assignment([("orders", 0)])
    assert g["authorized_operations"] == (1 << 3) | (1 << 8) | (1 << 6)
    assert (unknown["error_code"], unknown["group_state"], unknown["members"]) == (0, "Dead", [])


def test_describe_hides_payloads_during_a_rebalance_and_needs_describe():
    """A rebalancing group's members show no metadata or assignment (about to change); a
    group the principal may not DESCRIBE answers GROUP_AUTHORIZATION_FAILED."""
    session = _session(denied=[(Op.DESCRIBE, Res.GROUP, "hidden")])
    session.backend.coordinator.descriptions["g"] = _description("PreparingRebalance")
    answer = _run(h.describe_groups, session, 15, 0, {"groups": ["g", "hidden"]})
    g, hidden = answer["groups"]
    assert g["members"][0]["member_metadata"] == g["members"][0]["member_assignment"] == b""
    assert hidden["error_code"] == 30
    assert [c[1] for c in _calls(session, "describe_group")] == ["g"]


def test_list_groups_merges_shards_filters_states_and_hides_what_cannot_be_described():
    """Every shard's groups, sorted; v4 states filter (case-insensitive); without DESCRIBE
    on the cluster only the groups the principal may DESCRIBE."""
    everything = _run(h.list_groups, _session(), 16, 3, {})
    assert [(g["group_id"], g["group_state"], g["protocol_type"])
            for g in everything["groups"]] == [
        ("a-group", "Empty", ""), ("b-group", "Stable", "consumer")]  # fmt: skip
    stable = _run(h.list_groups, _session(), 16, 4, {"states_filter": ["stable"]})
    assert [g["group_id"] for g in stable["groups"]] == ["b-group"]
    limited = _session(denied=[(Op.DESCRIBE, Res.CLUSTER, "kafka-cluster"),
                               (Op.DESCRIBE, Res.GROUP, "a-group")])
    assert [g["group_id"] for g in _run(h.list_groups, limited, 16, 0, {})["groups"]] == [
        "b-group"]


def test_delete_groups_answers_each_group_s_outcome():
    """NON_EMPTY_GROUP from the coordinator passes as 68; a group without DELETE is 30 and
    not deleted; a name given twice is deleted once."""
    session = _session(denied=[(Op.DELETE, Res.GROUP, "kept")])
    session.backend.coordinator.error = NonEmptyGroup("has members")
    answer = _run(h.delete_groups, session, 42, 1, {"groups_names": ["busy", "kept", "busy"]})
    assert answer["results"] == [{"group_id": "busy", "error_code": 68},
                                 {"group_id": "kept", "error_code": 30}]
    assert _calls(session, "delete_group") == [("delete_group", "busy")]


def test_group_error_mapping_keeps_group_codes_and_turns_the_rest_retriable():
    """Group error codes pass; an unreachable coordinator or failed write is retriable."""
    assert h._group_errno(None) == 0
    assert h._group_errno(GroupIdNotFound("x")) == 69
    assert h._group_errno(RequestTimedOut("x")) == 15
    assert h._group_errno(RuntimeError("x")) == 15


# -- through the codec, at every served version ------------------------------------------------

WIRE_REQUESTS = {
    11: _join_body(group_instance_id=None),
    14: {"group_id": "g", "generation_id": 5, "member_id": "m1", "group_instance_id": None,
         "assignments": [{"member_id": "m1", "assignment": b"\x00\x00"}]},
    12: {"group_id": "g", "generation_id": 5, "member_id": "m1", "group_instance_id": None},
    13: {"group_id": "g", "member_id": "m1"},
    8: _commit_body(group_instance_id=None),
    9: {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0]}],
        "require_stable": False},
    15: {"groups": ["g"], "include_authorized_operations": False},
    16: {"states_filter": []},
    42: {"groups_names": ["g"]},
}
HANDLERS = {11: h.join_group, 14: h.sync_group, 12: h.heartbeat, 13: h.leave_group,
            8: h.offset_commit, 9: h.offset_fetch, 15: h.describe_groups, 16: h.list_groups,
            42: h.delete_groups}  # fmt: skip


def _wire_cases():
    return [(key, v) for key in WIRE_REQUESTS for v in range(SUPPORTED[key][0],
                                                             SUPPORTED[key][1] + 1)]


@pytest.mark.parametrize(("api_key", "version"), _wire_cases())
def test_requests_decoded_by_the_codec_are_answered_in_bytes_kafka_python_reads(api_key, version):
    """Each handler reads the codec's field names at every served version, and its answer
    encodes into a response kafka-python decodes without an error code."""
    session = _session()
    session.backend.coordinator.descriptions["g"] = _description("Stable")
    frame = encode_request(RequestHeader(api_key, version, 3, "client-a"), WIRE_REQUESTS[api_key])
    header, body = read_request(frame[4:])
    answer = asyncio.run(HANDLERS[api_key](session, header, body))
    response = encode_response(header, answer)
    decoded = kp_class(api_key, request=False).decode(response[4:], version=version, header=True)
    values = decoded.to_dict(json=False)
    codes = [values.get("error_code", 0)]
    for item in values.get("topics") or values.get("groups") or values.get("results") or ():
        codes.append(item.get("error_code", 0))
        codes.extend(p.get("error_code", 0) for p in item.get("partitions") or ())
    assert set(codes) == {0}, values
    if api_key == 11:
        assert values["member_id"] == "client-a-1" and len(values["members"]) == 2
    if api_key == 9:
        assert values["topics"][0]["partitions"][0]["committed_offset"] == 42


def test_a_first_join_from_v4_on_is_answered_member_id_required_with_its_id():
    """KIP-394: JoinGroup v4+ asks the coordinator for the round trip, whose
    MemberIdRequired answer carries the id the client must join with; before v4 it does
    not ask."""
    session = _session()
    session.backend.coordinator.join_answer = (
        MemberIdRequired("join again with member id client-a-7", "client-a-7"), None)
    answer = _run(h.join_group, session, 11, 4, _join_body())
    assert (answer["error_code"], answer["member_id"]) == (79, "client-a-7")
    _run(h.join_group, session, 11, 3, _join_body())
    assert [c[-1] for c in _calls(session, "join_group")] == [True, False]
