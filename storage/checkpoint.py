"""Small files that must never be half-written: write to a temporary name, fsync, rename.

A reader sees the old content or the new, never a mix. Used for the leader-epoch checkpoint,
the log-start-offset and recovery-point files and producer-state snapshots. Creating, renaming
or removing a file is durable only once its directory is fsynced; every helper here does it.
"""

from __future__ import annotations

import os

from rafka.errors import KafkaStorageError
from rafka.storage import files


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably (file and directory entry are fsynced)."""
    tmp = path + ".tmp"
    try:
        files.create_file(tmp, data, sync=True)
        files.rename(tmp, path)
        files.fsync_directory(os.path.dirname(path) or ".")
    except OSError as e:
        raise KafkaStorageError(
            f"cannot write {path}: {e.strerror}; make the data directory writable"
        ) from e


def remove_durably(path: str) -> None:
    """Unlink ``path`` (if present) and fsync its directory: until the directory is synced, a
    power loss can bring the file back."""
    try:
        if files.unlink(path):
            files.fsync_directory(os.path.dirname(path) or ".")
    except OSError as e:
        raise KafkaStorageError(
            f"cannot remove {path}: {e.strerror}; make the data directory writable"
        ) from e


def read_text(path: str) -> str | None:
    """The file's text, or None if it does not exist."""
    data = files.read_file(path)
    return None if data is None else data.decode("utf-8")


def write_offset(path: str, offset: int) -> None:
    write_atomically(path, f"{offset}\n".encode())


def read_offset(path: str) -> int | None:
    """The offset stored in ``path``, or None if the file is missing or unreadable."""
    try:
        text = read_text(path)
        return int(text) if text is not None else None
    except ValueError:
        return None
