"""The pinned Ray / Spark / RayDP set is the one installed, and it imports together."""

import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pinned() -> dict[str, str]:
    text = PYPROJECT.read_text()
    deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    return {
        re.sub(r"\[.*\]", "", name): version
        for name, version in re.findall(r'"([A-Za-z0-9_.\[\]-]+)==([^"]+)"', deps)
    }


def test_installed_versions_are_the_pinned_ones():
    """Every dependency pinned in pyproject.toml is installed at exactly that version."""
    pins = pinned()
    assert {"ray", "raydp", "pyspark", "numpy", "pandas", "pyarrow"} <= pins.keys()
    wrong = {name: (want, md.version(name)) for name, want in pins.items()
             if md.version(name) != want}
    assert not wrong, f"installed versions differ from the pins: {wrong}"


def test_ray_raydp_pyspark_and_arrow_import_together():
    """The pinned set imports in one interpreter (numpy < 2 with pyarrow < 20)."""
    code = "import ray, raydp, pyspark, pyarrow, pandas, numpy; print(ray.__version__)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == pinned()["ray"]
