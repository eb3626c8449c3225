"""Running one chaos script for a test: in its own process (the test session may hold a
Ray connection) and its own session, so a run past its time, or a test interrupted, is
stopped with every Ray process it started; its last REPORT line, parsed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def run_report(script: str, args: list[str], out_dir: Path, name: str, timeout_s: float,
               extra_logs: str = "") -> tuple[dict, str]:  # fmt: skip
    """(report, message): the run's REPORT and a message naming its summary and its log
    files (``<name>.out``, ``<name>.err`` in ``out_dir``) for the test's assertions. Fails
    the test when the run printed no report."""
    stdout, stderr = out_dir / f"{name}.out", out_dir / f"{name}.err"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        process = subprocess.Popen([sys.executable, script, *args], stdout=out, stderr=err,
                                   start_new_session=True)  # fmt: skip
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if process.poll() is None:  # past its time, or the test interrupted
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    lines = [line for line in stdout.read_text().splitlines() if line.startswith("REPORT ")]
    logs = f"(logs: {stdout}, {stderr}{extra_logs})"
    assert lines, f"the run printed no report, exit {process.returncode} {logs}\n" + (
        stderr.read_text()[-3000:]
    )
    report = json.loads(lines[-1][len("REPORT "):])
    print("\n" + report["summary"])
    return report, f"\n{report['summary']}\n{logs}"
