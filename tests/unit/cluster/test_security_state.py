"""Users and ACLs in the controller's metadata: decisions return records, records apply to
the image, and the metadata log's snapshot and replay rebuild the same users and ACLs."""

from __future__ import annotations

import pytest

from rafka.cluster import security_changes as changes
from rafka.cluster.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rafka.cluster.metadata import MetadataImage
from rafka.cluster.metadata_log import MetadataLog
from rafka.cluster.scram import make_credential
from rafka.errors import (
    InvalidPrincipalType,
    InvalidRecord,
    InvalidRequest,
    ResourceNotFound,
    UnacceptableCredential,
)

S256, S512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
CRED = {m: make_credential("pw", m, salt=b"fixed") for m in (S256, S512)}
READ_ORDERS = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW).to_tuple()  # fmt: skip
WRITE_PREFIX = AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:bob", "*",
                          AclOperation.WRITE, AclPermissionType.DENY).to_tuple()  # fmt: skip
GROUP_READ = AclBinding(ResourceType.GROUP, "g", PatternType.LITERAL, "User:alice", "*",
                        AclOperation.READ, AclPermissionType.ALLOW).to_tuple()  # fmt: skip


class Image:
    """A metadata image that applies what the decisions return, checked first, as the log."""

    def __init__(self):
        self.image = MetadataImage()

    def append(self, records):
        self.image.check(records)
        for record in records:
            self.image.apply(record, self.image.offset + 1)

    @property
    def security(self):
        return self.image.security


def replayed(image: MetadataImage) -> MetadataImage:
    copy = MetadataImage()
    for record in image.to_records():
        copy.apply(record, image.offset)
    return copy


# -- users -------------------------------------------------------------------------------------


def test_upsert_user_adds_and_merges_mechanisms():
    """A per-mechanism upsert keeps the other mechanism's credential; replace drops it."""
    m = Image()
    m.append(changes.upsert_user(m.security, "alice", {S256: CRED[S256]}))
    m.append(changes.upsert_user(m.security, "alice", {S512: CRED[S512]}))
    assert sorted(m.security.users["alice"]) == [S256, S512]
    m.append(changes.upsert_user(m.security, "alice", {S512: CRED[S512]}, replace=True))
    assert sorted(m.security.users["alice"]) == [S512]


def test_list_users_shows_mechanisms_and_iterations_never_keys():
    """list_users answers names, mechanisms and iterations only."""
    m = Image()
    m.append(changes.upsert_user(m.security, "bob", CRED))
    m.append(changes.upsert_user(m.security, "alice", {S256: CRED[S256]}))
    assert changes.list_users(m.security) == [
        {"name": "alice", "mechanisms": [S256], "iterations": {S256: 4096}},
        {"name": "bob", "mechanisms": [S256, S512], "iterations": {S256: 4096, S512: 4096}},
    ]


def test_bad_credentials_are_refused_before_any_record():
    """A bad name, mechanism or credential shape is UnacceptableCredential."""
    state = Image().security
    for name, creds in (("", CRED), ("a", {}), ("a", {"SCRAM-SHA-1": CRED[S256]}),
                        ("a", {S512: CRED[S256]}),
                        ("a", {S256: {"iterations": 4096}})):  # fmt: skip
        with pytest.raises(UnacceptableCredential):
            changes.upsert_user(state, name, creds)


def test_delete_user_and_one_mechanism():
    """Deleting one mechanism keeps the user; deleting the last, or all, removes it."""
    m = Image()
    m.append(changes.upsert_user(m.security, "alice", CRED))
    m.append(changes.delete_user(m.security, "alice", [S256]))
    assert list(m.security.users["alice"]) == [S512]
    with pytest.raises(ResourceNotFound, match="no SCRAM-SHA-256"):
        changes.delete_user(m.security, "alice", [S256])
    m.append(changes.delete_user(m.security, "alice"))
    assert m.security.users == {}
    with pytest.raises(ResourceNotFound, match="does not exist"):
        changes.delete_user(m.security, "alice")


# -- ACLs --------------------------------------------------------------------------------------


def test_create_acls_answers_per_binding():
    """Valid bindings are created (once, even when repeated); invalid ones get their errno."""
    m = Image()
    bad_principal = READ_ORDERS[:3] + ("Group:x",) + READ_ORDERS[4:]
    bad_cluster = (int(ResourceType.CLUSTER), "c", 3, "User:a", "*", 5, 3)
    answers, records = changes.create_acls(
        m.security, [READ_ORDERS, bad_principal, READ_ORDERS, bad_cluster, WRITE_PREFIX]
    )
    assert [a[0] for a in answers] == [0, InvalidPrincipalType.errno, 0, InvalidRequest.errno, 0]
    assert "kafka-cluster" in answers[3][1]
    m.append(records)
    assert list(m.security.acls) == [READ_ORDERS, WRITE_PREFIX]
    again, records = changes.create_acls(m.security, [READ_ORDERS])
    assert again == [(0, "")] and records == []


def test_describe_acls_by_filter():
    """None lists all; a MATCH filter lists what applies to a name; UNKNOWN is refused."""
    m = Image()
    m.append(changes.create_acls(m.security, [READ_ORDERS, WRITE_PREFIX, GROUP_READ])[1])
    assert changes.describe_acls(m.security, None) == [READ_ORDERS, WRITE_PREFIX, GROUP_READ]
    match = AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.MATCH).to_tuple()
    assert changes.describe_acls(m.security, match) == [READ_ORDERS, WRITE_PREFIX]
    by_principal = AclBindingFilter(principal="User:alice").to_tuple()
    assert changes.describe_acls(m.security, by_principal) == [READ_ORDERS, GROUP_READ]
    with pytest.raises(InvalidRequest):
        changes.describe_acls(m.security, AclBindingFilter(operation=0).to_tuple())


def test_delete_acls_per_filter():
    """Each filter answers what it matched; everything matched is deleted, nothing else."""
    m = Image()
    m.append(changes.create_acls(m.security, [READ_ORDERS, WRITE_PREFIX, GROUP_READ])[1])
    alice = AclBindingFilter(principal="User:alice").to_tuple()
    groups = AclBindingFilter(resource_type=ResourceType.GROUP).to_tuple()
    nobody = AclBindingFilter(principal="User:zed").to_tuple()
    matched, records = changes.delete_acls(m.security, [alice, groups, nobody])
    assert matched == [[READ_ORDERS, GROUP_READ], [GROUP_READ], []]
    m.append(records)
    assert list(m.security.acls) == [WRITE_PREFIX]


def test_delete_acls_checks_every_filter_first():
    """One invalid filter deletes nothing."""
    m = Image()
    m.append(changes.create_acls(m.security, [READ_ORDERS])[1])
    with pytest.raises(InvalidRequest):
        changes.delete_acls(m.security, [None, AclBindingFilter(resource_type=0).to_tuple()])
    assert list(m.security.acls) == [READ_ORDERS]


# -- records, versions, snapshots --------------------------------------------------------------


def test_version_is_the_offset_of_the_last_security_record():
    """Only security records move the version."""
    m = Image()
    assert m.security.version == -1
    m.append([{"type": "producer_ids", "next": 10}])
    m.append(changes.upsert_user(m.security, "alice", CRED))
    assert m.security.version == 1
    m.append([{"type": "producer_ids", "next": 20}])
    assert m.security.version == 1
    assert m.security.snapshot()["version"] == 1


def test_malformed_security_records_are_never_written():
    """check refuses malformed user and ACL records (so the log always replays)."""
    image = MetadataImage()
    for record in (
        {"type": "user", "name": "", "credentials": CRED},
        {"type": "user", "name": "a", "credentials": {S256: {"salt": b"x"}}},
        {"type": "acl_create", "bindings": [[2, "t"]]},
        {"type": "acl_create", "bindings": [list(READ_ORDERS[:3]) + ["bob"] +
                                            list(READ_ORDERS[4:])]},
    ):  # fmt: skip
        with pytest.raises(InvalidRecord):
            image.check([record])


def test_to_records_rebuilds_users_and_acls():
    """Replaying to_records() gives the same users, ACLs and a version not below the old."""
    m = Image()
    m.append(changes.upsert_user(m.security, "alice", CRED))
    m.append(changes.create_acls(m.security, [READ_ORDERS, GROUP_READ])[1])
    copy = replayed(m.image)
    assert copy.security.users == m.security.users
    assert list(copy.security.acls) == list(m.security.acls)
    assert copy.security.version >= m.security.version
    assert MetadataImage().to_records() == replayed(MetadataImage()).to_records()


def test_metadata_log_snapshot_and_replay_keep_users_and_acls(tmp_path):
    """Through the real metadata log: appended, snapshotted, more appended, reopened."""
    store = MetadataLog(str(tmp_path), snapshot_every=3)
    security = store.image.security
    store.append(changes.upsert_user(security, "alice", CRED))
    store.append(changes.create_acls(security, [READ_ORDERS, WRITE_PREFIX])[1])
    store.append(changes.upsert_user(security, "bob", {S256: CRED[S256]}))  # snapshot here
    store.append(changes.delete_acls(security, [AclBindingFilter(principal="User:bob")])[1])
    store.append(changes.delete_user(security, "alice", [S512]))
    expected = security.snapshot()
    store.close()
    reopened = MetadataLog(str(tmp_path))
    try:
        got = reopened.image.security.snapshot()
        assert got == expected
        assert list(got["users"]) == ["alice", "bob"] and list(got["users"]["alice"]) == [S256]
        assert got["acls"] == [READ_ORDERS]
    finally:
        reopened.close()
