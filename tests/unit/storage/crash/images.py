"""The crash images checked at each point: which variants exist and how each is built.

Random choices (which unsynced writes and directory operations persisted) are seeded by the
workload, the point and the variant, so an image named in a failure comes back the same.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil

from .model import FileSystemModel, Image

VARIANTS = ("kill", "power", "power-all-writes", "power-torn-0", "power-torn-1",
            "power-meta-0", "power-meta-1", "power-reordered-0", "power-reordered-1",
            "power-zero-filled")  # fmt: skip


def image_of(model: FileSystemModel, workload: str, point: int, variant: str) -> Image:
    """The image ``variant`` of a crash at ``point``; random choices are seeded by all three,
    so the same image comes back on every run."""
    rng = random.Random(f"{workload}:{point}:{variant}")
    if variant == "kill":
        return model.after_kill()
    if variant == "power":
        return model.after_power_loss()
    if variant == "power-all-writes":
        return model.after_power_loss(all_writes=True)
    if variant == "power-zero-filled":
        return model.after_power_loss(zero_filled=True)
    if variant.startswith("power-torn"):
        return model.after_power_loss(rng=rng)
    pending = model.unsynced_directory_operations()
    if variant.startswith("power-reordered"):
        return model.after_power_loss(
            rng=rng, metadata_subset={s for s in pending if rng.random() < 0.5}
        )
    return model.after_power_loss(rng=rng, metadata_cut=rng.choice(pending) if pending else None)


def digest(image: Image) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for path, content in sorted(image.items()):
        h.update(path.encode() + b"\0")
        h.update(b"d" if content is None else b"f%d:" % len(content) + content)
    return h.digest()




def materialize(image: Image, directory: str) -> None:
    """Write ``image`` under ``directory`` (emptied first)."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for path, content in sorted(image.items()):
        target = os.path.join(directory, *path.split("/"))
        if content is None:
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(content)
