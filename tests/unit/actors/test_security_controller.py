"""The controller's users and ACLs part over a real metadata log (no Ray): what it records
survives a controller restart, and listeners polling ``security_snapshot`` see a change
once and nothing while there is none."""

from __future__ import annotations

import asyncio

import pytest

from rafka.cluster.acls import AclBinding, AclBindingFilter, Authorizer
from rafka.cluster.scram import ScramServer, make_credential, verify_plain
from rafka.errors import ResourceNotFound
from tests.unit.actors.controller_fakes import ControllerProcess, Registry

READ_T = AclBinding.of("topic", "t", "literal", "User:alice", "*", "read", "allow").to_tuple()


def run(coroutine):
    return asyncio.run(coroutine)


def test_users_and_acls_survive_a_restart_and_authenticate(tmp_path):
    """Recorded users and ACLs are there after a restart, and work for SASL and ACL checks."""
    registry, appended = Registry(), []

    async def first_life():
        process = ControllerProcess(str(tmp_path), registry, appended)
        creds = {m: make_credential("pw", m) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        await process.security.upsert_user("alice", creds, True)
        no_type = READ_T[:3] + ("bob",) + READ_T[4:]
        answers = await process.security.create_acls([READ_T, no_type])
        assert answers[0] == (0, "") and answers[1][0] == 42 and "User:<name>" in answers[1][1]
        await process.die()

    run(first_life())

    async def second_life():
        process = ControllerProcess(str(tmp_path), registry, appended)
        assert process.security.list_users() == [{
            "name": "alice", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
            "iterations": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}]
        snap = process.security.security_snapshot(-1)
        assert snap["acls"] == [READ_T]
        assert process.security.security_snapshot(snap["version"]) is None
        users = snap["users"]
        assert verify_plain(b"\0alice\0pw", users.get) == "alice"
        server = ScramServer("SCRAM-SHA-512", lambda n: users.get(n, {}).get("SCRAM-SHA-512"))
        assert server.first(b"n,,n=alice,r=abc").startswith(b"r=abc")
        auth = Authorizer(snap["acls"], allow_everyone_if_no_acl_found=True)
        assert auth.authorize("User:alice", "h", 3, 2, "t")
        assert not auth.authorize("User:bob", "h", 3, 2, "t")
        await process.die()

    run(second_life())


def test_snapshot_version_moves_with_each_change_only(tmp_path):
    """A listener sees None until a change, then the new state, then None again."""
    async def scenario():
        process = ControllerProcess(str(tmp_path), Registry(), [])
        sec = process.security
        v0 = sec.security_snapshot(-2)["version"]
        assert sec.security_snapshot(v0) is None
        await sec.create_acls([READ_T])
        snap = sec.security_snapshot(v0)
        assert snap["version"] > v0 and snap["acls"] == [READ_T]
        await sec.create_acls([READ_T])  # already there: no record, no new version
        assert sec.security_snapshot(snap["version"]) is None
        assert await sec.delete_acls([AclBindingFilter().to_tuple()]) == [[READ_T]]
        later = sec.security_snapshot(snap["version"])
        assert later["acls"] == [] and later["version"] > snap["version"]
        assert sec.describe_acls(None) == []
        with pytest.raises(ResourceNotFound):
            await sec.delete_user("nobody", None)
        await process.die()

    run(scenario())
