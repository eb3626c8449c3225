"""Directory entries that recovery depends on are fsynced, not left in the page cache.

Creating, renaming or removing a file changes its directory, and only an fsync of the
directory makes that change survive a power loss. These tests record the os calls the storage
engine makes and check the order: the change, then an fsync of the partition directory.
"""

from __future__ import annotations

import os

import pytest

from rafka.storage.log_loader import CLEAN_SHUTDOWN_FILE, load_segments
from rafka.storage.segment import Segment

from .support import batch


class OsCalls:
    """The os calls that change or sync a directory, in order, with paths instead of fds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        self._paths: dict[int, str] = {}
        real_open, real_fsync, real_fdatasync = os.open, os.fsync, os.fdatasync
        real_unlink, real_replace = os.unlink, os.replace

        def open_(path, flags, *args, **kwargs):
            fd = real_open(path, flags, *args, **kwargs)
            self._paths[fd] = os.fspath(path)
            if flags & os.O_CREAT:
                self.events.append(("create", os.fspath(path)))
            return fd

        def fsync(fd):
            self.events.append(("fsync", self._paths.get(fd, f"fd {fd}")))
            return real_fsync(fd)

        def fdatasync(fd):
            self.events.append(("fdatasync", self._paths.get(fd, f"fd {fd}")))
            return real_fdatasync(fd)

        def unlink(path, *args, **kwargs):
            self.events.append(("unlink", os.fspath(path)))
            return real_unlink(path, *args, **kwargs)

        def replace(src, dst, *args, **kwargs):
            self.events.append(("replace", os.fspath(dst)))
            return real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(os, "unlink", unlink)
        monkeypatch.setattr(os, "replace", replace)

    def directory_synced_after(self, event: tuple[str, str], directory: str) -> bool:
        """True when ``event`` happened and an fsync of ``directory`` came after it."""
        if event not in self.events:
            return False
        later = self.events[self.events.index(event) + 1 :]
        return ("fsync", directory) in later


@pytest.fixture
def os_calls(monkeypatch):
    return OsCalls(monkeypatch)


def _closed_log(open_log) -> str:
    log = open_log()
    log.append_as_leader(batch([b"a", b"b"]), leader_epoch=0)
    log.close()
    return log.directory


def test_removing_the_clean_shutdown_marker_fsyncs_the_directory(open_log, os_calls):
    """The loader makes the marker's removal durable itself, so a power loss right after a
    restart cannot bring the marker back and skip the next recovery."""
    directory = _closed_log(open_log)
    marker = os.path.join(directory, CLEAN_SHUTDOWN_FILE)
    os_calls.events.clear()
    segments, report, _ = load_segments(
        directory, lambda base, suffix: Segment(directory, base, 4096, 1024, suffix),
        lambda header: None, gaps_allowed=False,
    )  # fmt: skip
    try:
        assert report.clean_shutdown
        assert not os.path.exists(marker)
        assert os_calls.directory_synced_after(("unlink", marker), directory), os_calls.events
    finally:
        for segment in segments:
            segment.close()


def test_close_fsyncs_the_directory_after_writing_the_clean_shutdown_marker(open_log, os_calls):
    """The marker written by a clean close is in the directory durably before close returns."""
    log = open_log()
    log.append_as_leader(batch([b"a"]), leader_epoch=0)
    os_calls.events.clear()
    log.close()
    marker = os.path.join(log.directory, CLEAN_SHUTDOWN_FILE)
    assert os_calls.directory_synced_after(("replace", marker), log.directory), os_calls.events


def test_a_flush_into_a_rolled_segment_makes_its_directory_entry_durable(open_log, os_calls):
    """Rolling creates the new segment's file; the flush that first covers records in it
    fsyncs the directory too, so they are not lost with a directory entry that never reached
    the disk (Kafka's flush does the same)."""
    log = open_log()
    log.append_as_leader(batch([b"a"]), leader_epoch=0)
    os_calls.events.clear()
    segment = log.roll()
    log.append_as_leader(batch([b"b"]), leader_epoch=0)
    log.flush()
    assert os_calls.directory_synced_after(("create", segment.log_path), log.directory), (
        os_calls.events
    )


def test_an_index_rebuilt_on_a_clean_open_is_durable_before_the_open_returns(
    open_log, os_calls, tmp_path
):
    """A clean-shutdown marker written later must never cover a rebuilt index still in the
    page cache, so the rebuild syncs it."""
    log = open_log({"segment.bytes": 400, "index.interval.bytes": 50})
    for i in range(12):
        log.append_as_leader(batch([b"x" * 40]), leader_epoch=0)
    index_path = log.segments[0].offset_index.path
    log.close()
    with open(index_path, "r+b") as f:
        f.write(b"\xff" * 8)  # an entry pointing past the log: the index is rebuilt
    os_calls.events.clear()
    reopened = open_log({"segment.bytes": 400, "index.interval.bytes": 50})
    assert index_path in reopened.recovery_report.indexes_rebuilt
    events = os_calls.events
    # Built under a temporary name, synced, renamed into place, and the rename synced.
    synced = events.index(("fdatasync", index_path + ".tmp"))
    renamed = events.index(("replace", index_path))
    assert synced < renamed, events
    assert os_calls.directory_synced_after(("replace", index_path), reopened.directory)
