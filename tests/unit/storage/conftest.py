"""Fixtures for storage tests: a fake clock and a log opener that cleans up."""

from __future__ import annotations

import pytest

from rafka.storage import Log, LogConfig

from .support import FakeClock


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    """Open (or reopen) the test's log directory with Kafka-named config overrides."""
    logs = []

    def _open(config=None, directory=None) -> Log:
        log = Log(str(directory or tmp_path / "topic-0"), LogConfig.from_dict(config or {}), clock)
        logs.append(log)
        return log

    yield _open
    for log in logs:
        log.abandon()
