"""Recording the storage engine's file-system operations, and replaying them into the model.

``Recorder.install`` replaces the functions of ``rafka.storage.files`` (through which every
storage module reaches the disk) with wrappers that do the real call and append what changed
to ``operations``. Operations on open files name the open (a token), not the path, since a
file keeps its identity across a rename. ``replay`` feeds a prefix of the operations to a
``FileSystemModel``; the model after ``k`` operations is the state a crash at that point
starts from.

Operations (tuples):
    ("mkdir", path)                 a directory created
    ("open", token, path)           a file opened, created empty when missing
    ("write", token, data)          bytes appended (every storage write is an append)
    ("size", token, n)              the file truncated or extended to n bytes
    ("sync", token)                 fdatasync / fsync of the file
    ("close", token)
    ("rename", source, target)      atomic, within one directory
    ("unlink", path)
    ("syncdir", path)               fsync of a directory
    ("restore", image)              the machine rebooted after a crash and the tree is this
                                    image, all of it durable (a workload restarting from one)
Paths are tuples of names below the recorder's root; operations outside it are not recorded.
"""

from __future__ import annotations

import itertools
import os

import pytest

from rafka.storage import files

from .model import FileSystemModel, restored


class Recorder:
    """Records the operations under ``root`` made through ``rafka.storage.files``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.operations: list[tuple] = []
        self._tokens: dict[int, int] = {}  # open fd -> token
        self._next_token = itertools.count()

    def _relative(self, path: str) -> tuple[str, ...] | None:
        absolute = os.path.abspath(path)
        if absolute == self.root:
            return ()
        if not absolute.startswith(self.root + os.sep):
            return None
        return tuple(absolute[len(self.root) + 1 :].split(os.sep))

    def _record_open(self, fd: int, path: str) -> int | None:
        relative = self._relative(path)
        if relative is None:
            return None
        token = next(self._next_token)
        self._tokens[fd] = token
        self.operations.append(("open", token, relative))
        return token

    def _on_fd(self, fd: int, *operation) -> None:
        token = self._tokens.get(fd)
        if token is not None:
            self.operations.append((operation[0], token, *operation[1:]))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = {name: getattr(files, name) for name in (
            "open_for_append", "writev", "write", "ftruncate", "fdatasync", "close",
            "create_file", "truncate", "rename", "unlink", "make_directories",
            "fsync_directory",
        )}  # fmt: skip

        def open_for_append(path):
            fd = real["open_for_append"](path)
            self._record_open(fd, path)
            return fd

        def writev(fd, parts):
            written = real["writev"](fd, parts)
            self._on_fd(fd, "write", b"".join(bytes(p) for p in parts)[:written])
            return written

        def write(fd, data):
            written = real["write"](fd, data)
            self._on_fd(fd, "write", bytes(data[:written]))
            return written

        def ftruncate(fd, size):
            real["ftruncate"](fd, size)
            self._on_fd(fd, "size", size)

        def fdatasync(fd):
            real["fdatasync"](fd)
            self._on_fd(fd, "sync")

        def close(fd):
            real["close"](fd)
            self._on_fd(fd, "close")
            self._tokens.pop(fd, None)

        def create_file(path, data, sync):
            real["create_file"](path, data, sync)
            relative = self._relative(path)
            if relative is None:
                return
            token = next(self._next_token)
            self.operations += [("open", token, relative), ("size", token, 0),
                                ("write", token, bytes(data))]  # fmt: skip
            if sync:
                self.operations.append(("sync", token))
            self.operations.append(("close", token))

        def truncate(path, size):
            real["truncate"](path, size)
            relative = self._relative(path)
            if relative is not None:
                token = next(self._next_token)
                self.operations += [("open", token, relative), ("size", token, size),
                                    ("close", token)]  # fmt: skip

        def rename(source, target):
            real["rename"](source, target)
            a, b = self._relative(source), self._relative(target)
            if a is not None and b is not None:
                self.operations.append(("rename", a, b))

        def unlink(path):
            removed = real["unlink"](path)
            relative = self._relative(path)
            if removed and relative is not None:
                self.operations.append(("unlink", relative))
            return removed

        def make_directories(path):
            created = real["make_directories"](path)
            for directory in created:
                relative = self._relative(directory)
                if relative:
                    self.operations.append(("mkdir", relative))
            return created

        def fsync_directory(path):
            real["fsync_directory"](path)
            relative = self._relative(path)
            if relative is not None:
                self.operations.append(("syncdir", relative))

        for name, wrapper in (
            ("open_for_append", open_for_append), ("writev", writev), ("write", write),
            ("ftruncate", ftruncate), ("fdatasync", fdatasync), ("close", close),
            ("create_file", create_file), ("truncate", truncate), ("rename", rename),
            ("unlink", unlink), ("make_directories", make_directories),
            ("fsync_directory", fsync_directory),
        ):  # fmt: skip
            monkeypatch.setattr(files, name, wrapper)


class Replayer:
    """Feeds operations one at a time to a model; ``done`` is how many it has applied."""

    def __init__(self, operations: list[tuple]) -> None:
        self.operations = operations
        self.model = FileSystemModel()
        self.done = 0
        self._open: dict[int, object] = {}

    def step(self) -> None:
        op = self.operations[self.done]
        kind, model = op[0], self.model
        if kind == "mkdir":
            model.make_directory(op[1])
        elif kind == "open":
            self._open[op[1]] = model.create(op[2])
        elif kind == "write":
            node = self._open[op[1]]
            node.write(len(node.data), op[2])
        elif kind == "size":
            self._open[op[1]].resize(op[2])
        elif kind == "sync":
            self._open[op[1]].sync()
        elif kind == "close":
            self._open.pop(op[1], None)
        elif kind == "rename":
            model.rename(op[1], op[2])
        elif kind == "unlink":
            model.unlink(op[1])
        elif kind == "syncdir":
            model.sync_directory(op[1])
        elif kind == "restore":
            self.model = restored(op[1])
            self._open = {}
        else:
            raise ValueError(f"unknown operation {op!r}")
        self.done += 1


def describe(operation: tuple) -> str:
    """One line for a failure report."""
    kind = operation[0]
    if kind == "write":
        return f"write token={operation[1]} {len(operation[2])} bytes"
    if kind == "restore":
        return f"restore an image of {len(operation[1])} paths (restart after a crash)"
    return " ".join(str("/".join(p) if isinstance(p, tuple) else p) for p in operation)
