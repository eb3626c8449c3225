"""SecurityAdmin: the users and ACLs half of ``Admin`` (as Kafka's Admin client's
alterUserScramCredentials, describeUserScramCredentials, createAcls, describeAcls and
deleteAcls). The controller keeps both (``rafka.actors.controller_security``); Kafka
listeners authenticate SASL clients against the users and authorize every request with the
ACLs.

Passwords stay here: ``add_user`` derives the SCRAM credentials (salted, iterated) on this
side and sends only those, as Kafka's AlterUserScramCredentials does.
"""

from __future__ import annotations

from typing import Any, Iterable

from rafka.cluster.acls import AclBinding, AclBindingFilter, validate_binding
from rafka.cluster.scram import MECHANISMS, MIN_ITERATIONS, make_credential
from rafka.errors import error_class
from rafka.types import UserDescription


def _mechanisms(mechanism: str | None) -> list[str]:
    if mechanism is None:
        return list(MECHANISMS)
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism {mechanism!r} is unknown: give one of "
                         f"{', '.join(MECHANISMS)}, or None for both")  # fmt: skip
    return [mechanism]


def _user_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a user name must be a non-empty string, got {name!r}")
    return name


def _binding(b: Any) -> AclBinding:
    if not isinstance(b, AclBinding):
        raise TypeError(f"expected an AclBinding, got {b!r} ({type(b).__name__})")
    return b


def _filter(f: Any) -> AclBindingFilter:
    if f is None:
        return AclBindingFilter()
    if isinstance(f, AclBinding):  # a binding selects exactly itself
        return AclBindingFilter(*f)
    if not isinstance(f, AclBindingFilter):
        raise TypeError(f"expected an AclBindingFilter (or None for all), got {f!r}")
    return f


class SecurityAdmin:
    """Part of ``Admin`` (its field ``_gateway``)."""

    def add_user(
        self, name: str, password: str, mechanism: str | None = None,
        iterations: int = MIN_ITERATIONS,
    ) -> None:  # fmt: skip
        """Create user ``name`` or set its password: SCRAM credentials for ``mechanism``
        ("SCRAM-SHA-256" or "SCRAM-SHA-512"; None, the default: both). The user's other
        credentials are dropped, so an old password stops working for every mechanism
        (SASL/PLAIN is checked against these credentials too). UnacceptableCredential for
        ``iterations`` outside 4096..16384 or an empty password."""
        _user_name(name)
        credentials = {m: make_credential(password, m, iterations) for m in _mechanisms(mechanism)}
        self._gateway.call_controller("upsert_user", name, credentials, True)

    def remove_user(self, name: str) -> None:
        """Delete user ``name`` and all its credentials; ResourceNotFound when there is no
        such user."""
        self._gateway.call_controller("delete_user", _user_name(name), None)

    def list_users(self) -> list[UserDescription]:
        """Every user with its mechanisms and their iterations (never salts or keys)."""
        return [UserDescription(u["name"], dict(u["iterations"]))
                for u in self._gateway.call_controller("list_users")]  # fmt: skip

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create ACL bindings (one that exists already is left as it is). Every binding is
        checked here first (InvalidRequest, InvalidPrincipalType) so nothing is created when
        one is wrong; an error the controller answers is raised after the others are
        created."""
        checked = [_binding(b) for b in bindings]
        for b in checked:
            validate_binding(b)
        answers = self._gateway.call_controller("create_acls", [b.to_tuple() for b in checked])
        for b, (errno, message) in zip(checked, answers):
            if errno:
                raise error_class(errno)(f"{message} (ACL: {b})")

    def describe_acls(self, filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACL bindings ``filter`` matches (None: every one), oldest first."""
        answer = self._gateway.call_controller("describe_acls", _filter(filter).to_tuple())
        return [AclBinding.of(b) for b in answer]

    def delete_acls(
        self, filters: Iterable[AclBindingFilter | AclBinding | None]
    ) -> list[list[AclBinding]]:
        """Delete every ACL binding each filter matches; per filter, the bindings it
        matched (and deleted)."""
        tuples = [_filter(f).to_tuple() for f in filters]
        answer = self._gateway.call_controller("delete_acls", tuples)
        return [[AclBinding.of(b) for b in matched] for matched in answer]
