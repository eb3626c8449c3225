"""Settings given to running services are compared with the ones they run with: a value
that differs is an error naming it, never silently ignored."""

from __future__ import annotations

import pytest

from rafka.connection import check_running_settings
from rafka.errors import InvalidConfig


def test_settings_equal_to_the_running_ones_or_to_their_defaults_pass():
    check_running_settings({"num.partitions": 3}, {"num.partitions": 3})
    check_running_settings({"num.partitions": 1}, {})  # 1 is the default


def test_a_setting_that_differs_from_the_running_one_is_named_with_both_values():
    with pytest.raises(InvalidConfig) as raised:
        check_running_settings(
            {"num.partitions": 3, "broker.session.timeout.ms": 2000},
            {"num.partitions": 3, "broker.session.timeout.ms": 6000},
        )
    message = str(raised.value)
    assert "broker.session.timeout.ms=2000 (running with 6000)" in message
    assert "num.partitions" not in message and "rafka down" in message
