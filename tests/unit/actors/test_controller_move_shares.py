"""The controller tells each replica a move adds its share of ``replication.throttled.rate``:
the moves copying into its broker and out of its leader's. A second move into the same
broker reaches the first move's replica too, and a move that catches up hands its share
back. The real controller parts over a fake Ray layer (``controller_fakes``)."""

from __future__ import annotations

import asyncio

from rafka.cluster.replication_quota import SHARE_FIELD
from tests.unit.actors.controller_fakes import settle
from tests.unit.actors.test_controller_restarts import Cluster, create


def test_moves_into_one_broker_share_its_rate_and_hear_when_that_changes(tmp_path):
    """Two moves into one broker, started by separate requests, are both told 2; when one
    completes, the other is told 1 without any change to its own partition."""

    async def main():
        cluster = Cluster(str(tmp_path / "controller"))
        process = await cluster.start({"replication.throttled.rate": 1 << 20})
        a = await create(process, "a", 1, 1)
        b = await create(process, "b", 1, 1)
        on = {name: t["partitions"][0]["replicas"][0] for name, t in (("a", a), ("b", b))}
        target = next(x for x in range(4) if x not in on.values())
        replicas = cluster.registry.replicas

        await process.reassignments.reassign_partitions("a", {0: [target]})
        await settle(process)
        moving_a = replicas()[(a["topic_id"], 0, target)].state
        assert moving_a[SHARE_FIELD] == [1, 1]
        assert moving_a["settings"]["replication.throttled.rate"] == 1 << 20
        assert replicas()[(a["topic_id"], 0, on["a"])].state[SHARE_FIELD] is None  # the leader

        # A second move into the same broker, in a request of its own: both copy at half.
        await process.reassignments.reassign_partitions("b", {0: [target]})
        await settle(process)
        assert replicas()[(b["topic_id"], 0, target)].state[SHARE_FIELD][0] == 2
        assert replicas()[(a["topic_id"], 0, target)].state[SHARE_FIELD][0] == 2

        # The first copy catches up (its leader takes it into the ISR): the move completes,
        # and the second copy is told it has the broker's rate to itself again.
        p = process.image.topics[a["topic_id"]].partitions[0]
        await process.changes.alter_isr(a["topic_id"], 0, p.leader, p.leader_epoch,
                                        p.partition_epoch, p.isr + [target], None)  # fmt: skip
        await settle(process)
        assert replicas()[(b["topic_id"], 0, target)].state[SHARE_FIELD] == [1, 1]
        assert replicas()[(a["topic_id"], 0, target)].state[SHARE_FIELD] is None
        process.store.close()

    asyncio.run(main())
