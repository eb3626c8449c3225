"""Adds waiting at a transaction coordinator: taken together by producer identity, each
answered once, and gone from the waiting list when answered or abandoned."""

from __future__ import annotations

import asyncio

import pytest

from rafka.actors.transaction_adds import WaitingAdds, partitions_of, resolve
from rafka.errors import ProducerFenced


def test_adds_of_one_identity_are_taken_together_and_others_stay():
    async def scenario():
        waiting = WaitingAdds()
        a = waiting.join("etl", (7, 2), [("orders", 0)])
        b = waiting.join("etl", (7, 2), [["orders", 1], ["audit", 0]])
        stale = waiting.join("etl", (7, 1), [("orders", 2)])
        other_id = waiting.join("billing", (7, 2), [("orders", 0)])
        taken = waiting.take("etl", (7, 2))
        assert taken == [a, b]
        assert partitions_of(taken) == [("audit", 0), ("orders", 0), ("orders", 1)]
        assert waiting.waiting("etl") == 1 and waiting.take("etl", (7, 1)) == [stale]
        assert waiting.waiting("etl") == 0 and waiting.waiting("billing") == 1
        assert waiting.take("billing", (7, 2)) == [other_id]

    asyncio.run(scenario())


def test_every_add_taken_is_answered_once_with_the_decisions_outcome():
    async def scenario():
        waiting = WaitingAdds()
        a = waiting.join("etl", (7, 2), [("orders", 0)])
        b = waiting.join("etl", (7, 2), [("orders", 1)])
        refusal = ProducerFenced("fenced")
        resolve([a, b], refusal)
        resolve([a, b], None)  # a second outcome changes nothing
        for add in (a, b):
            with pytest.raises(ProducerFenced):
                await add.done
        c = waiting.join("etl", (7, 3), [("orders", 0)])
        resolve(waiting.take("etl", (7, 3)), None)
        assert await c.done is None

    asyncio.run(scenario())


def test_an_add_that_leaves_is_no_longer_taken():
    async def scenario():
        waiting = WaitingAdds()
        a = waiting.join("etl", (7, 2), [("orders", 0)])
        waiting.leave("etl", a)
        waiting.leave("etl", a)  # twice is harmless
        assert waiting.take("etl", (7, 2)) == [] and waiting.waiting("etl") == 0

    asyncio.run(scenario())
