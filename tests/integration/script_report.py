"""Run a scenario script in its own process (a process holds one Ray connection, and the test
session's is taken) and return the JSON report it prints on a line starting ``REPORT ``."""

from __future__ import annotations

import json
import subprocess
import sys


def run_script(script: str, *args: str, timeout_s: float = 600) -> dict:
    done = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, timeout=timeout_s
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])
