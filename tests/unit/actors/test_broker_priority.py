"""The Ray instances rafka starts run their workers (rafka's brokers) at the clients' priority."""

from __future__ import annotations

import os

from rafka.actors import service


def test_a_ray_node_rafka_starts_runs_its_workers_at_nice_zero(monkeypatch):
    """Without a setting, a raylet started inside is told to run workers at nice 0, and the
    process environment is as it was afterwards."""
    monkeypatch.delenv(service.WORKER_NICENESS_ENV, raising=False)
    with service.at_broker_priority():
        assert os.environ[service.WORKER_NICENESS_ENV] == "0"
    assert service.WORKER_NICENESS_ENV not in os.environ


def test_a_niceness_the_user_set_is_kept(monkeypatch):
    """RAY_worker_niceness set by the user wins over rafka's default, and stays set."""
    monkeypatch.setenv(service.WORKER_NICENESS_ENV, "10")
    with service.at_broker_priority():
        assert os.environ[service.WORKER_NICENESS_ENV] == "10"
    assert os.environ[service.WORKER_NICENESS_ENV] == "10"
