"""A listener's copy of the controller's users and ACLs, refreshed by version.

The controller's ``security_snapshot(version)`` answers None while nothing changed, so a
listener polls it cheaply; a change replaces the whole copy at once (requests see either
the old ACLs or the new, never half of each).
"""

from __future__ import annotations

from typing import Any

from rafka.cluster.acls import AclBinding, Authorizer, parse_super_users
from rafka.cluster.settings import setting


#: The version before the first snapshot: below any the controller has (-1 for "no users or
#: ACLs ever"), so the first poll always answers a snapshot.
NEVER_LOADED = -2


class SecurityCache:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.allow_if_no_acl = bool(setting(settings, "allow.everyone.if.no.acl.found"))
        self.super_users = parse_super_users(setting(settings, "super.users"))
        self.version = NEVER_LOADED
        self.users: dict[str, dict[str, dict]] = {}  # user -> mechanism -> credential
        # Until the first snapshot arrives only super users are allowed (as Kafka's
        # StandardAuthorizer before its initial load, KIP-801): the ACLs are not known yet.
        self.authorizer = Authorizer([], False, self.super_users)

    def update(self, snapshot: dict[str, Any]) -> None:
        bindings = [AclBinding.of(b) for b in snapshot.get("acls", ())]
        self.authorizer = Authorizer(bindings, self.allow_if_no_acl, self.super_users)
        self.users = dict(snapshot.get("users", {}))
        self.version = int(snapshot["version"])

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:  # fmt: skip
        return self.authorizer.authorize(principal, host, operation, resource_type, name)

    def credential(self, user: str, mechanism: str) -> dict | None:
        return self.users.get(user, {}).get(mechanism)

    def credentials(self, user: str) -> dict[str, dict]:
        return self.users.get(user, {})
