"""The processes messages reach, and the network between them: the only source of message
order. Time and the queue of pending actions are the replication simulation's ``Scheduler``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.unit.cluster.txn_sim.runner import TxnSimulation


class Endpoint:
    """A process: ``up`` while it runs, ``process`` the number of its current life (a
    message is bound to the life it was sent to), ``stalled_until`` the end of a pause
    (messages wait until then). Handlers are its ``on_<kind>`` methods."""

    name = "?"

    def __init__(self) -> None:
        self.up = True
        self.process = 0
        self.stalled_until = -1


class Network:
    """Delivers each message after a random latency; while faults are on, a few are held
    back and a few are lost (the caller times out and resends). A request is bound to the
    receiver's life when it is sent: it is lost if that life is over when it arrives, and
    still arrives if its sender died meanwhile (a late message of a dead or fenced process).
    An answer is also lost if its sender's life ended before it arrives (Ray then fails the
    call). Requests on one channel (sender life to receiver life) arrive in the order they
    were sent, as Ray runs one caller's calls to an actor, unless their kind is in
    ``cfg.reorder``."""

    def __init__(self, sim: "TxnSimulation") -> None:
        self.sim = sim
        self.rng = sim.rng
        self.cfg = sim.cfg
        self.faulty = True
        self._last: dict[tuple, int] = {}  # channel -> time of its last delivery

    def latency(self) -> int:
        cfg = self.cfg
        if self.faulty and self.rng.random() < cfg.delay:
            self.sim.faults["delayed_message"] += 1
            return self.sim.uniform(*cfg.delayed_ms)
        return self.sim.uniform(*cfg.latency_ms)

    def _lost(self, fault: str) -> bool:
        if self.faulty and self.rng.random() < self.cfg.loss:
            self.sim.faults[fault] += 1
            return True
        return False

    def send(self, src: Endpoint, dst: Endpoint | None, kind: str, *payload) -> bool:
        """A request ``on_<kind>(*payload)`` to ``dst``; False if it cannot leave (no
        receiver, or the receiver is down), so the caller knows at once, as Ray tells it."""
        if dst is None or not dst.up:
            self.sim.faults["no_receiver"] += 1
            return False
        if self._lost("lost_request"):
            return True
        sched = self.sim.scheduler
        at = sched.now + self.latency()
        if kind not in self.cfg.reorder:
            channel = (id(src), src.process, id(dst), dst.process)
            at = max(at, self._last.get(channel, 0))
            self._last[channel] = at
        sched.at(at, self._deliver, None, 0, dst, dst.process, kind, payload)
        return True

    def reply(self, src: Endpoint, dst: Endpoint, kind: str, *payload) -> None:
        """The answer ``on_<kind>(*payload)`` to a call ``src`` served."""
        if self._lost("lost_answer"):
            return
        self.sim.scheduler.after(self.latency(), self._deliver, src, src.process, dst,
                                 dst.process, kind, payload)  # fmt: skip

    def _deliver(self, src: Endpoint | None, src_process: int, dst: Endpoint, process: int,
                 kind: str, payload: tuple) -> None:  # fmt: skip
        sim = self.sim
        if src is not None and (not src.up or src.process != src_process):
            sim.faults["lost_from_dead"] += 1
            sim.note(f"lost: {src.name} died before its answer arrived")
            return
        if not dst.up or dst.process != process:
            sim.faults["lost_to_dead"] += 1
            sim.note(f"lost: {dst.name} died before this arrived")
            return
        if dst.stalled_until > sim.scheduler.now:  # it waits in the process's queue
            sim.scheduler.at(dst.stalled_until, self._deliver, src, src_process, dst, process,
                             kind, payload)  # fmt: skip
            return
        getattr(dst, "on_" + kind)(*payload)
