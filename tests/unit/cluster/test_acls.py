"""Kafka's ACL model: binding validation, filter matching as DescribeAcls/DeleteAcls do, and
the authorizer deciding as Kafka's StandardAuthorizer does."""

from __future__ import annotations

import pytest

from rafka.cluster.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    check_operation_supported,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from rafka.errors import InvalidPrincipalType, InvalidRequest

T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)  # fmt: skip
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
O = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(name="orders", op=O.READ, perm=ALLOW, principal=ALICE, host="*", rt=T, pt=LIT):
    return AclBinding(rt, name, pt, principal, host, op, perm)


def check(bindings, principal=ALICE, op=O.READ, name="orders", rt=T, host="10.0.0.1",
          allow_everyone=True, super_users=()):  # fmt: skip
    return Authorizer(bindings, allow_everyone, super_users).authorize(
        principal, host, op, rt, name
    )


# -- enums and tuples --------------------------------------------------------------------------


def test_enum_codes_are_kafkas():
    """The numeric codes are Kafka's, as they travel in ACL requests."""
    assert [ResourceType.TOPIC, ResourceType.USER] == [2, 7]
    assert [PatternType.MATCH, PatternType.PREFIXED] == [2, 4]
    assert [O.ALL, O.DESCRIBE, O.IDEMPOTENT_WRITE, O.DESCRIBE_TOKENS] == [2, 8, 12, 14]
    assert [AclPermissionType.DENY, AclPermissionType.ALLOW] == [2, 3]


def test_binding_round_trips_through_a_plain_tuple():
    """A binding becomes a tuple of ints and strings and comes back equal, with enum members."""
    b = acl(pt=PRE, op=O.WRITE, perm=DENY)
    t = b.to_tuple()
    assert all(type(v) in (int, str) for v in t)
    back = AclBinding.of(t)
    assert back == b and isinstance(back.operation, AclOperation)


def test_binding_fields_may_be_names():
    """Enum fields may be given by name, case-insensitively, dashes for underscores."""
    b = AclBinding.of("topic", "t", "prefixed", ALICE, "*", "describe-configs", "allow")
    assert b.operation is O.DESCRIBE_CONFIGS and b.pattern_type is PRE


def test_unknown_code_reads_as_unknown_and_bad_name_is_refused():
    """An int code Kafka might add later reads as UNKNOWN; a misspelt name is an error."""
    assert AclBinding.of(99, "t", 3, ALICE, "*", 3, 3).resource_type is ResourceType.UNKNOWN
    with pytest.raises(InvalidRequest, match="give one of"):
        AclBinding.of("topik", "t", 3, ALICE, "*", 3, 3)


# -- validation --------------------------------------------------------------------------------


def test_valid_bindings_pass():
    """Literal, prefixed, wildcard-principal and cluster bindings are accepted."""
    for b in (acl(), acl(pt=PRE), acl(principal="User:*"), acl("*"),
              acl("kafka-cluster", O.CREATE, rt=C)):  # fmt: skip
        validate_binding(b)


@pytest.mark.parametrize("binding, error, words", [
    (acl(principal="Group:x"), InvalidPrincipalType, "User:<name>"),
    (acl(principal="User:"), InvalidPrincipalType, "User:<name>"),
    (acl(principal="alice"), InvalidRequest, "TYPE:NAME"),
    (acl(rt=ResourceType.ANY), InvalidRequest, "resource type"),
    (acl(rt=ResourceType.UNKNOWN), InvalidRequest, "resource type"),
    (acl(pt=PatternType.MATCH), InvalidRequest, "LITERAL or PREFIXED"),
    (acl(pt=PatternType.ANY), InvalidRequest, "LITERAL or PREFIXED"),
    (acl(op=O.ANY), InvalidRequest, "operation"),
    (acl(op=O.UNKNOWN), InvalidRequest, "operation"),
    (acl(perm=AclPermissionType.ANY), InvalidRequest, "ALLOW or DENY"),
    (acl(""), InvalidRequest, "resource name is empty"),
    (acl("other", O.CREATE, rt=C), InvalidRequest, "kafka-cluster"),
    (acl(host=""), InvalidRequest, "host"),
])  # fmt: skip
def test_invalid_bindings_are_refused_with_a_fix(binding, error, words):
    """Each rule broken is refused with Kafka's error type and a message saying what to give."""
    with pytest.raises(error, match=words):
        validate_binding(binding)


def test_operation_support_per_resource_type():
    """As kafka-acls.sh: WRITE on a group is meaningless, READ on a group is fine."""
    check_operation_supported(acl(rt=G))
    with pytest.raises(InvalidRequest, match="GROUP ACLs support"):
        check_operation_supported(acl(op=O.WRITE, rt=G))


def test_filter_with_unknown_field_is_refused():
    """A filter naming an UNKNOWN enum value is refused; ANY is fine."""
    validate_filter(AclBindingFilter())
    with pytest.raises(InvalidRequest):
        validate_filter(AclBindingFilter(operation=O.UNKNOWN))


# -- filters -----------------------------------------------------------------------------------


def test_any_filter_matches_every_binding():
    """The default filter (all ANY/None) matches every binding."""
    for b in (acl(), acl(pt=PRE, perm=DENY), acl("kafka-cluster", O.ALTER, rt=C)):
        assert AclBindingFilter().matches(b)


def test_exact_filter_fields():
    """Each given field must equal the binding's."""
    b = acl(host="1.2.3.4")
    assert AclBindingFilter(T, "orders", LIT, ALICE, "1.2.3.4", O.READ, ALLOW).matches(b)
    assert not AclBindingFilter(principal=BOB).matches(b)
    assert not AclBindingFilter(host="*").matches(b)  # no wildcard expansion in filters
    assert not AclBindingFilter(operation=O.WRITE).matches(b)
    assert not AclBindingFilter(permission=DENY).matches(b)
    assert not AclBindingFilter(resource_type=G).matches(b)
    assert not AclBindingFilter(pattern_type=PRE).matches(b)


def test_any_pattern_with_name_matches_that_exact_name_of_either_pattern():
    """Pattern ANY plus a name: bindings of exactly that name, literal or prefixed."""
    f = AclBindingFilter(T, "ord", PatternType.ANY)
    assert f.matches(acl("ord")) and f.matches(acl("ord", pt=PRE))
    assert not f.matches(acl("orders")) and not f.matches(acl("*"))


def test_match_pattern_selects_bindings_that_apply_to_the_name():
    """MATCH: literal of the name, literal wildcard, and prefixed of any prefix of it."""
    f = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert f.matches(acl("orders")) and f.matches(acl("*")) and f.matches(acl("ord", pt=PRE))
    assert f.matches(acl("orders", pt=PRE))
    assert not f.matches(acl("ord")) and not f.matches(acl("ordersx", pt=PRE))
    assert not f.matches(acl("*", pt=PRE))  # a prefixed '*' is the character, not a wildcard


# -- the authorizer ----------------------------------------------------------------------------


def test_no_acl_on_resource_follows_allow_everyone_setting():
    """A resource no binding applies to is allowed, or denied when the setting is off."""
    others = [acl("payments")]
    assert check(others)
    assert not check(others, allow_everyone=False)
    assert not check([], allow_everyone=False)


def test_an_acl_for_someone_else_denies_everyone_not_named():
    """Once any binding applies to a resource, principals it does not allow are denied."""
    assert not check([acl(principal=BOB)])
    assert check([acl()])


def test_deny_beats_allow():
    """A matching DENY wins whatever ALLOWs also match."""
    assert not check([acl(), acl(perm=DENY)])
    assert not check([acl(op=O.ALL), acl("ord", pt=PRE, perm=DENY)])
    assert not check([acl(), acl("*", perm=DENY, principal="User:*")])


def test_literal_wildcard_and_prefixed_bindings_apply():
    """Literal of the name, the literal wildcard and a prefix all grant; others do not."""
    assert check([acl("*")], allow_everyone=False)
    assert check([acl("ord", pt=PRE)], allow_everyone=False)
    assert check([acl("orders", pt=PRE)], allow_everyone=False)
    assert not check([acl("ord")], allow_everyone=False)
    assert not check([acl("ordersx", pt=PRE)], allow_everyone=False)
    assert not check([acl("orders", rt=G)], allow_everyone=False)


def test_wildcard_principal_and_host():
    """User:* matches every principal; host '*' every address, else it must be equal."""
    assert check([acl(principal="User:*")], principal=BOB)
    assert check([acl(host="10.0.0.1")], host="10.0.0.1")
    assert not check([acl(host="10.0.0.2")], host="10.0.0.1")


def test_allow_implies_describe_and_describe_configs():
    """READ, WRITE, DELETE, ALTER allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS."""
    for op in (O.READ, O.WRITE, O.DELETE, O.ALTER, O.DESCRIBE):
        assert check([acl(op=op)], op=O.DESCRIBE)
    for op in (O.CREATE, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS):
        assert not check([acl(op=op)], op=O.DESCRIBE)
    assert check([acl(op=O.ALTER_CONFIGS)], op=O.DESCRIBE_CONFIGS)
    assert not check([acl(op=O.ALTER)], op=O.DESCRIBE_CONFIGS)
    assert not check([acl(op=O.DESCRIBE)], op=O.READ)  # implication goes one way


def test_deny_applies_to_its_own_operation_only():
    """A DENY of DESCRIBE does not deny READ; a DENY of READ does not deny DESCRIBE."""
    assert check([acl(op=O.READ), acl(op=O.DESCRIBE, perm=DENY)], op=O.READ)
    assert check([acl(op=O.DESCRIBE), acl(op=O.READ, perm=DENY)], op=O.DESCRIBE)
    assert check([acl(op=O.READ), acl(op=O.READ, perm=DENY)], op=O.DESCRIBE)


def test_all_allows_and_denies_every_operation():
    """Operation ALL matches every operation, in an ALLOW or a DENY."""
    for op in (O.READ, O.WRITE, O.DESCRIBE, O.ALTER_CONFIGS):
        assert check([acl(op=O.ALL)], op=op)
        assert not check([acl(op=O.ALL), acl(op=O.ALL, perm=DENY)], op=op)


def test_super_users_are_allowed_despite_deny():
    """A super user passes every check, DENYs and the no-ACL default included."""
    supers = parse_super_users("User:admin; User:ops")
    assert supers == {"User:admin", "User:ops"}
    assert check([acl(principal="User:*", perm=DENY)], principal="User:ops", super_users=supers)
    assert check([], principal="User:admin", allow_everyone=False, super_users="User:admin")


def test_cluster_resource():
    """Cluster actions are checked against the kafka-cluster resource."""
    rules = [acl("kafka-cluster", O.IDEMPOTENT_WRITE, rt=C)]
    assert check(rules, op=O.IDEMPOTENT_WRITE, name="kafka-cluster", rt=C)
    assert not check(rules, op=O.CREATE, name="kafka-cluster", rt=C)


def test_many_prefixes_are_found_by_length():
    """Hundreds of prefixed bindings: only those that start the name apply."""
    rules = [acl(f"team{i}-", pt=PRE, principal=f"User:u{i}") for i in range(500)]
    auth = Authorizer(rules, allow_everyone_if_no_acl_found=False)
    assert auth.authorize("User:u42", "h", O.READ, T, "team42-orders")
    assert not auth.authorize("User:u41", "h", O.READ, T, "team42-orders")
    assert [b.resource_name for b in auth.applicable(T, "team42-orders")] == ["team42-"]
    assert not auth.authorize("User:u42", "h", O.READ, T, "team4")


def test_authorize_accepts_int_codes_and_tuples():
    """The listener may pass int codes, and bindings as the controller's plain tuples."""
    auth = Authorizer([acl().to_tuple()], False)
    assert auth.authorize(ALICE, "h", 3, 2, "orders")
    denied = Authorizer([AclBinding(*acl(perm=DENY, op=O.ALL).to_tuple()), acl()], False)
    assert not denied.authorize(ALICE, "h", 3, 2, "orders")


# -- by resource type --------------------------------------------------------------------------


def test_by_resource_type_allows_when_any_allow_is_not_denied():
    """WRITE on some topic (Kafka's stand-in for IDEMPOTENT_WRITE) is found by type."""
    auth = Authorizer([acl("a", O.WRITE), acl("b", O.READ, principal=BOB)], False)
    assert auth.authorize_by_resource_type(ALICE, "h", O.WRITE, T)
    assert not auth.authorize_by_resource_type(BOB, "h", O.WRITE, T)


def test_by_resource_type_deny_covering_every_allow_denies():
    """A literal deny of the same name, a prefixed deny of a prefix, or a '*' deny cover it."""
    def by_type(rules):
        return Authorizer(rules, False).authorize_by_resource_type(ALICE, "h", O.WRITE, T)

    assert not by_type([acl("a", O.WRITE), acl("a", O.WRITE, DENY)])
    assert not by_type([acl("abc", O.WRITE, pt=PRE), acl("ab", O.WRITE, DENY, pt=PRE)])
    assert not by_type([acl("a", O.WRITE), acl("*", O.WRITE, DENY)])
    assert by_type([acl("a", O.WRITE), acl("b", O.WRITE, DENY)])
    assert by_type([acl("*", O.ALL)])


def test_by_resource_type_without_acls_follows_the_default():
    """No ACL of the type: allowed when everyone is allowed without ACLs."""
    assert Authorizer([], True).authorize_by_resource_type(ALICE, "h", O.WRITE, T)
    assert not Authorizer([], False).authorize_by_resource_type(ALICE, "h", O.WRITE, T)
