"""Admin's consumer-group calls without Ray: the gateway is a fake whose ``send`` and
``list_offset`` return object-ref stand-ins that only its ``get`` resolves, the coordinator
and the partition leaders are plain objects, and every call they receive is recorded."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest

from rafka.clients.admin import Admin
from rafka.clients.admin_groups import reset_target, timestamp_ms
from rafka.clients.metadata import PartitionLeader, TopicMetadata
from rafka.cluster.consumer_protocol import encode_assignment
from rafka.errors import (
    GroupIdNotFound,
    InvalidGroupId,
    LeaderNotAvailable,
    NonEmptyGroup,
    NotLeaderOrFollower,
    UnknownTopicOrPartition,
)
from rafka.types import (
    GroupListing,
    GroupPartitionOffsets,
    MemberDescription,
    OffsetAndMetadata,
    TopicPartition,
)

TP = TopicPartition


class Ref:
    """An object-ref stand-in: the answer, computed when the call was sent."""

    def __init__(self, value: Any) -> None:
        self.value = value


class FakeCoordinator:
    """A coordinator shard holding groups as ``Group.describe()`` dicts; an admin commit
    (member "", generation -1) is refused with NonEmptyGroup while the group has members."""

    def __init__(self, *groups: dict) -> None:
        self.groups = {g["group_id"]: g for g in groups}
        self.before_commit = lambda: None  # a consumer joining in the race, for one test

    def list_groups(self) -> list[dict]:
        return [{"group_id": g["group_id"], "state": g["state"], "members": len(g["members"]),
                 "protocol_type": g["protocol_type"]} for g in self.groups.values()]  # fmt: skip

    def describe_group(self, group_id: str) -> tuple:
        if group_id not in self.groups:
            return GroupIdNotFound(f"consumer group {group_id!r} does not exist"), None
        return None, self.groups[group_id]

    def delete_group(self, group_id: str):
        error, group = self.describe_group(group_id)
        if group is not None and group["members"]:
            return NonEmptyGroup(f"group {group_id} has members")
        self.groups.pop(group_id, None)
        return error

    def commit_offsets(self, group_id, member_id, instance_id, generation, offsets,
                       outside_group=False):  # fmt: skip
        # an admin commits from outside the group, as no member of no generation
        assert (member_id, instance_id, generation, outside_group) == ("", None, -1, True)
        self.before_commit()
        group = self.groups.setdefault(group_id, make_group(group_id))
        if group["members"]:
            return NonEmptyGroup(f"group {group_id} is Stable with members")
        for tp, (offset, epoch, metadata) in offsets.items():
            group["offsets"][tp] = {"offset": offset, "leader_epoch": epoch,
                                    "metadata": metadata, "commit_ms": 1}  # fmt: skip
        return None

    def fetch_offsets(self, group_id, partitions, require_stable=False):
        offsets = self.groups.get(group_id, {"offsets": {}})["offsets"]
        return None, {tp: (c["offset"], c["leader_epoch"], c["metadata"])
                      for tp, c in offsets.items() if partitions is None or tp in partitions}


class FakeLeader:
    """A partition leader's log: its log start, high watermark and record timestamps."""

    def __init__(self, log_start: int, high_watermark: int, timestamps=(), errno: int = 0):
        self.log_start, self.high_watermark, self.errno = log_start, high_watermark, errno
        self.timestamps = dict(timestamps)  # offset -> timestamp ms

    def list_offset(self, timestamp: int) -> tuple:
        if self.errno:
            return self.errno, "not the leader any more", -1, -1
        if timestamp == -2:
            return 0, "", self.log_start, -1
        if timestamp == -1:
            return 0, "", self.high_watermark, -1
        found = [o for o, ts in sorted(self.timestamps.items())
                 if ts >= timestamp and o < self.high_watermark]  # fmt: skip
        return (0, "", found[0], self.timestamps[found[0]]) if found else (0, "", -1, -1)


class FakeGateway:
    """Routes groups to shards by their first letter (a-m: shard 0) and records the calls."""

    def __init__(self, shards: list[FakeCoordinator]) -> None:
        self.shards = shards
        self.sent: list[tuple[str, tuple]] = []
        self.asked: list[tuple[Any, int]] = []
        self.gets = 0

    def group_coordinator(self, group_id: str) -> FakeCoordinator:
        return self.shards[0 if group_id[0] <= "m" or len(self.shards) == 1 else 1]

    def group_coordinators(self) -> list[FakeCoordinator]:
        return list(self.shards)

    def send(self, handle, method: str, *args) -> Ref:
        self.sent.append((method, args))
        return Ref(getattr(handle, method)(*args))

    def list_offset(self, replica: FakeLeader, timestamp: int) -> Ref:
        self.asked.append((replica, timestamp))
        return Ref(replica.list_offset(timestamp))

    def get(self, refs, timeout_s=None, what=""):
        self.gets += 1
        if isinstance(refs, list):
            assert all(isinstance(r, Ref) for r in refs)
            return [r.value for r in refs]
        assert isinstance(refs, Ref)
        return refs.value

    def methods(self) -> list[str]:
        return [method for method, _ in self.sent]


class FakeMetadata:
    """Topics as lists of leaders (None: no leader now); never creates a topic."""

    def __init__(self, topics: dict[str, list[FakeLeader | None]]) -> None:
        self.topics = topics

    def partition_counts(self, names, refresh=False) -> dict[str, int]:
        assert refresh
        return {n: len(self.topics[n]) for n in names if n in self.topics}

    def cached(self, name: str) -> TopicMetadata | None:
        leaders = self.topics.get(name)
        if leaders is None:
            return None
        return TopicMetadata(name, f"id-{name}", [
            PartitionLeader(-1 if r is None else 1, 0) for r in leaders
        ])  # fmt: skip

    def topic(self, name: str) -> TopicMetadata:
        raise AssertionError("partition_counts refreshed it; cached() answers")

    def replica(self, meta: TopicMetadata, partition: int) -> FakeLeader:
        leader = self.topics[meta.name][partition]
        if leader is None:
            raise LeaderNotAvailable(f"{meta.name}-{partition} has no leader")
        return leader


def make_group(group_id="billing", state="Empty", members=(), offsets=None, protocol_type=""):
    return {
        "group_id": group_id, "state": state, "protocol_type": protocol_type,
        "protocol": "range" if members else "", "generation": 4 if members else 0,
        "leader": members[0]["member_id"] if members else None, "members": list(members),
        "offsets": {tp: {"offset": o, "leader_epoch": 2, "metadata": "m", "commit_ms": 1}
                    for tp, o in (offsets or {}).items()},
    }  # fmt: skip


def member(member_id: str, *partitions: tuple[str, int]) -> dict:
    return {"member_id": member_id, "group_instance_id": None, "client_id": "app",
            "client_host": "/10.0.0.7", "assignment": encode_assignment(partitions)}  # fmt: skip


def stable(group_id="billing", offsets=None) -> dict:
    return make_group(group_id, "Stable", [member("m-1", ("orders", 0))], offsets, "consumer")


def cluster(*groups: dict, topics=None) -> tuple[Admin, FakeGateway, FakeCoordinator]:
    """An Admin over one shard holding ``groups``; topic "orders" has 3 partitions with logs
    [10, 100), [0, 50) and [5, 5) (empty), "audit" one partition [0, 7)."""
    coordinator = FakeCoordinator(*groups)
    gateway = FakeGateway([coordinator])
    topics = topics or {
        "orders": [FakeLeader(10, 100, {10: 1_000, 40: 2_000, 99: 3_000}),
                   FakeLeader(0, 50, {0: 1_500, 49: 2_500}), FakeLeader(5, 5)],
        "audit": [FakeLeader(0, 7)],
    }  # fmt: skip
    return Admin(gateway, FakeMetadata(topics)), gateway, coordinator


def committed(coordinator: FakeCoordinator, group_id="billing") -> dict:
    return {tp: c["offset"] for tp, c in coordinator.groups[group_id]["offsets"].items()}


# -- listing and describing ---------------------------------------------------------------------


def test_list_groups_asks_every_shard_in_one_round_and_sorts_by_id():
    """Both shards' groups come back as GroupListings sorted by id, from a single get."""
    gateway = FakeGateway([FakeCoordinator(make_group("billing")),
                           FakeCoordinator(stable("payments"), make_group("audit-x"))])
    listed = Admin(gateway, FakeMetadata({})).list_groups()
    assert listed == [GroupListing("audit-x", "Empty", "", 0),
                      GroupListing("billing", "Empty", "", 0),
                      GroupListing("payments", "Stable", "consumer", 1)]  # fmt: skip
    assert gateway.gets == 1 and gateway.methods() == ["list_groups", "list_groups"]


def test_describe_decodes_members_and_computes_lag_per_partition():
    """Members' assignments are decoded to TopicPartitions; each committed or owned
    partition gets its log end offset from its leader (one round), lag = log end -
    committed, None without a commit, and its owner."""
    group = make_group("billing", "Stable", [member("m-1", ("orders", 0), ("orders", 1)),
                                             member("m-2", ("audit", 0))],
                       {TP("orders", 0): 60, TP("audit", 0): 7}, "consumer")  # fmt: skip
    admin, gateway, _ = cluster(group)
    d = admin.describe_group("billing")
    assert (d.state, d.protocol_type, d.protocol, d.generation, d.leader) == (
        "Stable", "consumer", "range", 4, "m-1")
    assert d.members[0] == MemberDescription(
        "m-1", None, "app", "/10.0.0.7", [TP("orders", 0), TP("orders", 1)])
    assert d.offsets == [
        GroupPartitionOffsets("audit", 0, 7, 7, 0, "m-2", "m"),
        GroupPartitionOffsets("orders", 0, 60, 100, 40, "m-1", "m"),
        GroupPartitionOffsets("orders", 1, None, 50, None, "m-1", ""),
    ]
    assert d.total_lag == 40
    assert gateway.gets == 2 and {ts for _, ts in gateway.asked} == {-1}


def test_describe_leaves_the_assignment_of_other_protocols_empty():
    """A group of another protocol type has opaque assignments: members show none."""
    group = make_group("billing", "Stable", [member("m-1", ("orders", 0))], {},
                       protocol_type="connect")  # fmt: skip
    admin, _, _ = cluster(group)
    d = admin.describe_group("billing")
    assert d.members[0].assignment == [] and d.offsets == []


def test_describe_marks_log_end_unknown_for_a_gone_topic_or_a_leaderless_partition():
    """A committed partition whose topic was deleted, or that has no leader now, shows log
    end offset -1 and no lag instead of failing the whole description."""
    group = make_group(offsets={TP("gone", 0): 3, TP("orders", 1): 4, TP("orders", 0): 20})
    topics = {"orders": [FakeLeader(0, 30), None]}
    admin, _, _ = cluster(group, topics=topics)
    ends = {(o.topic, o.partition): (o.log_end_offset, o.lag)
            for o in admin.describe_group("billing").offsets}  # fmt: skip
    assert ends == {("gone", 0): (-1, None), ("orders", 0): (30, 10), ("orders", 1): (-1, None)}


def test_describe_of_an_unknown_group_raises_group_id_not_found_naming_it():
    """A group no shard knows raises GroupIdNotFound whose message names it."""
    admin, _, _ = cluster(make_group("billing"))
    with pytest.raises(GroupIdNotFound, match="'nobody'"):
        admin.describe_group("nobody")


@pytest.mark.parametrize("bad", ["", None, 7, b"billing"])
def test_bad_group_ids_are_refused_before_anything_is_sent(bad):
    """Every group call raises InvalidGroupId for a non-string or empty id, sending nothing."""
    admin, gateway, _ = cluster(make_group("billing"))
    for call in (admin.describe_group, admin.delete_group, admin.list_group_offsets,
                 lambda g: admin.reset_offsets(g, to="earliest"),
                 lambda g: admin.alter_group_offsets(g, {TP("orders", 0): 1})):  # fmt: skip
        with pytest.raises(InvalidGroupId):
            call(bad)
    assert gateway.sent == [] and gateway.gets == 0


def test_describe_groups_describes_each_in_one_round_each():
    """Several groups cost one get to the coordinators and one to the leaders."""
    admin, gateway, _ = cluster(make_group("billing", offsets={TP("orders", 0): 10}),
                                make_group("audit", offsets={TP("audit", 0): 1}))
    described = admin.describe_groups(["billing", "audit"])
    assert [d.group_id for d in described] == ["billing", "audit"]
    assert [o.lag for d in described for o in d.offsets] == [90, 6]
    assert gateway.gets == 2
    with pytest.raises(TypeError, match="wrap a single one"):
        admin.describe_groups("billing")


# -- deleting and offsets -----------------------------------------------------------------------


def test_delete_group_passes_non_empty_group_through_and_keeps_the_group():
    """The coordinator's NonEmptyGroup and GroupIdNotFound are raised; the group stays."""
    admin, _, coordinator = cluster(stable())
    with pytest.raises(NonEmptyGroup):
        admin.delete_group("billing")
    assert "billing" in coordinator.groups
    with pytest.raises(GroupIdNotFound, match="'nobody'"):
        admin.delete_group("nobody")


def test_delete_group_removes_an_empty_group():
    """An empty group is deleted with one delete_group call to its coordinator."""
    admin, gateway, coordinator = cluster(make_group("billing"))
    assert admin.delete_group("billing") is None
    assert coordinator.groups == {} and gateway.sent == [("delete_group", ("billing",))]


def test_list_group_offsets_reads_offset_metadata_and_epoch_sorted():
    """The coordinator's (offset, epoch, metadata) become OffsetAndMetadata(offset,
    metadata, epoch); asking for partitions passes them as plain pairs."""
    admin, gateway, _ = cluster(make_group(offsets={TP("orders", 1): 4, TP("audit", 0): 2}))
    assert admin.list_group_offsets("billing") == {
        TP("audit", 0): OffsetAndMetadata(2, "m", 2), TP("orders", 1): OffsetAndMetadata(4, "m", 2),
    }  # fmt: skip
    assert list(admin.list_group_offsets("billing", [TP("orders", 1)])) == [TP("orders", 1)]
    assert gateway.sent[-1] == ("fetch_offsets", ("billing", [("orders", 1)], False))
    assert admin.list_group_offsets("nobody") == {}


def test_alter_group_offsets_commits_as_an_admin():
    """Ints and OffsetAndMetadata are committed from outside the group (as member "" of
    generation -1), with the coordinator's (offset, epoch, metadata) tuples."""
    admin, gateway, coordinator = cluster(make_group("billing"))
    admin.alter_group_offsets("billing", {TP("orders", 0): 12,
                                          TP("audit", 0): OffsetAndMetadata(3, "x", 5)})
    assert gateway.sent[-1] == ("commit_offsets", ("billing", "", None, -1, {
        ("orders", 0): (12, -1, ""), ("audit", 0): (3, 5, "x")}, True))  # fmt: skip
    assert committed(coordinator) == {("orders", 0): 12, ("audit", 0): 3}


@pytest.mark.parametrize(
    "offsets, error, message",
    [({TP("orders", 0): -1}, ValueError, "give 0 or more"),
     ({TP("orders", 0): True}, TypeError, "must be an int"),
     ({TP("orders", 0): "5"}, TypeError, "must be an int"),
     ({("orders", -1): 5}, ValueError, "negative partition"),
     ({("orders", "0"): 5}, TypeError, "is not a partition"),
     ({TP("orders", 3): 5}, UnknownTopicOrPartition, "no partition 3: it has 3"),
     ({TP("nope", 0): 5}, UnknownTopicOrPartition, "'nope' does not exist"),
     ({}, ValueError, "offsets is empty"),
     ([(TP("orders", 0), 5)], TypeError, "must be a dict")],
)  # fmt: skip
def test_alter_group_offsets_refuses_bad_offsets_before_committing(offsets, error, message):
    """Each bad offset or partition raises an error saying what to fix; nothing is committed."""
    admin, gateway, _ = cluster(make_group("billing"))
    with pytest.raises(error, match=message):
        admin.alter_group_offsets("billing", offsets)
    assert "commit_offsets" not in gateway.methods()


def test_alter_group_offsets_passes_non_empty_group_through_unchanged():
    """The coordinator refuses an admin commit to a group with members; offsets stay."""
    admin, _, coordinator = cluster(stable(offsets={TP("orders", 0): 50}))
    with pytest.raises(NonEmptyGroup):
        admin.alter_group_offsets("billing", {TP("orders", 0): 12})
    assert committed(coordinator) == {("orders", 0): 50}


# -- reset_offsets -------------------------------------------------------------------------------


def test_reset_to_earliest_and_latest_covers_every_partition_of_the_topics():
    """--to-earliest puts each partition at its log start, --to-latest at its high
    watermark, and the plan is committed."""
    admin, _, coordinator = cluster(make_group(offsets={TP("orders", 0): 50}))
    assert admin.reset_offsets("billing", ["orders"], to="earliest") == {
        TP("orders", 0): 10, TP("orders", 1): 0, TP("orders", 2): 5}
    assert committed(coordinator) == {("orders", 0): 10, ("orders", 1): 0, ("orders", 2): 5}
    assert admin.reset_offsets("billing", ["orders", "audit"], to="LATEST") == {
        TP("audit", 0): 7, TP("orders", 0): 100, TP("orders", 1): 50, TP("orders", 2): 5}


def test_reset_to_an_offset_is_clamped_to_log_start_and_high_watermark():
    """An absolute offset below the log start or past the high watermark is clamped."""
    admin, _, _ = cluster(make_group())
    plan = admin.reset_offsets("billing", partitions=[TP("orders", 0), TP("orders", 1)], to=30)
    assert plan == {TP("orders", 0): 30, TP("orders", 1): 30}
    plan = admin.reset_offsets("billing", partitions=[TP("orders", 0), TP("orders", 1)], to=5)
    assert plan == {TP("orders", 0): 10, TP("orders", 1): 5}
    assert admin.reset_offsets("billing", ["orders"], to=1000)[TP("orders", 1)] == 50


def test_reset_to_a_datetime_finds_the_first_record_at_or_after_it_else_latest():
    """An aware datetime is converted to ms; partitions with no record at or after it go
    to their high watermark; leaders are asked once, all in one round."""
    admin, gateway, _ = cluster(make_group())
    when = datetime(1970, 1, 1, 1, 0, 2, tzinfo=timezone(timedelta(hours=1)))  # 2,000 ms
    plan = admin.reset_offsets("billing", ["orders"], to=when)
    assert plan == {TP("orders", 0): 40, TP("orders", 1): 49, TP("orders", 2): 5}
    assert sorted({ts for _, ts in gateway.asked}) == [-2, -1, 2_000]
    gets = gateway.gets
    later = datetime(1970, 1, 1, 0, 0, 3, 1000, tzinfo=timezone.utc)  # 3,001 ms
    assert admin.reset_offsets("billing", ["orders"], to=later, dry_run=True)[
        TP("orders", 0)] == 100  # fmt: skip
    assert gateway.gets - gets == 2  # the describe, then every leader at once


def test_a_naive_datetime_is_local_time(monkeypatch):
    """As Kafka's tool reads --to-datetime, a datetime without a zone is local time."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30, no daylight saving
    time.tzset()
    try:
        assert timestamp_ms(datetime(1970, 1, 1, 5, 30, 1)) == 1_000
        assert timestamp_ms(datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)) == 1_000
        assert timestamp_ms(datetime(1960, 1, 1, tzinfo=timezone.utc)) == 0
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_reset_shift_moves_from_the_committed_offset_or_the_log_start_clamped():
    """shift_by adds to the committed offset (or, without one, to the log start) and the
    result stays within [log start, high watermark]."""
    admin, _, _ = cluster(make_group(offsets={TP("orders", 0): 50, TP("orders", 1): 45}))
    assert admin.reset_offsets("billing", ["orders"], shift_by=-20) == {
        TP("orders", 0): 30, TP("orders", 1): 25, TP("orders", 2): 5}
    admin, _, _ = cluster(make_group(offsets={TP("orders", 0): 50, TP("orders", 1): 45}))
    assert admin.reset_offsets("billing", ["orders"], shift_by=10) == {
        TP("orders", 0): 60, TP("orders", 1): 50, TP("orders", 2): 5}
    admin, _, _ = cluster(make_group(offsets={TP("orders", 0): 50}))
    assert admin.reset_offsets("billing", ["orders"], shift_by=-100)[TP("orders", 0)] == 10


def test_reset_target_rules():
    """The pure rule: clamp into [log start, high watermark]; datetime -1 means latest."""
    assert reset_target("shift", 3, None, 10, 20) == 13
    assert reset_target("datetime", 0, None, 10, 20, found=-1) == 20
    assert reset_target("datetime", 0, None, 10, 20, found=12) == 12
    assert reset_target("offset", 25, 15, 10, 20) == 20


def test_dry_run_returns_the_plan_and_commits_nothing():
    """A dry run returns the plan without sending a commit."""
    admin, gateway, coordinator = cluster(make_group(offsets={TP("orders", 0): 50}))
    plan = admin.reset_offsets("billing", ["orders"], to="earliest", dry_run=True)
    assert plan[TP("orders", 0)] == 10
    assert "commit_offsets" not in gateway.methods()
    assert committed(coordinator) == {("orders", 0): 50}


def test_reset_of_a_group_with_members_raises_non_empty_group_before_any_work():
    """The describe shows members: NonEmptyGroup, no leader asked, no commit sent (a dry
    run too, as Kafka's tool refuses)."""
    for dry_run in (False, True):
        admin, gateway, coordinator = cluster(stable(offsets={TP("orders", 0): 50}))
        with pytest.raises(NonEmptyGroup, match="'billing' is Stable with 1 member"):
            admin.reset_offsets("billing", ["orders"], to="earliest", dry_run=dry_run)
        assert gateway.methods() == ["describe_group"] and gateway.asked == []
        assert committed(coordinator) == {("orders", 0): 50}


def test_reset_passes_the_coordinators_non_empty_group_through_when_a_member_joins_meanwhile():
    """A consumer joining between the describe and the commit makes the coordinator refuse:
    the error is raised and the offsets stay as they were."""
    admin, gateway, coordinator = cluster(make_group(offsets={TP("orders", 0): 50}))
    group = coordinator.groups["billing"]
    coordinator.before_commit = lambda: group["members"].append(member("late"))
    with pytest.raises(NonEmptyGroup):
        admin.reset_offsets("billing", ["orders"], to="earliest")
    assert gateway.methods()[-1] == "commit_offsets"
    assert committed(coordinator) == {("orders", 0): 50}


def test_reset_without_topics_covers_the_committed_partitions():
    """Neither topics nor partitions (--all-topics) means every committed partition."""
    admin, _, _ = cluster(make_group(offsets={TP("orders", 1): 3, TP("audit", 0): 1}))
    assert admin.reset_offsets("billing", to="latest") == {TP("audit", 0): 7, TP("orders", 1): 50}


def test_reset_without_topics_needs_committed_offsets():
    """--all-topics of a group without offsets is refused before any leader is asked."""
    admin, gateway, _ = cluster(make_group("billing"))
    with pytest.raises(ValueError, match="no committed offsets to reset: name topics="):
        admin.reset_offsets("billing", to="earliest")
    with pytest.raises(GroupIdNotFound, match="'nobody' does not exist"):
        admin.reset_offsets("nobody", to="earliest")
    assert gateway.asked == [] and "commit_offsets" not in gateway.methods()


def test_reset_of_an_unknown_group_with_topics_creates_its_offsets():
    """As with Kafka's tool, offsets may be set for a group that does not exist yet."""
    admin, _, coordinator = cluster()
    assert admin.reset_offsets("fresh", ["audit"], to="latest") == {TP("audit", 0): 7}
    assert committed(coordinator, "fresh") == {("audit", 0): 7}


@pytest.mark.parametrize(
    "topics, partitions, message",
    [(["nope"], None, "topic 'nope' does not exist"),
     (None, [TP("orders", 3)], "no partition 3: it has 3"),
     (None, [TP("nope", 0)], "'nope' does not exist")],
)  # fmt: skip
def test_reset_of_unknown_topics_or_partitions_names_them(topics, partitions, message):
    """A missing topic or partition raises UnknownTopicOrPartition naming it, before work."""
    admin, gateway, _ = cluster(make_group())
    with pytest.raises(UnknownTopicOrPartition, match=message):
        admin.reset_offsets("billing", topics, partitions, to="earliest")
    assert gateway.asked == [] and "commit_offsets" not in gateway.methods()


def test_reset_raises_a_leaders_error_and_commits_nothing():
    """An error a leader answers with is raised, naming the partition; nothing is committed."""
    admin, gateway, _ = cluster(make_group(), topics={"orders": [FakeLeader(0, 9, errno=6)]})
    with pytest.raises(NotLeaderOrFollower, match="orders-0"):
        admin.reset_offsets("billing", ["orders"], to="earliest")
    assert "commit_offsets" not in gateway.methods()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [({}, ValueError, "exactly one of to= .* got neither"),
     ({"to": "earliest", "shift_by": 1}, ValueError, "got both"),
     ({"to": "beginning"}, ValueError, "'beginning' is unknown: give 'earliest'"),
     ({"to": True}, TypeError, "to must be"),
     ({"to": -3}, ValueError, "negative"),
     ({"to": 2.5}, TypeError, "to must be"),
     ({"to": date(2024, 1, 1)}, TypeError, "a date alone is not a datetime"),
     ({"shift_by": True}, TypeError, "shift_by must be an int"),
     ({"to": 1, "topics": "orders"}, TypeError, "wrap a single one in a list"),
     ({"to": 1, "topics": []}, ValueError, "topics is empty"),
     ({"to": 1, "topics": [""]}, TypeError, "non-empty string"),
     ({"to": 1, "partitions": TP("orders", 0)}, TypeError, "wrap a single one in a list"),
     ({"to": 1, "partitions": [TP("orders", -1)]}, ValueError, "negative partition"),
     ({"to": 1, "partitions": [("orders", True)]}, TypeError, "is not a partition")],
)  # fmt: skip
def test_reset_argument_errors_say_how_to_fix_them_before_sending(kwargs, error, message):
    """Each bad argument raises TypeError or ValueError saying how to fix it; nothing is sent."""
    admin, gateway, _ = cluster(make_group())
    with pytest.raises(error, match=message):
        admin.reset_offsets("billing", **kwargs)
    assert gateway.sent == []
