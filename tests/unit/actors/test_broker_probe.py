"""A silent broker is probed before it is fenced: a probe that gets no answer fences it,
unless the controller itself got no CPU while it waited (then the timeout says nothing of
the broker, and the broker stays live until it is probed again)."""

from __future__ import annotations

import asyncio
import time

from tests.unit.actors.controller_fakes import ControllerProcess, node_of, Registry

SILENT = 1


async def start(tmp_path) -> ControllerProcess:
    registry = Registry()
    process = ControllerProcess(str(tmp_path / "controller"), registry, [])
    for i, disk in enumerate(["d0", "d1", "d2"]):
        broker_id, _ = await process.brokers.heartbeat(disk, None, None, node_of(i))
        registry.add_agent(broker_id, disk)
    # Broker SILENT last spoke two sessions ago: a suspect.
    process.core.liveness.last_heartbeat_ms[SILENT] -= 2 * process.core.liveness.session_timeout_ms
    return process


def probe_with(process: ControllerProcess, ping) -> None:
    process.calls.ping_agent = ping
    return process.brokers._probe(SILENT)


def test_a_probe_without_an_answer_fences_the_silent_broker(tmp_path):
    async def main():
        process = await start(tmp_path)

        async def unanswered(broker_id: int, timeout_s: float) -> bool:
            await asyncio.sleep(timeout_s)
            return False

        await probe_with(process, unanswered)
        assert process.core.fencings == 1
        assert SILENT not in process.core.liveness.live()
        process.store.close()

    asyncio.run(main())


def test_a_probe_that_timed_out_while_the_controller_was_starved_fences_nobody(tmp_path):
    async def main():
        process = await start(tmp_path)

        async def starved(broker_id: int, timeout_s: float) -> bool:
            time.sleep(timeout_s + 0.3)  # this process got no CPU: the answer was not read
            return False

        await probe_with(process, starved)
        assert process.core.fencings == 0
        assert SILENT in process.core.liveness.live()
        process.store.close()

    asyncio.run(main())


def test_the_agents_heartbeats_and_probe_answers_run_on_their_own_event_loop():
    """Work on the agent's main loop (starting host actors waits on Ray's GCS) cannot
    delay a heartbeat or the answer to a probe: both run in the liveness group, which the
    agent actor is created with."""
    from rafka.actors.node_agent import CONCURRENCY_GROUPS, LIVENESS_GROUP, NodeAgent

    assert LIVENESS_GROUP in CONCURRENCY_GROUPS
    for method in (NodeAgent.ping, NodeAgent.start_heartbeats):
        assert getattr(method, "__ray_concurrency_group__", None) == LIVENESS_GROUP
