"""The balancer's view from the brokers' load reports, with the real controller parts over a
real metadata log and a fake Ray layer (``controller_fakes``): disks and partition sizes and
traffic reach the view and the status, stale reports count no traffic, unregistered brokers'
reports are dropped, and a broker reported above its disk threshold has replicas planned off."""

from __future__ import annotations

import asyncio

from rafka.actors.broker_loads import STALE_INTERVALS
from rafka.actors.controller_core import now_ms
from rafka.cluster.balancer_types import Goal
from tests.unit.actors.controller_fakes import ControllerProcess, Registry
from tests.unit.actors.test_controller_balancing import start, with_topic

INTERVAL_MS = 2_000
SETTINGS = {"broker.load.report.interval.ms": INTERVAL_MS}


def report_of(process: ControllerProcess, broker: int, capacity: int, size: int,
              bytes_in: float = 0.0, bytes_out: float = 0.0) -> dict:  # fmt: skip
    """What ``broker``'s agent would report: every replica of "orders" it holds at ``size``
    bytes with the given rates, and its disk ``capacity`` used by their sum."""
    topic = process.image.topic("orders")
    rows = [[topic.topic_id, p.partition, size, bytes_in, bytes_out]
            for p in topic.partitions.values() if broker in p.replicas]  # fmt: skip
    return {"disk_capacity": capacity, "disk_used": size * len(rows), "replicas": rows}


def test_reports_give_the_view_each_brokers_disk_and_each_partitions_size_and_traffic(tmp_path):
    """A partition's size is its largest replica's; its bytes in and out are its leader's."""

    async def main():
        process = await start(str(tmp_path / "c"), Registry(), SETTINGS)
        await with_topic(process, partitions=3, rf=2)
        for b in range(3):
            answer = process.balancing.report_load(
                b, report_of(process, b, 10_000 * (b + 1), 100 * (b + 1), 10.0 * (b + 1),
                             1.0 * (b + 1)))  # fmt: skip
            assert answer == INTERVAL_MS  # the agents' next report comes after this
        view = process.balancing.view(now_ms())
        assert [(b.disk_capacity, b.disk_used) for b in view.brokers] == [
            (10_000, 200), (20_000, 400), (30_000, 600)]
        for p in view.partitions:
            assert p.size_bytes == 100 * (max(p.replicas) + 1)
            assert (p.bytes_in_per_s, p.bytes_out_per_s) == (10.0 * (p.leader + 1),
                                                             1.0 * (p.leader + 1))
        process.store.close()

    asyncio.run(main())


def test_the_status_shows_disk_and_traffic_per_broker_as_the_goals_count_them(tmp_path):
    """Bytes in count on every broker holding a replica, bytes out on the leader only."""

    async def main():
        process = await start(str(tmp_path / "c"), Registry(), SETTINGS)
        await with_topic(process, partitions=3, rf=2)
        for b in range(3):
            process.balancing.report_load(b, report_of(process, b, 1_000, 50, 8.0, 2.0))
        status = process.balancing.describe()
        partitions = process.image.topic("orders").partitions.values()
        for b in range(3):
            held = sum(b in p.replicas for p in partitions)
            led = sum(p.leader == b for p in partitions)
            assert (status["disk_used"][b], status["disk_capacity"][b]) == (50 * held, 1_000)
            assert status["bytes_in_per_s"][b] == 8.0 * held
            assert status["bytes_out_per_s"][b] == 2.0 * led
        process.store.close()

    asyncio.run(main())


def test_a_stale_report_keeps_the_sizes_and_counts_no_traffic(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry(), SETTINGS)
        await with_topic(process, partitions=3, rf=2)
        for b in range(3):
            process.balancing.report_load(b, report_of(process, b, 1_000, 70, 5.0, 5.0))
        later = now_ms() + STALE_INTERVALS * INTERVAL_MS + 1
        view = process.balancing.view(later)
        assert all(b.disk_used > 0 for b in view.brokers)
        assert all(p.size_bytes == 70 and p.bytes_in_per_s == p.bytes_out_per_s == 0.0
                   for p in view.partitions)  # fmt: skip
        process.store.close()

    asyncio.run(main())


def test_a_report_from_an_unregistered_broker_is_dropped(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry(), SETTINGS)
        await with_topic(process, partitions=3, rf=2)
        topic_id = process.image.topic("orders").topic_id
        answer = process.balancing.report_load(9, {
            "disk_capacity": 1_000, "disk_used": 999,
            "replicas": [[topic_id, 0, 999, 50.0, 50.0]]})  # fmt: skip
        assert answer == INTERVAL_MS
        view = process.balancing.view(now_ms())
        assert [b.broker_id for b in view.brokers] == [0, 1, 2]
        assert all(p.size_bytes == 0 and p.bytes_in_per_s == 0.0 for p in view.partitions)
        process.store.close()

    asyncio.run(main())


def test_a_broker_reported_above_its_disk_threshold_has_replicas_planned_off(tmp_path):
    async def main():
        process = await start(str(tmp_path / "c"), Registry(), SETTINGS)
        await with_topic(process, partitions=6, rf=2)
        process.balancing.report_load(0, report_of(process, 0, 1_000, 250))  # 4 x 250: full
        for b in (1, 2):
            process.balancing.report_load(b, report_of(process, b, 100_000, 10))
        plan = await process.balancing.rebalance(dry_run=True)
        disk_moves = [m for m in plan["moves"] if m["goal"] == Goal.DISK_CAPACITY.value]
        assert disk_moves and all(m["source"] == 0 for m in disk_moves)
        assert Goal.DISK_CAPACITY.value not in plan["violations"]  # 1000 - 250 <= 800
        process.store.close()

    asyncio.run(main())
