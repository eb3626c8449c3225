"""The Ray instances rafka starts run their workers (rafka's brokers) at the clients' priority."""

from __future__ import annotations

import os

from rafka.actors import service


def test_a_ray_instance_rafka_starts_runs_its_workers_at_nice_zero(monkeypatch):
    """Without a setting, the raylet rafka starts is told to run workers at nice 0."""
    monkeypatch.delenv(service.WORKER_NICENESS_ENV, raising=False)
    service.at_broker_priority()
    assert os.environ[service.WORKER_NICENESS_ENV] == "0"


def test_a_niceness_the_user_set_is_kept(monkeypatch):
    """RAY_worker_niceness set by the user wins over rafka's default."""
    monkeypatch.setenv(service.WORKER_NICENESS_ENV, "10")
    service.at_broker_priority()
    assert os.environ[service.WORKER_NICENESS_ENV] == "10"
