"""The controller's real parts over a fake Ray layer, for exact interleavings without Ray.

``FakeRay`` stands in for ``rafka.actors.ray_actors.RayActors``: a registry of named fake
actors (node agents and replicas) shared by every controller process of one test, so a
controller that dies and starts again finds the actors the previous one left. Each
controller process gets its own ``FakeRay`` view; once that process dies its calls fail and
its sends are dropped. Calls can be held at a gate (``hold``) to stop a request exactly
where it waits for an actor, and sends queue until ``deliver`` (so a push can be lost).

``ControllerProcess`` is one life of the controller: the real parts built by
``rafka.actors.controller.build_parts`` over a real ``MetadataLog`` in a temporary
directory. ``die()`` is the process dying: its tasks stop, its files are left as they are
(``MetadataLog.abandon``). ``CrashingLog`` dies on demand right after an append is durable,
or in the middle of a snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Callable

import msgpack

from rafka.actors.controller import build_parts
from rafka.actors.placement import agent_name, replica_name
from rafka.actors.ray_actors import ActorDied
from rafka.actors.replica_state import is_stale, state_version, with_defaults
from rafka.cluster.metadata_log import SNAPSHOT_FILE, MetadataLog
from rafka.errors import KafkaStorageError
from rafka.storage.checkpoint import write_atomically

NAMESPACE = "test"


class ProcessDied(BaseException):
    """The controller process died here (a BaseException, so no handler swallows it)."""


class FakeReplica:
    """A replica actor: keeps the newest state it was told, by the same rules as
    ``PartitionReplica.adopt`` (a state from an older controller, or an older version, is
    ignored)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.key = (state["topic_id"], state["partition"], state["broker_id"])
        self.state = with_defaults(state)
        self.deleted = False

    async def update_state(self, state: dict[str, Any]) -> None:
        if is_stale(state, self.state):
            return
        if "leader_epoch" in state and state_version(state) < state_version(self.state):
            return
        self.state = with_defaults({**self.state, **state})

    async def confirm_replica_epoch(self, recorded: int) -> None:
        return None

    async def ready(self) -> dict[str, Any]:
        return {"topic_id": self.key[0], "partition": self.key[1], "broker_id": self.key[2],
                "node_id": node_of(self.key[2]),
                "role": "leader" if self.leads else "follower"}  # fmt: skip

    @property
    def leads(self) -> bool:
        return self.state["leader"] == self.key[2]


def node_of(broker_id: int) -> str:
    """The Ray node a broker's agent and replicas run on (one node per broker, forever)."""
    return f"node-{broker_id}"


class FakeAgent:
    """A node agent: creates replica actors by name (an existing one is found, as Ray's
    ``get_if_exists``), deletes them, answers pings."""

    def __init__(self, registry: "Registry", broker_id: int, disk: str) -> None:
        self.registry = registry
        self.broker_id = broker_id
        self.disk = disk
        self.refuse_creation = False  # its node cannot start actors (a full node, say)
        self.fail_partitions: set[int] = set()  # replicas of these partitions fail to start

    async def ensure_replicas(self, states: list[dict]) -> list[dict]:
        if self.refuse_creation:
            raise KafkaStorageError("the node could not start the replica actors")
        out = []
        for s in states:
            if s["partition"] in self.fail_partitions:
                out.append({"topic_id": s["topic_id"], "partition": s["partition"],
                            "broker_id": s["broker_id"], "error": "KafkaStorageError()"})
                continue
            name = replica_name(s["topic_id"], s["partition"], s["broker_id"])
            replica = self.registry.actors.get(name)
            if replica is None:
                replica = self.registry.actors[name] = FakeReplica(s)
                self.registry.created.append(name)
            out.append(await replica.ready())
        return out

    async def delete_replicas(self, states: list[dict]) -> int:
        deleted = 0
        for s in states:
            name = replica_name(s["topic_id"], s["partition"], s["broker_id"])
            replica = self.registry.actors.pop(name, None)
            if replica is not None:
                replica.deleted = True
                deleted += 1
        return deleted

    async def hosted(self) -> list[list]:
        return [list(a.key) for a in self.registry.actors.values()
                if isinstance(a, FakeReplica) and a.key[2] == self.broker_id]  # fmt: skip

    async def ping(self) -> int:
        return self.broker_id

    async def status(self) -> dict:
        return {"disk": self.disk, "broker_id": self.broker_id}

    async def node_id(self) -> str | None:
        return node_of(self.broker_id)


class Registry:
    """Every named actor of the fake cluster, shared by all controller processes."""

    def __init__(self) -> None:
        self.actors: dict[str, Any] = {}
        self.created: list[str] = []
        self.down: set[int] = set()  # brokers whose node is down: their actors do not answer

    def add_agent(self, broker_id: int, disk: str) -> FakeAgent:
        agent = self.actors[agent_name(disk)] = FakeAgent(self, broker_id, disk)
        return agent

    def replicas(self) -> dict[tuple[str, int, int], FakeReplica]:
        return {a.key: a for a in self.actors.values() if isinstance(a, FakeReplica)}


class FakeRay:
    """One controller process's view of the fake Ray layer (``RayActors``' methods)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.dead = False
        self.outbox: list[tuple[Any, str, tuple, Callable | None]] = []
        self._gates: dict[str, asyncio.Event] = {}
        self.waiting: dict[str, int] = {}  # method -> calls held at its gate now
        #: Every call that reached a gate, as (handle, method, args): it was sent, so the
        #: actor may still carry it out after this process died (``carry_out_held``).
        self.held: list[tuple[Any, str, tuple]] = []

    def hold(self, method: str) -> None:
        """Calls of ``method`` wait (after they are sent) until ``release(method)``."""
        self._gates[method] = asyncio.Event()

    def release(self, method: str) -> None:
        self._gates.pop(method).set()

    async def carry_out_held(self, method: str) -> None:
        """The actors carry out the held calls of ``method`` whose sender is gone (Ray runs
        a call that was sent whatever became of its caller); nobody sees the answers."""
        for handle, sent, args in self.held:
            if sent == method and self._reachable(handle):
                await getattr(handle, method)(*args)

    def find(self, name: str):
        return self.registry.actors.get(name)

    def replica(self, topic_id: str, partition: int, broker_id: int, slot: int):
        """The replica, whatever its host: the fake has no host actors."""
        return self.registry.actors.get(replica_name(topic_id, partition, broker_id))

    def push_states(self, pushes: list, on_failure: Callable) -> None:
        for handle, state in pushes:
            self.send(handle, "update_state", state, on_failure=lambda s=state: on_failure(s))

    def _broker_of(self, handle) -> int | None:
        if isinstance(handle, FakeAgent):
            return handle.broker_id
        if isinstance(handle, FakeReplica):
            return handle.key[2]
        return None

    def _reachable(self, handle) -> bool:
        return (handle in self.registry.actors.values()
                and self._broker_of(handle) not in self.registry.down)  # fmt: skip

    async def call(self, handle, method: str, *args, timeout_s: float | None = None):
        await asyncio.sleep(0)  # a remote call always yields
        gate = self._gates.get(method)
        if gate is not None:
            self.held.append((handle, method, args))
            self.waiting[method] = self.waiting.get(method, 0) + 1
            try:
                await gate.wait()
            finally:
                self.waiting[method] -= 1
        if self.dead:
            raise asyncio.CancelledError  # the caller's process is gone
        if not self._reachable(handle):
            raise ActorDied(f"{method}: the actor is gone")
        return await getattr(handle, method)(*args)

    def send(self, handle, method: str, *args, on_failure: Callable | None = None) -> None:
        if not self.dead:
            self.outbox.append((handle, method, args, on_failure))

    async def deliver(self, keep: Callable[[tuple], bool] = lambda message: True) -> int:
        """Deliver every queued send for which ``keep(message)`` is true (others are lost);
        returns how many arrived."""
        queued, self.outbox = self.outbox, []
        arrived = 0
        for handle, method, args, on_failure in queued:
            if not keep((handle, method, args)):
                continue
            if not self._reachable(handle):
                if on_failure is not None:
                    on_failure()
                continue
            await getattr(handle, method)(*args)
            arrived += 1
        return arrived

    async def replica_names(self) -> set[str]:
        await asyncio.sleep(0)
        return {n for n, a in self.registry.actors.items() if isinstance(a, FakeReplica)}


class CrashingLog(MetadataLog):
    """A metadata log whose process dies right after the next append is durable
    (``die_after_append``) or in the middle of the next snapshot, after the snapshot file
    is written and before the log below it is deleted (``die_in_snapshot``). Every record
    appended is also kept in ``appended`` (across lives: pass the same list)."""

    def __init__(self, directory: str, appended: list, **kwargs) -> None:
        self.die_after_append = False
        self.die_in_snapshot = False
        self.died = False
        self.on_death: Callable[[], None] = lambda: None
        self.appended = appended
        super().__init__(directory, **kwargs)

    def _die(self, where: str):
        self.died = True
        self.on_death()
        return ProcessDied(where)

    def append(self, records: list[dict[str, Any]]) -> None:
        if self.died:
            raise ProcessDied("already dead")
        super().append(records)
        self.appended.extend(records)
        if self.die_after_append and records:
            self.die_after_append = False
            raise self._die("after an append")

    def snapshot(self) -> None:
        if self.die_in_snapshot:
            self.die_in_snapshot = False
            blob = msgpack.packb({"next_offset": self.log.log_end_offset,
                                  "records": self.image.to_records()})  # fmt: skip
            write_atomically(os.path.join(self.directory, SNAPSHOT_FILE), blob)
            raise self._die("in a snapshot")
        super().snapshot()


class ControllerProcess:
    """One life of the controller over ``directory``: the real parts, a fake Ray view."""

    def __init__(
        self, directory: str, registry: Registry, appended: list,
        settings: dict[str, Any] | None = None, snapshot_every: int = 10_000,
    ) -> None:  # fmt: skip
        self.ray = FakeRay(registry)
        self.store = CrashingLog(directory, appended, snapshot_every=snapshot_every,
                                 lock_timeout_s=1.0)  # fmt: skip
        logger = logging.getLogger("rafka.test.controller")
        parts = build_parts(self.store, dict(settings or {}), NAMESPACE, self.ray, logger)
        for name, part in parts.items():
            setattr(self, name, part)
        self.tasks: set[asyncio.Task] = set()
        self.alive = True
        self.store.on_death = self._stop_talking

    def _stop_talking(self) -> None:
        """From the moment of death nothing more leaves the process."""
        self.ray.dead = True
        self.ray.outbox.clear()

    @property
    def image(self):
        return self.core.image

    def run(self, coroutine) -> asyncio.Task:
        """Run a request (or timer) of this process; it stops when the process dies."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def die(self) -> None:
        """The process dies: every task it runs stops, its sends are lost, its metadata log
        files stay as they are (nothing closed cleanly)."""
        self.alive = False
        self.ray.dead = True
        self.ray.outbox.clear()
        for gate in list(self.ray._gates):
            self.ray.release(gate)
        tasks = list(self.tasks) + list(self.core._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.store.abandon()

    async def heartbeat_all(self) -> None:
        """Every registered broker whose node is up heartbeats once."""
        for broker_id, broker in sorted(self.image.brokers.items()):
            if broker_id not in self.ray.registry.down:
                await self.brokers.heartbeat(broker.disk, broker_id, None, node_of(broker_id))


def differences(registry: Registry, image) -> list[str]:
    """How the replica actors differ from the metadata ``image``: actors that should run and
    do not (or run and should not), and replicas holding another leader or other epochs than
    their partition's. Empty when they agree."""
    wanted = {
        (topic.topic_id, p.partition, b): p
        for topic in image.topics.values() for p in topic.partitions.values() for b in p.replicas
    }  # fmt: skip
    running = registry.replicas()
    if set(running) != set(wanted):
        return [f"replica actors {sorted(set(running) ^ set(wanted))} differ from the metadata"]
    out = []
    for key, p in wanted.items():
        s = running[key].state
        if (s["leader"], s["leader_epoch"], s["partition_epoch"]) != (
            p.leader, p.leader_epoch, p.partition_epoch
        ):
            out.append(f"replica {key} holds leader {s['leader']} epochs {s['leader_epoch']}/"
                       f"{s['partition_epoch']}, the metadata {p.leader} {p.leader_epoch}/"
                       f"{p.partition_epoch}")  # fmt: skip
    return out


async def settle(process: ControllerProcess, rounds: int = 5) -> None:
    """Let background tasks run and queued pushes arrive."""
    for _ in range(rounds):
        await asyncio.sleep(0)
        await process.ray.deliver()
        await asyncio.sleep(0)
