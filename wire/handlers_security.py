"""SASL authentication (PLAIN, SCRAM-SHA-256/512) and the ACL APIs over the Kafka protocol.

SASL follows KIP-152: SaslHandshake v1 picks the mechanism, then SaslAuthenticate requests
carry the mechanism's messages. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed, as Kafka does; so is a handshake
naming a mechanism the listener does not enable (UNSUPPORTED_SASL_MECHANISM, with the
enabled list). SaslHandshake v0 (raw SASL tokens, no SaslAuthenticate framing) is listed, as
older librdkafka enables SASL only then, but answered UNSUPPORTED_VERSION: every client
rafka serves uses v1. Credentials are the controller's (``rafka users``),
cached by the listener; the password itself is never stored.
"""

from __future__ import annotations

import asyncio

from rafka.cluster.acls import AclBinding, AclBindingFilter
from rafka.cluster.acls import AclOperation as Op
from rafka.cluster.acls import ResourceType as Res
from rafka.cluster.scram import ScramServer, verify_plain
from rafka.cluster.settings import setting
from rafka.errors import (
    ClusterAuthorizationFailed,
    IllegalSaslState,
    RafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanism,
    UnsupportedVersion,
)
from rafka.wire.connection import CloseConnection
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers import handles
from rafka.wire.session import Session

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
CLUSTER = "kafka-cluster"


def enabled_mechanisms(session: Session) -> list[str]:
    text = setting(session.settings, "sasl.enabled.mechanisms")
    return [m.strip().upper() for m in text.split(",") if m.strip()]


@handles(SASL_HANDSHAKE)
async def sasl_handshake(session: Session, header: RequestHeader, body: dict) -> dict:
    mechanisms = enabled_mechanisms(session)
    if header.api_version < 1:
        # v0 sends the mechanism's tokens as bare frames, which rafka does not read; every
        # client it serves asks for v1 (with SaslAuthenticate) when the broker lists it.
        return {"error_code": UnsupportedVersion.errno, "mechanisms": mechanisms}
    if not session.endpoint.uses_sasl or not session.needs_authentication:
        raise CloseConnection(
            "SaslHandshake on a connection that is not waiting for SASL authentication",
            {"error_code": IllegalSaslState.errno, "mechanisms": mechanisms},
        )
    mechanism = body.get("mechanism", "")
    if mechanism not in mechanisms:
        # Kafka answers with the enabled mechanisms, then closes: the client may not try
        # another on this connection.
        raise CloseConnection(
            f"SaslHandshake asked for mechanism {mechanism!r}, not one of {mechanisms}",
            {"error_code": UnsupportedSaslMechanism.errno, "mechanisms": mechanisms},
        )
    session.sasl_mechanism = mechanism
    session.sasl_exchange = None
    return {"error_code": 0, "mechanisms": mechanisms}


@handles(SASL_AUTHENTICATE)
async def sasl_authenticate(session: Session, header: RequestHeader, body: dict) -> dict:
    mechanism = session.sasl_mechanism
    if mechanism is None or not session.needs_authentication:
        raise CloseConnection("SaslAuthenticate before SaslHandshake or after authentication",
                              _auth_answer(IllegalSaslState.errno,
                                           "send SaslHandshake first"))  # fmt: skip
    token = bytes(body.get("auth_bytes") or b"")
    try:
        if mechanism == "PLAIN":
            # PBKDF2 of the password takes milliseconds: off the event loop, so one client
            # guessing passwords does not stall every connection of the listener.
            user = await asyncio.to_thread(
                verify_plain, token, lambda u: session.security.credentials(u) or None)
            session.authenticated(user)
            return _auth_answer(0, None)
        if session.sasl_exchange is None:
            session.sasl_exchange = ScramServer(
                mechanism, lambda u: session.security.credential(u, mechanism)
            )
            return _auth_answer(0, None, session.sasl_exchange.first(token))
        exchange = session.sasl_exchange
        final = exchange.final(token)
        session.authenticated(exchange.username)
        return _auth_answer(0, None, final)
    except (SaslAuthenticationFailed, IllegalSaslState) as e:
        raise CloseConnection(f"SASL {mechanism}: {e}", _auth_answer(e.errno, str(e))) from None


def _auth_answer(errno: int, message: str | None, token: bytes = b"") -> dict:
    return {"error_code": errno, "error_message": message, "auth_bytes": token,
            "session_lifetime_ms": 0}  # fmt: skip


# -- ACLs --------------------------------------------------------------------------------------


def _filter(item: dict, prefix: str) -> AclBindingFilter:
    return AclBindingFilter.of(
        item[f"resource_type{prefix}"], item.get(f"resource_name{prefix}"),
        item.get(f"pattern_type{prefix}", 3), item.get(f"principal{prefix}"),
        item.get(f"host{prefix}"), item["operation"], item["permission_type"],
    )  # fmt: skip


def _may_alter_acls(session: Session, op: Op) -> bool:
    return session.authorize(op, Res.CLUSTER, CLUSTER)


@handles(DESCRIBE_ACLS)
async def describe_acls(session: Session, header: RequestHeader, body: dict) -> dict:
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": []}
    if not _may_alter_acls(session, Op.DESCRIBE):
        return {**answer, "error_code": ClusterAuthorizationFailed.errno,
                "error_message": "describing ACLs needs DESCRIBE on the cluster"}
    try:
        found = await session.backend.controller(
            "describe_acls", _filter(body, "_filter").to_tuple())
    except RafkaError as e:
        return {**answer, "error_code": e.errno, "error_message": str(e)}
    grouped: dict[tuple, list] = {}
    for b in (AclBinding.of(t) for t in found):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": int(b.operation),
             "permission_type": int(b.permission)})  # fmt: skip
    answer["resources"] = [
        {"resource_type": int(rt), "resource_name": name, "pattern_type": int(pt), "acls": acls}
        for (rt, name, pt), acls in grouped.items()
    ]
    return answer


@handles(CREATE_ACLS)
async def create_acls(session: Session, header: RequestHeader, body: dict) -> dict:
    creations = body.get("creations", [])
    if not _may_alter_acls(session, Op.ALTER):
        message = "creating ACLs needs ALTER on the cluster"
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ClusterAuthorizationFailed.errno, "error_message": message}
            for _ in creations]}  # fmt: skip
    results: list[dict | None] = [None] * len(creations)
    bindings, places = [], []
    for i, c in enumerate(creations):
        try:
            bindings.append(AclBinding.of(
                c["resource_type"], c["resource_name"], c.get("resource_pattern_type", 3),
                c["principal"], c["host"], c["operation"], c["permission_type"],
            ).to_tuple())  # fmt: skip
            places.append(i)
        except RafkaError as e:
            results[i] = {"error_code": e.errno, "error_message": str(e)}
    if bindings:
        try:
            answers = await session.backend.controller("create_acls", bindings)
        except RafkaError as e:
            answers = [(e.errno, str(e))] * len(bindings)
        for i, (errno, message) in zip(places, answers):
            results[i] = {"error_code": errno, "error_message": message or None}
    return {"throttle_time_ms": 0, "results": results}


@handles(DELETE_ACLS)
async def delete_acls(session: Session, header: RequestHeader, body: dict) -> dict:
    filters = body.get("filters", [])
    if not _may_alter_acls(session, Op.ALTER):
        message = "deleting ACLs needs ALTER on the cluster"
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": ClusterAuthorizationFailed.errno, "error_message": message,
             "matching_acls": []} for _ in filters]}  # fmt: skip
    results: list[dict | None] = [None] * len(filters)
    asked, places = [], []
    for i, f in enumerate(filters):
        try:
            asked.append(_filter(f, "_filter").to_tuple())
            places.append(i)
        except RafkaError as e:
            results[i] = {"error_code": e.errno, "error_message": str(e), "matching_acls": []}
    if asked:
        try:
            deleted = await session.backend.controller("delete_acls", asked)
        except RafkaError as e:
            deleted = None
            for i in places:
                results[i] = {"error_code": e.errno, "error_message": str(e),
                              "matching_acls": []}  # fmt: skip
        for i, matched in zip(places, deleted or ()):
            results[i] = {"error_code": 0, "error_message": None, "matching_acls": [
                _matching(AclBinding.of(t)) for t in matched]}  # fmt: skip
    return {"throttle_time_ms": 0, "filter_results": results}


def _matching(b: AclBinding) -> dict:
    return {"error_code": 0, "error_message": None, "resource_type": int(b.resource_type),
            "resource_name": b.resource_name, "pattern_type": int(b.pattern_type),
            "principal": b.principal, "host": b.host, "operation": int(b.operation),
            "permission_type": int(b.permission)}  # fmt: skip
