"""Users and ACLs through the real controller actor: what an admin stores is what a Kafka
listener's ``security_snapshot`` poll sees."""

from __future__ import annotations

import pytest

from rafka.cluster.acls import AclBinding, AclBindingFilter
from rafka.cluster.scram import verify_plain
from rafka.errors import ResourceNotFound


def test_users_and_acls_round_trip_through_the_controller(cluster):
    """add_user, create_acls, the listener's snapshot, then removal, on the live controller."""
    admin = cluster.admin()
    gateway = admin._gateway
    before = gateway.call_controller("security_snapshot", -2)
    admin.add_user("it-alice", "it-pw")
    binding = AclBinding.of("topic", "it-orders", "literal", "User:it-alice", "*", "read",
                            "allow")  # fmt: skip
    try:
        admin.create_acls([binding])
        assert "it-alice" in [u.name for u in admin.list_users()]
        assert binding in admin.describe_acls()
        snapshot = gateway.call_controller("security_snapshot", before["version"])
        assert snapshot["version"] > before["version"]
        assert verify_plain(b"\0it-alice\0it-pw", snapshot["users"].get) == "it-alice"
        assert tuple(binding.to_tuple()) in [tuple(b) for b in snapshot["acls"]]
        assert gateway.call_controller("security_snapshot", snapshot["version"]) is None
    finally:
        admin.delete_acls([AclBindingFilter(principal="User:it-alice")])
        admin.remove_user("it-alice")
    assert binding not in admin.describe_acls()
    with pytest.raises(ResourceNotFound):
        admin.remove_user("it-alice")
