"""SASL SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and PLAIN checked against SCRAM credentials.

A credential is what the controller stores for one user and mechanism, never the password:

    {"salt": bytes, "iterations": int, "stored_key": bytes, "server_key": bytes}

    SaltedPassword = PBKDF2-HMAC-H(password (UTF-8), salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key"); StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")

The exchange (``ScramServer``), two round trips after the mechanism is chosen:

    client-first  n,[a=authzid],n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<both nonces>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

The server checks ClientProof XOR HMAC(StoredKey, AuthMessage) hashes to StoredKey; no
PBKDF2 runs on the server during SCRAM. An unknown user goes through the same steps with a
dummy credential (its salt derived from the name, so asking twice shows the same salt), and
fails at the same point with the same message as a wrong password. As Kafka, passwords are
taken as UTF-8 without SASLprep, and iterations must be within 4096..16384.

Plain Python, no Ray; a ``ScramServer`` serves one connection's exchange.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any, Callable, Mapping

from rafka.errors import IllegalSaslState, SaslAuthenticationFailed, UnacceptableCredential

#: mechanism -> (hashlib name, digest size in bytes)
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 32),
    "SCRAM-SHA-512": ("sha512", 64),
}
MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials maximum
SALT_BYTES = 32

Credential = dict[str, Any]
# Unknown users get a salt derived from their name with this per-process key, so a client
# cannot tell them from real users by the salt changing between attempts.
_DUMMY_KEY = secrets.token_bytes(32)


def _check_mechanism(mechanism: str) -> tuple[str, int]:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise UnacceptableCredential(
            f"unknown SCRAM mechanism {mechanism!r}: give one of {', '.join(MECHANISMS)}"
        ) from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def make_credential(
    password: str, mechanism: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> Credential:
    """The stored form of ``password`` for ``mechanism`` (a fresh random salt unless one is
    given). UnacceptableCredential for an unknown mechanism, an empty password, or
    iterations outside 4096..16384."""
    hash_name, _size = _check_mechanism(mechanism)
    if not isinstance(password, str) or not password:
        raise UnacceptableCredential("the password is empty: give a non-empty password")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not (
        MIN_ITERATIONS <= iterations <= MAX_ITERATIONS
    ):
        raise UnacceptableCredential(
            f"iterations={iterations!r}: give an int from {MIN_ITERATIONS} to {MAX_ITERATIONS}"
        )
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else bytes(salt)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return {
        "salt": salt, "iterations": iterations,
        "stored_key": hashlib.new(hash_name, client_key).digest(),
        "server_key": _hmac(hash_name, salted, b"Server Key"),
    }  # fmt: skip


def check_credential(credential: Any, mechanism: str) -> Credential:
    """``credential`` checked for shape (what the controller accepts from an admin):
    UnacceptableCredential naming the field that is wrong. Returns a clean copy."""
    _hash_name, size = _check_mechanism(mechanism)
    if not isinstance(credential, Mapping):
        raise UnacceptableCredential(f"a {mechanism} credential must be a dict, got "
                                     f"{type(credential).__name__}")  # fmt: skip
    iterations = credential.get("iterations")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not (
        MIN_ITERATIONS <= iterations <= MAX_ITERATIONS
    ):
        raise UnacceptableCredential(f"{mechanism} iterations={iterations!r}: give an int from "
                                     f"{MIN_ITERATIONS} to {MAX_ITERATIONS}")  # fmt: skip
    out: Credential = {"iterations": iterations}
    for field, length in (("salt", None), ("stored_key", size), ("server_key", size)):
        value = credential.get(field)
        if not isinstance(value, (bytes, bytearray)) or not value or (
            length is not None and len(value) != length
        ):
            want = f"{length} bytes" if length else "non-empty bytes"
            raise UnacceptableCredential(f"{mechanism} credential field {field!r} must be "
                                         f"{want}; derive it with make_credential")  # fmt: skip
        out[field] = bytes(value)
    return out


def _dummy_credential(username: str, mechanism: str) -> Credential:
    hash_name, size = MECHANISMS[mechanism]
    salt = _hmac("sha256", _DUMMY_KEY, username.encode())
    return {"salt": salt, "iterations": MIN_ITERATIONS,
            "stored_key": secrets.token_bytes(size), "server_key": secrets.token_bytes(size)}


def _failed(mechanism: str) -> SaslAuthenticationFailed:
    # Kafka's words; the same for an unknown user and a wrong password.
    return SaslAuthenticationFailed(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def _unescape_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' travels as '=2C' and '=' as '=3D'; any other '=' is invalid."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise SaslAuthenticationFailed(
                    f"invalid SCRAM username {name!r}: '=' must be escaped as =3D (',' as =2C)"
                )
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not key or not eq:
            raise SaslAuthenticationFailed(f"invalid SCRAM {what} message: {part!r} is not "
                                           "an attribute (name=value)")  # fmt: skip
        out.append((key, value))
    return out


def _decode(message: bytes, what: str) -> str:
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed(f"the SCRAM {what} message is not UTF-8") from None


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise SaslAuthenticationFailed(f"the SCRAM {what} is not base64") from None


class ScramServer:
    """One connection's SCRAM exchange: ``first`` then ``final``, each once, in order
    (IllegalSaslState otherwise). ``username`` is set once ``final`` succeeded.
    ``lookup(username)`` answers the user's credential for this mechanism or None.
    ``nonce``: the server nonce (random unless given, for test vectors)."""

    def __init__(
        self, mechanism: str, lookup: Callable[[str], Credential | None], nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._hash_name, _ = _check_mechanism(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce or secrets.token_urlsafe(24)  # no ',' in base64url
        self.username: str | None = None
        self._user: str | None = None
        self._credential: Credential | None = None
        self._known = False  # the user exists (else a dummy credential stands in)
        self._gs2_header = ""
        self._nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first
        self.complete = False

    def first(self, client_first: bytes) -> bytes:
        """The server-first message for the client's first message."""
        if self._credential is not None:
            raise IllegalSaslState("the SCRAM client-first message came twice")
        text = _decode(client_first, "client-first")
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise SaslAuthenticationFailed("invalid SCRAM client-first message: it must start "
                                           "with a gs2 header such as 'n,,'")  # fmt: skip
        if flag.startswith("p="):
            raise SaslAuthenticationFailed(
                "SCRAM channel binding is not supported: use the SCRAM mechanism without "
                "-PLUS ('n,,' header)"
            )
        if flag not in ("n", "y"):
            raise SaslAuthenticationFailed(f"invalid SCRAM gs2 header flag {flag!r}")
        if authzid and not authzid.startswith("a="):
            raise SaslAuthenticationFailed(f"invalid SCRAM authzid {authzid!r}")
        attrs = _attributes(bare, "client-first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslAuthenticationFailed("invalid SCRAM client-first message: expected "
                                           "n=<user>,r=<nonce>")  # fmt: skip
        if len(attrs) > 2:
            # Kafka's only extension is tokenauth (delegation tokens), which rafka has not.
            raise SaslAuthenticationFailed(
                f"unsupported SCRAM extensions {[k for k, _ in attrs[2:]]}: send none"
            )
        user = _unescape_saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not user or not client_nonce:
            raise SaslAuthenticationFailed("the SCRAM username or client nonce is empty")
        if authzid and _unescape_saslname(authzid[2:]) != user:
            raise SaslAuthenticationFailed(
                f"SCRAM authorization id {authzid[2:]!r} differs from the username {user!r}: "
                "leave it out or give the same name"
            )
        found = self._lookup(user)
        self._user = user
        self._credential = found if found is not None else _dummy_credential(user, self.mechanism)
        self._known = found is not None
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(self._credential["salt"]).decode()
        server_first = f"r={self._nonce},s={salt},i={self._credential['iterations']}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """Check the client's proof; the server-final message (``v=...``) when it holds,
        SaslAuthenticationFailed when not (same message for an unknown user)."""
        if self._credential is None or self.complete:
            raise IllegalSaslState("the SCRAM client-final message came before the "
                                   "client-first one, or twice")  # fmt: skip
        self.complete = True  # one attempt per exchange, success or not
        text = _decode(client_final, "client-final")
        without_proof, sep, proof_part = text.rpartition(",")
        attrs = _attributes(without_proof, "client-final") if sep else []
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r" or (
            not proof_part.startswith("p=")
        ):
            raise SaslAuthenticationFailed("invalid SCRAM client-final message: expected "
                                           "c=...,r=...,p=...")  # fmt: skip
        if _b64decode(attrs[0][1], "channel binding") != self._gs2_header.encode():
            raise SaslAuthenticationFailed("the SCRAM channel binding does not repeat the "
                                           "gs2 header of the client-first message")  # fmt: skip
        if attrs[1][1] != self._nonce:
            raise SaslAuthenticationFailed("the SCRAM nonce of the client-final message is not "
                                           "the one the server sent")  # fmt: skip
        proof = _b64decode(proof_part[2:], "client proof")
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        stored_key = self._credential["stored_key"]
        signature = _hmac(self._hash_name, stored_key, auth_message)
        if len(proof) != len(signature):
            raise _failed(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        valid = hmac.compare_digest(hashlib.new(self._hash_name, client_key).digest(), stored_key)
        if not (valid and self._known):
            raise _failed(self.mechanism)
        self.username = self._user
        server_signature = _hmac(self._hash_name, self._credential["server_key"], auth_message)
        return b"v=" + base64.b64encode(server_signature)


def verify_plain(
    message: bytes, lookup_any: Callable[[str], Mapping[str, Credential] | None]
) -> str:
    """The username of a valid SASL/PLAIN message ``[authzid] NUL user NUL password``,
    checked against one of the user's stored SCRAM credentials (``lookup_any(user)``:
    {mechanism: credential} or None). SaslAuthenticationFailed otherwise, with the same
    message and the same PBKDF2 work for an unknown user as for a wrong password."""
    parts = bytes(message).split(b"\0")
    if len(parts) != 3:
        raise SaslAuthenticationFailed("invalid SASL/PLAIN message: expected "
                                       "[authzid] NUL username NUL password")  # fmt: skip
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("the SASL/PLAIN message is not UTF-8") from None
    if not user or not password:
        raise SaslAuthenticationFailed("SASL/PLAIN: the username or password is empty")
    if authzid and authzid != user:
        raise SaslAuthenticationFailed(
            f"SASL/PLAIN authorization id {authzid!r} differs from the username {user!r}: "
            "leave it out or give the same name"
        )
    stored = lookup_any(user) or {}
    mechanism = next((m for m in MECHANISMS if m in stored), None)
    known = mechanism is not None
    mechanism = mechanism or "SCRAM-SHA-256"
    credential = stored[mechanism] if known else _dummy_credential(user, mechanism)
    hash_name, _ = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), credential["salt"],
                                 credential["iterations"])  # fmt: skip
    stored_key = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
    if not (hmac.compare_digest(stored_key, credential["stored_key"]) and known):
        raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
    return user
