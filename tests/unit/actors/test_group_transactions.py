"""TxnOffsetCommit at the group coordinator: which groups take offsets into a producer's
transaction, checked as Kafka's group coordinator checks transactional commits."""

from __future__ import annotations

import asyncio

from rafka.actors.group_transactions import GroupTransactionsMixin
from rafka.cluster.group import Group
from rafka.cluster.transactional_offsets import PendingOffsets
from rafka.errors import IllegalGeneration

from ..cluster.test_group import CONFIG, stable_group


class FakeVerifier:
    """Every transaction is ongoing and holds the offsets partition."""

    async def verify(self, *args):
        return None


class FakeLog:
    def __init__(self) -> None:
        self.written: list = []

    async def write(self, records) -> None:
        self.written.append(list(records))


class Shard(GroupTransactionsMixin):
    """The fields GroupCoordinator gives the mixin, over one group."""

    def __init__(self, group: Group) -> None:
        self.shard = 0
        self.groups = {group.group_id: group}
        self.log = FakeLog()
        self.pending = PendingOffsets()
        self._resolving = asyncio.Lock()
        self._verifier = FakeVerifier()

    async def _until_loaded(self) -> None:
        return None

    def _group(self, group_id: str, create: bool) -> Group:
        return self.groups.setdefault(group_id, Group(group_id, CONFIG, 0))


def commit(shard: Shard, member_id: str, generation: int):
    return asyncio.run(shard.commit_offsets_in_transaction(
        "tx", 7, 0, "g", member_id, None, generation, {("t", 0): (10, -1, "")}))  # fmt: skip


def test_a_commit_naming_only_the_group_joins_the_transaction_while_the_group_has_members():
    """TxnOffsetCommit v0-2, or a producer given just the group id: member "" and
    generation -1 are accepted by a group with members, as Kafka accepts them."""
    group, _ = stable_group(2)
    shard = Shard(group)
    assert commit(shard, "", -1) is None
    assert len(shard.log.written) == 1
    assert shard.pending.by_producer[7][("g", ("t", 0))]


def test_a_member_s_transactional_commit_of_an_older_generation_is_refused():
    """KIP-447: a commit naming its member and generation is checked as the member's, so a
    zombie of an older generation cannot add offsets."""
    group, (a, _) = stable_group(2)
    shard = Shard(group)
    assert isinstance(commit(shard, a, 0), IllegalGeneration)
    assert commit(shard, a, 1) is None
