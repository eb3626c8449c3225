"""An exclusive lock on a data directory, held for as long as its owner process runs.

Kafka locks each log directory (``.lock``) so that two brokers never write one directory.
rafka's controller does the same for its metadata directory: Ray may start a new controller
process while an old one still runs (a node that only looked dead), and two processes
appending to one metadata log would each lose the other's changes on replay. The lock is an
``flock`` on ``<directory>/.lock``: the kernel drops it when the process dies, however it
dies, so a crashed owner never leaves the directory locked.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Callable

from rafka.errors import KafkaStorageError

LOCK_FILE = ".lock"


class DirectoryLocked(KafkaStorageError):
    """Another process held the directory's lock for longer than the wait allowed."""


class DirectoryLock:
    """Holds ``<directory>/.lock`` exclusively from ``acquire`` until ``release``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; True when this object holds it now."""
        if self._fd is not None:
            return True
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(
        self, timeout_s: float, on_wait: Callable[[str], None] | None = None,
        poll_s: float = 0.2,
    ) -> None:  # fmt: skip
        """Take the lock, waiting up to ``timeout_s`` for its holder to stop (``on_wait`` is
        told once who holds it); DirectoryLocked when it does not."""
        deadline = time.monotonic() + timeout_s
        told = False
        while not self.try_acquire():
            if not told and on_wait is not None:
                on_wait(self.holder())
                told = True
            if time.monotonic() >= deadline:
                raise DirectoryLocked(
                    f"{self.directory} is locked by {self.holder()} for more than "
                    f"{timeout_s:g} s: another process still uses it; stop that process "
                    "(or wait for it to exit), then start again"
                )
            time.sleep(poll_s)

    def holder(self) -> str:
        """Who holds the lock, as its file says ("process <pid>")."""
        try:
            with open(self.path) as f:
                pid = f.read().strip()
        except OSError:
            pid = ""
        return f"process {pid}" if pid else "another process"

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
