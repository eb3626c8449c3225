"""KafkaListener: the Kafka wire protocol on a broker's node, for Kafka's own clients.

One actor per broker (data disk), pinned where the disk is, as its node agent is, and started
by that agent when the cluster setting ``listeners`` names any. It opens an asyncio server
per listed endpoint (TLS for SSL and SASL_SSL), reports the advertised endpoints to the
controller (which puts them in Kafka Metadata answers), keeps a copy of the controller's
users and ACLs, and serves each connection with ``rafka.wire.connection.Connection``. The
requests' meaning lives in ``rafka.wire.handlers``; the Ray calls in ``KafkaBackend``.

Trust model: Python handles inside the Ray cluster are trusted (Ray's token authentication
keeps others out of the cluster); a Kafka client is whoever reaches a listener, so listener
requests are authenticated (SASL_ listeners) and authorized (ACLs) here.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import ray

from rafka.actors.kafka_backend import KafkaBackend
from rafka.actors.logs import actor_logger, label_process_logs
from rafka.actors.placement import CONTROLLER_NAME, pinned_to_disk
from rafka.cluster.settings import setting
from rafka.errors import InvalidConfig
from rafka.wire import handlers
from rafka.wire.connection import Connection
from rafka.wire.listeners import Endpoint, advertised, parse_listeners
from rafka.wire.security_view import SecurityCache
from rafka.wire.session import Session
from rafka.wire.tls import certificate_principal, tls_context

#: How often the listener reports its endpoints and refreshes users and ACLs, s.
REPORT_INTERVAL_S = 5.0
SECURITY_REFRESH_S = 1.0
#: How often a node agent looks for its broker id, then for its listener, s.
REGISTRATION_WAIT_S = 0.2
LISTENER_CHECK_S = 30.0
LISTENER_PREFIX = "rafka-kafka-listener-"


def listener_name(disk: str) -> str:
    return f"{LISTENER_PREFIX}{disk}"


class KafkaListener:
    def __init__(self, namespace: str, disk: str, broker_id: int,
                 settings: dict[str, Any]) -> None:  # fmt: skip
        self.logger = actor_logger(__name__, "KafkaListener", disk=disk, broker=broker_id)
        label_process_logs(self.logger.prefix)
        self.namespace = namespace
        self.disk = disk
        self.broker_id = broker_id
        self.settings = settings
        self.endpoints = parse_listeners(setting(settings, "listeners"))
        self.backend = KafkaBackend(namespace)
        self.security = SecurityCache(settings)
        self.servers: dict[str, asyncio.AbstractServer] = {}
        self.advertised: list[Endpoint] = []
        self.connections: set[Connection] = set()
        self.failures: dict[str, str] = {}  # protocol -> why its server did not open
        self._started: asyncio.Task | None = None
        self._loops: list[asyncio.Task] = []
        # Opens by itself: after a crash Ray restarts this actor and nobody else calls it.
        ray.get_runtime_context().current_actor.start.remote()

    async def start(self) -> list[tuple[str, str, int]]:
        """Open the servers (once; again after a start that failed) and report them;
        returns the advertised endpoints."""
        if self._started is None or (self._started.done() and self._started.exception()):
            self._started = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._started)
        return [tuple(e) for e in self.advertised]

    async def _start(self) -> None:
        # Users and ACLs first: no request is served before they are known.
        while True:
            try:
                await self._refresh_security()
                break
            except Exception as e:  # noqa: BLE001 - the controller may be restarting
                self.logger.warning("users and ACLs not loaded yet (%s); retrying", e)
                await asyncio.sleep(SECURITY_REFRESH_S)
        bound: dict[str, int] = {}
        for endpoint in self.endpoints:
            try:
                server = await self._open(endpoint)
            except (OSError, InvalidConfig, ssl.SSLError) as e:
                self.failures[endpoint.protocol] = str(e)
                self.logger.error("cannot open the %s listener at %s: %s",
                                  endpoint.protocol, endpoint, e)  # fmt: skip
                continue
            self.servers[endpoint.protocol] = server
            bound[endpoint.protocol] = server.sockets[0].getsockname()[1]
        opened = [e for e in self.endpoints if e.protocol in self.servers]
        self.advertised = advertised(opened, bound, setting(self.settings, "advertised.listeners"),
                                     ray.util.get_node_ip_address())  # fmt: skip
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._every(REPORT_INTERVAL_S, self._report)),
                       loop.create_task(self._every(SECURITY_REFRESH_S, self._refresh_security))]
        self.logger.info("Kafka listeners: %s", ", ".join(map(str, self.advertised)))
        try:
            await self._report()
        except Exception as e:  # noqa: BLE001 - the report loop tries again
            self.logger.warning("could not report the listeners yet: %s", e)

    async def _open(self, endpoint: Endpoint) -> asyncio.AbstractServer:
        tls = tls_context(self.settings) if endpoint.uses_tls else None
        host = endpoint.host or None  # "" means every interface

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(endpoint, reader, writer)

        return await asyncio.start_server(serve, host, endpoint.port, ssl=tls,
                                          reuse_address=True, limit=1 << 20)  # fmt: skip

    async def _serve(self, endpoint: Endpoint, reader, writer) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        shown = next(a for a in self.advertised if a.protocol == endpoint.protocol)
        session = Session(self.backend, self.security, endpoint, str(peer[0]), self.settings,
                          f"kafka-{self.broker_id}", certificate_principal(writer),
                          (self.broker_id, shown.host, shown.port), self.namespace)  # fmt: skip
        connection = Connection(reader, writer, session, handlers.handler_for,
                                setting(self.settings, "socket.request.max.bytes"),
                                self.logger,
                                setting(self.settings, "connections.max.idle.ms") / 1000)
        self.connections.add(connection)
        try:
            await connection.serve()
        except Exception:  # noqa: BLE001 - one connection never ends the listener
            self.logger.exception("connection from %s failed", peer[0])
        finally:
            self.connections.discard(connection)

    async def _every(self, interval_s: float, step) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except Exception as e:  # noqa: BLE001 - retried on the next tick
                self.logger.warning("%s failed: %s", step.__name__, e)

    async def _report(self) -> None:
        controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
        await controller.register_listener.remote([self.broker_id],
                                                  [tuple(e) for e in self.advertised])

    async def _refresh_security(self) -> None:
        snapshot = await self.backend.controller("security_snapshot", self.security.version)
        if snapshot is not None:
            self.security.update(snapshot)

    async def describe(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "advertised": [str(e) for e in self.advertised],
            "failures": dict(self.failures),
            "connections": [c.describe() for c in self.connections],
        }

    async def stop(self) -> None:
        for server in self.servers.values():
            server.close()
        for task in self._loops:
            task.cancel()


async def keep_listener(namespace: str, disk: str, agent, logger) -> None:
    """A node agent's task: once its disk has a broker id, start the disk's listener when
    the cluster setting ``listeners`` names any, and start it again should it be gone."""
    while True:
        pause = REGISTRATION_WAIT_S  # until the disk has a broker id
        try:
            if agent.broker_id is not None:
                controller = ray.get_actor(CONTROLLER_NAME, namespace=namespace)
                settings = await controller.settings_in_force.remote()
                if not setting(settings, "listeners"):
                    return
                await ensure_listener(namespace, disk, agent.broker_id, settings)
                pause = LISTENER_CHECK_S
        except Exception as e:  # noqa: BLE001 - tried again shortly
            logger.warning("the Kafka listener did not start: %s", e)
            pause = REPORT_INTERVAL_S
        await asyncio.sleep(pause)


def ensure_listener(namespace: str, disk: str, broker_id: int, settings: dict[str, Any]):
    """Start (or find) the listener of ``disk`` and have it open its servers; returns the
    ObjectRef of its advertised endpoints."""
    actor = ray.remote(KafkaListener).options(
        name=listener_name(disk), namespace=namespace, get_if_exists=True,
        max_concurrency=10_000, **pinned_to_disk(disk),
    ).remote(namespace, disk, broker_id, settings)  # fmt: skip
    return actor.start.remote()
