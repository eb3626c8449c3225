"""A model of what a file system keeps across a crash, fed with the storage engine's operations.

The rules (ALICE's and CrashMonkey's conservative model of a POSIX file system on Linux):

- A process kill keeps everything written: the page cache outlives the process.
- A power loss keeps each file's bytes and size as of its last fsync/fdatasync, and each
  directory's entries (creations, renames, removals) as of that directory's last fsync. What
  was written or changed after that may also have reached the disk, in part: some of a
  file's later writes in order, the last one possibly torn; some of the later directory
  operations, either in the order they were made (ext4 and xfs journal metadata in order)
  or any subset of them (file systems that reorder, such as btrfs).

Nodes are files and directories; a directory entry names a node, so a file renamed over
another keeps its own bytes, and a durable entry can still name a node whose newer name was
never synced. Paths are relative to the root the model was made for, whose own entry is
taken as durable.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

_ids = itertools.count()


@dataclass(eq=False)
class FileNode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    # Changes since the last sync, oldest first: ("write", position, bytes) or ("size", n).
    unsynced: list = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_ids))

    def write(self, position: int, data: bytes) -> None:
        if len(self.data) < position:
            self.data.extend(bytes(position - len(self.data)))
        self.data[position : position + len(data)] = data
        self.unsynced.append(("write", position, bytes(data)))

    def resize(self, size: int) -> None:
        if size <= len(self.data):
            del self.data[size:]
        else:
            self.data.extend(bytes(size - len(self.data)))
        self.unsynced.append(("size", size))

    def sync(self) -> None:
        self.durable = bytes(self.data)
        self.unsynced = []

    def persisted(
        self, changes: int, torn: bool, rng: random.Random, zero_filled: bool = False
    ) -> bytes:
        """The bytes after the durable state plus the first ``changes`` unsynced changes, the
        last of them cut short when ``torn`` (a write that reached the disk in part); with
        ``zero_filled`` the new size reached the disk but not the data (zeros instead)."""
        content = bytearray(self.durable)
        for i, change in enumerate(self.unsynced[:changes]):
            if change[0] == "size":
                size = change[1]
                content = content[:size] + bytes(max(0, size - len(content)))
                continue
            _, position, data = change
            if torn and i == changes - 1 and len(data) > 1:
                data = data[: rng.randrange(1, len(data))]
            if zero_filled:
                data = bytes(len(data))
            if len(content) < position:
                content.extend(bytes(position - len(content)))
            content[position : position + len(data)] = data
        return bytes(content)


@dataclass(eq=False)
class DirectoryNode:
    entries: dict = field(default_factory=dict)
    durable: dict = field(default_factory=dict)
    # Entry changes since the last sync: (sequence, name, node or None for a removal).
    unsynced: list = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_ids))

    def link(self, name: str, node, sequence: int) -> None:
        self.entries[name] = node
        self.unsynced.append((sequence, name, node))

    def unlink(self, name: str, sequence: int) -> None:
        self.entries.pop(name, None)
        self.unsynced.append((sequence, name, None))

    def sync(self) -> None:
        self.durable = dict(self.entries)
        self.unsynced = []


Image = dict  # relative path -> bytes for files, None for directories


class FileSystemModel:
    """The volatile and durable state of a directory tree, changed one operation at a time."""

    def __init__(self) -> None:
        self.root = DirectoryNode()
        self.sequence = 0  # orders directory operations across directories

    # -- lookups -------------------------------------------------------------------------------

    def _directory(self, parts: tuple[str, ...]) -> DirectoryNode:
        node = self.root
        for part in parts:
            node = node.entries[part]
        return node

    def lookup(self, path: tuple[str, ...]):
        return self._directory(path[:-1]).entries.get(path[-1]) if path else self.root

    # -- operations (paths are tuples of names below the root) ---------------------------------

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def make_directory(self, path: tuple[str, ...]) -> None:
        self._directory(path[:-1]).link(path[-1], DirectoryNode(), self._next())

    def create(self, path: tuple[str, ...]) -> FileNode:
        """The file at ``path``, created empty when missing."""
        node = self.lookup(path)
        if node is None:
            node = FileNode()
            self._directory(path[:-1]).link(path[-1], node, self._next())
        return node

    def rename(self, source: tuple[str, ...], target: tuple[str, ...]) -> None:
        directory = self._directory(source[:-1])
        node = directory.entries[source[-1]]
        sequence = self._next()  # one atomic step: both entries change together
        directory.unlink(source[-1], sequence)
        self._directory(target[:-1]).link(target[-1], node, sequence)

    def unlink(self, path: tuple[str, ...]) -> None:
        directory = self._directory(path[:-1])
        if path[-1] in directory.entries:
            directory.unlink(path[-1], self._next())

    def sync_directory(self, path: tuple[str, ...]) -> None:
        self._directory(path).sync()

    # -- crash images --------------------------------------------------------------------------

    def after_kill(self) -> Image:
        """What a process kill leaves: everything written."""
        image: Image = {}

        def walk(directory: DirectoryNode, prefix: tuple[str, ...]) -> None:
            for name, node in directory.entries.items():
                path = prefix + (name,)
                if isinstance(node, DirectoryNode):
                    image["/".join(path)] = None
                    walk(node, path)
                else:
                    image["/".join(path)] = bytes(node.data)

        walk(self.root, ())
        return image

    def after_power_loss(
        self, rng: random.Random | None = None, metadata_cut: int | None = None,
        all_writes: bool = False, metadata_subset: set[int] | None = None,
        zero_filled: bool = False,
    ) -> Image:  # fmt: skip
        """What a power loss leaves. With no arguments, exactly the synced state. With
        ``metadata_cut``, directory operations up to that sequence number also persisted
        (in order); with ``metadata_subset``, those whose sequence numbers it holds (in any
        order); with ``rng``, each file also kept a random prefix of its unsynced changes,
        the last possibly torn; with ``all_writes``, every unsynced change of every file
        persisted (but no unsynced directory operation); with ``zero_filled``, every file
        reached its latest size but its unsynced bytes read as zeros."""
        image: Image = {}

        def persisted(sequence: int) -> bool:
            if metadata_subset is not None:
                return sequence in metadata_subset
            return metadata_cut is not None and sequence <= metadata_cut

        def entries_of(directory: DirectoryNode) -> dict:
            entries = dict(directory.durable)
            if metadata_cut is not None or metadata_subset is not None:
                for sequence, name, node in directory.unsynced:
                    if not persisted(sequence):
                        continue
                    if node is None:
                        entries.pop(name, None)
                    else:
                        entries[name] = node
            return entries

        def content_of(node: FileNode) -> bytes:
            if zero_filled:
                return node.persisted(len(node.unsynced), False, random.Random(0), True)
            if all_writes:
                return bytes(node.data)
            if rng is None or not node.unsynced:
                return node.durable
            changes = rng.randint(0, len(node.unsynced))
            return node.persisted(changes, torn=changes > 0 and rng.random() < 0.5, rng=rng)

        def walk(directory: DirectoryNode, prefix: tuple[str, ...]) -> None:
            for name, node in sorted(entries_of(directory).items()):
                path = prefix + (name,)
                if isinstance(node, DirectoryNode):
                    image["/".join(path)] = None
                    walk(node, path)
                else:
                    image["/".join(path)] = content_of(node)

        walk(self.root, ())
        return image

    def unsynced_directory_operations(self) -> list[int]:
        """Sequence numbers of directory operations not yet synced, in order."""
        sequences: set[int] = set()

        def walk(directory: DirectoryNode) -> None:
            sequences.update(s for s, _, _ in directory.unsynced)
            for node in directory.entries.values():
                if isinstance(node, DirectoryNode):
                    walk(node)
            for node in directory.durable.values():
                if isinstance(node, DirectoryNode) and node not in directory.entries.values():
                    walk(node)

        walk(self.root)
        return sorted(sequences)


def restored(image: Image) -> FileSystemModel:
    """A model holding ``image`` with everything durable: the disk after a crash and reboot."""
    model = FileSystemModel()
    for path, content in sorted(image.items()):
        parts = tuple(path.split("/"))
        parent = model._directory(parts[:-1])
        node = DirectoryNode() if content is None else FileNode(bytearray(content), content)
        parent.entries[parts[-1]] = node
    def sync_all(directory: DirectoryNode) -> None:
        directory.sync()
        for node in directory.entries.values():
            if isinstance(node, DirectoryNode):
                sync_all(node)
    sync_all(model.root)
    return model
