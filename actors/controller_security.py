"""The controller's users and ACLs: SCRAM credentials and Kafka ACL bindings, kept in the
metadata log, served to admins and to the Kafka listeners.

Decisions are ``rafka.cluster.security_changes`` (plain Python); this part takes the
controller's lock, appends the records they return, and answers. Every method is
idempotent in effect except ``delete_user`` (ResourceNotFound the second time, as Kafka).
The password never reaches the controller: admins send credentials derived on their side
(``rafka.cluster.scram.make_credential``), as Kafka's AlterUserScramCredentials does.

Listeners poll ``security_snapshot(version)``: None while nothing changed, else the whole
set of users and ACLs, which they swap in at once.
"""

from __future__ import annotations

from typing import Any

from rafka.actors.controller_core import ControllerCore
from rafka.cluster import security_changes as decide
from rafka.cluster.security_state import SecurityState


class ControllerSecurity:
    """Users and ACLs, over the controller's shared core (its metadata log and lock)."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    @property
    def state(self) -> SecurityState:
        return self.core.image.security

    async def upsert_user(self, name: str, credentials: dict[str, dict], replace: bool) -> None:
        async with self.core.lock:
            self.core.store.append(decide.upsert_user(self.state, name, credentials, replace))
        self.core.logger.info("user %r: credentials set for %s", name, sorted(credentials))

    async def delete_user(self, name: str, mechanisms: list[str] | None) -> None:
        async with self.core.lock:
            self.core.store.append(decide.delete_user(self.state, name, mechanisms))
        self.core.logger.info("user %r: credentials deleted (%s)", name, mechanisms or "all")

    def list_users(self) -> list[dict[str, Any]]:
        return decide.list_users(self.state)

    async def create_acls(self, bindings: list[tuple]) -> list[tuple[int, str]]:
        async with self.core.lock:
            answers, records = decide.create_acls(self.state, bindings)
            self.core.store.append(records)
        return answers

    def describe_acls(self, acl_filter: tuple | None) -> list[tuple]:
        return decide.describe_acls(self.state, acl_filter)

    async def delete_acls(self, filters: list[tuple | None]) -> list[list[tuple]]:
        async with self.core.lock:
            matched, records = decide.delete_acls(self.state, filters)
            self.core.store.append(records)
        return matched

    def security_snapshot(self, known_version: int) -> dict[str, Any] | None:
        if known_version == self.state.version:
            return None
        return self.state.snapshot()
