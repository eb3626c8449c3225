"""A controller gateway for users and ACLs without Ray: the controller's decisions
(``rafka.cluster.security_changes``) over a metadata image, answers passed through msgpack
as Ray's would be transformed into plain types."""

from __future__ import annotations

from typing import Any

import msgpack

from rafka.clients.admin_security import SecurityAdmin
from rafka.cluster import security_changes as decide
from rafka.cluster.metadata import MetadataImage


class SecurityGateway:
    """``call_controller`` for the security methods, applying records to ``image``."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.calls: list[tuple] = []

    def _append(self, records: list[dict]) -> None:
        self.image.check(records)
        for record in records:
            # Through msgpack, as the metadata log stores them.
            self.image.apply(msgpack.unpackb(msgpack.packb(record)), self.image.offset + 1)

    def call_controller(self, method: str, *args: Any) -> Any:
        self.calls.append((method, *args))
        state = self.image.security
        if method == "upsert_user":
            self._append(decide.upsert_user(state, *args))
        elif method == "delete_user":
            self._append(decide.delete_user(state, *args))
        elif method == "list_users":
            return decide.list_users(state)
        elif method == "create_acls":
            answers, records = decide.create_acls(state, *args)
            self._append(records)
            return answers
        elif method == "describe_acls":
            return decide.describe_acls(state, *args)
        elif method == "delete_acls":
            matched, records = decide.delete_acls(state, *args)
            self._append(records)
            return matched
        else:
            raise AssertionError(f"unexpected controller call {method}")
        return None


class SecurityOnlyAdmin(SecurityAdmin):
    def __init__(self, gateway: SecurityGateway) -> None:
        self._gateway = gateway
