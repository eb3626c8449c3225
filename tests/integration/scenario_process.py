"""Run a LocalCluster scenario script in a process of its own (a process holds one Ray
connection, and the test session's is taken) and in a session of its own, so that a run past
its time is killed with every process it started (the Ray nodes of its LocalCluster).
The script prints its report as JSON on a line starting ``REPORT ``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def run_scenario(script: str, work: Path, timeout_s: float) -> dict[str, Any]:
    """The script's report (run with ``work / "data"`` as its data directory); its stderr is
    kept in ``work / "stderr.log"``. Fails the test on a timeout, on no report, and on a
    report with an ``error``."""
    stderr_path = work / "stderr.log"
    proc = subprocess.Popen(
        [sys.executable, script, str(work / "data")], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        stderr_path.write_text(err)
        pytest.fail(f"the scenario did not finish in {timeout_s} s (output in "
                    f"{stderr_path}); its end:\n{err[-5000:]}")  # fmt: skip
    finally:
        if proc.poll() is None:  # interrupted: take its Ray nodes down with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr_path.write_text(err)
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert lines, f"no report, exit {proc.returncode} (output in {stderr_path}):\n{err[-3000:]}"
    found = json.loads(lines[-1][len("REPORT "):])
    assert "error" not in found, found["error"] + f"\n(output in {stderr_path})"
    return found
