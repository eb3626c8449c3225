"""ReplicaHost: the Ray actor that hosts partition replicas of one disk (``replicas.per.actor``).

Each replica hosted is a whole ``PartitionReplica`` (its directory and log, its role, its
follower loop, producer state and metrics); the host gives them a process, an event loop and
one set of timers, and routes every call to the replica it names (see ``replica_handle``).
With ``replicas.per.actor`` = 1 (the default) each host holds one replica; with more, the
controller fills a broker's hosts up to that many (``rafka.cluster.hosting``).

The host keeps the creation states of its replicas in ``<disk>/hosts/<slot>.members``
(replaced atomically on every change), so when Ray restarts it after a crash it reopens every
one of them, and each checks in with the controller before it leads or follows (a host that
dies is the failure of all its replicas). A replica leaves the file before its files are
deleted, so a replica in the file always existed: reopened, it never takes its creation state
as current.

Idle costs nothing per replica: follower loops are long polls, and the timers (maintenance,
ISR lag checks, log gauges) are one loop each per host, going over its replicas (maintenance
staggered: one replica at a time, spread over the interval).

Calls naming a replica the host does not hold raise NotLeaderOrFollower (retriable: the
caller refreshes its metadata; the replica is starting, moved or deleted).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import msgpack
import numpy as np
import ray

from rafka.actors import direct_channel, metrics
from rafka.actors.fetch_batcher import FetchBatcher
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.partition_replica import PartitionReplica
from rafka.actors.replica_fetch import WaitCutoff
from rafka.actors.placement import agent_name
from rafka.actors.replica_state import actor_was_reconstructed
from rafka.cluster.load_rates import monotonic_ms
from rafka.cluster.settings import setting
from rafka.errors import KafkaStorageError, NotLeaderOrFollower, RafkaError
from rafka.storage.checkpoint import write_atomically

HOSTS_DIR = "hosts"
EMPTY = np.empty(0, dtype=np.uint8)
#: A timer this late (s) means the host's event loop was stalled.
STALL_S = 0.5
#: Seconds between two maintenance rounds of one replica (flush.ms, retention, compaction).
MAINTENANCE_INTERVAL_S = 30.0

Key = tuple[str, int]  # (topic id, partition)


def members_path(data_dir: str, slot: int) -> str:
    return os.path.join(data_dir, HOSTS_DIR, f"{slot}.members")


def read_members(path: str) -> list[dict[str, Any]]:
    """The creation states saved in ``path``; [] when there is none (an unreadable file too:
    its replicas are then recreated by the controller's reconcile, and check in as replicas
    that find their files)."""
    try:
        with open(path, "rb") as f:
            return list(msgpack.unpackb(f.read()))
    except (FileNotFoundError, ValueError, msgpack.UnpackException):
        return []


class ReplicaHost:
    """Host ``slot`` of broker ``broker_id``, on the disk whose data directory is
    ``data_dir``."""

    def __init__(
        self,
        data_dir: str,
        broker_id: int,
        slot: int,
        namespace: str | None = None,
        maintenance_interval_s: float = MAINTENANCE_INTERVAL_S,
    ):
        self.logger = actor_logger(__name__, "ReplicaHost", broker=broker_id, slot=slot)
        if namespace is not None:  # in a Ray actor: this process is this host
            label_process_logs(self.logger.prefix)
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.slot = slot
        self.namespace = namespace
        self.maintenance_interval_s = maintenance_interval_s
        self.replicas: dict[Key, PartitionReplica] = {}
        self.fetches = FetchBatcher()  # its followers' fetches, per leader host
        self._creation: dict[Key, dict[str, Any]] = {}  # key -> creation state (the file)
        self._tasks: list[asyncio.Task] = []
        self.closed = False
        self.channel = direct_channel.ChannelServer({
            method: getattr(self, method) for method in direct_channel.CHANNEL_METHODS
        })  # fmt: skip
        os.makedirs(os.path.join(data_dir, HOSTS_DIR), exist_ok=True)
        self._members = members_path(data_dir, slot)
        # Every replica in the file ran before: it reopens as restarted and checks in.
        reconstructed = namespace is not None and actor_was_reconstructed()
        for state in read_members(self._members):
            key = (state["topic_id"], state["partition"])
            try:
                self._open(state, restarted=True)
            except Exception:  # one unreadable replica must not keep the others down
                self.logger.exception("could not reopen %s-%d", state["topic"],
                                      state["partition"])  # fmt: skip
                self._creation[key] = state  # kept: the reconcile will try again
        if reconstructed or self.replicas:
            self.logger.info("reopened %d replica(s)", len(self.replicas))
        if namespace is not None:  # start the loops without waiting for a caller
            ray.get_runtime_context().current_actor.ready.remote()

    # -- hosting -------------------------------------------------------------------------------

    def _open(self, state: dict[str, Any], restarted: bool) -> PartitionReplica:
        key = (state["topic_id"], state["partition"])
        replica = PartitionReplica(self.data_dir, state, namespace=self.namespace,
                                   reconstructed=restarted, on_retired=self._retired,
                                   fetches=self.fetches)  # fmt: skip
        self.replicas[key] = replica
        self._creation[key] = state
        return replica

    def _save_members(self) -> None:
        write_atomically(self._members, msgpack.packb(list(self._creation.values())))

    async def ready(self) -> int:
        """Start the timers and every replica's loops; how many replicas it holds."""
        if not self._tasks and not self.closed:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._maintain()),
                           loop.create_task(self._watch_isrs()),
                           loop.create_task(self._report_log_gauges())]  # fmt: skip
        for replica in self.replicas.values():
            replica.loop_ready()
        return len(self.replicas)

    async def channel_address(self) -> tuple[str, int, bytes] | None:
        """Where callers reach this host's direct channel: (ip, port, token); None when
        channels are off here (``direct_channel.enabled``) or the host is closed."""
        if self.closed or not direct_channel.enabled():
            return None
        ip, port = await self.channel.start(ray.util.get_node_ip_address())
        return ip, port, self.channel.token

    async def add_replicas(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Open the replicas of ``states`` that this host does not hold yet (one already
        held is left as it is). Answers each replica's description, or for one that could
        not open ``{topic_id, partition, broker_id, error}``."""
        await self.ready()
        out = []
        new = [s for s in states if (s["topic_id"], s["partition"]) not in self.replicas]
        if new:
            for s in new:
                self._creation[(s["topic_id"], s["partition"])] = s
            self._save_members()  # before any file of theirs exists: see the module doc
        for s in states:
            key = (s["topic_id"], s["partition"])
            try:
                replica = self.replicas.get(key) or self._open(s, restarted=False)
                replica.loop_ready()
                out.append(replica.describe_sync())
            except Exception as e:
                self.logger.exception("could not open %s-%d", s["topic"], s["partition"])
                self.replicas.pop(key, None)
                out.append({"topic_id": s["topic_id"], "partition": s["partition"],
                            "broker_id": s["broker_id"], "error": repr(e)})  # fmt: skip
            await asyncio.sleep(0)  # opening logs blocks: let the others' calls in
        return out

    async def hosted(self) -> list[tuple[str, int, int]]:
        """(topic id, partition, replica epoch) of every replica this host holds."""
        return [(t, p, r.replica_epoch) for (t, p), r in self.replicas.items()]

    async def describe_all(self) -> list[dict[str, Any]]:
        return [r.describe_sync() for r in self.replicas.values()]

    async def count(self) -> int:
        return len(self.replicas)

    async def load_report(self) -> dict[str, Any]:
        """Every replica's log size and traffic counters, for its agent's load report (one
        call per host, see ``rafka.cluster.load_rates``): ``at_ms`` (this node's monotonic
        clock) and ``replicas``, each ``[topic id, partition, size in bytes, bytes appended
        to its log, bytes sent to consumers, since_ms]`` (the counters count from 0 at
        ``since_ms``, when the replica opened)."""
        return {"at_ms": monotonic_ms(), "replicas": [
            [t, p, r.log.size_bytes, r.log.bytes_appended,
             r.partition_metrics.bytes_to_consumers, r.partition_metrics.counters_since_ms]
            for (t, p), r in self.replicas.items()
        ]}  # fmt: skip

    async def remove(self, topic_id: str, partition: int, delete_files: bool) -> bool:
        """Stop one replica (``delete_files``: and delete its files); False when it is not
        held here. It leaves the members file first."""
        key = (topic_id, partition)
        replica = self.replicas.pop(key, None)
        if self._creation.pop(key, None) is not None:
            self._save_members()
        if replica is None:
            return False
        if delete_files:
            await replica.delete()
        else:
            await replica.close()
        return True

    async def _retired(self, replica: PartitionReplica) -> None:
        """A replica deleted itself (the controller no longer assigns it here)."""
        key = (replica.topic_id, replica.partition)
        if self.replicas.get(key) is replica:
            del self.replicas[key]
            self._creation.pop(key, None)
            self._save_members()
        if not self.replicas and self.namespace is not None:
            # Its agent stops an empty host (under the lock it creates hosts with).
            try:
                agent = ray.get_actor(agent_name(self._disk()), namespace=self.namespace)
                agent.host_emptied.remote(self.slot)
            except ValueError:
                pass

    def _disk(self) -> str:
        return os.path.basename(os.path.normpath(self.data_dir))

    async def close_all(self) -> int:
        """Close every replica cleanly (flushed, clean-shutdown marker); how many."""
        self.closed = True
        self.channel.close()
        for task in self._tasks:
            task.cancel()
        replicas = list(self.replicas.values())
        for replica in replicas:
            await replica.close()
        return len(replicas)

    async def watch(self) -> None:
        """Never answers while the host lives: its agent keeps one outstanding, and learns
        of the host's death when the call fails."""
        await asyncio.Event().wait()

    # -- timers, one per host ------------------------------------------------------------------

    async def _maintain(self) -> None:
        """Each replica's maintenance every ``maintenance_interval_s``, one replica at a
        time, spread over the interval."""
        while not self.closed:
            replicas = list(self.replicas.values())
            if not replicas:
                await asyncio.sleep(self.maintenance_interval_s)
                continue
            pause = self.maintenance_interval_s / len(replicas)
            for replica in replicas:
                await asyncio.sleep(pause)
                if replica.closed:
                    continue
                try:
                    replica.run_maintenance()
                except Exception:  # a failed cleanup must not stop the others; next round
                    self.logger.exception("maintenance of %s failed", replica.directory)

    async def _watch_isrs(self) -> None:
        """Each leader re-checks its followers' lag a few times per lag window, so a
        follower that stopped fetching leaves the ISR even when nothing else happens."""
        while not self.closed:
            lag_ms = min((setting(r.settings, "replica.lag.time.max.ms")
                          for r in self.replicas.values()), default=30_000)  # fmt: skip
            pause = min(max(lag_ms / 4000, 0.05), 1.0)
            woke = time.monotonic()
            await asyncio.sleep(pause)
            if time.monotonic() - woke > pause + STALL_S:
                # This process got no CPU for a while (a long compaction, say): follower
                # fetches that came meanwhile are not read yet, so lag is not judged now.
                continue
            for replica in list(self.replicas.values()):
                if replica.leader is not None:
                    replica.isr.maybe_propose()

    async def _report_log_gauges(self) -> None:
        while not self.closed:
            await asyncio.sleep(metrics.LOG_GAUGES_INTERVAL_S)
            for replica in list(self.replicas.values()):
                replica.report_log_gauges()

    # -- the replicas' methods (see PartitionReplica) ------------------------------------------

    def _replica(self, topic_id: str, partition: int) -> PartitionReplica:
        replica = self.replicas.get((topic_id, partition))
        if replica is None:
            raise NotLeaderOrFollower(
                f"host {self.slot} of broker {self.broker_id} holds no replica of partition "
                f"{partition} of topic id {topic_id} (it is starting, moved or was deleted); "
                "refresh metadata and retry"
            )
        return replica

    async def produce(self, topic_id: str, partition: int, batches, acks: int,
                      timeout_ms: int, client_id: str = "", request_no: int = -1,
                      transactional_id: str | None = None) -> tuple:  # fmt: skip
        return await self._replica(topic_id, partition).produce(
            batches, acks, timeout_ms, client_id, request_no, transactional_id
        )

    async def fetch(self, topic_id: str, partition: int, offset: int, max_bytes: int,
                    min_bytes: int = 1, max_wait_ms: int = 500) -> tuple:
        return await self._replica(topic_id, partition).fetch(
            offset, max_bytes, min_bytes, max_wait_ms
        )

    async def fetch_committed(self, topic_id: str, partition: int, offset: int,
                              max_bytes: int, min_bytes: int = 1,
                              max_wait_ms: int = 500) -> tuple:  # fmt: skip
        return await self._replica(topic_id, partition).fetch_committed(
            offset, max_bytes, min_bytes, max_wait_ms
        )

    async def write_marker(self, topic_id: str, partition: int, *args) -> tuple:
        return await self._replica(topic_id, partition).write_marker(*args)

    async def describe_producers(self, topic_id: str, partition: int) -> tuple:
        return await self._replica(topic_id, partition).describe_producers()

    async def replicate(self, topic_id: str, partition: int, *args) -> tuple:
        return await self._replica(topic_id, partition).replicate(*args)

    async def replicate_many(self, requests: list[tuple]) -> list[tuple]:
        """Follower fetches of one follower host (``(topic id, partition, *replicate's
        arguments)`` each, see ``fetch_batcher``), answered together: as soon as one has
        something or has waited its ``max_wait_ms``, the others stop waiting and answer
        with what they have then. Each answers on its own: a partition that fails answers
        its error, the others are not held back by it."""
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        cutoff = WaitCutoff()
        tasks = [loop.create_task(self._replicate_one(request, cutoff)) for request in requests]
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            cutoff.reached = True
            for topic_id, partition, *_ in requests:
                replica = self.replicas.get((topic_id, partition))
                if replica is not None:
                    replica.wake_waiters()
            await asyncio.wait(pending)
        return [task.result() for task in tasks]

    async def _replicate_one(self, request: tuple, cutoff: WaitCutoff) -> tuple:
        topic_id, partition, *args = request
        try:
            return await self._replica(topic_id, partition).replicate(*args, cutoff=cutoff)
        except RafkaError as e:  # in a batch, an error is that fetch's answer
            return (e.errno, str(e), -1, -1, -1, -1, -1, EMPTY)
        except Exception as e:  # a fault in one partition must not stop the others'
            self.logger.exception("a follower fetch of %s-%d failed", topic_id, partition)
            error = KafkaStorageError(f"the leader could not read partition {partition}: {e!r}")
            return (error.errno, str(error), -1, -1, -1, -1, -1, EMPTY)

    async def export_block(self, topic_id: str, partition: int, start: int, end: int,
                           committed_only: bool = False) -> tuple:  # fmt: skip
        return await self._replica(topic_id, partition).export_block(start, end, committed_only)

    async def list_offset(self, topic_id: str, partition: int, timestamp: int,
                          read_committed: bool = False) -> tuple:  # fmt: skip
        return await self._replica(topic_id, partition).list_offset(timestamp, read_committed)

    async def describe(self, topic_id: str, partition: int) -> dict[str, Any]:
        return self._replica(topic_id, partition).describe_sync()

    async def update_state(self, topic_id: str, partition: int, state: dict[str, Any]) -> None:
        replica = self.replicas.get((topic_id, partition))
        if replica is not None:  # else it is starting and is created with a newer state
            await replica.update_state(state)

    async def update_states(self, states: list[dict[str, Any]]) -> int:
        """Many replicas' states at once (the controller batches its pushes per host);
        how many of them this host holds."""
        held = 0
        for state in states:
            replica = self.replicas.get((state["topic_id"], state["partition"]))
            if replica is not None:
                held += 1
                await replica.update_state(state)
        return held

    async def confirm_replica_epoch(self, topic_id: str, partition: int, recorded: int) -> None:
        await self._replica(topic_id, partition).confirm_replica_epoch(recorded)

    async def maintain_now(self, topic_id: str, partition: int) -> dict[str, int]:
        return self._replica(topic_id, partition).run_maintenance()

    async def close(self, topic_id: str, partition: int) -> None:
        await self._replica(topic_id, partition).close()

    async def delete(self, topic_id: str, partition: int) -> None:
        await self.remove(topic_id, partition, delete_files=True)
