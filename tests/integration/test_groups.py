"""Consumer groups on a real local cluster: assignment, failover of members, cooperative
rebalancing, max_poll_interval_ms, coordinator restarts, static members, patterns."""

from __future__ import annotations

import time
import uuid

import pytest
import ray
from ray import cloudpickle

from rafka import TopicPartition
from rafka.actors.local_cluster import wait_for
from rafka.errors import CommitFailed, GroupIdNotFound, NonEmptyGroup
from tests.integration import group_members
from tests.integration.group_members import Member, MemberProcess, partitions

# Ray workers import this module's actors by value: tests/ is not on their path.
cloudpickle.register_pickle_by_value(group_members)

FAST = dict(session_timeout_ms=2_000, heartbeat_interval_ms=150, max_poll_interval_ms=20_000)


def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def produce(cluster, topic: str, n: int, partitions_: int) -> None:
    producer = cluster.producer(linger_ms=5)
    for i in range(n):
        producer.send(topic, value=b"%d" % i, partition=i % partitions_)
    producer.close()


def balanced(members, total: int, per_member: int):
    """Whether the members own ``per_member`` partitions each, ``total`` together, with no
    rebalance pending; a member's poll error is raised at once."""
    for m in members:
        if m.errors:
            raise m.errors[0]
    owned = [m.owned() for m in members]
    return (
        all(len(o) == per_member for o in owned)
        and len(set().union(*owned)) == total
        and all(not m.consumer._member._rejoin_needed for m in members)
    )


def test_three_consumers_of_six_partitions_get_two_each(cluster, make_topic):
    """Every partition goes to exactly one of three members, two each, and together they
    read every record once."""
    topic = make_topic(partitions=6)
    produce(cluster, topic, 600, 6)
    group = group_id()
    members = [Member(cluster, [topic], group_id=group, **FAST) for _ in range(3)]
    try:
        wait_for(lambda: balanced(members, 6, 2), 30, "two partitions per member")
        wait_for(lambda: sum(len(m.read) for m in members) >= 600, 30, "every record read")
        read = sorted(r for m in members for r in m.read)
        assert read == sorted((i % 6, i // 6) for i in range(600))
        description = cluster.admin().describe_group(group)
        assert description.state == "Stable" and len(description.members) == 3
        assert description.total_lag == 0
    finally:
        for m in members:
            m.stop()
    assert all(not m.errors for m in members), [m.errors for m in members]


def test_a_killed_member_s_partitions_move_and_resume_from_the_last_commit(cluster, make_topic):
    """A consumer process killed with no goodbye: after its session times out the others
    take its partitions and go on from its last committed offsets, skipping nothing."""
    topic = make_topic(partitions=6)
    total = 3000
    produce(cluster, topic, total, 6)
    group = group_id()
    settings = dict(group_id=group, max_poll_records=20, poll_pause_s=0.05, **FAST)
    processes = [MemberProcess.remote(cluster, topic, settings) for _ in range(3)]
    wait_for(
        lambda: [len(o) for o in ray.get([p.owned.remote() for p in processes])] == [2, 2, 2],
        60, "two partitions per process",
    )  # fmt: skip
    wait_for(lambda: all(ray.get([p.read.remote() for p in processes])), 30, "reading")
    victim, survivors = processes[0], processes[1:]
    victim_partitions = {tuple(tp) for tp in ray.get(victim.owned.remote())}
    ray.kill(victim, no_restart=True)
    killed_at = time.monotonic()
    wait_for(
        lambda: sum(len(o) for o in ray.get([p.owned.remote() for p in survivors])) == 6,
        30, "the survivors to own all six partitions",
    )  # fmt: skip
    moved_after = time.monotonic() - killed_at
    print(f"partitions of the killed member moved after {moved_after:.2f} s "
          f"(session_timeout_ms={FAST['session_timeout_ms']})")  # fmt: skip
    wait_for(
        lambda: cluster.admin().describe_group(group).total_lag == 0, 90,
        "the group to catch up",
    )  # fmt: skip
    read = {r for p in survivors for r in ray.get(p.read.remote())}
    for tp in victim_partitions:
        got = sorted(o for p, o in read if p == tp[1])
        # Everything after the victim's last commit was read again by a survivor; its
        # earlier records may be missing from the survivors' reads but not from the log.
        assert got, f"no survivor read partition {tp}"
        assert got == list(range(got[0], total // 6)), f"{tp} skipped records"
    assert all(not ray.get(p.errors.remote()) for p in survivors)
    for p in survivors:
        ray.kill(p)


def test_a_cooperative_rebalance_keeps_the_partitions_that_stay(cluster, make_topic):
    """With cooperative-sticky, a third member joining costs the first two only the
    partitions it takes; with an eager assignor every partition is revoked."""
    topic = make_topic(partitions=6)
    for strategy, everything_revoked in (("cooperative-sticky", False), ("range", True)):
        group = group_id()
        settings = dict(group_id=group, partition_assignment_strategy=[strategy], **FAST)
        first = [Member(cluster, [topic], **settings) for _ in range(2)]
        members = list(first)
        try:
            wait_for(lambda first=first: balanced(first, 6, 3), 30, "three partitions each")
            before = {id(m): m.owned() for m in first}
            for m in first:
                m.listener.events.clear()
            members.append(Member(cluster, [topic], **settings))
            wait_for(lambda ms=members: balanced(ms, 6, 2), 30, "two partitions each")
            for m in first:
                kept = before[id(m)] & m.owned()
                if everything_revoked:
                    assert m.listener.revoked() == before[id(m)]
                else:
                    assert len(kept) == 2  # sticky: each keeps two of its three
                    assert m.listener.revoked() == before[id(m)] - kept
                    assert not m.listener.revoked() & kept
        finally:
            for m in members:
                m.stop()


def test_a_member_that_stops_polling_leaves_the_group(cluster, make_topic):
    """Past max_poll_interval_ms without a poll the member leaves (its heartbeats alone do
    not keep it in); its partitions go to the other member, and when it polls again it
    hears they were lost and rejoins."""
    topic = make_topic(partitions=4)
    group = group_id()
    settings = dict(group_id=group, session_timeout_ms=5_000, heartbeat_interval_ms=150,
                    max_poll_interval_ms=1_500)  # fmt: skip
    slow, steady = Member(cluster, [topic], **settings), Member(cluster, [topic], **settings)
    try:
        wait_for(lambda: balanced([slow, steady], 4, 2), 30, "two partitions each")
        slow.paused.set()
        wait_for(lambda: len(steady.owned()) == 4, 20, "the steady member to own all four")
        assert len(cluster.admin().describe_group(group).members) == 1
        slow.paused.clear()
        wait_for(lambda: balanced([slow, steady], 4, 2), 30, "the slow member back")
        assert slow.listener.lost()
    finally:
        slow.stop()
        steady.stop()


def test_killing_the_coordinator_keeps_every_committed_offset(cluster, make_topic):
    """Offsets live in __consumer_offsets: a coordinator killed and restarted by Ray
    reads them back, and the group's members carry on."""
    topic = make_topic(partitions=3)
    produce(cluster, topic, 300, 3)
    group = group_id()
    member = Member(cluster, [topic], group_id=group, **FAST)
    try:
        wait_for(lambda: len(member.read) >= 300, 30, "every record read")
        member.paused.set()
        time.sleep(0.3)  # the last poll's commit is done
        consumer = cluster.consumer(group_id=group, enable_auto_commit=False)
        committed = consumer.committed(list(partitions(topic, 3)))
        assert {tp: c.offset for tp, c in committed.items()} == {
            tp: 100 for tp in partitions(topic, 3)
        }
        coordinator = cluster.gateway.group_coordinator(group)
        ray.kill(coordinator, no_restart=False)
        assert {
            tp: c.offset for tp, c in consumer.committed(list(partitions(topic, 3))).items()
        } == {tp: 100 for tp in partitions(topic, 3)}
        consumer.close()
        member.paused.clear()
        produce(cluster, topic, 30, 3)
        wait_for(lambda: len(member.read) >= 330, 30, "the member reading on")
        assert sorted(member.read) == sorted((i % 3, i // 3) for i in range(330))
    finally:
        member.stop()
    assert not member.errors, member.errors


def test_two_groups_read_the_same_topic_independently(cluster, make_topic):
    """Each group reads every record and keeps its own committed offsets."""
    topic = make_topic(partitions=2)
    produce(cluster, topic, 200, 2)
    a, b = group_id(), group_id()
    first = Member(cluster, [topic], group_id=a, **FAST)
    try:
        wait_for(lambda: len(first.read) >= 200, 30, "group a reading everything")
    finally:
        first.stop()
    second = Member(cluster, [topic], group_id=b, **FAST)
    try:
        wait_for(lambda: len(second.read) >= 200, 30, "group b reading everything")
    finally:
        second.stop()
    assert sorted(first.read) == sorted(second.read) == sorted(
        (i % 2, i // 2) for i in range(200)
    )
    admin = cluster.admin()
    assert admin.describe_group(a).total_lag == admin.describe_group(b).total_lag == 0
    admin.delete_group(a)
    with pytest.raises(GroupIdNotFound):
        admin.describe_group(a)
    assert admin.describe_group(b).offsets[0].committed == 100


def test_a_static_member_returns_to_its_partitions_without_a_rebalance(cluster, make_topic):
    """group_instance_id: a consumer closed and replaced within its session timeout gets the
    same partitions back in the same generation."""
    topic = make_topic(partitions=4)
    group = group_id()
    settings = dict(group_id=group, session_timeout_ms=10_000, heartbeat_interval_ms=200)
    a = Member(cluster, [topic], group_instance_id="a", **settings)
    b = Member(cluster, [topic], group_instance_id="b", **settings)
    try:
        wait_for(lambda: balanced([a, b], 4, 2), 30, "two partitions each")
        generation = cluster.admin().describe_group(group).generation
        owned_by_b = b.owned()
        b.stop()
        b = Member(cluster, [topic], group_instance_id="b", **settings)
        wait_for(lambda: b.owned() == owned_by_b, 30, "b back on its partitions")
        assert cluster.admin().describe_group(group).generation == generation
        assert not a.listener.revoked()
    finally:
        a.stop()
        b.stop()


def test_a_pattern_subscription_picks_up_new_topics_and_partitions(cluster, make_topic):
    """A regex subscription grows to topics created later, and a subscribed topic that
    gains partitions has them assigned."""
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = make_topic(partitions=1, prefix=prefix)
    group = group_id()
    consumer = cluster.consumer(group_id=group, metadata_max_age_ms=300, **FAST)
    consumer.subscribe(pattern=f"{prefix}-.*")
    try:
        wait_for(lambda: consumer.poll(50) is not None and consumer.assignment() == {
            TopicPartition(first, 0)}, 30, "the first topic")  # fmt: skip
        second = make_topic(partitions=2, prefix=prefix)
        wait_for(lambda: consumer.poll(50) is not None and len(consumer.assignment()) == 3,
                 30, "the new topic's partitions")  # fmt: skip
        cluster.admin().create_partitions(first, 2)
        wait_for(lambda: consumer.poll(50) is not None and len(consumer.assignment()) == 4,
                 30, "the new partition")  # fmt: skip
        assert consumer.subscription() == {first, second}
    finally:
        consumer.close()


def test_bad_group_calls_are_refused_and_change_nothing(cluster, make_topic):
    """A commit for a partition the member does not own, describing an unknown group and
    resetting the offsets of an active group are typed errors; no offset moves."""
    topic = make_topic(partitions=2)
    produce(cluster, topic, 20, 2)
    group = group_id()
    a = Member(cluster, [topic], group_id=group, **FAST)
    b = Member(cluster, [topic], group_id=group, **FAST)
    admin = cluster.admin()
    try:
        wait_for(lambda: balanced([a, b], 2, 1), 30, "one partition each")
        wait_for(lambda: len(a.read) + len(b.read) >= 20, 30, "every record read")
        a.paused.set()
        b.paused.set()
        time.sleep(0.3)
        before = admin.list_group_offsets(group)
        foreign = next(iter(b.owned()))
        with pytest.raises(CommitFailed, match="not assigned"):
            a.consumer.commit({foreign: 0})
        with pytest.raises(NonEmptyGroup):
            admin.reset_offsets(group, topics=[topic], to="earliest")
        assert admin.list_group_offsets(group) == before
        with pytest.raises(GroupIdNotFound, match="nope"):
            admin.describe_group(f"nope-{uuid.uuid4().hex[:6]}")
    finally:
        a.stop()
        b.stop()
    plan = admin.reset_offsets(group, topics=[topic], to="earliest")
    assert set(plan.values()) == {0}
    assert {tp: o.offset for tp, o in admin.list_group_offsets(group).items()} == plan


def test_auto_commit_commits_what_was_consumed(cluster, make_topic):
    """enable_auto_commit commits the positions of returned records on its interval and
    on close; a new member of the group starts there."""
    topic = make_topic(partitions=1)
    produce(cluster, topic, 50, 1)
    group = group_id()
    consumer = cluster.consumer(
        group_id=group, auto_offset_reset="earliest", enable_auto_commit=True,
        auto_commit_interval_ms=100, max_poll_records=30, **FAST,
    )  # fmt: skip
    consumer.subscribe([topic])
    got = wait_for(lambda: consumer.poll(200), 30, "records")
    assert len(got) == 30
    consumer.close()
    assert cluster.consumer(group_id=group).committed(TopicPartition(topic, 0)).offset == 30
    follower = cluster.consumer(group_id=group, auto_offset_reset="earliest", **FAST)
    follower.subscribe([topic])
    rest = wait_for(lambda: follower.poll(200), 30, "the rest")
    assert rest[0].offset == 30
    follower.close()


def test_the_cli_consumes_as_a_group_describes_it_and_rewinds_it(cluster, make_topic, capsys):
    """`rafka consume --group` commits what it printed, `rafka groups describe` shows no
    lag, and `rafka groups reset-offsets --execute` makes the group read everything again."""
    from rafka.cli import main

    def run(*argv: str) -> str:
        status = main([*argv, "--namespace", cluster.namespace])
        out, err = capsys.readouterr()
        assert status == 0, err
        return out

    topic = make_topic(partitions=2)
    produce(cluster, topic, 10, 2)
    group = group_id()
    consume = ("consume", topic, "--group", group, "--from-beginning", "--timeout-ms", "2000")
    assert sorted(run(*consume).split()) == sorted(str(i) for i in range(10))
    described = run("groups", "describe", group)
    rows = [line.split() for line in described.splitlines() if line.startswith(topic)]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("0", "5", "5", "0"), ("1", "5", "5", "0")]
    assert group in run("groups", "list").split()
    run("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert len(run(*consume).split()) == 10
