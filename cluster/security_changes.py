"""The controller's decisions on users and ACLs: requests in, records (and answers) out.

Plain functions over a ``SecurityState``; nothing is changed here. The controller appends
the records to its metadata log, which applies them (``rafka.cluster.security_state``).
Answers use plain types (tuples of ints and strings, dicts) so they cross Ray and msgpack.
Kafka's rules: creating a binding that exists succeeds without a change, a filter with an
UNKNOWN field is refused, deleting a user or credential that does not exist is
ResourceNotFound.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rafka.cluster.acls import AclBinding, AclBindingFilter, validate_binding, validate_filter
from rafka.cluster.scram import MECHANISMS, check_credential
from rafka.cluster.security_state import SecurityState
from rafka.errors import RafkaError, ResourceNotFound, UnacceptableCredential

Record = dict[str, Any]


def _user_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise UnacceptableCredential(f"user name {name!r} is not a non-empty string")
    return name


def upsert_user(
    state: SecurityState, name: str, credentials: Mapping[str, Any], replace: bool = False
) -> list[Record]:
    """Set ``name``'s credentials ({mechanism: credential}); with ``replace`` its other
    mechanisms' credentials go (a new password), else they stay (Kafka's per-mechanism
    upsert). UnacceptableCredential for a bad name, mechanism or credential."""
    _user_name(name)
    if not isinstance(credentials, Mapping) or not credentials:
        raise UnacceptableCredential(
            f"no credentials given for user {name!r}: give {{mechanism: credential}} made by "
            "rafka.cluster.scram.make_credential"
        )
    checked = {m: check_credential(c, m) for m, c in credentials.items()}
    return [{"type": "user", "name": name, "credentials": checked, "replace": bool(replace)}]


def delete_user(
    state: SecurityState, name: str, mechanisms: Iterable[str] | None = None
) -> list[Record]:
    """Delete ``name``'s credentials for ``mechanisms`` (None: the user). ResourceNotFound
    for a user, or a credential of it, that does not exist."""
    held = state.users.get(_user_name(name))
    if held is None:
        raise ResourceNotFound(f"user {name!r} does not exist; `rafka users list` shows who does")
    if mechanisms is not None:
        mechanisms = list(mechanisms)
        for mechanism in mechanisms:
            if mechanism not in MECHANISMS:
                raise UnacceptableCredential(
                    f"unknown SCRAM mechanism {mechanism!r}: give one of {', '.join(MECHANISMS)}"
                )
            if mechanism not in held:
                raise ResourceNotFound(f"user {name!r} has no {mechanism} credential (it has "
                                       f"{', '.join(sorted(held))})")  # fmt: skip
    return [{"type": "user_delete", "name": name, "mechanisms": mechanisms}]


def list_users(state: SecurityState) -> list[dict[str, Any]]:
    """[{"name", "mechanisms": [mechanism, ...], "iterations": {mechanism: n}}], by name
    (Kafka's DescribeUserScramCredentials: never the salt or keys)."""
    return [
        {"name": name, "mechanisms": sorted(creds),
         "iterations": {m: c["iterations"] for m, c in sorted(creds.items())}}
        for name, creds in sorted(state.users.items())
    ]  # fmt: skip


def create_acls(
    state: SecurityState, bindings: Iterable[Any]
) -> tuple[list[tuple[int, str]], list[Record]]:
    """One (errno, message) per binding, (0, "") when created or already there, and the
    record adding the new ones. A refused binding does not stop the others (as Kafka)."""
    answers: list[tuple[int, str]] = []
    new: dict[tuple, None] = {}
    for raw in bindings:
        try:
            binding = AclBinding.of(raw)
            validate_binding(binding)
        except RafkaError as e:
            answers.append((e.errno, str(e)))
            continue
        key = binding.to_tuple()
        if key not in state.acls:
            new[key] = None
        answers.append((0, ""))
    records = [{"type": "acl_create", "bindings": [list(b) for b in new]}] if new else []
    return answers, records


def _filter(raw: Any) -> AclBindingFilter:
    f = AclBindingFilter.of(raw)
    validate_filter(f)
    return f


def describe_acls(state: SecurityState, acl_filter: Any) -> list[tuple]:
    """The bindings (tuples, oldest first) ``acl_filter`` matches (None: all).
    InvalidRequest for a filter with an UNKNOWN field."""
    f = _filter(acl_filter)
    return [b for b in state.acls if f.matches(AclBinding.of(b))]


def delete_acls(
    state: SecurityState, filters: Iterable[Any]
) -> tuple[list[list[tuple]], list[Record]]:
    """Per filter, the bindings it matched (each deleted; one matched by two filters is
    listed under both), and the record deleting them. Every filter is checked before any
    binding is deleted (InvalidRequest)."""
    checked = [_filter(f) for f in filters]
    bindings = [(b, AclBinding.of(b)) for b in state.acls]
    matched = [[t for t, b in bindings if f.matches(b)] for f in checked]
    gone = dict.fromkeys(t for per_filter in matched for t in per_filter)
    records = [{"type": "acl_delete", "bindings": [list(b) for b in gone]}] if gone else []
    return matched, records
