"""What a crash at each point may and must leave, kept while a workload runs.

Points are counts of recorded operations: a crash at point ``k`` happens after the first
``k`` operations. A record is identified by its offset and content ``(key, value,
timestamp)``.

- ``must(k)``: records the log had acknowledged as flushed by point ``k`` (a flush, a roll or
  a close had returned), less those an operation begun by then may remove (truncation,
  delete_records, retention, compaction). Every one must be in a reopened image.
- ``may_hold(offset, content, k)``: whether that record had been written at that offset by
  point ``k``. Nothing else may be served.
"""

from __future__ import annotations

from bisect import bisect_right

Content = tuple  # (key, value, timestamp)


class Ledger:
    def __init__(self) -> None:
        self.current: dict[int, Content] = {}  # what the live log holds
        self._written: dict[int, list[tuple[int, Content]]] = {}
        self._must_points: list[int] = [0]
        self._must: list[dict[int, Content]] = [{}]

    # -- while the workload runs ---------------------------------------------------------------

    def appended(self, point: int, records: dict[int, Content]) -> None:
        """Records written by an operation that began at ``point``."""
        for offset, content in records.items():
            self._written.setdefault(offset, []).append((point, content))
        self.current.update(records)

    def flushed(self, point: int) -> None:
        """Everything the log holds is durable from ``point`` on."""
        self._set_must(point, dict(self.current))

    def removing(self, point: int, now_held: dict[int, Content]) -> None:
        """An operation begun at ``point`` changed the log to hold ``now_held``: records it
        dropped may be gone in any crash from ``point`` on."""
        must = {o: c for o, c in self._must[-1].items() if now_held.get(o) == c}
        self._set_must(point, must)
        self.current = dict(now_held)

    def _set_must(self, point: int, must: dict[int, Content]) -> None:
        if point < self._must_points[-1]:
            raise ValueError(f"must-set at {point} after one at {self._must_points[-1]}")
        self._must_points.append(point)
        self._must.append(must)

    # -- when checking a crash image -----------------------------------------------------------

    def must(self, point: int) -> dict[int, Content]:
        return self._must[self.must_version(point)]

    def must_version(self, point: int) -> int:
        """Which must-set applies at ``point``: images are distinct only together with it."""
        return bisect_right(self._must_points, point) - 1

    def may_hold(self, offset: int, content: Content, point: int) -> bool:
        return any(p < point and c == content for p, c in self._written.get(offset, ()))
