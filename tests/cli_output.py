"""Reading the CLI's plain-text tables back in tests."""

from __future__ import annotations


def table_rows(out: str, heading: str) -> list[list[str]]:
    """The rows (split on whitespace) of the indented table under the first line starting
    with ``heading``, its header row first."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return rows
