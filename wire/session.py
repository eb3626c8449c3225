"""What the handlers of one connection share: who the client is, and what serves it.

``principal`` is Kafka's: ``User:ANONYMOUS`` on PLAINTEXT, ``User:<distinguished name>`` of
the client certificate on SSL when it sent one, and ``User:<name>`` once SASL succeeds.
Every listener request is authorized for that principal (``authorize``); Python handles
inside the Ray cluster never come through here.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Protocol

from rafka.wire.listeners import Endpoint

ANONYMOUS = "User:ANONYMOUS"

_session_ids = itertools.count(1)


class SecurityView(Protocol):
    """The listener's cached copy of the controller's users and ACLs."""

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool: ...  # fmt: skip

    def credential(self, user: str, mechanism: str) -> dict | None: ...

    def credentials(self, user: str) -> dict[str, dict]: ...


class Session:
    """Per-connection state; handlers read and update it (one event loop: no locks)."""

    def __init__(
        self,
        backend: Any,
        security: SecurityView,
        endpoint: Endpoint,
        client_host: str,
        settings: dict[str, Any],
        listener_name: str,
        principal: str = ANONYMOUS,
        node: tuple[int, str, int] = (-1, "", -1),
        cluster_id: str = "rafka",
    ) -> None:
        self.backend = backend
        self.security = security
        self.endpoint = endpoint
        self.client_host = client_host
        self.settings = settings
        self.principal = principal
        self.node = node  # (broker id, advertised host, port) of the listener serving this
        self.cluster_id = cluster_id
        self.needs_authentication = endpoint.uses_sasl
        self.sasl_mechanism: str | None = None
        self.sasl_exchange: Any = None  # the mechanism's server state while authenticating
        self.sasl_handshake_version = -1  # v0 handshakes send raw tokens, not SaslAuthenticate
        # Produce calls from this connection are numbered per partition, so the leader
        # appends them in the order the client sent them (see actors/request_order.py).
        self.client_key = f"{listener_name}/{next(_session_ids)}"
        self._produce_numbers: dict[tuple, int] = {}
        self._produce_gates: dict[tuple, asyncio.Future] = {}

    def authorize(self, operation: int, resource_type: int, name: str) -> bool:
        return self.security.authorize(self.principal, self.client_host, operation,
                                       resource_type, name)  # fmt: skip

    def next_produce_number(self, key: tuple) -> int:
        """0, 1, 2, ... per ``key`` (client id at a leader, topic, partition)."""
        number = self._produce_numbers.get(key, 0)
        self._produce_numbers[key] = number + 1
        return number

    def produce_gate(self, key: tuple) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the previous produce's gate for ``key``, this one's): a produce opens its gate
        once it was numbered and sent, and the next waits for it. Call in arrival order."""
        mine = asyncio.get_running_loop().create_future()
        previous = self._produce_gates.get(key)
        self._produce_gates[key] = mine
        return (None if previous is None or previous.done() else previous), mine

    def authenticated(self, user: str) -> None:
        self.principal = f"User:{user}"
        self.needs_authentication = False
        self.sasl_exchange = None
