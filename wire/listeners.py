"""Kafka's ``listeners`` / ``advertised.listeners`` syntax: ``PROTOCOL://host:port,...``.

rafka names each listener by its security protocol (Kafka's default
``listener.security.protocol.map``), so at most one listener per protocol. A Kafka client
connected to one listener is told, for every broker, the address of that broker's listener
of the same protocol: a SASL_SSL client is never sent to a PLAINTEXT port.
"""

from __future__ import annotations

from typing import NamedTuple

from rafka.errors import InvalidConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Hosts that mean "every interface": advertised as the node's own address instead.
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class Endpoint(NamedTuple):
    protocol: str  # one of PROTOCOLS
    host: str  # "" or 0.0.0.0: every interface
    port: int  # 0: a free port, picked when the listener binds

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listeners(text: str, setting: str = "listeners") -> list[Endpoint]:
    """The endpoints in ``text`` (empty text: none). InvalidConfig names what is wrong."""
    out: list[Endpoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        protocol, sep, address = item.partition("://")
        protocol = protocol.upper()
        if not sep or protocol not in PROTOCOLS:
            raise InvalidConfig(
                f"{setting}: {item!r} is not PROTOCOL://host:port with PROTOCOL one of "
                f"{', '.join(PROTOCOLS)} (e.g. PLAINTEXT://0.0.0.0:9092)"
            )
        host, port = _host_port(address, item, setting)
        if any(e.protocol == protocol for e in out):
            raise InvalidConfig(
                f"{setting}: {protocol} is listed twice; rafka opens one listener per "
                "security protocol"
            )
        out.append(Endpoint(protocol, host, port))
    return out


def _host_port(address: str, item: str, setting: str) -> tuple[str, int]:
    if address.startswith("["):  # [ipv6]:port
        host, _, rest = address[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise InvalidConfig(
            f"{setting}: {item!r} needs a port from 0 to 65535 (0 picks a free one), "
            "e.g. PLAINTEXT://0.0.0.0:9092"
        )
    return host, port


def advertised(
    listeners: list[Endpoint], bound: dict[str, int], advertised_text: str, node_address: str
) -> list[Endpoint]:
    """What clients are told for each listener: ``advertised.listeners`` where it names the
    protocol, else the listener itself with the node's address for a wildcard host and the
    bound port (``bound``: protocol -> port) for port 0."""
    given = {e.protocol: e for e in parse_listeners(advertised_text, "advertised.listeners")}
    unknown = set(given) - {e.protocol for e in listeners}
    if unknown:
        raise InvalidConfig(
            f"advertised.listeners names {', '.join(sorted(unknown))}, which listeners does "
            "not open; advertise only protocols that listeners lists"
        )
    out = []
    for e in listeners:
        a = given.get(e.protocol)
        if a is None:
            host = node_address if e.host in WILDCARD_HOSTS else e.host
            a = Endpoint(e.protocol, host, bound.get(e.protocol, e.port))
        elif a.port == 0:
            a = a._replace(port=bound.get(e.protocol, e.port))
        out.append(a)
    return out


def bootstrap_string(endpoints: list[Endpoint]) -> str:
    """``host:port,...`` (Kafka's ``bootstrap.servers``), each address once, in order."""
    seen: list[str] = []
    for e in endpoints:
        host = f"[{e.host}]" if ":" in e.host else e.host
        address = f"{host}:{e.port}"
        if address not in seen:
            seen.append(address)
    return ",".join(seen)
