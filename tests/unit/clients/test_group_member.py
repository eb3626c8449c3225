"""The member side of the group protocol (``GroupMember`` with the consumer's hooks), against
the real group state machine on a fake coordinator and an injected clock: state transitions,
errors in listeners and assignors, answers that never come or come late, lost membership,
and commits. No Ray, no threads (the heartbeat thread's round is called directly)."""

from __future__ import annotations

import pytest

from rafka.clients.group_rebalance import JOINING, STABLE, SYNCING, UNJOINED
from rafka.clients.rebalance_listener import ConsumerRebalanceListener
from rafka.errors import (
    CommitFailed,
    FencedInstanceId,
    IllegalState,
    RafkaError,
    RequestTimedOut,
)
from rafka.types import TopicPartition
from tests.unit.clients.group_fakes import (
    Clock,
    FakeConsumer,
    FakeCoordinator,
    FakeGateway,
    FakeMetadata,
)


def tps(*numbers: int, topic: str = "t") -> set:
    return {TopicPartition(topic, p) for p in numbers}


class Listener(ConsumerRebalanceListener):
    """Records events; ``on_revoked``/``on_assigned`` (callables) run inside the callbacks."""

    def __init__(self, consumer=None) -> None:
        self.consumer = consumer
        self.events: list[tuple[str, set]] = []
        self.on_revoked = self.on_assigned = None

    def on_partitions_revoked(self, revoked: set) -> None:
        self.events.append(("revoked", set(revoked)))
        if self.on_revoked:
            self.on_revoked(revoked)

    def on_partitions_assigned(self, assigned: set) -> None:
        self.events.append(("assigned", set(assigned)))
        if self.on_assigned:
            self.on_assigned(assigned)

    def on_partitions_lost(self, lost: set) -> None:
        self.events.append(("lost", set(lost)))


class World:
    def __init__(self, topics=None, **settings) -> None:
        self.clock = Clock()
        self.coordinator = FakeCoordinator(self.clock)
        self.gateway = FakeGateway(self.coordinator)
        self.metadata = FakeMetadata(dict(topics or {"t": 4}))
        self.settings = settings
        self.consumers: list[FakeConsumer] = []

    def add(self, topics=None, **settings) -> FakeConsumer:
        merged = {**self.settings, **settings}
        consumer = FakeConsumer(self.gateway, self.metadata, self.clock,
                                client=f"c{len(self.consumers)}", **merged)  # fmt: skip
        consumer.listener = Listener(consumer)
        consumer.subscribe(list(topics or self.metadata.topics), listener=consumer.listener)
        self.consumers.append(consumer)
        return consumer

    def step(self, seconds: float = 0.1, polling=None) -> None:
        """Time passes; the polling consumers poll; every heartbeat thread runs a round;
        the coordinator's timer runs."""
        self.clock.now += seconds
        for c in self.consumers if polling is None else polling:
            c.poll()
        for c in self.consumers:
            c.member.heartbeat_once()
        self.coordinator.tick()
        self.check_one_owner()

    def settle(self, steps: int = 40, polling=None) -> None:
        for _ in range(steps):
            self.step(polling=polling)
            if all(c.member.stable for c in self.consumers) and self.group_stable():
                return
        raise AssertionError(f"no stable group: {[c.member.state for c in self.consumers]}")

    def group_stable(self) -> bool:
        group = self.coordinator.groups.get("g")
        return group is not None and group.state.value == "Stable"

    def check_one_owner(self) -> None:
        seen: dict = {}
        for c in self.consumers:
            for tp in c.assignment_set():
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member.client_id}"
                seen[tp] = c.member.client_id

    def owned(self) -> set:
        return set().union(*(c.assignment_set() for c in self.consumers))


def _assignment_set(self) -> set:
    return set(self._partitions)


FakeConsumer.assignment_set = _assignment_set


# -- transitions -------------------------------------------------------------------------------


def test_a_member_goes_unjoined_joining_syncing_stable_and_owns_every_partition():
    """One poll sends the join; the answers move it to SYNCING and STABLE."""
    world = World()
    world.coordinator.held = {"sync_group"}
    c = world.add()
    assert c.member.state == UNJOINED
    c.poll()
    assert c.member.state == SYNCING and c.member.generation == 1
    world.coordinator.held = set()
    world.coordinator.release()
    c.poll()
    assert c.member.state == STABLE and c.assignment_set() == tps(0, 1, 2, 3)
    assert c.listener.events == [("assigned", tps(0, 1, 2, 3))]


def test_a_join_held_by_the_coordinator_leaves_the_member_joining():
    world = World()
    world.coordinator.held = {"join_group"}
    c = world.add()
    c.poll()
    assert c.member.state == JOINING and c.member.pending_ref() is not None


def test_cooperative_members_share_partitions_with_one_owner_at_every_step():
    """Three members join one by one; each step has at most one owner per partition, and
    the group ends balanced."""
    world = World()
    for _ in range(3):
        world.add()
        world.settle()
    assert sorted(len(c.assignment_set()) for c in world.consumers) == [1, 1, 2]
    assert world.owned() == tps(0, 1, 2, 3)


# -- errors finish the state change first ------------------------------------------------------


def test_a_commit_in_on_partitions_revoked_succeeds_in_a_cooperative_rebalance():
    """Kafka's documented pattern: commit what is given up, in on_partitions_revoked. The
    commit names the new generation while the partitions are outside the new assignment."""
    world = World()
    a = world.add()
    world.settle()
    a.read(5)
    committed_errors = []

    def commit(revoked):
        try:
            a.commit({tp: a._partitions[tp].position for tp in revoked})
        except RafkaError as e:
            committed_errors.append(e)

    a.listener.on_revoked = commit
    world.add()
    world.settle()
    assert committed_errors == []
    revoked = a.listener.events[1][1]
    group = world.coordinator.groups["g"]
    assert {tp: group.offsets[(tp.topic, tp.partition)].offset for tp in revoked} == {
        tp: 5 for tp in revoked
    }


def test_an_error_in_on_partitions_revoked_still_finishes_the_rebalance():
    """The listener's error reaches the caller, after the member gave the partitions up,
    became STABLE and asked for the follow-up rebalance: it never stays mid-rebalance."""
    world = World()
    a = world.add()
    world.settle()

    def fail(revoked):
        raise ValueError("listener bug")

    a.listener.on_revoked = fail
    b = world.add()
    with pytest.raises(ValueError, match="listener bug"):
        world.settle()
    assert a.member.state in (STABLE, JOINING, SYNCING)
    a.listener.on_revoked = None
    world.settle()
    assert len(a.assignment_set()) == 2 and len(b.assignment_set()) == 2


def test_an_error_in_on_partitions_assigned_leaves_the_member_stable_and_is_raised_once():
    world = World()
    a = world.add()
    a.listener.on_assigned = lambda assigned: (_ for _ in ()).throw(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        world.settle()
    assert a.member.state == STABLE and a.assignment_set() == tps(0, 1, 2, 3)
    a.listener.on_assigned = None
    world.settle()  # nothing more raised; heartbeats go on
    assert a.member.stable


def test_an_assignor_timeout_makes_the_leader_rejoin_and_the_group_completes():
    """A metadata call that times out while the leader assigns (a controller failover): the
    leader rejoins and assigns again; the group is not left waiting."""
    world = World()
    failures = [RequestTimedOut("metadata did not answer in time")]
    world.metadata.fail = lambda: failures.pop() if failures else None
    a = world.add()
    a.poll()
    assert a.member.state == UNJOINED and a.member._rejoin_needed
    world.settle()
    assert a.assignment_set() == tps(0, 1, 2, 3)


def test_an_assignor_bug_is_raised_from_poll_and_the_member_does_not_hang():
    world = World()
    failures = [ZeroDivisionError("assignor bug")]
    world.metadata.fail = lambda: failures.pop() if failures else None
    a = world.add()
    with pytest.raises(ZeroDivisionError):
        a.poll()
    assert a.member.state == UNJOINED and a.member._rejoin_needed
    world.settle()
    assert a.member.stable


def test_a_custom_cooperative_assignor_that_moves_a_partition_in_one_round_is_refused():
    from rafka.clients.assignors import CooperativeStickyAssignor

    class Mover(CooperativeStickyAssignor):
        name = "mover"

        def _assign(self, group):
            first = group.order[-1]  # everything to the newest member
            return {m: (group.partitions() if m == first else []) for m in group.order}

    world = World(strategy=[Mover()])
    a = world.add()
    world.settle()
    world.add()
    with pytest.raises(IllegalState, match="moved"):
        for _ in range(10):
            world.step()
    world.check_one_owner()


@pytest.mark.parametrize("call, waiting", [("join_group", JOINING), ("sync_group", SYNCING)])
def test_a_join_or_sync_that_gets_no_answer_is_given_up_at_its_deadline(call, waiting):
    world = World()
    world.coordinator.lost = {call}
    a = world.add()
    a.poll()
    assert a.member.state == waiting
    world.clock.now += a.member._answer_timeout_s() + 1
    world.coordinator.lost = set()
    world.settle()
    assert a.member.stable


# -- cooperative ownership ---------------------------------------------------------------------


def test_a_topic_dropped_from_the_subscription_is_revoked_before_the_join():
    """Kafka's onJoinPrepare: partitions of topics no longer subscribed to are given up
    before the member joins, so the assignor can hand them on at once and no two members
    read them."""
    world = World(topics={"t": 2, "u": 2})
    a = world.add(topics=["t", "u"])
    world.settle()
    b = world.add(topics=["t", "u"])
    world.settle()
    dropped = sorted(a.assignment_set())[0].topic
    kept = ({"t", "u"} - {dropped}).pop()
    a_dropped = {tp for tp in a.assignment_set() if tp.topic == dropped}
    a.subscribe([kept], listener=a.listener)
    a.poll()
    assert ("revoked", a_dropped) in a.listener.events
    assert not {tp for tp in a.assignment_set() if tp.topic == dropped}
    world.settle()
    assert {tp for tp in b.assignment_set() if tp.topic == dropped} == tps(0, 1, topic=dropped)


# -- slow members ------------------------------------------------------------------------------


def test_a_member_that_polls_less_often_than_its_session_timeout_stays_through_a_rebalance():
    """The heartbeat thread takes the join and sync answers and heartbeats meanwhile, so a
    member whose poll gap exceeds session_timeout_ms (within max_poll_interval_ms) is not
    expelled, and a slow leader does not hold the group up."""
    world = World(session_ms=1000, max_poll_ms=30_000)
    slow = world.add()
    world.settle()
    generation = world.coordinator.groups["g"].generation
    fast = world.add()
    world.step()  # the slow leader hears of the rebalance by heartbeat
    slow.poll()  # and polls once: its join goes out
    for _ in range(40):  # 4 s: four session timeouts without a poll from the slow leader
        world.step(polling=[fast])
    group = world.coordinator.groups["g"]
    assert slow.member.member_id in group.members
    assert group.state.value == "Stable" and group.generation == generation + 1
    assert slow.member.state == SYNCING  # its heartbeat thread synced; its poll applies it
    world.settle()
    assert sorted(len(c.assignment_set()) for c in world.consumers) == [2, 2]


# -- lost membership ---------------------------------------------------------------------------


def expel(world, consumer) -> None:
    """The coordinator removes ``consumer`` (its session expired) without it noticing."""
    group = world.coordinator.groups["g"]
    world.coordinator.apply(group, group.leave([(consumer.member.member_id, None)],
                                               world.clock.ms()))  # fmt: skip


def test_a_member_that_learns_from_a_failed_commit_it_was_removed_revokes_as_lost():
    """The commit fails with CommitFailed; the next join claims nothing, and the partitions
    are reported lost, not revoked."""
    world = World()
    a = world.add()
    world.settle()
    b = world.add()
    world.settle()
    expel(world, a)
    a.read(3)
    with pytest.raises(CommitFailed):
        a.commit()
    held = set(a.listener.events[-1][1]) if a.listener.events else set()
    a.poll()
    assert ("lost", held) in a.listener.events or not held
    assert not a.assignment_set() or a.member.generation > 0
    join = [args for m, args in world.coordinator.calls if m == "join_group"][-1]
    from rafka.cluster.consumer_protocol import decode_subscription

    assert decode_subscription(join[6][0][1]).owned_partitions == ()
    world.settle()
    assert world.owned() == tps(0, 1, 2, 3)
    del b


def test_an_expelled_member_cannot_commit_as_if_from_outside_the_group():
    """After its membership is reset the consumer fails the commit itself; the coordinator
    sees no commit that could rewind the next owner's progress."""
    world = World()
    a = world.add()
    world.settle()
    a.read(7)
    a.commit()
    expel(world, a)
    a.member.heartbeat_once()  # learns it is out: member id and generation reset
    assert a.member.generation == -1
    calls = len(world.coordinator.calls)
    with pytest.raises(CommitFailed, match="not in a generation"):
        a.commit({TopicPartition("t", 0): 1})
    assert not [m for m, _ in world.coordinator.calls[calls:] if m == "commit_offsets"]
    assert world.coordinator.groups["g"].offsets[("t", 0)].offset == 7


def test_a_late_commit_answer_from_an_earlier_generation_leaves_the_new_membership_alone():
    world = World()
    a = world.add()
    world.settle()
    a.read(2)
    world.coordinator.held = {"commit_offsets"}
    results = []
    a.commit(asynchronous=True, callback=lambda offsets, error: results.append(error))
    world.coordinator.held = set()
    world.add()
    world.settle()
    generation = a.member.generation
    assert generation > 1
    world.coordinator.release("commit_offsets")
    a.poll()
    assert isinstance(results[0], CommitFailed)
    assert a.member.generation == generation and a.member.stable


def test_a_member_that_stops_polling_leaves_and_reports_its_partitions_lost():
    world = World(max_poll_ms=2000)
    a = world.add()
    world.settle()
    for _ in range(25):
        world.step(polling=[])
    assert a.member.member_id == "" and "g" in world.coordinator.groups
    assert not world.coordinator.groups["g"].members
    a.poll()
    assert a.listener.events[-1] == ("lost", tps(0, 1, 2, 3))


def test_a_fenced_static_member_raises_on_every_poll_gives_up_its_partitions_and_stays_out():
    """Another process took the static member's place: the old one reports what it holds
    as lost, raises FencedInstanceId on every poll (an application that catches it cannot
    go on reading partitions the new process owns) and never rejoins."""
    world = World()
    a = world.add(instance="i-1")
    world.settle()
    held = a.assignment_set()
    b = world.add(instance="i-1")  # the same instance id: a new process takes over
    world.step(polling=[b])
    with pytest.raises(FencedInstanceId):
        for _ in range(5):
            world.step(polling=[a])
    assert not a.assignment_set() and ("lost", held) in a.listener.events
    calls = len(world.coordinator.calls)
    for _ in range(3):
        with pytest.raises(FencedInstanceId):
            a.poll()
    assert not [m for m, _ in world.coordinator.calls[calls:] if m == "join_group"]


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_an_auto_commit_that_learns_the_member_was_removed_revokes_as_lost_before_joining(
    strategy,
):
    """Kafka's onJoinPrepare commits first (auto-commit); when that commit shows the member
    is out of the group, what it holds is reported lost (not revoked, even by an eager
    member) and the join claims nothing."""
    world = World(auto_commit=True, strategy=strategy)
    a = world.add()
    world.settle()
    world.add()
    world.settle()
    held = a.assignment_set()
    a.read(3)
    expel(world, a)
    a.member.request_rejoin()  # as a heartbeat's RebalanceInProgress would
    events = len(a.listener.events)
    a.poll()
    assert a.listener.events[events] == ("lost", held)
    join = [args for m, args in world.coordinator.calls if m == "join_group"][-1]
    from rafka.cluster.consumer_protocol import decode_subscription

    assert decode_subscription(join[6][0][1]).owned_partitions == ()
    world.settle()
    assert world.owned() == tps(0, 1, 2, 3)


def test_a_member_whose_revoke_commit_shows_it_was_removed_takes_no_new_assignment():
    """The assignment is applied in the polling thread; if the commit in
    on_partitions_revoked learns the member is out of the group, the member does not become
    STABLE in the dead generation and reports what it still holds as lost."""
    world = World()
    a = world.add()
    world.settle()
    b = world.add()
    world.coordinator.held = {"sync_group"}
    for _ in range(3):
        world.step(polling=[b])  # a hears of the rebalance by heartbeat only
    a.poll()  # a rejoins; the group forms the new generation
    world.step(polling=[b])
    world.coordinator.held = set()
    world.coordinator.release()
    a.member.heartbeat_once()  # a's sync answer is taken, to be applied at its next poll
    assert a.member._synced is not None
    expel(world, a)
    failures = []

    def commit(revoked):
        try:
            a.commit({tp: 1 for tp in revoked})
        except CommitFailed as e:
            failures.append(e)

    a.listener.on_revoked = commit
    events = len(a.listener.events)
    a.poll()
    assert failures and a.member.state != STABLE
    after = [kind for kind, _ in a.listener.events[events:]]
    assert after[0] == "revoked" and "assigned" not in after, after
    assert after[-1] == "lost" or not a.assignment_set()
    a.listener.on_revoked = None
    world.settle()
    assert world.owned() == tps(0, 1, 2, 3)
    del b


def test_a_reset_between_the_join_decision_and_the_join_never_claims_partitions():
    """The heartbeat thread resets the membership while the polling thread prepares its
    join: the join claims nothing (its partitions are reported lost), so no commit of the
    stale member can rewind the new owner's progress."""
    world = World()
    a = world.add()
    b = world.add()
    world.settle()
    for _ in range(30):  # a's process stalls: its session expires, b takes everything
        world.clock.now += 0.1
        b.poll()
        b.member.heartbeat_once()
        world.coordinator.tick()
    b.read(100)
    b.commit()
    reads = {"n": 0}
    owned = a.owned

    def owned_then_reset():
        reads["n"] += 1
        if reads["n"] == 3:  # inside _start_join, after its first look at the membership
            a.member.heartbeat_once()  # UnknownMemberId: the membership is reset
        return owned()

    a.owned = owned_then_reset
    a.member.request_rejoin()
    a.poll()
    a.owned = owned
    from rafka.cluster.consumer_protocol import decode_subscription

    join = [args for m, args in world.coordinator.calls if m == "join_group"][-1]
    assert decode_subscription(join[6][0][1]).owned_partitions == ()
    assert not a.assignment_set()
    a.listener.on_revoked = lambda revoked: a.commit({tp: 7 for tp in revoked})
    world.settle()
    offsets = world.coordinator.groups["g"].offsets
    assert all(c.offset >= 100 for c in offsets.values()), offsets


def test_a_member_told_it_is_out_gives_its_partitions_up_at_once_even_during_a_backoff():
    world = World()
    a = world.add()
    world.add()
    world.settle()
    a.member._retry_at = world.clock.now + 10  # a rejoin backoff is running
    expel(world, a)
    a.member.heartbeat_once()  # learns it is out
    held = a.assignment_set()
    a.poll()
    assert not a.assignment_set() and a.listener.events[-1] == ("lost", held)


def test_a_late_rebalance_answer_to_a_heartbeat_does_not_cause_another_rebalance():
    """A heartbeat's RebalanceInProgress handled after the member already rejoined asks for
    no second rejoin (Kafka asks only in STABLE)."""
    world = World()
    a = world.add()
    world.settle()
    start = world.coordinator.groups["g"].generation
    world.coordinator.held = {"heartbeat"}
    a.member._wake.set()
    import threading

    hb = threading.Thread(target=a.member.heartbeat_once)
    hb.start()  # its heartbeat waits at the coordinator
    world.add().poll()  # a new member: the group prepares a rebalance
    a.member.request_rejoin()
    a.poll()  # a rejoins before hearing the heartbeat's answer
    world.coordinator.release("heartbeat")
    world.coordinator.held = set()
    hb.join(5)
    for _ in range(40):
        world.step()
    assert world.coordinator.groups["g"].generation - start <= 2  # join + cooperative follow-up
    assert a.member.stable


def test_close_stops_the_heartbeat_thread_before_leaving_so_no_member_is_left_behind():
    world = World()
    a = world.add()
    world.coordinator.held = {"join_group"}
    a.poll()  # the join waits at the coordinator
    world.coordinator.held = set()
    world.coordinator.release("join_group")  # answered; nobody has taken the answer yet
    a.close()
    group = world.coordinator.groups["g"]
    world.step(polling=[])
    assert not group.members or a.member is None


def test_poll_from_a_rebalance_listener_is_refused_rather_than_deadlocking():
    world = World()
    a = world.add()
    errors = []

    def nested(assigned):
        try:
            a.member.poll()
        except IllegalState as e:
            errors.append(e)

    a.listener.on_assigned = nested
    world.settle()
    assert errors and "listener" in str(errors[0])


def test_closing_a_member_that_is_out_of_the_group_reports_its_partitions_lost():
    """Kafka's onLeavePrepare: a consumer closed after it learned it is out of the group
    calls on_partitions_lost, not on_partitions_revoked, and commits nothing."""
    world = World()
    a = world.add()
    world.settle()
    held = a.assignment_set()
    expel(world, a)
    a.member.heartbeat_once()  # learns it is out
    a.unsubscribe()
    assert a.listener.events[-1] == ("lost", held)


def test_auto_commit_commits_what_a_cooperative_member_gives_up_before_it_goes():
    world = World(auto_commit=True)
    a = world.add()
    world.settle()
    a.read(15)
    world.add()
    world.settle()
    revoked = next(s for kind, s in a.listener.events if kind == "revoked")
    offsets = world.coordinator.groups["g"].offsets
    assert {offsets[(tp.topic, tp.partition)].offset for tp in revoked} == {15}


def test_a_commit_made_while_the_members_join_answer_waits_is_made_in_the_new_generation():
    """The group moved on to the generation the member's own join formed, but the member has
    not taken the answer yet: its commit in the old generation is refused; the member takes
    the answer and commits again, and is not reset (nothing is reported lost)."""
    world = World()
    a = world.add()
    b = world.add()
    world.settle()
    a.read(4)
    c = world.add()
    c.poll()  # a new member: the group prepares a rebalance
    world.coordinator.held = {"join_group"}
    for m in (a, b):
        m.member.heartbeat_once()  # RebalanceInProgress: a rejoin is due
        m.poll()  # the join goes out (held)
    world.coordinator.held = set()
    world.coordinator.release("join_group")  # the join phase completes; nobody took answers
    for m in (b, c):
        m.poll()
        m.member.heartbeat_once()
    before = a.member.generation
    a.commit()
    assert a.member.generation > before and not a.member._lost
    assert not [kind for kind, _ in a.listener.events if kind == "lost"]
    offsets = world.coordinator.groups["g"].offsets
    assert {offsets[(tp.topic, tp.partition)].offset for tp in a.assignment_set()} == {4}


@pytest.mark.parametrize("leave", ["unsubscribe", "close"])
def test_a_listener_may_close_or_unsubscribe_its_consumer(leave):
    world = World()
    a = world.add()
    done = []

    def go(assigned):
        getattr(a, leave)() if leave == "unsubscribe" else a.member.close()
        done.append(leave)

    a.listener.on_assigned = go
    for _ in range(5):
        if not done:
            a.poll()
    assert done == [leave]


def test_an_async_commit_callback_that_reads_a_position_runs_once():
    world = World()
    c = world.add()
    world.settle()
    partition = next(iter(tps(0)))
    c.read(3)
    calls = []

    def callback(offsets, error):
        calls.append(error)
        if c._partitions[partition].position is None:
            c._resolve_positions()  # what Consumer.position() does

    world.coordinator.hold_writes = True
    c.commit(asynchronous=True, callback=callback)
    c._partitions[partition].position = None  # handed back meanwhile: to be resolved
    world.coordinator.hold_writes = False
    world.coordinator.finish_writes()
    c.member.poll()
    assert calls == [None]


@pytest.mark.parametrize("static", [False, True])
def test_a_subscribed_topic_created_after_the_assignment_gets_assigned(static):
    """The leader notes subscribed topics that do not exist yet as empty, so it rebalances
    once they do; a static leader that took over while the topic was created too."""
    world = World(topics={"t": 2}, metadata_max_age_ms=1000)
    if not static:
        world.add(topics=["t", "u"])
        world.settle()
        world.metadata.topics["u"] = 2
    else:
        c0 = world.add(topics=["t", "u"], instance="i0")
        c1 = world.add(topics=["t", "u"], instance="i1")
        world.settle()
        old = c0 if c0.member.member_id == world.coordinator.groups["g"].leader_id else c1
        world.consumers.remove(old)  # the leader's process dies without a word
        world.metadata.topics["u"] = 2
        world.add(topics=["t", "u"], instance=old.member.group_instance_id)
    for _ in range(60):
        world.step()
    assert world.owned() == tps(0, 1) | tps(0, 1, topic="u")


def test_an_assignor_naming_ids_outside_the_group_is_trimmed_so_the_group_settles():
    from rafka.clients.assignors import RangeAssignor

    class Extra(RangeAssignor):
        name = "extra"

        def assign(self, counts, subscriptions):
            return {**super().assign(counts, subscriptions), "departed-member": []}

    world = World(strategy=[Extra()])
    world.add()
    world.add()
    world.settle()
    assert world.owned() == tps(0, 1, 2, 3)
