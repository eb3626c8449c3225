"""SCRAM-SHA-256/512 server exchange (RFC 5802/7677), stored credentials, and PLAIN checked
against SCRAM credentials."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from rafka.cluster.scram import (
    ScramServer,
    check_credential,
    make_credential,
    verify_plain,
)
from rafka.errors import IllegalSaslState, SaslAuthenticationFailed, UnacceptableCredential

# RFC 7677, section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")  # fmt: skip
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")  # fmt: skip
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramClient:
    """A SCRAM client written from RFC 5802, to drive the server end to end."""

    def __init__(self, mechanism, user, password, nonce="fyko+d2lbbFgONRv9qkxdawL",
                 gs2_header="n,,"):  # fmt: skip
        self.hash = HASHES[mechanism]
        self.password = password.encode()
        self.gs2_header = gs2_header
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={escaped},r={nonce}"
        self.nonce = nonce

    def first(self) -> bytes:
        return (self.gs2_header + self.bare).encode()

    def final(self, server_first: bytes, nonce_override=None, flip=False) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        assert attrs["r"].startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))  # fmt: skip
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        cbind = base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={cbind},r={nonce_override or attrs['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        if flip:
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        server_signature = hmac.new(server_key, auth, self.hash).digest()
        self.expected_final = b"v=" + base64.b64encode(server_signature)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def users(**passwords):
    """A lookup over users with both mechanisms' credentials (fixed salt for speed)."""
    creds = {u: {m: make_credential(p, m, salt=b"salt-" + u.encode()) for m in HASHES}
             for u, p in passwords.items()}  # fmt: skip
    return creds


def exchange(mechanism, creds, user, password, **final_kwargs):
    server = ScramServer(mechanism, lambda name: creds.get(name, {}).get(mechanism))
    client = ScramClient(mechanism, user, password)
    server_first = server.first(client.first())
    answer = server.final(client.final(server_first, **final_kwargs))
    assert answer == client.expected_final  # the client checks the server too
    return server


# -- RFC 7677 ----------------------------------------------------------------------------------


def test_rfc7677_credential_and_exchange():
    """With RFC 7677's salt and nonces the server answers the published messages exactly."""
    cred = make_credential("pencil", "SCRAM-SHA-256", 4096, RFC_SALT)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.username is None
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user" and server.complete


def test_rfc7677_wrong_password_fails_with_kafkas_message():
    """The published client-final against the credential of another password fails."""
    cred = make_credential("pencil2", "SCRAM-SHA-256", 4096, RFC_SALT)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials with SASL "
                       "mechanism SCRAM-SHA-256"):  # fmt: skip
        server.final(RFC_CLIENT_FINAL)
    assert server.username is None


# -- full exchanges ----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", sorted(HASHES))
def test_full_exchange_authenticates(mechanism):
    """A client with the right password authenticates, and verifies the server's signature."""
    assert exchange(mechanism, users(alice="s3cret"), "alice", "s3cret").username == "alice"


@pytest.mark.parametrize("mechanism", sorted(HASHES))
def test_wrong_password_and_unknown_user_fail_alike(mechanism):
    """Same error, same message, for a wrong password and for a user that does not exist."""
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "s3cret")):
        with pytest.raises(SaslAuthenticationFailed) as e:
            exchange(mechanism, users(alice="s3cret"), user, password)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "invalid credentials" in messages[0]


def test_unknown_user_gets_a_stable_plausible_salt():
    """An unknown user is answered with a salt and 4096 iterations, the same each time."""
    def salt_of(user):
        server = ScramServer("SCRAM-SHA-256", lambda name: None)
        return server.first(f"n,,n={user},r=abc".encode()).split(b",")[1:]

    assert salt_of("ghost") == salt_of("ghost") != salt_of("ghost2")
    assert salt_of("ghost")[1] == b"i=4096"


@pytest.mark.parametrize("mechanism", sorted(HASHES))
def test_kafka_python_client_authenticates(mechanism):
    """kafka-python's SCRAM client (an independent implementation) completes the exchange."""
    scram = pytest.importorskip("kafka.net.sasl.scram")
    creds = users(alice="s3cret")
    server = ScramServer(mechanism, lambda name: creds.get(name, {}).get(mechanism))
    client = scram.ScramClient("alice", "s3cret", mechanism)
    client.process_server_first_message(server.first(client.first_message()))
    client.process_server_final_message(server.final(client.final_message()))
    assert server.username == "alice"


def test_escaped_username():
    """'=2C' and '=3D' in the saslname are ',' and '='."""
    creds = users(**{"a,b=c": "pw"})
    assert exchange("SCRAM-SHA-256", creds, "a,b=c", "pw").username == "a,b=c"


def test_bad_escape_is_refused():
    """An '=' not followed by 2C or 3D is malformed."""
    server = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(SaslAuthenticationFailed, match="escaped"):
        server.first(b"n,,n=a=b,r=abc")


def test_channel_binding_is_refused():
    """A client asking for channel binding ('p=') is told it is not supported."""
    server = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(SaslAuthenticationFailed, match="channel binding"):
        server.first(b"p=tls-unique,,n=user,r=abc")


def test_authzid_must_equal_username():
    """An authorization id other than the username is refused; the same one is fine."""
    creds = users(alice="pw")
    server = ScramServer("SCRAM-SHA-256", lambda name: creds.get(name, {}).get("SCRAM-SHA-256"))
    with pytest.raises(SaslAuthenticationFailed, match="differs"):
        server.first(b"n,a=bob,n=alice,r=abc")
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", gs2_header="n,a=alice,")
    server = ScramServer("SCRAM-SHA-256", lambda name: creds.get(name, {}).get("SCRAM-SHA-256"))
    assert server.final(client.final(server.first(client.first()))) == client.expected_final


def test_extensions_are_refused():
    """tokenauth (delegation tokens) and other extensions are refused."""
    server = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(SaslAuthenticationFailed, match="extensions"):
        server.first(b"n,,n=user,r=abc,tokenauth=true")


def test_nonce_must_be_the_servers():
    """A client-final message with another nonce fails."""
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        exchange("SCRAM-SHA-256", users(alice="pw"), "alice", "pw", nonce_override="xyz")


def test_tampered_proof_fails():
    """One flipped bit of the proof fails authentication."""
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        exchange("SCRAM-SHA-512", users(alice="pw"), "alice", "pw", flip=True)


def test_messages_out_of_order():
    """final before first, first twice and final twice are IllegalSaslState."""
    server = ScramServer("SCRAM-SHA-256", lambda name: None)
    with pytest.raises(IllegalSaslState):
        server.final(b"c=biws,r=x,p=AAAA")
    server.first(b"n,,n=user,r=abc")
    with pytest.raises(IllegalSaslState):
        server.first(b"n,,n=user,r=abc")
    with pytest.raises(SaslAuthenticationFailed):
        server.final(b"garbage")
    with pytest.raises(IllegalSaslState):
        server.final(b"c=biws,r=x,p=AAAA")


@pytest.mark.parametrize("message", [b"", b"n", b"n,,", b"n,,r=abc,n=user", b"\xff\xfe",
                                     b"x,,n=user,r=abc", b"n,,n=,r=abc"])  # fmt: skip
def test_malformed_client_first_is_refused(message):
    """Malformed client-first messages raise SaslAuthenticationFailed, nothing else."""
    with pytest.raises(SaslAuthenticationFailed):
        ScramServer("SCRAM-SHA-256", lambda name: None).first(message)


# -- credentials -------------------------------------------------------------------------------


def test_credential_shape_and_limits():
    """Keys have the hash's size; iterations and mechanism are checked."""
    cred = make_credential("pw", "SCRAM-SHA-512", 8192)
    assert len(cred["stored_key"]) == len(cred["server_key"]) == 64
    assert cred["iterations"] == 8192 and len(cred["salt"]) == 32
    assert check_credential(cred, "SCRAM-SHA-512") == cred
    for bad in ({"iterations": 4095}, {"iterations": 16385}):
        with pytest.raises(UnacceptableCredential, match="4096 to 16384"):
            make_credential("pw", "SCRAM-SHA-256", **bad)
    with pytest.raises(UnacceptableCredential, match="unknown SCRAM mechanism"):
        make_credential("pw", "SCRAM-SHA-1")
    with pytest.raises(UnacceptableCredential, match="empty"):
        make_credential("", "SCRAM-SHA-256")


def test_check_credential_refuses_wrong_sizes():
    """A SHA-256 credential offered as SHA-512 (wrong key size) is refused."""
    cred = make_credential("pw", "SCRAM-SHA-256")
    with pytest.raises(UnacceptableCredential, match="stored_key"):
        check_credential(cred, "SCRAM-SHA-512")
    with pytest.raises(UnacceptableCredential):
        check_credential({**cred, "salt": b""}, "SCRAM-SHA-256")


def test_fresh_salts_differ():
    """Two credentials of one password have different salts and keys."""
    a, b = (make_credential("pw", "SCRAM-SHA-256") for _ in range(2))
    assert a["salt"] != b["salt"] and a["stored_key"] != b["stored_key"]


# -- PLAIN -------------------------------------------------------------------------------------


def test_plain_accepts_the_password_of_either_credential():
    """PLAIN is checked against the stored SCRAM credential, with or without authzid."""
    creds = users(alice="pw")
    assert verify_plain(b"\0alice\0pw", creds.get) == "alice"
    assert verify_plain(b"alice\0alice\0pw", creds.get) == "alice"
    only512 = {"alice": {"SCRAM-SHA-512": creds["alice"]["SCRAM-SHA-512"]}}
    assert verify_plain(b"\0alice\0pw", only512.get) == "alice"


def test_plain_refuses_wrong_password_and_unknown_user_alike():
    """Same message for a wrong password and an unknown user."""
    creds = users(alice="pw")
    messages = []
    for message in (b"\0alice\0nope", b"\0ghost\0pw"):
        with pytest.raises(SaslAuthenticationFailed) as e:
            verify_plain(message, creds.get)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("message, words", [
    (b"alice\0pw", "expected"), (b"\0\0pw", "empty"), (b"\0alice\0", "empty"),
    (b"bob\0alice\0pw", "differs"), (b"\0al\xffice\0pw", "UTF-8"),
])  # fmt: skip
def test_plain_malformed(message, words):
    """Malformed PLAIN messages are refused saying what is wrong."""
    with pytest.raises(SaslAuthenticationFailed, match=words):
        verify_plain(message, users(alice="pw").get)
