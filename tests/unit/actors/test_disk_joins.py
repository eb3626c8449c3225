"""A disk node that joins gets a node agent started by the controller, once; a disk whose
agent exists (running, or waiting for its node) is left alone; nothing starts while the
services stop; a disk whose node is up but whose broker stays unheard gets its agent
restarted. Fakes stand for Ray's node table and actors."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from rafka.actors.disk_joins import AGENT_STUCK_S, DiskJoins


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def joins(live: list[str], with_agent: set[str], heard: set[int] | None = None,
          clock: Clock | None = None, retired: dict[int, str] | None = None,
          ) -> tuple[DiskJoins, list[str]]:  # fmt: skip
    """A DiskJoins over fakes; disk ``dN`` is broker N, heard while in ``heard`` (default:
    every broker). ``started`` lists the agents started, then ("restart", disk) entries."""
    started: list = []

    def start(disk: str) -> None:
        started.append(disk)
        with_agent.add(disk)

    image = SimpleNamespace(broker_for_disk=lambda disk: SimpleNamespace(broker_id=int(disk[1:])),
                            retired_brokers=retired or {})  # fmt: skip
    liveness = SimpleNamespace(is_live=lambda b: heard is None or b in heard)
    core = SimpleNamespace(stopping=False, logger=logging.getLogger("test"), image=image,
                           liveness=liveness)  # fmt: skip
    part = DiskJoins(core, lambda: list(live), lambda d: d in with_agent, start,
                     lambda disk: started.append(("restart", disk)), clock or Clock())
    return part, started


def test_a_disk_that_joins_gets_an_agent_once():
    live, agents = ["d1", "d2"], {"d1", "d2"}
    part, started = joins(live, agents)
    assert asyncio.run(part.check()) == []
    live.append("d3")
    assert asyncio.run(part.check()) == ["d3"]
    assert asyncio.run(part.check()) == [] and started == ["d3"]


def test_nothing_starts_while_the_services_stop():
    part, started = joins(["d1", "d9"], {"d1"})
    part.core.stopping = True
    assert asyncio.run(part.check()) == [] and started == []
    part.core.stopping = False
    assert asyncio.run(part.check()) == ["d9"]


def test_a_live_disks_broker_unheard_for_long_gets_its_agent_restarted_once_per_wait():
    clock, heard = Clock(), {1}
    part, events = joins(["d1", "d2"], {"d1", "d2"}, heard, clock)
    asyncio.run(part.check())
    clock.now += AGENT_STUCK_S - 1
    asyncio.run(part.check())
    assert events == []  # not yet: it may still be starting
    clock.now += 2
    asyncio.run(part.check())
    assert events == [("restart", "d2")]
    clock.now += 5
    asyncio.run(part.check())
    assert events == [("restart", "d2")]  # the next restart waits a whole wait again
    heard.add(2)
    clock.now += AGENT_STUCK_S
    asyncio.run(part.check())
    assert events == [("restart", "d2")]


def test_a_disk_whose_node_is_down_is_not_restarted():
    clock = Clock()
    live = ["d1", "d2"]
    part, events = joins(live, {"d1", "d2"}, {1}, clock)
    asyncio.run(part.check())
    live.remove("d2")  # its node went down: Ray restarts the agent when it is back
    clock.now += 2 * AGENT_STUCK_S
    asyncio.run(part.check())
    assert events == []


def test_the_node_of_a_retired_disk_gets_no_agent_while_it_lives_on():
    live, agents = ["d1", "d2"], {"d1"}
    part, started = joins(live, agents, retired={2: "d2"})
    assert asyncio.run(part.check()) == [] and started == []
