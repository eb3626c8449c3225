"""A node agent's load reports (``rafka.actors.load_reports``) without Ray: one call per host
actor, hosts that do not run or do not answer, the disk's capacity from the node label or the
filesystem, and the interval the controller answers."""

from __future__ import annotations

import asyncio
import logging
import os

import ray

from rafka.actors.load_reports import LoadReporter, disk_space, host_slots, label_bytes
from rafka.actors.replica_host import HOSTS_DIR

LOGGER = logging.getLogger("rafka.test.load_reports")


class Method:
    """``handle.method.remote(*args)`` of a fake actor: awaits ``fn(*args)``."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)


class FakeHost:
    def __init__(self, answers: list[dict]) -> None:
        self.answers = answers
        self.calls = 0
        self.load_report = Method(self._load_report)

    async def _load_report(self) -> dict:
        self.calls += 1
        return self.answers.pop(0)


class DeadHost:
    def __init__(self) -> None:
        self.load_report = Method(self._load_report)

    async def _load_report(self) -> dict:
        raise ray.exceptions.RayActorError()


class FakeController:
    def __init__(self, interval_ms: int) -> None:
        self.reports: list[tuple[int, dict]] = []
        self.interval_ms = interval_ms
        self.report_load = Method(self._report_load)

    async def _report_load(self, broker_id: int, report: dict) -> int:
        self.reports.append((broker_id, report))
        return self.interval_ms


def with_slots(directory, *slots: int) -> str:
    os.makedirs(os.path.join(directory, HOSTS_DIR), exist_ok=True)
    for slot in slots:
        open(os.path.join(directory, HOSTS_DIR, f"{slot}.members"), "wb").close()
    open(os.path.join(directory, HOSTS_DIR, "9.members.tmp"), "wb").close()  # not a host
    return str(directory)


def reporter(directory: str, hosts: dict, controller, label: str | None = "10000",
             broker_id: int | None = 3) -> LoadReporter:  # fmt: skip
    return LoadReporter(directory, lambda: broker_id, hosts.get, lambda: controller, label,
                        LOGGER)  # fmt: skip


def test_one_call_per_host_reports_every_replica_with_its_rates(tmp_path):
    """The first report measures from each replica's opening, the next from the first."""
    directory = with_slots(tmp_path, 0, 1)
    host0 = FakeHost([{"at_ms": 2_000, "replicas": [["tid", 0, 300, 2_000, 0, 0],
                                                     ["tid", 1, 200, 0, 0, 0]]},
                      {"at_ms": 4_000, "replicas": [["tid", 0, 500, 6_000, 1_000, 0],
                                                     ["tid", 1, 200, 0, 0, 0]]}])  # fmt: skip
    host1 = FakeHost([{"at_ms": 2_000, "replicas": [["uid", 0, 100, 0, 0, 1_000]]}] * 2)
    controller = FakeController(interval_ms=250)
    loads = reporter(directory, {0: host0, 1: host1}, controller)

    asyncio.run(loads.report_once())
    report = asyncio.run(loads.report_once())

    assert (host0.calls, host1.calls) == (2, 2)
    assert controller.reports[-1] == (3, report)
    assert report == {"disk_capacity": 10_000, "disk_used": 800, "replicas": [
        ["tid", 0, 500, 2_000.0, 500.0], ["tid", 1, 200, 0.0, 0.0], ["uid", 0, 100, 0.0, 0.0]]}
    assert loads.interval_ms == 250


def test_a_host_that_does_not_run_or_answer_keeps_its_sizes_and_the_rest_is_reported(tmp_path):
    directory = with_slots(tmp_path, 0, 1, 2)
    host0 = FakeHost([{"at_ms": 1_000, "replicas": [["tid", 0, 300, 0, 0, 0]]}])
    controller = FakeController(interval_ms=5_000)
    loads = reporter(directory, {0: host0, 1: DeadHost()}, controller)  # slot 2: no actor
    asyncio.run(loads.report_once())
    assert asyncio.run(loads.report_once())["replicas"] == [["tid", 0, 300, 0.0, 0.0]]


def test_nothing_is_reported_before_the_disk_has_a_broker_id(tmp_path):
    controller = FakeController(interval_ms=5_000)
    loads = reporter(with_slots(tmp_path), {}, controller, broker_id=None)
    assert asyncio.run(loads.report_once()) is None and controller.reports == []


def test_a_controller_that_cannot_be_reached_loses_the_report_and_keeps_the_interval(tmp_path):
    def no_controller():
        raise ValueError("Failed to look up actor 'rafka-controller'")

    loads = LoadReporter(with_slots(tmp_path), lambda: 3, {}.get, no_controller, None, LOGGER)
    interval = loads.interval_ms
    assert asyncio.run(loads.report_once()) is not None
    assert loads.interval_ms == interval


def test_the_node_label_gives_the_capacity_and_the_logs_are_the_use(tmp_path):
    assert disk_space(str(tmp_path), "5000", 1_234) == (5_000, 1_234)


def test_without_the_label_the_filesystem_gives_capacity_and_use(tmp_path):
    for label in (None, "lots", "0"):
        capacity, used = disk_space(str(tmp_path), label, 1_234)
        assert 0 < used <= capacity


def test_label_bytes_reads_positive_whole_numbers_only():
    assert [label_bytes(v) for v in ("1073741824", None, "-5", "1.5G")] == [2**30, 0, 0, 0]


def test_the_hosts_of_a_disk_are_the_slots_with_a_members_file(tmp_path):
    assert host_slots(str(tmp_path)) == []
    assert host_slots(with_slots(tmp_path, 3, 0, 12)) == [0, 3, 12]
