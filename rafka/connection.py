"""``connect()`` and the ``Cluster`` handle: the user's entry point.

The Cluster handle is small and picklable: it carries the Ray namespace (and the address it
was reached at), nothing else. Unpickled inside a Ray task or actor, it attaches to the same
services by name, so a pipeline can fan out over Ray and open producers and consumers in
every worker.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from rafka.actors import service
from rafka.actors.handles import Gateway
from rafka.actors.placement import default_data_root, default_namespace
from rafka.clients.admin import Admin
from rafka.clients.consumer import Consumer
from rafka.clients.metadata import MetadataCache
from rafka.clients.producer import Producer
from rafka.cluster.settings import setting, validate_settings
from rafka.errors import BrokerNotAvailable, InvalidConfig

#: How long ``bootstrap_servers`` waits for the listeners to open, s.
LISTENERS_WAIT_S = 30.0

_gateways: dict[str, Gateway] = {}
_gateways_lock = threading.Lock()


def _gateway(namespace: str) -> Gateway:
    # One gateway per namespace per process: actor handles are looked up once and shared.
    with _gateways_lock:
        gateway = _gateways.get(namespace)
        if gateway is None:
            gateway = _gateways[namespace] = Gateway(namespace)
        return gateway


class Cluster:
    """A connection to one rafka cluster. Make producers, consumers and admins from it."""

    def __init__(self, namespace: str, address: str | None) -> None:
        self.namespace = namespace
        self.address = address
        self._metadata: MetadataCache | None = None

    @property
    def gateway(self) -> Gateway:
        return _gateway(self.namespace)

    @property
    def metadata(self) -> MetadataCache:
        if self._metadata is None:
            self._metadata = MetadataCache(self.gateway)
        return self._metadata

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` for Kafka clients (``bootstrap.servers``): the brokers' Kafka
        listeners, which the cluster opens when started with the setting ``listeners``
        (e.g. ``PLAINTEXT://127.0.0.1:0``). Waits up to 30 s for them to open; raises
        BrokerNotAvailable when the cluster has none."""
        deadline = time.monotonic() + LISTENERS_WAIT_S
        wanted = setting(self.gateway.call_controller("settings_in_force"), "listeners")
        while True:
            found = self.gateway.call_controller("describe_cluster")["bootstrap_servers"]
            if found:
                return found
            if not wanted or time.monotonic() > deadline:
                raise BrokerNotAvailable(
                    "no Kafka listener is open: start the cluster with the setting listeners "
                    "(rafka.connect(settings={'listeners': 'PLAINTEXT://0.0.0.0:9092'}) or "
                    "`rafka up --set listeners=PLAINTEXT://0.0.0.0:9092`), and see the node "
                    "agents' logs if it is set"
                )
            time.sleep(0.2)

    def admin(self) -> Admin:
        return Admin(self.gateway, self.metadata)

    def producer(self, **settings: Any) -> Producer:
        """A Producer (see ``rafka.clients.producer_config.make_config`` for the settings)."""
        return Producer(self.gateway, MetadataCache(self.gateway), **settings)

    def consumer(self, **settings: Any) -> Consumer:
        """A Consumer: ``assign`` partitions, or give ``group_id`` and ``subscribe`` to
        share topics with the other members of a consumer group (Kafka's settings, see
        ``rafka.clients.consumer.Consumer``)."""
        return Consumer(self.gateway, MetadataCache(self.gateway), **settings)

    def status(self) -> dict[str, Any]:
        return self.gateway.call_controller("describe_cluster")

    def shutdown(self) -> dict[str, int]:
        """Stop every service cleanly (replicas flush and close). Data stays on disk."""
        try:
            return service.stop_services(self.namespace)
        finally:
            self.gateway.reset()
            self._metadata = None

    def __reduce__(self):
        return (_attach, (self.namespace, self.address))

    def __repr__(self) -> str:
        return f"Cluster(namespace={self.namespace!r}, address={self.address!r})"


def _attach(namespace: str, address: str | None) -> Cluster:
    """Unpickling: attach to running services (inside Ray workers Ray is already up)."""
    import ray

    if not ray.is_initialized():
        # Fail at once, not after Ray's minutes of retrying, when that Ray has stopped.
        service.check_ray_answers(address or "auto")
        ray.init(address=address or "auto", namespace=namespace)
    return Cluster(namespace, address)


def connect(
    address: str | None = None,
    *,
    data_dir: str | None = None,
    namespace: str | None = None,
    auto_create_topics: bool | None = None,
    controller_disk: str | None = None,
    settings: dict[str, Any] | None = None,
    start: bool = True,
) -> Cluster:
    """Connect to rafka, starting what is missing.

    With no ``address``: attach to the Ray instance this process already uses, or to one
    running on this machine, or start a local one whose node offers the disk ``local``, with
    data in ``data_dir`` (default ``$RAFKA_DATA_DIR`` or ``./rafka-data``). With ``address``
    ("auto", "ray://head:10001", "host:6379"): join that Ray cluster. Either way the services
    are started unless they already run (``start=False`` only attaches). What is given here
    (``auto_create_topics``, ``controller_disk`` and the cluster ``settings``, Kafka broker
    property names listed in ``rafka.cluster.settings``) applies when the services start;
    the metadata log keeps the settings, so a later start without them keeps them. Settings
    given to running services that differ from the ones they run with raise InvalidConfig.

    A Ray instance that has stopped (killed, or the machine restarted) leaves its address
    file behind (``/tmp/ray/ray_current_cluster``, or ``$RAY_TMPDIR/ray/...``). With no
    ``address``, a file whose instance does not answer is ignored with a warning and a new
    local instance is started. A Ray address that does not answer, given here or in the
    ``RAY_ADDRESS`` environment variable (or found in that file for "auto"), raises
    BrokerNotAvailable within seconds, naming the address and what to do (start that Ray,
    delete the stale file, or pass another address), where Ray itself would wait for minutes.
    """
    cluster_settings = validate_settings(settings)
    if auto_create_topics is not None:
        cluster_settings["auto.create.topics.enable"] = bool(auto_create_topics)
    namespace = namespace or default_namespace()
    data_root = os.path.abspath(data_dir) if data_dir else default_data_root()
    service.ensure_ray(address, namespace)
    if service.needs_start(namespace):
        if not start:
            raise BrokerNotAvailable(
                f"no rafka services run in Ray namespace {namespace!r}; run `rafka up`"
            )
        service.start_services(data_root, namespace, cluster_settings, controller_disk)
    elif cluster_settings:
        check_running_settings(cluster_settings, service.running_settings(namespace))
    return Cluster(namespace, address)


def check_running_settings(asked: dict[str, Any], running: dict[str, Any]) -> None:
    """InvalidConfig naming every setting in ``asked`` that the running services do not use
    (a default counts as its value), and how to change them."""
    differ = {
        name: (setting(running, name), value) for name, value in asked.items()
        if setting(running, name) != value
    }  # fmt: skip
    if differ:
        listed = ", ".join(
            f"{n}={new!r} (running with {old!r})" for n, (old, new) in differ.items()
        )
        raise InvalidConfig(
            f"the rafka services already run with other settings: {listed}; cluster settings "
            "apply when the services start: stop them with `rafka down` (or "
            "cluster.shutdown()) and start them again with the new settings"
        )
