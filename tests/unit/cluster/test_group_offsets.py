"""Committed offsets against the log they are written to: commits in flight, offset expiry
and group deletion. The coordinator writes to __consumer_offsets in order (FIFO) and awaits
each write; these tests play the coordinator's steps around those awaits in every order and
check that what the group holds in memory is what the log would give back."""

import itertools

import pytest

from rafka.cluster.group import CommittedOffset, Group, GroupConfig, GroupState
from rafka.errors import CoordinatorNotAvailable

from .test_group import join

RETENTION = 1_000
CONFIG = GroupConfig(min_session_timeout_ms=100, initial_rebalance_delay_ms=0,
                     offsets_retention_ms=RETENTION)  # fmt: skip
LATER = 10 * RETENTION  # past retention of everything committed at 0


def committed(offset: int, now: int = 0) -> CommittedOffset:
    return CommittedOffset(offset, 0, "", now)


def old_group(*partitions: int) -> Group:
    """An empty group holding offset 5 of each partition of topic t, committed at 0."""
    group = Group("g", CONFIG, 0)
    group.commit({("t", p): committed(5) for p in partitions})
    return group


# -- the decisions -------------------------------------------------------------------------------


def test_expiry_skips_a_partition_whose_commit_is_being_written():
    """An offset due to expire is kept while a new commit of its partition is in flight."""
    group = old_group(0, 1)
    commit = group.begin_commit({("t", 0): committed(9, LATER)})
    assert set(group.expired_offsets(LATER)) == {("t", 1)}
    group.end_commit(commit, written=True)
    assert group.offsets[("t", 0)].offset == 9


def test_expiry_deletes_only_offsets_unchanged_since_it_decided():
    """A commit written while the expiry's tombstones were being written stays."""
    group = old_group(0, 1)
    expired = group.expired_offsets(LATER)
    assert set(expired) == {("t", 0), ("t", 1)}
    commit = group.begin_commit({("t", 0): committed(9, LATER)})
    group.end_commit(commit, written=True)
    assert group.delete_expired_offsets(expired) == [("t", 1)]
    assert group.offsets == {("t", 0): committed(9, LATER)}


def test_a_failed_commit_write_changes_nothing():
    """A commit whose write failed is not applied and no longer counts as in flight."""
    group = old_group(0)
    commit = group.begin_commit({("t", 0): committed(9, LATER)})
    group.end_commit(commit, written=False)
    assert group.offsets == {("t", 0): committed(5)}
    assert set(group.expired_offsets(LATER)) == {("t", 0)}


def test_deletion_tombstones_the_commits_still_being_written():
    """Deleting a group covers its committed partitions and those of commits in flight
    (their records are written before the tombstones, so the tombstones win)."""
    group = old_group(0)
    group.begin_commit({("t", 1): committed(9)})
    group.mark_dead(10)
    assert group.offsets_to_delete() == {("t", 0), ("t", 1)}


def test_a_group_being_deleted_refuses_joins_and_commits_with_a_retriable_error():
    """While its deletion is written, a group answers joins and commits with
    CoordinatorNotAvailable, a retriable error: retried after the deletion, they find a
    new group (or the old one, if the deletion failed)."""
    group = old_group(0)
    group.mark_dead(10)
    with pytest.raises(CoordinatorNotAvailable, match="being removed; retry") as refused:
        join(group, now=20)
    assert refused.value.retriable
    with pytest.raises(CoordinatorNotAvailable, match="being removed; retry"):
        group.check_commit("", None, -1, {("t", 0): committed(7)}, outside_group=True)


def test_a_group_whose_deletion_failed_is_back_with_its_offsets():
    """Nothing was deleted: the same group is Empty again, with its offsets and a commit
    that was in flight and written meanwhile, and accepts joins."""
    group = old_group(0)
    commit = group.begin_commit({("t", 1): committed(9)})
    group.mark_dead(10)
    group.end_commit(commit, written=True)
    group.revive(20)
    assert group.state == GroupState.EMPTY
    assert group.offsets == {("t", 0): committed(5), ("t", 1): committed(9)}
    member = join(group, now=30)[0]
    assert member in group.members


def test_a_group_is_forgotten_only_when_it_holds_nothing():
    """Expiry drops a group from memory only when it is empty, has no offsets and no
    commit in flight."""
    group = old_group(0)
    group.delete_expired_offsets(group.expired_offsets(LATER))
    commit = group.begin_commit({("t", 0): committed(9, LATER)})
    assert not group.is_forgettable
    group.end_commit(commit, written=False)
    assert group.is_forgettable


# -- every interleaving --------------------------------------------------------------------------


class Shard:
    """The coordinator's state around one group id: the group it serves (None once
    forgotten or deleted) and the log, a FIFO of (partition, offset or None) records."""

    def __init__(self) -> None:
        self.group: Group | None = old_group(0, 1)
        self.log: list = [(tp, c) for tp, c in self.group.offsets.items()]

    def serve(self) -> Group:
        if self.group is None:  # as the coordinator: a commit to an unknown group makes it
            self.group = Group("g", CONFIG, LATER)
        return self.group

    def replay(self) -> dict:
        out: dict = {}
        for tp, c in self.log:
            if c is None:
                out.pop(tp, None)
            else:
                out[tp] = c
        return out


def commit_op(shard: Shard, partition: int, offset: int):
    """GroupCoordinator.commit_offsets from outside the group, as steps."""
    group = shard.serve()
    offsets = {("t", partition): committed(offset, LATER)}
    try:
        group.check_commit("", None, -1, offsets, outside_group=True)
    except CoordinatorNotAvailable:
        return
    commit = group.begin_commit(offsets)
    written = yield list(offsets.items())
    group.end_commit(commit, written)


def expire_op(shard: Shard):
    """GroupCoordinator._expire_offsets for the group, as steps."""
    group = shard.group
    if group is None:
        return
    expired = group.expired_offsets(LATER + 1)
    if not expired:
        return
    written = yield [(tp, None) for tp in expired]
    if not written:
        return
    group.delete_expired_offsets(expired)
    if group.is_forgettable and shard.group is group:
        group.mark_dead(LATER + 1)
        shard.group = None


def delete_op(shard: Shard):
    """GroupCoordinator.delete_group, as steps."""
    group = shard.group
    if group is None or group.state == GroupState.DEAD:
        return
    group.mark_dead(LATER)
    written = yield [(tp, None) for tp in group.offsets_to_delete()]
    if not written:
        group.revive(LATER)
    elif shard.group is group:
        shard.group = None


def schedules(n: int, resume_in_order: bool):
    """Every order of events of ``n`` operations: ("start", i) runs operation i up to its
    write; ("land",) ends the earliest write not ended (the log appends in order, FIFO);
    ("resume", i) runs operation i on from its ended write: at once (``resume_in_order``,
    as the coordinator's writer does) or at any later point."""

    def extend(events, started, landed, resumed):
        if len(resumed) == n:
            yield tuple(events)
            return
        for i in range(n):
            if i not in started:
                yield from extend(events + [("start", i)], started + [i], landed, resumed)
        if len(landed) < len(started):
            i = started[len(landed)]
            if resume_in_order:
                yield from extend(events + [("land",), ("resume", i)], started, landed + [i],
                                  resumed | {i})  # fmt: skip
            else:
                yield from extend(events + [("land",)], started, landed + [i], resumed)
        if not resume_in_order:
            for i in landed:
                if i not in resumed:
                    yield from extend(events + [("resume", i)], started, landed,
                                      resumed | {i})  # fmt: skip

    yield from extend([], [], [], frozenset())


OPERATIONS = ["commit t-0", "expiry", "commit t-1", "deletion"]


def run(events: tuple, landed: tuple[bool, ...]) -> Shard:
    """Play ``events`` (see ``schedules``) over ``OPERATIONS``; the write of operation i
    lands if ``landed[i]``, else fails. Operations refused, or with nothing to write, end
    at their start, and the events naming their write do nothing."""
    shard = Shard()
    makers = [lambda: commit_op(shard, 0, 7), lambda: expire_op(shard),
              lambda: commit_op(shard, 1, 8), lambda: delete_op(shard)]  # fmt: skip
    writing: list = []  # (index, its records), in write order
    ended: dict = {}  # index -> operation waiting to be resumed
    running: dict = {}
    for event in events:
        if event[0] == "start":
            op = running[event[1]] = makers[event[1]]()
            try:
                writing.append((event[1], next(op)))
            except StopIteration:
                pass
        elif event[0] == "land" and writing:
            index, records = writing.pop(0)
            if landed[index]:
                shard.log.extend(records)
            ended[index] = running[index]
        elif event[0] == "resume" and event[1] in ended:
            with pytest.raises(StopIteration):
                ended.pop(event[1]).send(landed[event[1]])
    return shard


def agree(shard: Shard) -> bool:
    memory = {} if shard.group is None else dict(shard.group.offsets)
    return memory == shard.replay()


@pytest.mark.parametrize("landed", list(itertools.product([True, False], repeat=4)))
def test_memory_and_the_log_agree_after_any_interleaving_of_commits_expiry_and_deletion(
    landed,
):
    """Two commits, an offset expiry and a group deletion, interleaved in every order the
    coordinator allows, their writes landing or failing: the offsets it holds afterwards
    are those the log gives back on a reload."""
    for events in schedules(4, resume_in_order=True):
        assert agree(run(events, landed)), events


def test_memory_and_the_log_agree_however_late_an_operation_resumes_after_its_write():
    """The same with every write landing and each operation resumed at any point after
    its write ended, not only in write order: the group does not rely on the order in
    which the coordinator's awaits return."""
    for events in schedules(4, resume_in_order=False):
        assert agree(run(events, (True,) * 4)), events
