"""Run ``rafka`` help screens in a fresh interpreter and check they did not import Ray."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import sys
from rafka.cli import main
for argv in {argvs!r}:
    try:
        main(argv)
    except SystemExit:
        pass
sys.exit(3 if 'ray' in sys.modules else 0)
"""


def help_without_ray(*argvs: list[str]) -> subprocess.CompletedProcess:
    """The finished process that printed the help of each of ``argvs``; its return code is 3
    when Ray was imported on the way."""
    code = _SCRIPT.format(argvs=[list(a) for a in argvs])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
