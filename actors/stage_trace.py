"""Stage timestamps of produced data across processes: where an acknowledgement's time goes.

Off unless the environment variable ``RAFKA_STAGE_TRACE_DIR`` names a directory when the
process imports this module (or ``enable`` is called), and then only while the switch file
``<dir>/on`` exists; every process of the cluster (the producer's, the leader's, the
followers') then appends one line per stage a piece of data passes to
``<dir>/<pid>.trace``: ``<stage> <end offset> <monotonic ns> <peer>``. The end offset (the
offset after the data's last record) is the join key: a stage "reached" offset ``E`` at the
first time it was marked with an end offset of ``E`` or more. ``time.monotonic_ns`` is
CLOCK_MONOTONIC, one clock for every process of a machine, so marks of a single-machine
cluster (a ``LocalCluster``) compare directly; on several machines they do not.

Stages, in the order an acks=all record passes them (``peer``: the follower's broker id
where one is involved, else -1):

    client.encode      the sender starts encoding the request's batches
    client.call        the produce call leaves the client
    leader.received    the leader's produce starts (after its turn in the request order)
    leader.appended    the leader's append is done
    leader.sent        a follower fetch leaves the leader with data up to the end offset
    follower.received  the follower has that answer
    follower.appended  the follower's log end reached the end offset
    leader.fetched     a follower fetch from this offset arrived (its progress report)
    leader.committed   the high watermark reached the end offset
    leader.answered    the produce answer leaves the leader
    client.answered    the client has the answer (on Ray's callback thread)
    client.completed   the record futures are completed

The cost when off is one module-level boolean test per call site; with the variable set and
the switch off, a clock read per mark. When on, a line is written and flushed per mark:
meant for the breakdown benchmark at a few hundred marks a second, not for production.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger(__name__)

ENV = "RAFKA_STAGE_TRACE_DIR"

STAGES = (
    "client.encode", "client.call", "leader.received", "leader.appended", "leader.sent",
    "follower.received", "follower.appended", "leader.fetched", "leader.committed",
    "leader.answered", "client.answered", "client.completed",
)  # fmt: skip

_directory = os.environ.get(ENV) or None
ENABLED = _directory is not None
#: Marks are written only while ``<dir>/on`` exists (looked at every SWITCH_CHECK_NS), so a
#: cluster started with the variable set costs nothing measurable until a benchmark asks.
SWITCH = "on"
SWITCH_CHECK_NS = 100_000_000
_lock = threading.Lock()
_file = None
_switch_checked_ns = -SWITCH_CHECK_NS
_switch_on = False


def enable(directory: str) -> None:
    """Trace into ``directory`` from this process, and from the processes it starts from
    now on (they inherit the environment variable)."""
    global _directory, ENABLED
    os.makedirs(directory, exist_ok=True)
    os.environ[ENV] = _directory = directory
    ENABLED = True


def switch(directory: str, on: bool) -> None:
    """Start or stop the marks of every process tracing into ``directory``; they notice
    within SWITCH_CHECK_NS, and each run switched on writes to fresh files (the files of an
    earlier run may be removed while it is off)."""
    path = os.path.join(directory, SWITCH)
    if on:
        open(path, "w").close()
    elif os.path.exists(path):
        os.remove(path)


def mark(stage: str, end_offset: int, at_ns: int | None = None, peer: int = -1) -> None:
    """Record that ``stage`` reached ``end_offset`` at ``at_ns`` (now when None). Callers
    test ``ENABLED`` first, so a disabled trace costs no call."""
    global _file, _switch_checked_ns, _switch_on
    if not ENABLED:
        return
    now = time.monotonic_ns()
    with _lock:
        if now - _switch_checked_ns >= SWITCH_CHECK_NS:
            _switch_checked_ns = now
            _switch_on = os.path.exists(os.path.join(_directory, SWITCH))
            if _file is not None and os.fstat(_file.fileno()).st_nlink == 0:
                _file.close()  # a new traced run removed the last run's files
                _file = None
        if not _switch_on:
            return
        try:
            if _file is None:
                _file = open(os.path.join(_directory, f"{os.getpid()}.trace"), "a", buffering=1)
            _file.write(f"{stage} {end_offset} {now if at_ns is None else at_ns} {peer}\n")
        except OSError as e:  # a trace must never fail the produce or fetch it marks
            _disable(e)


def _disable(error: OSError) -> None:
    """Stop tracing in this process after a write failed (lock held)."""
    global ENABLED, _file
    ENABLED = False
    _file = None
    log.warning("stage trace off in this process: cannot write to %s (%s); check %s",
                _directory, error, ENV)


def read(directory: str) -> dict[str, list[tuple[int, int, int]]]:
    """Every mark under ``directory``: stage -> [(end offset, ns, peer)] sorted by time."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".trace"):
            continue
        with open(os.path.join(directory, name)) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 4:
                    continue  # a line cut short by a killed process
                stage, end, at, peer = parts
                out.setdefault(stage, []).append((int(end), int(at), int(peer)))
    for marks in out.values():
        marks.sort(key=lambda m: m[1])
    return out
