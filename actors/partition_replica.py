"""PartitionReplica: the Ray actor that owns one replica of one partition.

A thin shell over ``rafka.storage.log.Log`` (the files) and ``rafka.cluster.replication``
(in-sync replicas and the high watermark). It is an async actor: produce, long-poll fetch and
the maintenance timer share one event loop, so an append wakes waiting fetches directly.

Calls answer with tuples whose first two fields are an error code and message (0, "" on
success), so an expected error costs no exception across Ray; clients turn codes back into
``rafka.errors`` types. Record bytes travel as numpy uint8 arrays: Ray moves those through
the object store without copying, never as ``bytes``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from typing import Any

import msgpack
import numpy as np

from rafka.cluster.replication import LeaderState
from rafka.errors import (
    NotEnoughReplicas,
    NotLeaderOrFollower,
    RafkaError,
    RequestTimedOut,
)
from rafka.storage import record_batch as rb
from rafka.storage.checkpoint import write_atomically
from rafka.storage.compaction import compact, dirty_ratio
from rafka.storage.config import LogConfig
from rafka.storage.log import Log, now_ms, partition_dir
from rafka.storage.retention import delete_expired_segments

log = logging.getLogger(__name__)

STATE_FILE = "partition.metadata"
EARLIEST = -2
LATEST = -1
_EMPTY = np.zeros(0, dtype=np.uint8)
UNKNOWN_CLIENT_WAIT_MS = 200


class PartitionReplica:
    """One replica. ``state`` is the controller's view at creation; the replica keeps its own
    latest copy in ``partition.metadata`` so a restart by Ray (which re-runs this constructor
    with the original arguments) resumes from what it last knew, not from the creation args."""

    def __init__(self, data_dir: str, state: dict[str, Any], maintenance_interval_s: float = 30.0):
        self.directory = partition_dir(data_dir, state["topic"], state["partition"])
        os.makedirs(self.directory, exist_ok=True)
        saved = _read_state(self.directory)
        if saved is not None and saved["topic_id"] == state["topic_id"]:
            state = saved
        self.state = state
        self.topic = state["topic"]
        self.partition = state["partition"]
        self.broker_id = state["broker_id"]
        self.log = Log(self.directory, LogConfig.from_dict(state["config"]))
        self.leader: LeaderState | None = None
        self._apply_leadership()
        _write_state(self.directory, state)
        self._appended: asyncio.Condition | None = None
        self._maintenance_interval_s = maintenance_interval_s
        self._maintenance: asyncio.Task | None = None
        self._closed = False
        # Ray starts an async actor's calls in arrival order but does not promise to run
        # them in the order one client sent them, so each producer numbers its requests to
        # this partition and they are appended in that order (see _wait_turn).
        self._next_request: dict[str, list] = {}  # client id -> [next number, last used]
        self._turn_changed: asyncio.Condition | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def _apply_leadership(self) -> None:
        s = self.state
        if s["leader"] == self.broker_id:
            self.leader = LeaderState(
                self.broker_id, s["replicas"], s["isr"], s["leader_epoch"],
                self.log.log_end_offset, self.log.high_watermark, now_ms(),
            )  # fmt: skip
            self.log.update_high_watermark(self.leader.on_local_append(self.log.log_end_offset))
        else:
            self.leader = None

    def _loop_ready(self) -> asyncio.Condition:
        # The condition and the timer need the actor's running loop, which __init__ lacks.
        if self._appended is None:
            self._appended = asyncio.Condition()
            self._turn_changed = asyncio.Condition()
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())
        return self._appended

    async def ready(self) -> dict[str, Any]:
        self._loop_ready()
        return self.describe_sync()

    async def _maintain(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._maintenance_interval_s)
            try:
                self.run_maintenance()
            except Exception:  # a failed cleanup must not kill the replica; retry next round
                log.exception("maintenance of %s failed", self.directory)

    def run_maintenance(self) -> dict[str, int]:
        """Flush (flush.ms), retention and compaction, as Kafka's log manager does on a timer."""
        now = now_ms()
        self.log.maybe_flush()
        freed = delete_expired_segments(self.log, now) if self.log.config.delete else 0
        cleaned = 0
        if self.log.config.compact and dirty_ratio(self.log) >= (
            self.log.config.min_cleanable_dirty_ratio
        ):
            result = compact(self.log, now)
            cleaned = result.bytes_in - result.bytes_out
        return {"retention_bytes_freed": freed, "compaction_bytes_removed": cleaned}

    async def maintain_now(self) -> dict[str, int]:
        return self.run_maintenance()

    async def update_state(self, state: dict[str, Any]) -> None:
        """The controller's new view of this partition (config, leadership)."""
        self.state = {**self.state, **state}
        self.log.config = LogConfig.from_dict(self.state["config"])
        self._apply_leadership()
        _write_state(self.directory, self.state)

    async def close(self) -> None:
        """Flush and close the log cleanly (a clean-shutdown marker spares recovery)."""
        if not self._closed:
            self._closed = True
            if self._maintenance is not None:
                self._maintenance.cancel()
            self.log.close()

    async def delete(self) -> None:
        """Close and remove this replica's files (its topic was deleted)."""
        await self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- produce -------------------------------------------------------------------------------

    async def _wait_turn(self, client_id: str, request_no: int, timeout_ms: int) -> None:
        """Wait until every earlier request of ``client_id`` has been appended. A request
        that never arrives (its sender died) is given up on after ``timeout_ms``."""
        turn = self._next_request.get(client_id)
        wait_ms = timeout_ms
        if turn is None:
            turn = self._next_request[client_id] = [0, 0.0]
            if len(self._next_request) > 10_000:
                self._forget_idle_clients()
            # A client this replica has not seen: either its first requests raced each other
            # (wait a little for number 0) or this replica restarted mid-session (go on).
            wait_ms = min(timeout_ms, UNKNOWN_CLIENT_WAIT_MS)
        turn[1] = time.monotonic()
        if request_no <= turn[0]:
            return
        deadline = time.monotonic() + wait_ms / 1000
        changed = self._turn_changed
        async with changed:
            while turn[0] < request_no:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning(
                        "%s-%d: request %d of client %s waited %d ms for request %d; going on",
                        self.topic, self.partition, request_no, client_id, wait_ms, turn[0],
                    )  # fmt: skip
                    turn[0] = request_no
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    async def _end_turn(self, client_id: str, request_no: int) -> None:
        turn = self._next_request.get(client_id)
        if turn is not None and request_no >= turn[0]:
            turn[0] = request_no + 1
            async with self._turn_changed:
                self._turn_changed.notify_all()

    def _forget_idle_clients(self) -> None:
        idle = time.monotonic() - 3600
        for client_id in [c for c, t in self._next_request.items() if t[1] < idle]:
            del self._next_request[client_id]

    async def produce(
        self, batches, acks: int, timeout_ms: int, client_id: str = "", request_no: int = -1
    ) -> tuple:
        """Append client batches (one or more, back to back), each on its own: one may fail
        while the others are written. Answers (errno, message, log_start_offset, [(errno,
        message, base_offset, log_append_time) per batch]); a request-level error (not the
        leader, too few in-sync replicas) fails every batch. With acks=-1 the answer waits
        until the high watermark passes the batches. ``request_no`` numbers one client's
        requests to this partition from 0; they are appended in that order (-1: no order)."""
        appended = self._loop_ready()
        if request_no >= 0:
            await self._wait_turn(client_id, request_no, timeout_ms)
        results = []
        last_offset = -1
        try:
            try:
                leader = self._leader()
                min_isr = self.log.config.min_insync_replicas
                if acks == -1 and not leader.enough_in_sync(min_isr):
                    raise NotEnoughReplicas(
                        f"{self.topic}-{self.partition} has {len(leader.isr)} in-sync "
                        f"replica(s), below min.insync.replicas={min_isr}; wait for replicas "
                        "to catch up or produce with acks=1"
                    )
                for batch in _split_batches(batches):
                    try:
                        info = self.log.append_as_leader(batch, leader.leader_epoch)
                    except RafkaError as e:
                        results.append((e.errno, str(e), -1, -1))
                        continue
                    results.append((0, "", info.first_offset, info.log_append_time))
                    last_offset = max(last_offset, info.last_offset)
            finally:
                if request_no >= 0:
                    await self._end_turn(client_id, request_no)
            if self.log.log_end_offset > leader.log_end_offset:
                self.log.update_high_watermark(leader.on_local_append(self.log.log_end_offset))
                self.log.maybe_flush()
                async with appended:
                    appended.notify_all()
            if acks == -1 and self.log.high_watermark <= last_offset:
                await self._await_high_watermark(last_offset + 1, timeout_ms)
        except RafkaError as e:
            return (e.errno, str(e), -1, [])
        return (0, "", self.log.log_start_offset, results)

    async def _await_high_watermark(self, offset: int, timeout_ms: int) -> None:
        appended = self._loop_ready()
        deadline = time.monotonic() + timeout_ms / 1000
        async with appended:
            while self.log.high_watermark < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOut(
                        f"the batch ending at offset {offset - 1} of {self.topic}-"
                        f"{self.partition} was appended but not replicated to every in-sync "
                        f"replica within {timeout_ms} ms"
                    )
                try:
                    await asyncio.wait_for(appended.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    def _leader(self) -> LeaderState:
        if self.leader is None:
            raise NotLeaderOrFollower(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader is {self.state['leader']}); refresh metadata and retry"
            )
        return self.leader

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(
        self,
        offset: int,
        max_bytes: int,
        min_bytes: int = 1,
        max_wait_ms: int = 500,
        replica_id: int = -1,
    ) -> tuple:
        """Whole batches from ``offset``: up to the high watermark for consumers
        (``replica_id`` -1), up to the log end for a follower (its broker id), which also
        reports the follower's progress. Waits up to ``max_wait_ms`` for ``min_bytes``.
        Answers (errno, message, high_watermark, log_start_offset, log_end_offset, records)."""
        appended = self._loop_ready()
        try:
            leader = self._leader()
            if replica_id >= 0:
                if replica_id not in leader.followers:
                    raise NotLeaderOrFollower(
                        f"broker {replica_id} is not a follower of {self.topic}-{self.partition}"
                    )
                hw = leader.on_follower_fetch(replica_id, offset, now_ms())
                if hw > self.log.high_watermark:
                    self.log.update_high_watermark(hw)
                    async with appended:
                        appended.notify_all()
            data = self._read(offset, max_bytes, replica_id)
            if len(data) < min_bytes and max_wait_ms > 0:
                deadline = time.monotonic() + max_wait_ms / 1000
                async with appended:
                    while len(data) < min_bytes:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        try:
                            await asyncio.wait_for(appended.wait(), remaining)
                        except asyncio.TimeoutError:
                            pass
                        data = self._read(offset, max_bytes, replica_id)
        except RafkaError as e:
            return (e.errno, str(e), -1, -1, -1, _EMPTY)
        records = np.frombuffer(data, dtype=np.uint8) if len(data) else _EMPTY
        log_ = self.log
        return (0, "", log_.high_watermark, log_.log_start_offset, log_.log_end_offset, records)

    def _read(self, offset: int, max_bytes: int, replica_id: int):
        limit = None if replica_id >= 0 else self.log.high_watermark
        return self.log.read(offset, max_bytes, limit).records

    async def list_offset(self, timestamp: int) -> tuple:
        """(errno, message, offset, timestamp): EARLIEST (-2) gives the log start, LATEST (-1)
        the high watermark, otherwise the first offset whose timestamp is >= ``timestamp``
        (offset -1 when there is none)."""
        try:
            self._leader()
            if timestamp == EARLIEST:
                return (0, "", self.log.log_start_offset, -1)
            if timestamp == LATEST:
                return (0, "", self.log.high_watermark, -1)
            found = self.log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= self.log.high_watermark:
                return (0, "", -1, -1)
            return (0, "", found[0], found[1])
        except RafkaError as e:
            return (e.errno, str(e), -1, -1)

    # -- status --------------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        return self.describe_sync()

    def describe_sync(self) -> dict[str, Any]:
        log_ = self.log
        return {
            "topic": self.topic, "partition": self.partition, "broker_id": self.broker_id,
            "leader": self.state["leader"], "leader_epoch": self.state["leader_epoch"],
            "isr": list(self.leader.isr) if self.leader else list(self.state["isr"]),
            "log_start_offset": log_.log_start_offset, "high_watermark": log_.high_watermark,
            "log_end_offset": log_.log_end_offset, "size_bytes": log_.size_bytes,
            "segments": len(log_.segments), "pid": os.getpid(),
            "recovery": log_.recovery_report.summary() if log_.recovery_report else "",
        }  # fmt: skip


def _split_batches(buffer) -> list:
    """The batches in a request buffer, as views, split on their length fields only (each is
    fully checked when it is appended). A malformed tail becomes one more piece, so its
    append fails with CorruptRecord."""
    view = memoryview(buffer).cast("B")
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        try:
            size = rb.read_header(view, pos, check_codec=False).size
        except RafkaError:
            size = end - pos
        out.append(view[pos : pos + size])
        pos += size
    return out


def _read_state(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, STATE_FILE), "rb") as f:
            return msgpack.unpackb(f.read())
    except (FileNotFoundError, ValueError, msgpack.UnpackException):
        return None


def _write_state(directory: str, state: dict[str, Any]) -> None:
    write_atomically(os.path.join(directory, STATE_FILE), msgpack.packb(state))
