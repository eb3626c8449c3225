"""Admin's users and ACLs calls: passwords become credentials on the client side, bindings
and filters travel as plain tuples, and the controller's answers come back typed."""

from __future__ import annotations

import pytest

from rafka.cluster.acls import AclBinding, AclBindingFilter, AclOperation, PatternType
from rafka.cluster.scram import ScramServer, verify_plain
from rafka.errors import InvalidPrincipalType, InvalidRequest, ResourceNotFound
from rafka.types import UserDescription
from tests.unit.clients.security_fakes import SecurityGateway, SecurityOnlyAdmin

READ = AclBinding.of("topic", "orders", "literal", "User:alice", "*", "read", "allow")
WRITE = AclBinding.of("topic", "ord", "prefixed", "User:bob", "*", "write", "deny")


@pytest.fixture
def admin() -> SecurityOnlyAdmin:
    return SecurityOnlyAdmin(SecurityGateway())


def test_add_user_sends_credentials_never_the_password(admin):
    """Only derived credentials reach the controller; both mechanisms by default."""
    admin.add_user("alice", "s3cret-pw")
    method, name, credentials, replace = admin._gateway.calls[-1]
    assert (method, name, replace) == ("upsert_user", "alice", True)
    assert sorted(credentials) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert b"s3cret-pw" not in repr(admin._gateway.calls).encode()
    assert admin.list_users() == [
        UserDescription("alice", {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096})]


def test_stored_credentials_authenticate_the_password(admin):
    """What add_user stored checks the password over PLAIN and SCRAM."""
    admin.add_user("alice", "pw", iterations=8192)
    users = admin._gateway.image.security.snapshot()["users"]
    assert verify_plain(b"\0alice\0pw", users.get) == "alice"
    server = ScramServer("SCRAM-SHA-256", lambda n: users.get(n, {}).get("SCRAM-SHA-256"))
    assert b"i=8192" in server.first(b"n,,n=alice,r=x")


def test_add_user_again_replaces_the_password_and_mechanisms(admin):
    """Setting a password with one mechanism drops the other's old credential."""
    admin.add_user("alice", "old")
    admin.add_user("alice", "new", mechanism="SCRAM-SHA-512")
    assert admin.list_users()[0].mechanisms == {"SCRAM-SHA-512": 4096}
    with pytest.raises(ValueError, match="unknown"):
        admin.add_user("alice", "pw", mechanism="SCRAM-SHA-1")


def test_remove_user(admin):
    """A removed user is gone; removing it again is ResourceNotFound."""
    admin.add_user("alice", "pw")
    admin.remove_user("alice")
    assert admin.list_users() == []
    with pytest.raises(ResourceNotFound):
        admin.remove_user("alice")


def test_acls_create_describe_delete(admin):
    """Bindings created come back typed; filters select and delete them."""
    admin.create_acls([READ, WRITE])
    assert admin.describe_acls() == [READ, WRITE]
    assert isinstance(admin.describe_acls()[0].operation, AclOperation)
    applies = AclBindingFilter(READ.resource_type, "orders", PatternType.MATCH)
    assert admin.describe_acls(applies) == [READ, WRITE]
    assert admin.delete_acls([AclBindingFilter(principal="User:bob"), READ]) == [[WRITE], [READ]]
    assert admin.describe_acls() == []


def test_invalid_binding_creates_nothing(admin):
    """One bad binding in the list is refused before anything is sent."""
    bad = READ._replace(principal="Group:x")
    with pytest.raises(InvalidPrincipalType):
        admin.create_acls([READ, bad])
    assert admin._gateway.calls == [] and admin.describe_acls() == []
    with pytest.raises(TypeError):
        admin.create_acls([READ.to_tuple()])


def test_invalid_filter_is_refused(admin):
    """A filter with an UNKNOWN field is InvalidRequest from the controller."""
    with pytest.raises(InvalidRequest):
        admin.describe_acls(AclBindingFilter(operation=AclOperation.UNKNOWN))
