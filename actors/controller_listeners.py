"""The controller's map of Kafka listeners: which address reaches which broker.

Listener actors (``rafka.actors.kafka_listener``) report the brokers on their node and the
endpoints they advertise, at start and every few seconds after, so a restarted controller
knows them again within one report. The map is memory only: it describes processes, not
durable state. Kafka's Metadata answers list the live brokers that have an endpoint of the
asking connection's protocol.
"""

from __future__ import annotations

import time
from typing import Any

from rafka.wire.listeners import Endpoint, bootstrap_string

#: An endpoint not reported again for this long is dropped (its listener stopped), s.
ENDPOINT_TTL_S = 30.0


class ListenerRegistry:
    def __init__(self, core, topics) -> None:
        self.core = core
        self.topics = topics
        # broker id -> (endpoints as (protocol, host, port) tuples, when last reported)
        self._endpoints: dict[int, tuple[list[tuple[str, str, int]], float]] = {}

    def register(self, broker_ids: list[int], endpoints: list) -> int:
        """``endpoints`` (protocol, host, port) reach every broker in ``broker_ids``."""
        now = time.monotonic()
        listed = [(str(p), str(h), int(port)) for p, h, port in endpoints]
        for broker_id in broker_ids:
            self._endpoints[int(broker_id)] = (listed, now)
        return len(broker_ids)

    def endpoints(self, protocol: str | None = None) -> dict[int, list[tuple[str, str, int]]]:
        """Live brokers' current endpoints (of ``protocol`` only, when given)."""
        now = time.monotonic()
        is_live = self.core.liveness.is_live
        out = {}
        for broker_id, (listed, seen) in sorted(self._endpoints.items()):
            if now - seen > ENDPOINT_TTL_S or broker_id not in self.core.image.brokers:
                continue
            if not is_live(broker_id):
                continue
            chosen = [e for e in listed if protocol is None or e[0] == protocol]
            if chosen:
                out[broker_id] = chosen
        return out

    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the live brokers' first listener (the first protocol in
        ``listeners``), for Kafka clients' ``bootstrap.servers``; "" when none reported."""
        endpoints = self.endpoints()
        if not endpoints:
            return ""
        protocol = next(iter(endpoints.values()))[0][0]
        return bootstrap_string([Endpoint(*e) for listed in endpoints.values()
                                 for e in listed if e[0] == protocol])  # fmt: skip

    async def kafka_metadata(
        self, names: list[str] | None, allow_auto_create: bool, protocol: str
    ) -> dict[str, Any]:
        """What a Kafka Metadata answer needs: the brokers reachable over ``protocol``
        (id, host, port, rack), the broker named as controller, and each topic's
        description (or (errno, message)); ``names=None``: every topic but internal ones."""
        image = self.core.image
        if names is None:
            topics = {n: self.topics.describe(image.topic(n))
                      for n in self.topics.list_topics(False)}  # fmt: skip
        else:
            topics = await self.topics.metadata(names, allow_auto_create)
        brokers = [
            (broker_id, host, port, image.brokers[broker_id].rack)
            for broker_id, listed in self.endpoints(protocol).items()
            for _, host, port in listed[:1]
        ]
        controller_id = brokers[0][0] if brokers else -1
        return {"brokers": brokers, "controller_id": controller_id, "topics": topics}
