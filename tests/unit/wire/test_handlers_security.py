"""SASL over the Kafka protocol (handshake, PLAIN, SCRAM) and the ACL APIs' handling."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest

from rafka.cluster.acls import AclBinding
from rafka.cluster.scram import make_credential
from rafka.wire.connection import CloseConnection
from rafka.wire.frames import RequestHeader
from rafka.wire.handlers_security import (
    create_acls,
    delete_acls,
    describe_acls,
    sasl_authenticate,
    sasl_handshake,
)
from rafka.wire.listeners import Endpoint
from rafka.wire.security_view import SecurityCache
from rafka.wire.session import ANONYMOUS, Session

PASSWORD = "pencil"


def _security(allow_all: bool = True) -> SecurityCache:
    cache = SecurityCache({"allow.everyone.if.no.acl.found": allow_all})
    cache.update({"version": 1, "users": {"alice": {
        "SCRAM-SHA-256": make_credential(PASSWORD, "SCRAM-SHA-256"),
        "SCRAM-SHA-512": make_credential(PASSWORD, "SCRAM-SHA-512"),
    }}, "acls": []})
    return cache


class _Controller:
    def __init__(self):
        self.calls = []

    async def controller(self, method, *args):
        self.calls.append((method, args))
        if method == "create_acls":
            return [(0, "")] * len(args[0])
        if method == "describe_acls":
            return [(2, "orders", 3, "User:bob", "*", 3, 3)]
        if method == "delete_acls":
            return [[(2, "orders", 3, "User:bob", "*", 3, 3)] for _ in args[0]]
        raise AssertionError(method)


def _session(protocol: str = "SASL_PLAINTEXT", security=None, backend=None) -> Session:
    return Session(backend, security or _security(), Endpoint(protocol, "127.0.0.1", 0),
                   "127.0.0.1", {}, "test")  # fmt: skip


def _header(api_key: int, version: int = 1) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "client")


def _handshake(session: Session, mechanism: str) -> dict:
    return asyncio.run(sasl_handshake(session, _header(17), {"mechanism": mechanism}))


def _authenticate(session: Session, token: bytes) -> dict:
    return asyncio.run(sasl_authenticate(session, _header(36), {"auth_bytes": token}))


def test_plain_with_the_right_password_authenticates_the_user():
    session = _session()
    assert _handshake(session, "PLAIN")["error_code"] == 0
    assert _authenticate(session, b"\0alice\0pencil")["error_code"] == 0
    assert session.principal == "User:alice" and not session.needs_authentication


def test_a_wrong_password_is_answered_then_the_connection_closes():
    session = _session()
    _handshake(session, "PLAIN")
    with pytest.raises(CloseConnection) as closed:
        _authenticate(session, b"\0alice\0wrong")
    assert closed.value.answer["error_code"] == 58
    assert session.principal == ANONYMOUS and session.needs_authentication


def test_a_handshake_naming_a_mechanism_not_enabled_is_answered_then_the_connection_closes():
    """UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms, then the connection ends, as
    Kafka's SaslServerAuthenticator does; no mechanism is chosen for the session."""
    session = _session()
    with pytest.raises(CloseConnection) as closed:
        _handshake(session, "GSSAPI")
    assert closed.value.answer == {"error_code": 33,
                                   "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert session.sasl_mechanism is None and session.needs_authentication


def test_authenticate_before_handshake_closes_the_connection():
    with pytest.raises(CloseConnection) as closed:
        _authenticate(_session(), b"\0alice\0pencil")
    assert closed.value.answer["error_code"] == 34


@pytest.mark.parametrize("mechanism, hash_name", [("SCRAM-SHA-256", "sha256"),
                                                  ("SCRAM-SHA-512", "sha512")])
def test_a_full_scram_exchange_authenticates(mechanism, hash_name):
    session = _session()
    _handshake(session, mechanism)
    client_nonce = "rOprNGfwEbeRWgbNEkqO"
    first_bare = f"n=alice,r={client_nonce}"
    server_first = _authenticate(session, f"n,,{first_bare}".encode())["auth_bytes"]
    attrs = dict(kv.split("=", 1) for kv in bytes(server_first).decode().split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, PASSWORD.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))  # fmt: skip
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{bytes(server_first).decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, hash_name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = _authenticate(session, f"{without_proof},p={proof}".encode())
    assert final["error_code"] == 0 and bytes(final["auth_bytes"]).startswith(b"v=")
    assert session.principal == "User:alice"


def test_acl_apis_go_to_the_controller_and_answer_in_kafkas_shapes():
    backend = _Controller()
    session = _session("PLAINTEXT", backend=backend)
    binding = {"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 3,
               "principal": "User:bob", "host": "*", "operation": 3, "permission_type": 3}
    created = asyncio.run(create_acls(session, _header(30), {"creations": [binding]}))
    assert created["results"] == [{"error_code": 0, "error_message": None}]
    assert backend.calls[0] == ("create_acls", ([AclBinding.of(
        2, "orders", 3, "User:bob", "*", 3, 3).to_tuple()],))
    described = asyncio.run(describe_acls(session, _header(29), {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}))
    assert described["resources"][0]["acls"][0]["principal"] == "User:bob"
    deleted = asyncio.run(delete_acls(session, _header(31), {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": "orders", "pattern_type_filter": 3,
        "principal_filter": None, "host_filter": None, "operation": 1,
        "permission_type": 1}]}))
    assert deleted["filter_results"][0]["matching_acls"][0]["resource_name"] == "orders"


def test_acl_changes_need_alter_on_the_cluster():
    security = _security(allow_all=True)
    security.update({"version": 2, "users": {}, "acls": [
        (4, "kafka-cluster", 3, "User:admin", "*", 7, 3)]})  # only admin may ALTER
    session = _session("PLAINTEXT", security=security, backend=_Controller())
    answer = asyncio.run(create_acls(session, _header(30), {"creations": [
        {"resource_type": 2, "resource_name": "t", "principal": "User:x", "host": "*",
         "operation": 3, "permission_type": 3}]}))
    assert answer["results"][0]["error_code"] == 31


def test_sasl_handshake_v0_is_listed_for_older_librdkafka_but_answered_unsupported():
    """librdkafka before 2.11 enables SASL only when SaslHandshake is listed from v0, so v0
    is advertised; a v0 handshake itself (raw tokens) is answered UNSUPPORTED_VERSION and
    leaves the connection unauthenticated."""
    from rafka.wire.frames import SUPPORTED

    assert SUPPORTED[17] == (0, 1)
    session = _session()
    answer = asyncio.run(sasl_handshake(session, _header(17, version=0), {"mechanism": "PLAIN"}))
    assert answer["error_code"] == 35 and session.needs_authentication
