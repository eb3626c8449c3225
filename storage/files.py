"""Every file-system call the storage engine makes, in one place.

The storage modules never call ``os`` or ``open`` on their files directly; they call these
functions. So what reaches the disk, and in which order, reads from one module, and the
crash-consistency checker (tests/unit/storage/crash) can record every operation by replacing
them. Errors are the OS's ``OSError``; callers turn them into KafkaStorageError with a hint.

What survives a power loss (Linux, any mainstream file system, conservatively): a file's
bytes and size as of its last ``fdatasync``/``fsync``, and a directory's entries (creations,
renames, removals) as of that directory's last ``fsync_directory``. A process kill loses
nothing that was written.
"""

from __future__ import annotations

import os


def open_for_append(path: str) -> int:
    """Open ``path`` for reading and appending, creating it if missing; returns the fd."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def file_size(fd: int) -> int:
    return os.fstat(fd).st_size


def writev(fd: int, parts: list) -> int:
    """Append the buffers in one call; returns the bytes written (short on a full disk)."""
    return os.writev(fd, parts)


def write(fd: int, data) -> int:
    return os.write(fd, data)


def pread(fd: int, size: int, position: int) -> bytes:
    return os.pread(fd, size, position)


def ftruncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)


def fdatasync(fd: int) -> None:
    os.fdatasync(fd)


def close(fd: int) -> None:
    os.close(fd)


def read_file(path: str) -> bytes | None:
    """The whole file, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def create_file(path: str, data: bytes, sync: bool) -> None:
    """Create or empty ``path`` and write ``data``; with ``sync``, fsync it before returning.
    The directory entry is not synced: see ``fsync_directory``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def truncate(path: str, size: int) -> None:
    os.truncate(path, size)


def rename(source: str, target: str) -> None:
    """Atomically replace ``target`` with ``source`` (same directory)."""
    os.replace(source, target)


def unlink(path: str) -> bool:
    """Remove ``path``; False when it was not there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def listdir(path: str) -> list[str]:
    return os.listdir(path)


def exists(path: str) -> bool:
    return os.path.exists(path)


def make_directories(path: str) -> list[str]:
    """Create ``path`` and any missing parents; returns the directories created, outermost
    first (each needs its parent fsynced to survive a power loss)."""
    missing = []
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    os.makedirs(path, exist_ok=True)
    return list(reversed(missing))


def fsync_directory(path: str) -> None:
    """Make creations, renames and removals of entries in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
