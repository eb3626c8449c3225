"""TLS for the Kafka listener: the server context from the ``ssl.*`` settings (PEM files),
and a client certificate's principal in Kafka's form."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from rafka.cluster.settings import setting
from rafka.errors import InvalidConfig
from rafka.wire.session import ANONYMOUS

#: Short attribute names of RFC 2253 (what Java's X500Principal prints, so Kafka's).
_SHORT_NAMES = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
    "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}  # fmt: skip
_SPECIAL = ',+"\\<>;'


def tls_context(settings: dict[str, Any]) -> ssl.SSLContext:
    """The server TLS context from the ``ssl.*`` settings (PEM files)."""
    keystore = setting(settings, "ssl.keystore.location")
    if not keystore:
        raise InvalidConfig(
            "an SSL or SASL_SSL listener needs ssl.keystore.location: a PEM file with the "
            "listener's certificate chain and private key"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(keystore, password=setting(settings, "ssl.key.password") or None)
    client_auth = setting(settings, "ssl.client.auth")
    truststore = setting(settings, "ssl.truststore.location")
    if client_auth != "none":
        if not truststore:
            raise InvalidConfig(
                f"ssl.client.auth={client_auth} needs ssl.truststore.location: a PEM file "
                "of the CA certificates client certificates chain to"
            )
        context.load_verify_locations(truststore)
        context.verify_mode = (ssl.CERT_REQUIRED if client_auth == "required"
                               else ssl.CERT_OPTIONAL)  # fmt: skip
    return context


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _SPECIAL else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def certificate_principal(writer: asyncio.StreamWriter) -> str:
    """Kafka's default SSL principal: ``User:`` and the client certificate's subject as an
    RFC 2253 distinguished name (``CN=alice,OU=ops,O=Acme,C=US``: most specific first,
    short names, special characters escaped); ``User:ANONYMOUS`` without a certificate."""
    certificate = writer.get_extra_info("peercert")
    if not certificate:
        return ANONYMOUS
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return f"User:{','.join(rdns)}" if rdns else ANONYMOUS
