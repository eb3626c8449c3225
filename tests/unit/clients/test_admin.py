"""Admin without Ray: what it sends the controller, how it reads the answers, and the
arguments it refuses before sending anything. The gateway and metadata cache are fakes."""

from __future__ import annotations

from typing import Any

import pytest

from rafka.clients.admin import ELECTION_TYPES, Admin, check_assignment
from rafka.errors import (
    ElectionNotNeeded,
    NoReassignmentInProgress,
    NotLeaderOrFollower,
    PreferredLeaderNotAvailable,
    RafkaError,
)
from rafka.types import (
    BrokerDescription,
    ElectionResult,
    PartitionDescription,
    TopicDescription,
)


class FakeGateway:
    """Answers controller calls from a dict of method -> value (or function of the args)
    and records every call."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple]] = []

    def call_controller(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        answer = self.answers[method]
        return answer(*args) if callable(answer) else answer


class FakeMetadata:
    def __init__(self) -> None:
        self.invalidated: list[str] = []

    def invalidate(self, name: str) -> None:
        self.invalidated.append(name)


def admin_with(**answers: Any) -> tuple[Admin, FakeGateway, FakeMetadata]:
    gateway, metadata = FakeGateway(**answers), FakeMetadata()
    return Admin(gateway, metadata), gateway, metadata


def partition_dict(partition=0, leader=1, replicas=(1, 2, 3), isr=None, **extra) -> dict:
    return {"partition": partition, "leader": leader, "leader_epoch": 3,
            "replicas": list(replicas), "isr": list(replicas if isr is None else isr),
            **extra}  # fmt: skip


def topic_dict(name="orders", partitions=None) -> dict:
    return {"name": name, "topic_id": f"id-{name}", "internal": False, "overrides": {},
            "config": {"retention.ms": 1},
            "partitions": partitions if partitions is not None else [partition_dict()]}  # fmt: skip


# -- types -------------------------------------------------------------------------------------


def test_partition_description_built_positionally_as_before_gets_defaults():
    """The five original fields still construct it; the new ones default to no
    reassignment and online."""
    p = PartitionDescription(0, 1, 2, [1, 2], [1, 2])
    assert (p.adding, p.removing, p.offline) == ((), (), False)
    assert not p.under_replicated and not p.reassigning and p.replication_factor == 2


def test_under_replicated_means_fewer_in_sync_than_the_replication_factor():
    """ISR smaller than the replicas is under-replicated; a reassignment's added replicas
    that are not in sync yet do not count (Kafka's rule)."""
    assert PartitionDescription(0, 1, 0, [1, 2, 3], [1, 2]).under_replicated
    moving = PartitionDescription(0, 1, 0, [1, 2, 3, 4], [1, 2, 3], [4], [1])
    assert moving.replication_factor == 3 and not moving.under_replicated
    assert moving.reassigning
    lagging = PartitionDescription(0, 1, 0, [1, 2, 3, 4], [1, 2], [4], [1])
    assert lagging.under_replicated


def test_broker_description_defaults_to_no_rack_and_unfenced():
    assert BrokerDescription(0, "local", True) == BrokerDescription(0, "local", True, None, False)


# -- request ids -------------------------------------------------------------------------------


class RestartingGateway(FakeGateway):
    """A gateway whose controller restarts during the first attempt of every call: like
    ``Gateway.call_controller`` it sends the same args again, and records each attempt."""

    def call_controller(self, method: str, *args: Any) -> Any:
        for attempt in range(2):
            self.calls.append((method, args))
            if attempt == 0:
                continue  # the controller died before answering; send the call again
            answer = self.answers[method]
            return answer(*args) if callable(answer) else answer


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 32 and set(value) <= set("0123456789abcdef")


def test_create_topic_sends_a_request_id_after_the_topic_settings():
    """The controller gets (name, partitions, replication factor, config, internal=False,
    request id)."""
    admin, gateway, _ = admin_with(create_topic=topic_dict())
    described = admin.create_topic("orders", 3, 2, {"retention.ms": 1})
    ((method, args),) = gateway.calls
    assert method == "create_topic"
    assert args[:5] == ("orders", 3, 2, {"retention.ms": 1}, False)
    assert len(args) == 6 and _is_request_id(args[5])
    assert described.name == "orders"


@pytest.mark.parametrize(
    "method, call, answer",
    [("create_topic", lambda admin: admin.create_topic("orders", 3), topic_dict()),
     ("create_partitions", lambda admin: admin.create_partitions("orders", 6), topic_dict()),
     ("delete_topic", lambda admin: admin.delete_topic("orders"), None)],
)  # fmt: skip
def test_a_call_sent_again_after_a_controller_restart_carries_the_same_request_id(
    method, call, answer
):
    """Each admin call makes one request id, the last argument; every attempt of that call
    sends it unchanged (so the controller answers the repeat as the first), and the next
    call makes a new one."""
    gateway, metadata = RestartingGateway(**{method: answer}), FakeMetadata()
    admin = Admin(gateway, metadata)
    call(admin)
    call(admin)
    first, again, second, _ = gateway.calls
    assert first == again and first[0] == method
    assert _is_request_id(first[1][-1])
    assert second[1][:-1] == first[1][:-1] and second[1][-1] != first[1][-1]


def test_create_partitions_and_delete_topic_send_name_then_request_id():
    admin, gateway, metadata = admin_with(create_partitions=topic_dict(), delete_topic=None)
    admin.create_partitions("orders", 6)
    admin.delete_topic("orders")
    (grow, (name, total, grow_id)), (delete, (deleted, delete_id)) = gateway.calls
    assert (grow, name, total, delete, deleted) == (
        "create_partitions", "orders", 6, "delete_topic", "orders"
    )  # fmt: skip
    assert _is_request_id(grow_id) and _is_request_id(delete_id) and grow_id != delete_id
    assert metadata.invalidated == ["orders", "orders"]


# -- describing --------------------------------------------------------------------------------


def test_describe_reads_adding_removing_and_offline():
    """The controller's new per-partition fields come through as lists and a bool."""
    admin, gateway, _ = admin_with(describe_topics=[topic_dict(partitions=[
        partition_dict(0, 1, (1, 2, 3), (1, 2, 3), adding=[3], removing=[1], offline=False),
        partition_dict(1, -1, (2,), (2,), adding=[], removing=[], offline=True),
    ])])  # fmt: skip
    described = admin.describe_topic("orders")
    assert gateway.calls == [("describe_topics", (["orders"],))]
    assert isinstance(described, TopicDescription)
    moving, dead = described.partitions
    assert (moving.adding, moving.removing, moving.offline) == ([3], [1], False)
    assert dead.offline and dead.leader == -1


def test_describe_of_an_older_controller_answer_uses_defaults():
    """Partition dicts without adding/removing/offline parse: no reassignment, offline
    exactly when there is no leader."""
    admin, _, _ = admin_with(describe_topics=[topic_dict(partitions=[
        partition_dict(0, 2), partition_dict(1, -1),
    ])])  # fmt: skip
    first, second = admin.describe_topic("orders").partitions
    assert first == PartitionDescription(0, 2, 3, [1, 2, 3], [1, 2, 3], [], [], False)
    assert second.offline


def test_brokers_carry_rack_and_fenced_and_old_answers_parse():
    """describe_cluster's brokers become BrokerDescriptions with rack and fenced; entries
    without them give no rack and unfenced."""
    admin, _, _ = admin_with(describe_cluster={"brokers": [
        {"broker_id": 0, "disk": "d0", "rack": "r1", "alive": True, "fenced": False},
        {"broker_id": 1, "disk": "d1", "rack": None, "alive": False, "fenced": True},
        {"broker_id": 2, "disk": "d2", "alive": True},
    ]})  # fmt: skip
    assert admin.brokers() == [
        BrokerDescription(0, "d0", True, "r1", False),
        BrokerDescription(1, "d1", False, None, True),
        BrokerDescription(2, "d2", True, None, False),
    ]


def test_under_replicated_partitions_lists_only_those_with_their_topic():
    """Every topic's partitions with fewer in-sync replicas than replicas, as (topic,
    partition) pairs; the topics asked for are passed on (None: all)."""
    admin, gateway, _ = admin_with(describe_topics=[
        topic_dict("a", [partition_dict(0, isr=(1, 2, 3)), partition_dict(1, isr=(1,))]),
        topic_dict("b", [partition_dict(0, isr=(2, 3))]),
    ])  # fmt: skip
    found = admin.under_replicated_partitions()
    assert [(t, p.partition, p.isr) for t, p in found] == [("a", 1, [1]), ("b", 0, [2, 3])]
    admin.under_replicated_partitions(["b"])
    assert gateway.calls == [("describe_topics", (None,)), ("describe_topics", (["b"],))]
    with pytest.raises(TypeError, match="list of names"):
        admin.under_replicated_partitions("b")


# -- elect_leaders -----------------------------------------------------------------------------


def test_elect_leaders_sends_type_topic_and_partitions_and_types_each_result():
    """errno 0 is a success (error None), others become their typed error with the
    controller's message; topics with a new leader are dropped from the metadata cache."""
    answer = [
        {"topic": "t", "partition": 0, "leader": 1, "errno": 0, "message": ""},
        {"topic": "t", "partition": 1, "leader": 2, "errno": 84, "message": "leads already"},
        {"topic": "u", "partition": 0, "leader": 3, "errno": 80, "message": "2 is down"},
        {"topic": "u", "partition": 1, "leader": -1, "errno": 6, "message": "moved"},
        {"topic": "u", "partition": 2, "leader": -1, "errno": 9999, "message": "odd"},
    ]
    admin, gateway, metadata = admin_with(elect_leaders=answer)
    results = admin.elect_leaders("t", [0, 1, 1], "preferred")
    assert gateway.calls == [("elect_leaders", ("preferred", "t", [0, 1]))]
    assert results[0] == ElectionResult("t", 0, 1, None)
    kinds = [type(r.error) for r in results[1:]]
    assert kinds == [ElectionNotNeeded, PreferredLeaderNotAvailable, NotLeaderOrFollower,
                     RafkaError]  # fmt: skip
    assert str(results[2].error) == "2 is down"
    assert metadata.invalidated == ["t"]


def test_elect_leaders_of_every_topic_sends_none_for_topic_and_partitions():
    admin, gateway, _ = admin_with(elect_leaders=[])
    assert admin.elect_leaders(election_type="unclean") == []
    assert gateway.calls == [("elect_leaders", ("unclean", None, None))]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [({"election_type": "PREFERRED"}, ValueError, "'preferred'.*'unclean'"),
     ({"election_type": "clean"}, ValueError, "unknown"),
     ({"partitions": [0]}, ValueError, "without a topic"),
     ({"topic": 5}, TypeError, "topic name"),
     ({"topic": "t", "partitions": "01"}, TypeError, "list of partition numbers"),
     ({"topic": "t", "partitions": 3}, TypeError, "list of partition numbers"),
     ({"topic": "t", "partitions": [True]}, TypeError, "must be an int"),
     ({"topic": "t", "partitions": [1.0]}, TypeError, "must be an int"),
     ({"topic": "t", "partitions": [-1]}, ValueError, "0 or more"),
     ({"topic": "t", "partitions": []}, ValueError, "empty")],
)  # fmt: skip
def test_elect_leaders_refuses_bad_arguments_before_calling(kwargs, error, match):
    """Bad election types, partitions without a topic and malformed partition lists raise
    TypeError or ValueError saying what to give, and nothing reaches the controller."""
    admin, gateway, _ = admin_with(elect_leaders=[])
    with pytest.raises(error, match=match):
        admin.elect_leaders(**kwargs)
    assert gateway.calls == []


def test_election_types_are_preferred_and_unclean():
    assert ELECTION_TYPES == ("preferred", "unclean")


# -- reassign_partitions -----------------------------------------------------------------------


def test_reassign_partitions_sends_a_normalised_plan_and_returns_the_description():
    """Keys may be decimal strings (a dict from JSON) and replicas any sequence: the
    controller gets {int: [int, ...]}; the topic leaves the metadata cache."""
    described = topic_dict(partitions=[partition_dict(0, 1, (1, 2, 3, 4), adding=[4],
                                                      removing=[1])])  # fmt: skip
    admin, gateway, metadata = admin_with(reassign_partitions=described)
    result = admin.reassign_partitions("orders", {"0": (2, 3, 4), 5: [1]})
    assert gateway.calls == [("reassign_partitions", ("orders", {0: [2, 3, 4], 5: [1]}))]
    assert result.partitions[0].adding == [4] and result.partitions[0].removing == [1]
    assert metadata.invalidated == ["orders"]


@pytest.mark.parametrize(
    "assignment, error, match",
    [([(0, [1])], TypeError, "must be a dict"),
     ({}, ValueError, "empty"),
     ({True: [1]}, TypeError, "partition number must be an int"),
     ({-1: [1]}, ValueError, "0 or more"),
     ({"x": [1]}, TypeError, "partition number must be an int"),
     ({0: "1,2"}, TypeError, "list of broker ids"),
     ({0: 1}, TypeError, "list of broker ids"),
     ({0: []}, ValueError, "no replicas"),
     ({0: [1, 2, 1]}, ValueError, "broker\\(s\\) 1 more than once"),
     ({0: [1, "2"]}, TypeError, "broker id of partition 0 must be an int"),
     ({0: [1], "0": [2]}, ValueError, "partition 0 is given twice")],
)  # fmt: skip
def test_reassign_partitions_refuses_malformed_assignments(assignment, error, match):
    """Each malformed assignment raises TypeError or ValueError naming the problem, and
    nothing reaches the controller."""
    admin, gateway, _ = admin_with(reassign_partitions=topic_dict())
    with pytest.raises(error, match=match):
        admin.reassign_partitions("orders", assignment)
    assert gateway.calls == []


@pytest.mark.parametrize("topic", [None, "", 3])
def test_reassign_partitions_needs_a_topic_name(topic):
    admin, gateway, _ = admin_with(reassign_partitions=topic_dict())
    with pytest.raises(TypeError, match="topic name"):
        admin.reassign_partitions(topic, {0: [1]})
    assert gateway.calls == []


# -- cancel_reassignment -----------------------------------------------------------------------


def test_cancel_reassignment_sends_the_partitions_and_returns_the_description():
    """The partitions go to the controller deduplicated, as a list (None: every partition
    being reassigned); the topic leaves the metadata cache; the answer is a
    TopicDescription."""
    admin, gateway, metadata = admin_with(cancel_reassignment=topic_dict())
    described = admin.cancel_reassignment("orders", (2, 0, 2))
    assert gateway.calls == [("cancel_reassignment", ("orders", [2, 0]))]
    assert isinstance(described, TopicDescription) and described.partitions[0].adding == []
    assert metadata.invalidated == ["orders"]
    admin.cancel_reassignment("orders")
    assert gateway.calls[-1] == ("cancel_reassignment", ("orders", None))


@pytest.mark.parametrize(
    "topic, partitions, error, match",
    [(None, None, TypeError, "topic name"),
     ("", None, TypeError, "topic name"),
     (3, [0], TypeError, "topic name"),
     ("orders", "0", TypeError, "list of partition numbers"),
     ("orders", 0, TypeError, "list of partition numbers"),
     ("orders", [True], TypeError, "must be an int"),
     ("orders", ["1"], TypeError, "must be an int"),
     ("orders", [-1], ValueError, "0 or more"),
     ("orders", [], ValueError, "empty")],
)  # fmt: skip
def test_cancel_reassignment_refuses_bad_arguments_before_calling(
    topic, partitions, error, match
):
    """A topic that is not a name, or partitions that are not a non-empty list of ints
    0 or more, raise TypeError or ValueError and nothing reaches the controller."""
    admin, gateway, _ = admin_with(cancel_reassignment=topic_dict())
    with pytest.raises(error, match=match):
        admin.cancel_reassignment(topic, partitions)
    assert gateway.calls == []


def test_cancel_reassignment_of_a_partition_not_being_reassigned_raises_the_typed_error():
    """The controller's NoReassignmentInProgress reaches the caller; the cache is left."""

    def refuse(name, partitions):
        raise NoReassignmentInProgress(f"partition {partitions[0]} of {name} is not moving")

    admin, _, metadata = admin_with(cancel_reassignment=refuse)
    with pytest.raises(NoReassignmentInProgress, match="partition 1 of orders"):
        admin.cancel_reassignment("orders", [1])
    assert metadata.invalidated == []


def test_check_assignment_keeps_the_replica_order():
    """The first broker of each list stays first: it is the preferred leader."""
    assert check_assignment({1: [3, 1, 2]}) == {1: [3, 1, 2]}
