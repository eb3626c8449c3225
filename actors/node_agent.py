"""NodeAgent: one per data disk. Holds the disk's broker id and hosts its replica actors.

The broker id lives in ``meta.properties`` in the disk's data directory, so it belongs to the
disk: a node that restarts (with a new Ray node id) but the same disk is the same broker, and
its replicas come back to their files.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import ray

from rafka.actors.disk_identity import (
    memory_available,
    node_label,
    read_meta_properties,
    write_meta_properties,
)
from rafka.actors.kafka_listener import keep_listener
from rafka.actors.load_reports import LoadReporter
from rafka.actors.logs import actor_logger, label_process_logs, log_prefix
from rafka.actors.placement import CONTROLLER_NAME, disk_dir, pinned_to_disk
from rafka.actors.replica_host import HOSTS_DIR, ReplicaHost, members_path, read_members
from rafka.actors.replica_state import newer_topic_holds, read_state, stray_path
from rafka.cluster.hosting import host_name
from rafka.cluster.placement import RACK_LABEL
from rafka.errors import KafkaStorageError
from rafka.storage.log import partition_dir
from rafka.storage.log_loader import ensure_writable_directory

#: How long a replica of a deleted topic gets to delete itself before a newer topic of its
#: name takes the directory, s (it is killed after).
RETIRE_TIMEOUT_S = 30.0
#: Host actors one agent starts at a time (each process start costs ~0.35 s of CPU).
HOST_STARTS_AT_ONCE = 2
#: Calls one host actor serves at once: long-poll fetches of all its replicas wait together.
HOST_MAX_CONCURRENCY = 10_000
#: How long a host may take to start (open its replicas' logs) before its start fails, s.
HOST_START_TIMEOUT_S = 300.0
#: How long the agent waits for a host's list of replicas, s.
HOSTED_TIMEOUT_S = 10.0
#: Pause before watching again a host that could not be reached, s.
WATCH_AGAIN_AFTER_S = 0.5
#: Heartbeats and the controller's probes run in this concurrency group, on an event loop
#: (and thread) of their own: work on the agent's main loop (starting host actors, which
#: waits on Ray's GCS, or reading members files) cannot delay them.
LIVENESS_GROUP = "liveness"
CONCURRENCY_GROUPS = {LIVENESS_GROUP: 100}


class NodeAgent:
    def __init__(self, data_root: str, disk: str, namespace: str) -> None:
        self.logger = actor_logger(__name__, "NodeAgent", disk=disk)
        label_process_logs(self.logger.prefix)  # this process is this node agent
        self.data_root = data_root
        self.disk = disk
        self.namespace = namespace
        self.directory = disk_dir(data_root, disk)
        ensure_writable_directory(self.directory)
        props = read_meta_properties(self.directory)
        if props and props.get("disk", disk) != disk:
            raise KafkaStorageError(
                f"{self.directory}/meta.properties belongs to disk {props['disk']!r}, not "
                f"{disk!r}: each disk needs its own data directory"
            )
        self.broker_id = int(props["broker.id"]) if "broker.id" in props else None
        self._label_logs()
        self.rack = node_label(RACK_LABEL)
        self.hosts: dict[int, Any] = {}  # slot -> running host actor
        self._host_locks: dict[int, asyncio.Lock] = {}
        self._watches: dict[int, asyncio.Task] = {}
        self._replica_epochs: dict[int, dict[tuple[str, int], int]] = {}  # slot -> lives
        self._starting = asyncio.Semaphore(HOST_STARTS_AT_ONCE)
        self._controller = None
        self._heartbeats: asyncio.Task | None = None
        # A new node tells the controller this disk's replicas restarted (and may have lost
        # unflushed records): they are not elected until each has checked in.
        self.node_id_ = ray.get_runtime_context().get_node_id()
        # Heartbeats start on their own: after a node comes back, Ray restarts this actor
        # and nobody else calls it.
        ray.get_runtime_context().current_actor.start_heartbeats.remote()
        self.load_reports = LoadReporter.of_agent(self)  # disk use and traffic, for balancing
        ray.get_runtime_context().current_actor.start_load_reports.remote()
        ray.get_runtime_context().current_actor.start_kafka_listener.remote()

    async def start(self) -> int:
        """Register this disk with the controller; returns its broker id (new or kept)."""
        await ray.get_runtime_context().current_actor.start_heartbeats.remote()
        return await self._heartbeat()

    @ray.method(concurrency_group=LIVENESS_GROUP)
    async def ping(self) -> int | None:
        return self.broker_id

    async def node_id(self) -> str:
        """The Ray node this agent (and so this disk's replicas) runs on."""
        return self.node_id_

    @ray.method(concurrency_group=LIVENESS_GROUP)
    async def start_heartbeats(self) -> None:
        """Start the heartbeat loop on the liveness group's event loop (once)."""
        if self._heartbeats is None:
            self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def start_load_reports(self) -> None:
        """Start the load reports (``load_reports``) on the main event loop (once)."""
        self.load_reports.start()

    async def start_kafka_listener(self) -> None:
        """Keep this disk's Kafka listener running (when the cluster has ``listeners``)."""
        asyncio.get_running_loop().create_task(
            keep_listener(self.namespace, self.disk, self, self.logger))

    async def _heartbeat(self) -> int:
        """One heartbeat (registering the disk if the controller does not know it)."""
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        broker_id, self._interval_ms = await asyncio.wait_for(
            self._controller.heartbeat.remote(
                self.disk, self.broker_id, self.rack, self.node_id_,
                memory_available(),
            ), 10,
        )
        if broker_id != self.broker_id:
            self.broker_id = broker_id
            self._label_logs()
            write_meta_properties(
                self.directory, {"broker.id": str(broker_id), "disk": self.disk, "version": "1"}
            )
        return broker_id

    def _label_logs(self) -> None:
        """Log lines name the disk and, once it has one, its broker id."""
        prefix = log_prefix("NodeAgent", disk=self.disk, broker=self.broker_id)
        self.logger.relabel(prefix)
        label_process_logs(prefix)

    async def _heartbeat_loop(self) -> None:
        """A heartbeat every interval, whether or not the last one was answered yet: a
        controller slow to answer (busy, or short of CPU) still hears this broker on time."""
        self._interval_ms = 200
        loop = asyncio.get_running_loop()
        while True:
            loop.create_task(self._heartbeat_once())
            await asyncio.sleep(self._interval_ms / 1000)

    async def _heartbeat_once(self) -> None:
        try:
            await self._heartbeat()
        except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
            self._controller = None  # not started yet, or restarting
            self.logger.debug("heartbeat failed: %r", e)

    # -- hosts ---------------------------------------------------------------------------------

    def _host_lock(self, slot: int) -> asyncio.Lock:
        lock = self._host_locks.get(slot)
        if lock is None:
            lock = self._host_locks[slot] = asyncio.Lock()
        return lock

    def _host(self, slot: int):
        """The running host actor of ``slot`` (None when it does not run)."""
        handle = self.hosts.get(slot)
        if handle is None:
            handle = _find(host_name(self.broker_id, slot), self.namespace)
            if handle is not None:
                self.hosts[slot] = handle
        return handle

    async def _start_host(self, slot: int):
        """Create (or find) the host actor of ``slot`` and wait until it runs. At most
        HOST_STARTS_AT_ONCE start at a time: a process start takes a third of a second of
        CPU, and a node starting dozens at once starves everything on it."""
        handle = self._host(slot)
        if handle is not None:
            self._watch_host(slot, handle)  # found: Ray may have restarted it
            return handle
        async with self._starting:
            handle = ray.remote(ReplicaHost).options(
                name=host_name(self.broker_id, slot), namespace=self.namespace,
                get_if_exists=True, max_concurrency=HOST_MAX_CONCURRENCY,
                **pinned_to_disk(self.disk),
            ).remote(self.directory, self.broker_id, slot, namespace=self.namespace)  # fmt: skip
            # Bounded: a host that cannot be scheduled must not hold a start slot forever.
            await asyncio.wait_for(handle.ready.remote(), HOST_START_TIMEOUT_S)
        self.hosts[slot] = handle
        self._watch_host(slot, handle)
        return handle

    def _watch_host(self, slot: int, handle) -> None:
        """Keep one call outstanding on the host: when it fails the host died, and the
        controller hears of it at once (its replicas fail together, like a broker's)."""
        if slot in self._watches:
            return

        async def watch() -> None:
            me = asyncio.current_task()
            try:
                await handle.watch.remote()
            except ray.exceptions.ActorUnavailableError:
                # Unreachable for now (a network blip, or a restart under way): not a death
                # to report; watch again, and a dead host's next call fails for good.
                self._watches.pop(slot, None)
                await asyncio.sleep(WATCH_AGAIN_AFTER_S)
                if self.hosts.get(slot) is handle:
                    self._watch_host(slot, handle)
            except ray.exceptions.RayActorError as e:
                self._watches.pop(slot, None)  # so that the host started again is watched
                if self.hosts.get(slot) is handle:
                    del self.hosts[slot]
                    await self._host_died(slot, e)
            finally:
                if self._watches.get(slot) is me:
                    del self._watches[slot]

        self._watches[slot] = asyncio.get_running_loop().create_task(watch())

    async def _host_died(self, slot: int, error: BaseException) -> None:
        """Tell the controller that every replica of the host failed, then have the host
        run again: Ray restarts one that crashed (it is watched again); one stopped for
        good (``ray.kill``) is started again here. Either way its replicas reopen from the
        members file and check in."""
        epochs = self._replica_epochs.pop(slot, {})
        keys = [(s["topic_id"], s["partition"]) for s in
                read_members(members_path(self.directory, slot))]  # fmt: skip
        self.logger.warning("host %d died (%s) with %d replica(s)", slot,
                            type(error).__name__, len(keys))  # fmt: skip
        if not keys:
            return
        try:
            if self._controller is not None:
                # With the life of each replica that died: a report that arrives after one
                # restarted and checked in again is about an earlier life, and ignored.
                await self._controller.replicas_failed.remote(
                    self.broker_id, [[t, p, epochs.get((t, p), -1)] for t, p in keys],
                    f"its host actor died ({type(error).__name__})",
                )
        except ray.exceptions.RayActorError:
            pass  # a restarting controller hears of it from the replicas' check-ins
        async with self._host_lock(slot):
            if slot in self.hosts or not read_members(members_path(self.directory, slot)):
                return  # started again meanwhile, or emptied
            if _find(host_name(self.broker_id, slot), self.namespace) is None:
                self.logger.warning("starting host %d again", slot)
            try:
                await self._start_host(slot)  # finds the one Ray restarts, or starts one
            except ray.exceptions.RayActorError as e:
                self.logger.warning("host %d did not start again: %r; the reconcile will "
                                    "retry", slot, e)  # fmt: skip

    async def ensure_replicas(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start (or find) the replicas of ``states`` on this disk, each in the host its
        ``host`` slot names (one held by another host here is closed there first), and wait
        until each has opened its log. Returns each replica's
        description, or for one that could not start ``{topic_id, partition, broker_id,
        error}``: the others are not held back by it."""
        by_slot: dict[int, list[dict[str, Any]]] = {}
        out = []
        index = await asyncio.to_thread(self._members_index)
        for state in states:
            await self._retire_older_topic(state)
            old = index.get((state["topic_id"], state["partition"]), state["host"])
            if old != state["host"]:  # re-hosted: see rafka.actors.host_packing
                try:  # closed there (flushed) before the new host opens its directory
                    key = (state["topic_id"], state["partition"])
                    if not await self._remove_from(old, *key, False) and any(
                            (s["topic_id"], s["partition"]) == key
                            for s in read_members(members_path(self.directory, old))):
                        raise KafkaStorageError(f"host {old} (not running) still holds it")
                except (ray.exceptions.RayActorError, KafkaStorageError) as e:
                    out.append({"topic_id": state["topic_id"], "partition": state["partition"],
                                "broker_id": state["broker_id"], "error": repr(e)})
                    continue
            by_slot.setdefault(state["host"], []).append(state)
        answers = await asyncio.gather(
            *(self._ensure_in(slot, group) for slot, group in by_slot.items()),
            return_exceptions=True,
        )
        for group, answer in zip(by_slot.values(), answers):
            if isinstance(answer, BaseException):
                out.extend({"topic_id": s["topic_id"], "partition": s["partition"],
                            "broker_id": s["broker_id"], "error": repr(answer)}
                           for s in group)  # fmt: skip
            else:
                out.extend(answer)
        return out

    async def _ensure_in(self, slot: int, states: list[dict[str, Any]]) -> list[dict]:
        async with self._host_lock(slot):
            host = await self._start_host(slot)
            described = await host.add_replicas.remote(states)
        self._note_epochs(slot, [(d["topic_id"], d["partition"], d["replica_epoch"])
                                 for d in described if "error" not in d])  # fmt: skip
        return [{**d, "host": slot} if "error" not in d else d for d in described]

    def _note_epochs(self, slot: int, lives: list[tuple[str, int, int]]) -> None:
        """Remember the replica epoch (life) of replicas in host ``slot``, as last heard."""
        known = self._replica_epochs.setdefault(slot, {})
        for topic_id, partition, epoch in lives:
            known[(topic_id, partition)] = epoch

    async def _retire_older_topic(self, state: dict[str, Any]) -> None:
        """A replica of a deleted topic of the same name that still runs here (its broker was
        away when the topic was deleted) holds the partition directory: delete it (files and
        replica) before the new topic's replica opens the directory, so the old one never
        writes into it."""
        path = partition_dir(self.directory, state["topic"], state["partition"])
        saved = read_state(path)
        if saved is None or saved["topic_id"] == state["topic_id"]:
            return
        if not newer_topic_holds(state, saved):
            return  # the directory's topic is the newer one: this replica keeps out of it
        slot = (await asyncio.to_thread(self._members_index)).get(
            (saved["topic_id"], state["partition"])
        )
        if slot is None:
            return
        self.logger.warning("deleting the replica of deleted topic id %s before topic id %s "
                            "takes %s", saved["topic_id"], state["topic_id"], path)  # fmt: skip
        try:
            await asyncio.wait_for(
                self._remove_from(slot, saved["topic_id"], state["partition"], True),
                RETIRE_TIMEOUT_S,
            )
        except (ray.exceptions.RayActorError, asyncio.TimeoutError) as e:
            self.logger.warning("the old replica did not delete itself: %r; stopping its "
                                "host", e)  # fmt: skip
            host = self._host(slot)
            if host is not None:
                # Its death is watched: the controller hears its other replicas failed,
                # and the host starts again without the old replica's files in its way.
                ray.kill(host, no_restart=True)

    def _members_index(self) -> dict[tuple[str, int], int]:
        """(topic id, partition) -> slot, from every members file on this disk."""
        folder = os.path.join(self.directory, HOSTS_DIR)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return {}
        index = {}
        for name in names:
            if name.endswith(".members"):
                slot = int(name.split(".")[0])
                for s in read_members(os.path.join(folder, name)):
                    index[(s["topic_id"], s["partition"])] = slot
        return index

    async def _remove_from(self, slot: int, topic_id: str, partition: int,
                           delete_files: bool) -> bool:  # fmt: skip
        """Remove one replica from its host; a host left empty is stopped."""
        async with self._host_lock(slot):
            host = self._host(slot)
            if host is None:
                return False
            removed = await host.remove.remote(topic_id, partition, delete_files)
            if await host.count.remote() == 0:
                await self._stop_host(slot, host)
            return removed

    async def _stop_host(self, slot: int, host) -> None:
        """Stop an empty host for good and wait until its name is free (under its lock), so
        a host started again in this slot is a new actor."""
        self._kill_host(slot, host)
        name = host_name(self.broker_id, slot)
        for _ in range(100):
            if _find(name, self.namespace) is None:
                break
            await asyncio.sleep(0.05)
        try:
            os.remove(members_path(self.directory, slot))
        except FileNotFoundError:
            pass

    async def host_emptied(self, slot: int) -> None:
        """A host whose last replica deleted itself: stop it, unless it holds some again."""
        async with self._host_lock(slot):
            host = self._host(slot)
            if host is not None and await host.count.remote() == 0:
                await self._stop_host(slot, host)

    async def hosted(self) -> list[list]:
        """[topic id, partition, broker id, slot] of every replica held by a running host
        here."""
        slots = [s for s in await self._running_slots() if s in self.hosts]
        answers = await asyncio.gather(
            *(asyncio.wait_for(self.hosts[s].hosted.remote(), HOSTED_TIMEOUT_S) for s in slots),
            return_exceptions=True,
        )
        out = []
        for slot, answer in zip(slots, answers):
            if isinstance(answer, BaseException):
                # Restarting or slow: what its members file names is there (it reopens
                # them), so nothing of it counts as missing.
                answer = [[s["topic_id"], s["partition"], -1] for s in
                          read_members(members_path(self.directory, slot))]  # fmt: skip
            else:
                self._note_epochs(slot, [tuple(k) for k in answer])
            out.extend([t, p, self.broker_id, slot] for t, p, _ in answer)
        return out

    async def _running_slots(self) -> list[int]:
        """Slots of this broker's host actors that exist (alive or restarting). Asked of
        Ray on a thread: the event loop keeps answering heartbeats and probes."""
        prefix = host_name(self.broker_id, 0)[:-1]
        named = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        slots = []
        for a in named:
            if a.get("namespace") == self.namespace and a["name"].startswith(prefix):
                slot = int(a["name"][len(prefix):])
                slots.append(slot)
                handle = self._host(slot)
                if handle is not None:
                    self._watch_host(slot, handle)
        return slots

    async def delete_replicas(self, states: list[dict[str, Any]]) -> int:
        """Delete the files of these replicas and stop them (a host left empty stops)."""
        deleted = 0
        index = await asyncio.to_thread(self._members_index)
        for state in states:
            slot = index.get((state["topic_id"], state["partition"]))
            if slot is not None and await self._remove_from(
                slot, state["topic_id"], state["partition"], True
            ):
                deleted += 1
            elif state.get("topic") is not None:  # not hosted; its files may be left
                path = os.path.join(self.directory, f"{state['topic']}-{state['partition']}")
                saved = read_state(path)
                if saved is None or saved.get("topic_id") == state["topic_id"]:
                    shutil.rmtree(path, ignore_errors=True)
                # else the directory belongs to a newer topic of the same name: not ours
                shutil.rmtree(stray_path(path, state["topic_id"]), ignore_errors=True)
        return deleted

    async def stop_replicas(self) -> int:
        """Close every replica on this disk cleanly (flushed, clean-shutdown marker) and stop
        their hosts; how many replicas were closed."""
        stopped = 0
        for slot in await self._running_slots():
            async with self._host_lock(slot):
                host = self._host(slot)
                if host is None:
                    continue
                try:
                    stopped += await host.close_all.remote()
                except ray.exceptions.RayActorError:
                    pass
                finally:
                    self._kill_host(slot, host)
        return stopped

    def _kill_host(self, slot: int, host) -> None:
        """Stop a host for good, unwatched (its death is no failure to report)."""
        self.hosts.pop(slot, None)
        watch = self._watches.pop(slot, None)
        if watch is not None:
            watch.cancel()
        ray.kill(host, no_restart=True)

    async def status(self) -> dict[str, Any]:
        usage = shutil.disk_usage(self.directory)
        return {
            "disk": self.disk, "broker_id": self.broker_id, "directory": self.directory,
            "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid(),
            "disk_total_bytes": usage.total, "disk_free_bytes": usage.free,
        }  # fmt: skip


def _find(name: str, namespace: str):
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
