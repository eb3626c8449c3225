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

from rafka.actors.logs import actor_logger, label_process_logs, log_prefix
from rafka.actors.partition_replica import PartitionReplica
from rafka.actors.placement import (
    CONTROLLER_NAME,
    disk_dir,
    pinned_to_disk,
    replica_name,
)
from rafka.actors.replica_state import newer_topic_holds, read_state, stray_path
from rafka.cluster.placement import RACK_LABEL
from rafka.errors import KafkaStorageError
from rafka.storage.checkpoint import read_text, write_atomically
from rafka.storage.log import partition_dir
from rafka.storage.log_loader import ensure_writable_directory

META_PROPERTIES = "meta.properties"
#: How long a replica of a deleted topic gets to delete itself before a newer topic of its
#: name takes the directory, s (it is killed after).
RETIRE_TIMEOUT_S = 30.0


def read_meta_properties(directory: str) -> dict[str, str]:
    text = read_text(os.path.join(directory, META_PROPERTIES)) or ""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def write_meta_properties(directory: str, props: dict[str, str]) -> None:
    body = "#rafka broker identity of this disk; do not copy to another disk\n"
    body += "".join(f"{k}={v}\n" for k, v in sorted(props.items()))
    write_atomically(os.path.join(directory, META_PROPERTIES), body.encode())


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
        self.rack = _node_label(RACK_LABEL)
        self.replicas: dict[str, Any] = {}
        self._controller = None
        self._heartbeats: asyncio.Task | None = None
        # A new node tells the controller this disk's replicas restarted (and may have lost
        # unflushed records): they are not elected until each has checked in.
        self.node_id_ = ray.get_runtime_context().get_node_id()
        # Heartbeats start on their own: after a node comes back, Ray restarts this actor
        # and nobody else calls it.
        ray.get_runtime_context().current_actor.start_heartbeats.remote()

    async def start(self) -> int:
        """Register this disk with the controller; returns its broker id (new or kept)."""
        await self.start_heartbeats()
        return await self._heartbeat()

    async def ping(self) -> int | None:
        return self.broker_id

    async def node_id(self) -> str:
        """The Ray node this agent (and so this disk's replicas) runs on."""
        return self.node_id_

    async def start_heartbeats(self) -> None:
        if self._heartbeats is None:
            self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat(self) -> int:
        """One heartbeat (registering the disk if the controller does not know it)."""
        if self._controller is None:
            self._controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        broker_id, self._interval_ms = await asyncio.wait_for(
            self._controller.heartbeat.remote(
                self.disk, self.broker_id, self.rack, self.node_id_
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
        self._interval_ms = 200
        while True:
            try:
                await self._heartbeat()
            except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
                self._controller = None  # not started yet, or restarting
                self.logger.debug("heartbeat failed: %r", e)
            await asyncio.sleep(self._interval_ms / 1000)

    async def ensure_replicas(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create (or find) the replica actors for ``states`` on this disk; wait until each has
        opened its log. Returns each replica's description, or for one that could not start
        ``{topic_id, partition, broker_id, error}``: the others are not held back by it."""
        actor = ray.remote(PartitionReplica)
        handles = []
        for state in states:
            await self._retire_older_topic(state)
            name = replica_name(state["topic_id"], state["partition"], state["broker_id"])
            handle = actor.options(
                name=name, namespace=self.namespace, get_if_exists=True,
                **pinned_to_disk(self.disk),
            ).remote(self.directory, state, namespace=self.namespace)  # fmt: skip
            self.replicas[name] = handle
            handles.append(handle)
        answers = await asyncio.gather(*(h.ready.remote() for h in handles),
                                       return_exceptions=True)  # fmt: skip
        return [
            answer if not isinstance(answer, BaseException) else {
                "topic_id": state["topic_id"], "partition": state["partition"],
                "broker_id": state["broker_id"], "error": repr(answer),
            }
            for state, answer in zip(states, answers)
        ]  # fmt: skip

    async def _retire_older_topic(self, state: dict[str, Any]) -> None:
        """A replica of a deleted topic of the same name that still runs here (its broker was
        away when the topic was deleted) holds the partition directory: delete it (files and
        actor) before the new topic's replica opens the directory, so the old one never
        writes into it."""
        path = partition_dir(self.directory, state["topic"], state["partition"])
        saved = read_state(path)
        if saved is None or saved["topic_id"] == state["topic_id"]:
            return
        if not newer_topic_holds(state, saved):
            return  # the directory's topic is the newer one: this replica keeps out of it
        old = _find(replica_name(saved["topic_id"], state["partition"], state["broker_id"]),
                    self.namespace)  # fmt: skip
        if old is None:
            return
        self.logger.warning("deleting the replica of deleted topic id %s before topic id %s "
                            "takes %s", saved["topic_id"], state["topic_id"], path)  # fmt: skip
        try:
            await asyncio.wait_for(old.delete.remote(), RETIRE_TIMEOUT_S)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError) as e:
            self.logger.warning("the old replica did not delete itself: %r", e)
        ray.kill(old, no_restart=True)

    async def delete_replicas(self, states: list[dict[str, Any]]) -> int:
        """Delete the files of these replicas and stop their actors."""
        deleted = 0
        for state in states:
            handle = self._take_handle(state)
            if handle is not None:
                await handle.delete.remote()
                ray.kill(handle, no_restart=True)
                deleted += 1
            elif state.get("topic") is not None:  # the actor is gone; its files may not be
                path = os.path.join(self.directory, f"{state['topic']}-{state['partition']}")
                saved = read_state(path)
                if saved is None or saved.get("topic_id") == state["topic_id"]:
                    shutil.rmtree(path, ignore_errors=True)
                # else the directory belongs to a newer topic of the same name: not ours
                shutil.rmtree(stray_path(path, state["topic_id"]), ignore_errors=True)
        return deleted

    async def stop_replicas(self, states: list[dict[str, Any]]) -> int:
        """Close these replicas cleanly (flushed, clean-shutdown marker) and stop them."""
        stopped = 0
        for state in states:
            handle = self._take_handle(state)
            if handle is not None:
                try:
                    await handle.close.remote()
                finally:
                    ray.kill(handle, no_restart=True)
                stopped += 1
        return stopped

    def _take_handle(self, state: dict[str, Any]):
        """The replica's actor handle (None when its actor is gone), no longer tracked here."""
        name = replica_name(state["topic_id"], state["partition"], state["broker_id"])
        return self.replicas.pop(name, None) or _find(name, self.namespace)

    async def status(self) -> dict[str, Any]:
        usage = shutil.disk_usage(self.directory)
        return {
            "disk": self.disk, "broker_id": self.broker_id, "directory": self.directory,
            "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid(),
            "disk_total_bytes": usage.total, "disk_free_bytes": usage.free,
        }  # fmt: skip


def _node_label(name: str) -> str | None:
    """A label of the node this process runs on (None when it is not set)."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return (node.get("Labels") or {}).get(name)
    return None


def _find(name: str, namespace: str):
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
