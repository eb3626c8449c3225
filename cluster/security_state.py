"""Users (SCRAM credentials) and ACLs: the security part of the metadata image.

Records (plain dicts, msgpack-friendly; see ``rafka.cluster.metadata``):

    user         {name, credentials: {mechanism:      a user's credentials were set: the
                  credential}, replace}               mechanisms given replace theirs (and,
                                                      with ``replace``, every other one goes)
    user_delete  {name, mechanisms}                   those credentials (None: all) were
                                                      deleted; a user without any is gone
    acl_create   {bindings: [[7 fields], ...]}        ACL bindings were added
    acl_delete   {bindings: [[7 fields], ...]}        ACL bindings were removed

A credential is ``rafka.cluster.scram``'s dict (salt, iterations, stored_key, server_key):
the password itself never reaches the controller. A binding is ``AclBinding.to_tuple()``.
Applying is idempotent (a binding added twice is there once, deleting what is not there
does nothing), so the log always replays.

``version`` is the metadata offset of the last security record applied, so it only grows
while the log does; a snapshot's records are all applied at its last offset, which is at
least the version before it. Listeners cache ``snapshot()`` and ask again with the version
they hold: an equal version means the same users and ACLs.
"""

from __future__ import annotations

from typing import Any, Mapping

from rafka.cluster.acls import AclBinding, validate_binding
from rafka.cluster.scram import check_credential
from rafka.errors import InvalidRecord, RafkaError

SECURITY_KINDS = frozenset({"user", "user_delete", "acl_create", "acl_delete"})


class SecurityState:
    """Users by name (mechanism -> credential) and ACL bindings (as tuples, oldest first)."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, dict[str, Any]]] = {}
        self.acls: dict[tuple, None] = {}  # an ordered set of binding tuples
        self.version = -1

    def apply(self, record: Mapping[str, Any], offset: int) -> None:
        kind = record["type"]
        if kind == "user":
            creds = {m: dict(c) for m, c in record["credentials"].items()}
            if record.get("replace"):
                self.users[record["name"]] = creds
            else:
                self.users.setdefault(record["name"], {}).update(creds)
        elif kind == "user_delete":
            mechanisms = record.get("mechanisms")
            held = self.users.get(record["name"], {})
            for mechanism in list(held) if mechanisms is None else mechanisms:
                held.pop(mechanism, None)
            if not held:
                self.users.pop(record["name"], None)
        elif kind == "acl_create":
            for b in record["bindings"]:
                self.acls[tuple(b)] = None
        elif kind == "acl_delete":
            for b in record["bindings"]:
                self.acls.pop(tuple(b), None)
        else:
            raise ValueError(f"not a security record: {kind!r}")
        self.version = offset

    def to_records(self) -> list[dict[str, Any]]:
        """Records that rebuild this state from empty (none when it is empty)."""
        out: list[dict[str, Any]] = [
            {"type": "user", "name": name, "credentials": creds, "replace": True}
            for name, creds in self.users.items()
        ]
        if self.acls:
            out.append({"type": "acl_create", "bindings": [list(b) for b in self.acls]})
        return out

    def bindings(self) -> list[AclBinding]:
        return [AclBinding.of(b) for b in self.acls]

    def snapshot(self) -> dict[str, Any]:
        """What a listener caches: {"version", "users": {name: {mechanism: credential}},
        "acls": [binding tuple, ...]} (copies)."""
        return {
            "version": self.version,
            "users": {n: {m: dict(c) for m, c in creds.items()} for n, creds in self.users.items()},
            "acls": list(self.acls),
        }


def check_record(record: Mapping[str, Any]) -> None:
    """InvalidRecord for a security record that is malformed (so it is never written)."""
    kind = record.get("type")
    try:
        if kind == "user":
            _check_name(record.get("name"))
            creds = record["credentials"]
            if not isinstance(creds, Mapping) or not creds:
                raise InvalidRecord("a user record carries no credentials")
            for mechanism, credential in creds.items():
                check_credential(credential, mechanism)
        elif kind == "user_delete":
            _check_name(record.get("name"))
            mechanisms = record.get("mechanisms")
            if mechanisms is not None and not isinstance(mechanisms, (list, tuple)):
                raise InvalidRecord("a user_delete record's mechanisms must be a list or None")
        elif kind in ("acl_create", "acl_delete"):
            for b in record["bindings"]:
                if len(b) != 7:
                    raise InvalidRecord(f"an ACL binding has 7 fields, got {b!r}")
                if kind == "acl_create":
                    validate_binding(AclBinding.of(b))
        else:
            raise InvalidRecord(f"not a security record: {kind!r}")
    except InvalidRecord:
        raise
    except (RafkaError, KeyError, TypeError) as e:
        raise InvalidRecord(f"malformed {kind} record: {e}") from e


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidRecord(f"a user record names {name!r}, not a user name")
