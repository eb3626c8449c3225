"""The node agent's load reports: its disk's use and its replicas' sizes and traffic, sent to
the controller for the balancer's disk and traffic goals (``rafka.actors.broker_loads``).

Every ``broker.load.report.interval.ms`` the agent asks each of its host actors for their
replicas' sizes and traffic counters (one ``ReplicaHost.load_report`` call per host, never
one per replica), turns the counters into rates (``rafka.cluster.load_rates``, which says
what is counted), and sends the controller one report (``Controller.report_load``). The
controller answers with the interval to wait before the next one, so the cluster setting
reaches every agent the way ``broker.heartbeat.interval.ms`` does (in the heartbeat's
answer); until the first answer the setting's default is used.

A report is plain data::

    {"disk_capacity": bytes, "disk_used": bytes,
     "replicas": [[topic id, partition, size in bytes, bytes in per s, bytes out per s], ...]}

The disk's capacity and use always describe the same space, one of two:

- a node labelled ``rafka_disk_bytes=<bytes>`` (``ray start --labels``) gives its disk that
  capacity, and the use is the sum of the replicas' log sizes on it: a quota on rafka's logs.
  This is how test clusters on one machine, where every disk is a directory of the same
  filesystem, give each broker a disk of its own size; and how a disk shared with other data
  gets the share rafka may fill;
- otherwise the filesystem of the data directory as ``df`` counts it
  (``shutil.disk_usage``): capacity its used plus available bytes (blocks reserved for root
  left out), use its used bytes, whatever fills them: on a real disk, other files count
  against the balancer's threshold too, since they take the same space.

Runs on the agent's main event loop, not the liveness group's: a slow report must never
delay a heartbeat. Nothing is persisted: a restarted agent starts measuring again (its first
rates are each replica's average since it opened, see ``load_rates``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from typing import Any, Callable

import ray

from rafka.actors.placement import CONTROLLER_NAME
from rafka.actors.replica_host import HOSTS_DIR
from rafka.cluster.load_rates import HostSample, LoadRates
from rafka.cluster.settings import setting

#: Node label giving the disk's capacity in bytes (see the module docstring).
DISK_BYTES_LABEL = "rafka_disk_bytes"
#: How long the agent waits for one host's counters, s; a host that does not answer in time
#: counts as not answering (its replicas keep their last sizes and rates).
HOST_TIMEOUT_S = 5.0
#: How long the agent waits for the controller to take a report, s.
CONTROLLER_TIMEOUT_S = 10.0


def disk_space(directory: str, capacity_label: str | None, logs_bytes: int) -> tuple[int, int]:
    """(capacity, used) of the disk of ``directory``, bytes: the label's capacity and
    ``logs_bytes`` (the sum of the logs on it) when the node's ``rafka_disk_bytes`` label
    is a positive number, else the filesystem's (see the module docstring)."""
    capacity = label_bytes(capacity_label)
    if capacity:
        return capacity, logs_bytes
    usage = shutil.disk_usage(directory)
    return usage.used + usage.free, usage.used


def label_bytes(value: str | None) -> int:
    """The bytes a ``rafka_disk_bytes`` label value gives (0 when unset or not a positive
    whole number)."""
    try:
        return max(int(value), 0) if value is not None else 0
    except ValueError:
        return 0


def host_slots(directory: str) -> list[int]:
    """The host slots of the disk whose data directory is ``directory``: those with a
    members file (written before a host opens any replica, removed when it is stopped)."""
    try:
        names = os.listdir(os.path.join(directory, HOSTS_DIR))
    except FileNotFoundError:
        return []
    stems = (name[: -len(".members")] for name in names if name.endswith(".members"))
    return sorted(int(stem) for stem in stems if stem.isdigit())


class LoadReporter:
    """The load reports of one disk's agent.

    ``broker_id()`` is the disk's broker id (None until registered: nothing is reported),
    ``host(slot)`` the running host actor of a slot (None when it does not run),
    ``controller()`` a handle on the controller (raises ValueError when there is none yet),
    ``capacity_label`` the node's ``rafka_disk_bytes`` label. Called on the agent's main
    event loop only; one report at a time (``report_once`` is awaited by one loop)."""

    def __init__(
        self, directory: str, broker_id: Callable[[], int | None],
        host: Callable[[int], Any], controller: Callable[[], Any],
        capacity_label: str | None, logger: logging.Logger | logging.LoggerAdapter,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.broker_id = broker_id
        self.host = host
        self.controller = controller
        self.capacity_label = capacity_label
        self.logger = logger
        self.rates = LoadRates()
        self.interval_ms: int = setting({}, "broker.load.report.interval.ms")
        self._controller: Any = None
        self._task: asyncio.Task | None = None

    @classmethod
    def of_agent(cls, agent: Any) -> "LoadReporter":
        """The reporter of a ``NodeAgent`` (in its Ray actor)."""
        namespace = agent.namespace
        labels = ray.get_runtime_context().get_node_labels() or {}
        return cls(agent.directory, lambda: agent.broker_id, agent._host,
                   lambda: ray.get_actor(CONTROLLER_NAME, namespace=namespace),
                   labels.get(DISK_BYTES_LABEL), agent.logger)  # fmt: skip

    def start(self) -> None:
        """Report every interval from now on (once; on the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.report_once()
            except Exception:  # the next report tries again
                self.logger.exception("load report failed")

    async def report_once(self) -> dict[str, Any] | None:
        """Measure, send one report and adopt the interval the controller answers; returns
        the report (None while the disk has no broker id)."""
        broker_id = self.broker_id()
        if broker_id is None:
            return None
        slots = host_slots(self.directory)
        answers = await asyncio.gather(*(self._ask(slot) for slot in slots))
        loads = self.rates.update(dict(zip(slots, answers)))
        capacity, used = disk_space(self.directory, self.capacity_label,
                                    sum(r.size_bytes for r in loads))  # fmt: skip
        report = {"disk_capacity": capacity, "disk_used": used,
                  "replicas": [list(r) for r in loads]}  # fmt: skip
        interval = await self._send(broker_id, report)
        if interval is not None:
            self.interval_ms = interval
        return report

    async def _ask(self, slot: int) -> HostSample | None:
        """The counters of host ``slot``; None when it does not run or does not answer."""
        handle = self.host(slot)
        if handle is None:
            return None
        try:
            answer = await asyncio.wait_for(handle.load_report.remote(), HOST_TIMEOUT_S)
            return HostSample.from_answer(answer)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError) as e:
            self.logger.debug("host %d gave no load report: %r", slot, e)
        except Exception:  # one faulty host must not keep the others' loads from the report
            self.logger.exception("host %d gave no load report", slot)
        return None

    async def _send(self, broker_id: int, report: dict[str, Any]) -> int | None:
        """Hand ``report`` to the controller; the interval it answers, ms (None when it
        could not be reached: this report is lost, the next one carries on)."""
        try:
            if self._controller is None:
                self._controller = self.controller()
            answer = await asyncio.wait_for(
                self._controller.report_load.remote(broker_id, report), CONTROLLER_TIMEOUT_S
            )
            return int(answer)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError, ValueError) as e:
            self._controller = None  # not started yet, or restarting
            self.logger.debug("load report not taken: %r", e)
            return None
