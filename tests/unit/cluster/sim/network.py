"""The simulated clock and the network: the only sources of time and of message order."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable

from tests.unit.cluster.sim.config import CLIENT

if TYPE_CHECKING:
    from tests.unit.cluster.sim.broker import Broker
    from tests.unit.cluster.sim.controller import Controller
    from tests.unit.cluster.sim.runner import Simulation


class Scheduler:
    """The simulated clock and its queue of pending actions, ordered by (time, insertion
    order): the only source of time and of ordering, so one seed always runs the same way."""

    def __init__(self) -> None:
        self.now = 0
        self._queue: list = []
        self._seq = 0

    def at(self, time: int, action: Callable, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time, self._seq, action, args))

    def after(self, delay: int, action: Callable, *args) -> None:
        self.at(self.now + delay, action, *args)

    def pop(self) -> tuple[Callable, tuple]:
        time, _, action, args = heapq.heappop(self._queue)
        self.now = time
        return action, args


class Network:
    """Delivers each message after a random latency; while faults are on, a few are held back
    long enough to arrive after later ones. Nothing between live processes is lost. A message
    to a broker or the controller is bound to the process running when it is sent: it is lost if that
    process is down by then or dies before it arrives, and waits while it is stalled
    (``Simulation.deliver``); an answer is also lost if the process that answers dies before
    it arrives (``Simulation.deliver_answer``)."""

    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.rng = sim.rng
        self.cfg = sim.cfg
        self.faulty = True

    def latency(self) -> int:
        rng, cfg = self.rng, self.cfg
        if self.faulty and rng.random() < cfg.delay:
            self.sim.faults["delayed_message"] += 1
            return self.sim.uniform(*cfg.delayed_ms)
        return self.sim.uniform(*cfg.latency_ms)

    def _process(self, dst: int) -> int | None:
        if dst == CLIENT:
            return None
        node = self.sim.node(dst)
        return node.process if node.up else None

    def send(self, dst: int, kind: str, *payload) -> None:
        """A request (or a push): it arrives even if its sender dies meanwhile."""
        process = self._process(dst)
        self.sim.scheduler.after(self.latency(), self.sim.deliver, dst, process, kind, payload)

    def answer(self, src: "Broker | Controller", dst: int, kind: str, *payload) -> None:
        """The answer to a call ``src`` served: lost if ``src``'s process dies before it
        arrives (Ray then fails the call)."""
        process = self._process(dst)
        self.sim.scheduler.after(self.latency(), self.sim.deliver_answer, src.id, src.process,
                                 dst, process, kind, payload)  # fmt: skip
