"""What a node agent knows of its disk and node: the disk's broker identity
(``meta.properties`` in its data directory, so it belongs to the disk, not to the Ray node),
the node's labels and the memory it has available."""

from __future__ import annotations

import os

import ray

from rafka.storage.checkpoint import read_text, write_atomically

META_PROPERTIES = "meta.properties"


def read_meta_properties(directory: str) -> dict[str, str]:
    text = read_text(os.path.join(directory, META_PROPERTIES)) or ""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def write_meta_properties(directory: str, props: dict[str, str]) -> None:
    body = "#rafka broker identity of this disk; do not copy to another disk\n"
    body += "".join(f"{k}={v}\n" for k, v in sorted(props.items()))
    write_atomically(os.path.join(directory, META_PROPERTIES), body.encode())


def memory_available() -> int | None:
    """Bytes of memory this node has available (Linux's MemAvailable); None where that is
    not known (the controller then does not check what fits here)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def node_label(name: str) -> str | None:
    """A label of the node this process runs on (None when it is not set)."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return (node.get("Labels") or {}).get(name)
    return None
