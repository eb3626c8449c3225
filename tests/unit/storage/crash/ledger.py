"""What a crash at each point may and must leave, kept while a workload runs.

Points are counts of recorded operations: a crash at point ``k`` happens after the first
``k`` operations. A record is identified by its offset and content ``(key, value,
timestamp)``.

- ``must(k)``: records the log had acknowledged as flushed by point ``k`` (a flush, a roll or
  a close had returned), less those an operation begun by then may remove (truncation,
  delete_records, retention, compaction). Every one must be in a reopened image.
- ``may_hold(offset, content, k)``: whether that record had been written at that offset by
  point ``k`` and not removed for good since: a record a finished removal took out (the
  removal returned, so it is durable) must not come back unless written again. Nothing else
  may be served.

A workload may restart from a crash image of an earlier point (``restarted``): what happened
after that point is then another history, which no point after the restart can see.
"""

from __future__ import annotations

from bisect import bisect_right

Content = tuple  # (key, value, timestamp)
_FOREVER = float("inf")


class Ledger:
    def __init__(self) -> None:
        self.current: dict[int, Content] = {}  # what the live log holds
        # offset -> [point written, content, first point that no longer sees it]
        self._written: dict[int, list[list]] = {}
        self._must_points: list[int] = [0]
        self._must: list[dict[int, Content]] = [{}]
        # (offset, content) -> [point a removal returned, first point that no longer sees it]
        self._removed: dict[tuple[int, Content], list[list]] = {}
        # offset -> [point a truncation returned, first point that no longer sees it]
        self._truncated: dict[int, list[list]] = {}
        # [point an operation that moved the log start returned, the start, until]
        self._log_starts: list[list] = []

    # -- while the workload runs ---------------------------------------------------------------

    def appended(self, point: int, records: dict[int, Content]) -> None:
        """Records written by an operation that began at ``point``."""
        for offset, content in records.items():
            self._written.setdefault(offset, []).append([point, content, _FOREVER])
        self.current.update(records)

    def flushed(self, point: int) -> None:
        """Everything the log holds is durable from ``point`` on."""
        self._set_must(point, dict(self.current))

    def removing(
        self, point: int, now_held: dict[int, Content], durable_at: int | None = None,
        truncation: bool = False,
    ) -> None:  # fmt: skip
        """An operation begun at ``point`` changed the log to hold ``now_held``: records it
        dropped may be gone in any crash from ``point`` on, and, when the operation made the
        removal durable before returning at ``durable_at``, must be gone from then on."""
        must = {o: c for o, c in self._must[-1].items() if now_held.get(o) == c}
        self._set_must(point, must)
        if durable_at is not None:
            for offset, content in self.current.items():
                if now_held.get(offset) != content:
                    self._removed.setdefault((offset, content), []).append(
                        [durable_at, _FOREVER]
                    )
                    if truncation:
                        self._truncated.setdefault(offset, []).append([durable_at, _FOREVER])
        self.current = dict(now_held)

    def log_start_moved(self, point: int, log_start: int) -> None:
        """An operation that returned at ``point`` made ``log_start`` durable."""
        self._log_starts.append([point, log_start, _FOREVER])

    def durable_log_start(self, point: int) -> int:
        """The log start no crash at ``point`` may go below."""
        return max((s for p, s, until in self._log_starts if p <= point < until), default=0)

    def restarted(self, crash_point: int, restart_point: int, now_held: dict) -> None:
        """The workload restarted at ``restart_point`` from an image of a crash at
        ``crash_point``: writes and removals after the crash are unseen from now on."""
        for entries in self._written.values():
            for entry in entries:
                if entry[0] >= crash_point:
                    entry[2] = min(entry[2], restart_point)
        for entry in self._log_starts:
            if entry[0] > crash_point:
                entry[2] = min(entry[2], restart_point)
        for table in (self._removed, self._truncated):
            for entries in table.values():
                for entry in entries:
                    if entry[0] > crash_point:
                        entry[1] = min(entry[1], restart_point)
        self.removing(restart_point, now_held)

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

    def _writes(self, offset: int, point: int) -> list[tuple[int, Content]]:
        return [(p, c) for p, c, until in self._written.get(offset, ()) if p < point < until]

    def may_hold(self, offset: int, content: Content, point: int) -> bool:
        written = [p for p, c in self._writes(offset, point) if c == content]
        if not written:
            return False
        removed = [r for r, until in self._removed.get((offset, content), ())
                   if r <= point < until]  # fmt: skip
        return not removed or max(written) >= max(removed)

    def truncated_for_good(self, offset: int, point: int) -> bool:
        """Whether a truncation that returned by ``point`` removed ``offset`` and nothing was
        written there since (so no state may still describe a record there)."""
        truncated = [t for t, until in self._truncated.get(offset, ()) if t <= point < until]
        if not truncated:
            return False
        written = [p for p, _ in self._writes(offset, point)]
        return not written or max(written) < max(truncated)
