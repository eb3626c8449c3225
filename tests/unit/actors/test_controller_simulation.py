"""The controller, restarted at any point under concurrent admin requests, never hands out a
leader epoch twice, never moves an epoch back, always starts again, and converges: a sweep
of seeded runs of ``controller_simulation`` over the real controller code.

``RAFKA_CONTROLLER_SIM_SEEDS`` (default 60) and ``RAFKA_CONTROLLER_SIM_EVENTS`` (default
120) size the sweep; ``RAFKA_CONTROLLER_SIM_SEED`` runs one seed."""

from __future__ import annotations

import logging
import os
from collections import Counter

import pytest

from rafka.actors.reconcile import Reconciled, Reconciler
from tests.unit.actors.controller_simulation import run_seed

SEEDS = int(os.environ.get("RAFKA_CONTROLLER_SIM_SEEDS", "60"))


@pytest.fixture(autouse=True)
def quiet_controller_logs():
    """Thousands of injected deaths log warnings; the report says what happened."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def seeds() -> list[int]:
    one = os.environ.get("RAFKA_CONTROLLER_SIM_SEED")
    return [int(one)] if one else list(range(SEEDS))


def test_the_controller_converges_under_restarts_at_any_point_and_concurrent_admin(
    tmp_path, capsys
):
    total: Counter = Counter()
    for seed in seeds():
        total += run_seed(seed, str(tmp_path / str(seed)))
    with capsys.disabled():
        print(f"\ncontroller simulation, {len(seeds())} seeds: {dict(sorted(total.items()))}")
    # The faults the sweep is about were injected, often.
    assert total["deaths_at_append"] >= len(seeds())
    assert total["deaths_now"] >= len(seeds())
    assert total["controller_starts"] > 2 * len(seeds())
    assert min(total[f"admin_{k}"] for k in ("create", "delete", "reassign", "cancel")) > 0


def test_without_the_reconcile_the_simulation_finds_replicas_behind_the_metadata(
    tmp_path, monkeypatch
):
    """The check can fail: a controller that never reconciles leaves stray or missing
    replica actors, or replicas on states the metadata moved past, after its deaths."""

    async def nothing(self):
        return Reconciled()

    monkeypatch.setattr(Reconciler, "reconcile", nothing)
    failures = []
    for seed in range(20):
        try:
            run_seed(seed, str(tmp_path / str(seed)))
        except AssertionError as e:
            failures.append(str(e))
    assert failures and all("invariant 4" in f for f in failures)
