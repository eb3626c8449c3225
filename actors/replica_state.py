"""The partition state a replica keeps beside its log, in ``partition.metadata``.

The state is the controller's latest view of the partition as this replica last heard it
(``{topic, topic_id, partition, broker_id, leader, leader_epoch, isr, replicas,
partition_epoch, adding, removing, config, settings, controller_epoch, topic_created_at}``),
msgpack-encoded and replaced atomically on every change. Only the ``PartitionReplica`` that owns the
directory reads or writes it, from its one event loop.

After a crash the file holds the last state written whole (the write is atomic), possibly
older than the controller's; the replica therefore checks in with the controller before it
acts on it. An unreadable file counts as absent: the replica then starts from the state it
was created with, and still checks in when Ray reports it as reconstructed.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import msgpack
import ray

from rafka.storage import files
from rafka.storage.checkpoint import write_atomically

STATE_FILE = "partition.metadata"


def read_state(directory: str) -> dict[str, Any] | None:
    """The state saved in ``directory``; None when there is none or it cannot be decoded."""
    try:
        with open(os.path.join(directory, STATE_FILE), "rb") as f:
            return msgpack.unpackb(f.read())
    except (FileNotFoundError, ValueError, msgpack.UnpackException):
        return None


def write_state(directory: str, state: dict[str, Any]) -> None:
    """Replace the saved state atomically (a crash leaves the old or the new one)."""
    write_atomically(os.path.join(directory, STATE_FILE), msgpack.packb(state))


def state_version(state: dict[str, Any]) -> tuple[int, int]:
    """(leader epoch, partition epoch): states compare by this pair, newer is greater."""
    return state.get("leader_epoch", -1), state.get("partition_epoch", -1)


def is_stale(new: dict[str, Any], held: dict[str, Any]) -> bool:
    """True when ``new`` comes from an older controller than ``held`` did: another
    controller took over since (states without a controller epoch predate them)."""
    return new.get("controller_epoch", 0) < held.get("controller_epoch", 0)


def newer_topic_holds(saved: dict[str, Any], mine: dict[str, Any]) -> bool:
    """True when the directory's saved state is of a topic created after this replica's
    (same name, another id): this replica's topic was deleted since. States written before
    creation offsets existed count as the oldest."""
    return saved.get("topic_created_at", -1) > mine.get("topic_created_at", -1)


def with_defaults(state: dict[str, Any]) -> dict[str, Any]:
    """States written before partition epochs and reassignments existed lack those fields."""
    out = dict(state)
    out.setdefault("partition_epoch", 0)
    out.setdefault("adding", [])
    out.setdefault("removing", [])
    out.setdefault("settings", {})
    return out


def actor_was_reconstructed() -> bool:
    """True inside an actor that Ray restarted (its constructor runs again); False outside
    an actor."""
    try:
        with warnings.catch_warnings():  # Ray 2.50 warns about its own use of actor_id
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside an actor
        return False


def set_aside_stray_directory(directory: str, topic_id: str, logger) -> str:
    """Rename a partition directory that belongs to a deleted topic of the same name to
    ``<dir>.<topic id>-stray`` (Kafka's stray logs), so nothing of it is read again; the
    operator may delete it. Returns the new path."""
    target = stray_path(directory, topic_id)
    os.rename(directory, target)
    files.fsync_directory(os.path.dirname(directory))
    logger.warning("found files of deleted topic id %s; moved them to %s", topic_id, target)
    return target


def stray_path(directory: str, topic_id: str) -> str:
    """Where the files of topic id ``topic_id`` go when a newer topic of the same name takes
    the partition directory."""
    return f"{directory}.{topic_id}-stray"
