"""Disk names and pinning (``rafka.actors.placement``): named disks follow their label,
ephemeral ones their node."""

from __future__ import annotations

import pytest
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rafka.actors.placement import (
    DISK_LABEL,
    EPHEMERAL_DISK_LABEL_VALUE,
    ephemeral_node,
    node_disk_name,
    pinned_to_disk,
)

NODE_ID = "ab" * 28


def test_a_node_labelled_auto_gets_a_disk_named_after_its_node_and_pinned_to_that_node():
    disk = node_disk_name({DISK_LABEL: EPHEMERAL_DISK_LABEL_VALUE}, NODE_ID)
    assert disk == f"auto-{NODE_ID}" and ephemeral_node(disk) == NODE_ID
    options = pinned_to_disk(disk)
    strategy = options["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy)
    assert (strategy.node_id, strategy.soft) == (NODE_ID, False)
    assert "label_selector" not in options and options["resources"]


def test_a_named_disk_is_pinned_by_its_label_wherever_its_node_comes_back():
    assert node_disk_name({DISK_LABEL: "disk-3"}, NODE_ID) == "disk-3"
    assert node_disk_name({}, NODE_ID) == "local"
    for disk in ("disk-3", "auto-short", "auto"):
        assert ephemeral_node(disk) is None
    assert pinned_to_disk("disk-3")["label_selector"] == {DISK_LABEL: "disk-3"}


def test_a_bad_disk_label_is_refused_with_the_rule():
    with pytest.raises(ValueError, match="valid Ray label value"):
        node_disk_name({DISK_LABEL: "-bad-"}, NODE_ID)
