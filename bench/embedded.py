"""A fresh embedded rafka for one benchmark: its own Ray instance, namespace and data dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


def start_embedded(data_dir: Path, namespace: str, settings: dict[str, Any] | None = None):
    """Start a local Ray instance whose node offers one disk, wipe ``data_dir`` and start
    rafka's services there, with the cluster ``settings`` (``rafka.connect``'s) if given.
    Returns the Cluster; ``cluster.shutdown()`` and ``ray.shutdown()`` end it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import rafka
    from rafka.actors.placement import DEFAULT_DISK, DISK_LABEL, DISK_RESOURCE

    shutil.rmtree(data_dir, ignore_errors=True)
    ray.init(
        address="local", resources={DISK_RESOURCE: 1}, labels={DISK_LABEL: DEFAULT_DISK},
        include_dashboard=False, namespace=namespace, logging_level="WARNING",
    )  # fmt: skip
    return rafka.connect(data_dir=str(data_dir), namespace=namespace, settings=settings)
