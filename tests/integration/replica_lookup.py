"""Finding replicas from a test, whatever host actor holds them: every disk's agent says which
replicas its running hosts hold, and a replica is reached through its host."""

from __future__ import annotations

from rafka.actors.placement import replica_name
from rafka.actors.replica_handle import ReplicaHandle
from rafka.cluster.hosting import HOST_PREFIX

AGENT_PREFIX = "rafka-agent-"


def _named(ray, namespace: str, prefix: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == namespace and a["name"].startswith(prefix)]  # fmt: skip


def running_replicas(ray, namespace: str, topic_id: str | None = None) -> set[str]:
    """``replica_name``s of the replicas held by running hosts (of ``topic_id`` only, when
    given), as their agents report them."""
    out = set()
    for name in _named(ray, namespace, AGENT_PREFIX):
        try:
            agent = ray.get_actor(name, namespace=namespace)
            hosted = ray.get(agent.hosted.remote(), timeout=30)
        except Exception:  # an agent restarting with its node: its replicas are not running
            continue
        # Each entry: topic id, partition, broker id, then the host slot.
        out.update(replica_name(t, p, b) for t, p, b, *_ in hosted if topic_id in (None, t))
    return out


def find_replica(ray, namespace: str, topic_id: str, partition: int,
                 broker: int) -> ReplicaHandle | None:  # fmt: skip
    """The replica of ``partition`` on ``broker``, through the host that holds it; None
    when no running host does."""
    for name in _named(ray, namespace, f"{HOST_PREFIX}b{broker}-"):
        try:
            host = ray.get_actor(name, namespace=namespace)
            if (topic_id, partition) in [tuple(k[:2]) for k in ray.get(host.hosted.remote(),
                                                                   timeout=30)]:
                return ReplicaHandle(host, topic_id, partition)
        except Exception:  # gone or restarting
            continue
    return None
