"""``rafka brokers drain|undrain`` and ``rafka balancer status|rebalance`` without Ray: the
commands run through ``main`` against a stub Admin, so what they ask for and print is checked
in milliseconds."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest

from rafka.cli import balancer as balancer_cli
from rafka.cli import main
from rafka.types import BalancerMove, BalancerPlan, BalancerStatus
from tests.cli_help import help_without_ray

PLAN = BalancerPlan(
    moves=[BalancerMove("orders", 3, [1, 4], 2, 4, "replicas per broker")],
    leader_moves=[("orders", 0, 4, "leaders per broker")],
    violations={"rack awareness": ["orders-5 spans too few racks"]},
)
STATUS = BalancerStatus(
    mode="node_add", goals=["leaving brokers hold nothing"], balancing_node_add=False,
    draining=[2], dead={3: 42_000}, heal_after_ms=600_000,
    in_flight=[{"topic": "orders", "partition": 1, "adding": [4], "removing": [2],
                "isr": [1, 2], "for_ms": 42_000}],
    replicas={1: 4, 2: 1, 3: 2, 4: 3}, leaders={1: 2, 2: 0, 3: 1, 4: 1}, moves_started=7,
    pending=PLAN,
    disk_used={1: 3 << 30, 2: 0, 3: 0, 4: 512 << 20},
    disk_capacity={1: 10 << 30, 2: 0, 3: 0, 4: 1 << 30},
    bytes_in_per_s={1: 1536.0 * 1024, 2: 0.0, 3: 0.0, 4: 512.0},
    bytes_out_per_s={1: 2.0 * 1024 * 1024, 2: 0.0, 3: 0.0, 4: 0.0},
)  # fmt: skip


class StubAdmin:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def drain_broker(self, broker_id):
        self.calls.append(("drain_broker", broker_id))
        return STATUS

    def undrain_broker(self, broker_id):
        self.calls.append(("undrain_broker", broker_id))
        return STATUS

    def describe_balancer(self):
        self.calls.append(("describe_balancer",))
        return STATUS

    def rebalance(self, dry_run=True):
        self.calls.append(("rebalance", dry_run))
        return PLAN


@pytest.fixture
def admin(monkeypatch) -> StubAdmin:
    stub = StubAdmin()

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        yield SimpleNamespace(admin=lambda: stub)

    monkeypatch.setattr(balancer_cli, "connected", connected)
    return stub


def run(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def test_drain_and_undrain_ask_for_the_broker_and_print_the_status(admin, capsys):
    status, out = run(capsys, "brokers", "drain", "2")
    assert status == 0 and admin.calls == [("drain_broker", 2)]
    assert "Mode: node_add" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["2", "1", "0", "-", "0", "B/s", "0", "B/s", "draining"] in rows
    assert ["3", "2", "1", "-", "0", "B/s", "0", "B/s", "dead", "42", "s"] in rows
    assert "Moving orders-1 for 42 s: adding [4], removing [2], in sync [1, 2]" in out
    run(capsys, "brokers", "undrain", "2")
    assert admin.calls[-1] == ("undrain_broker", 2)


def test_status_shows_each_brokers_disk_use_of_its_capacity_and_its_traffic(admin, capsys):
    status, out = run(capsys, "balancer", "status")
    assert status == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("BROKER"))
    assert header.split() == ["BROKER", "REPLICAS", "LEADERS", "DISK", "IN", "OUT", "STATE"]
    rows = [line.split() for line in lines]
    assert ["1", "4", "2", "3.0", "GiB", "of", "10.0", "GiB", "(30%)", "1.5", "MiB/s", "2.0",
            "MiB/s", "live"] in rows
    assert ["4", "3", "1", "512.0", "MiB", "of", "1.0", "GiB", "(50%)", "512", "B/s", "0",
            "B/s", "live"] in rows


def test_rebalance_previews_unless_told_to_execute(admin, capsys):
    status, out = run(capsys, "balancer", "rebalance")
    assert status == 0 and admin.calls == [("rebalance", True)]
    assert out.splitlines() == [
        "Would start: 1 replica move(s), 1 leadership move(s)",
        "  orders-3: broker 2 -> 4 (replicas per broker)",
        "  orders-0: leader -> 4 (leaders per broker)",
        "Still wrong (rack awareness): orders-5 spans too few racks",
    ]
    run(capsys, "balancer", "rebalance", "--execute")
    assert admin.calls[-1] == ("rebalance", False)


def test_status_as_json_holds_every_field(admin, capsys):
    status, out = run(capsys, "balancer", "status", "--json")
    found = json.loads(out)
    assert status == 0 and found["mode"] == "node_add" and found["draining"] == [2]
    assert found["disk_capacity"]["4"] == 1 << 30 and found["bytes_in_per_s"]["4"] == 512.0
    assert found["pending"]["moves"][0]["destination"] == 4


def test_a_broker_id_that_is_not_a_number_is_a_usage_error(admin, capsys):
    with pytest.raises(SystemExit) as info:
        main(["brokers", "drain", "two"])
    assert info.value.code == 2 and admin.calls == []


def test_brokers_and_balancer_help_do_not_import_ray():
    done = help_without_ray(["brokers", "--help"], ["balancer", "rebalance", "--help"])
    assert done.returncode == 0, done.stderr
    assert "--execute" in done.stdout and "drain" in done.stdout


def test_the_status_says_what_the_autoscaler_wants_and_asked_ray_for():
    from rafka.cli.balancer import status_text

    scaling = STATUS._replace(autoscaling={
        "enabled": True, "wanted": 3, "requested": 4, "retiring": 2, "retired": [5],
        "reasons": ["replicas: 3"], "removable": [2, 4]})
    text = status_text(scaling)
    assert ("Autoscaling: wants 3 broker(s) (replicas: 3), asked Ray for 4 disk node(s), "
            "retiring broker 2, retired [5]") in text
    assert "Autoscaling: off" in status_text(STATUS)


def test_the_status_says_how_long_a_move_has_been_in_flight():
    from rafka.cli.balancer import status_text

    assert "Moving orders-1 for 42 s: adding [4], removing [2], in sync [1, 2]" in (
        status_text(STATUS))
