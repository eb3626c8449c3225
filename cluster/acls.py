"""Kafka's ACL model: bindings, filters, and the authorizer that decides with them.

The enums carry Kafka's numeric codes (they travel in CreateAcls, DescribeAcls and
DeleteAcls requests as int8). A binding is a resource pattern (type, name, pattern type)
plus an entry (principal, host, operation, permission); on the Ray side a binding travels as
a plain tuple of those seven fields, ints for the enums (``AclBinding.to_tuple``).

``Authorizer`` decides as Kafka's StandardAuthorizer does:

1. a super user is allowed everything;
2. the bindings that apply to a resource are its literal ones, the literal ``*`` ones of its
   type, and the prefixed ones whose name starts the resource's name;
3. of those, a binding matches a request when its principal is the request's or ``User:*``,
   its host is the request's or ``*``, and its operation is the request's, or ``ALL``, or
   (ALLOW bindings only) one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE,
   ALTER_CONFIGS implies DESCRIBE_CONFIGS. A DENY matches its own operation (or ALL) only,
   so denying DESCRIBE does not deny READ, and denying READ does not deny DESCRIBE;
4. a matching DENY wins over any ALLOW; a matching ALLOW allows;
5. nothing matched: denied if any binding applies to the resource (for anyone), else
   ``allow.everyone.if.no.acl.found`` decides.

Plain Python, no Ray; an ``Authorizer`` is immutable (build a new one when the ACLs change).
"""

from __future__ import annotations

from collections import defaultdict
from enum import IntEnum
from typing import Any, Iterable, NamedTuple

from rafka.errors import InvalidPrincipalType, InvalidRequest

WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
USER_PREFIX = "User:"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2  # filters only: literal, wildcard and prefixed bindings that apply to a name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Permission = AclPermissionType  # the shorter name

#: Operations whose ALLOW also allows DESCRIBE / DESCRIBE_CONFIGS (Kafka's implied operations).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                              AclOperation.DELETE, AclOperation.ALTER})  # fmt: skip
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_O = AclOperation
#: The operations that mean something on each resource type (what kafka-acls.sh accepts).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE,
                                   _O.ALTER, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.ALL}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
                                     _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER,
                                     _O.DESCRIBE, _O.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.ALL}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE, _O.ALL}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS, _O.ALL}),
}  # fmt: skip


def _enum(cls: type[IntEnum], value: Any) -> Any:
    """``value`` (a member, an int code or a name) as a member of ``cls``; an unknown int
    code is UNKNOWN, as Kafka reads a code it does not know."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value.strip().upper().replace("-", "_")]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls if m.value > 1)
            raise InvalidRequest(
                f"{value!r} is not a {cls.__name__}: give one of {names}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{value!r} is not a {cls.__name__} (an int code or a name)")
    try:
        return cls(value)
    except ValueError:
        return cls(0)


class AclBinding(NamedTuple):
    """One ACL: who (principal ``User:<name>`` or ``User:*``, from ``host`` or ``*``) may or
    may not (``permission``) do ``operation`` to the resources of ``resource_type`` named
    ``resource_name`` (``pattern_type`` LITERAL: that name, ``*`` for every one; PREFIXED:
    every name starting with it)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(cls, *fields: Any) -> "AclBinding":
        """A binding from seven fields (enums as members, int codes or names), or from one
        tuple of them (what the controller stores and answers)."""
        if len(fields) == 1:
            fields = tuple(fields[0])
        if len(fields) != 7:
            raise InvalidRequest(f"an ACL binding has 7 fields, got {len(fields)}: {fields!r}")
        rt, name, pt, principal, host, op, perm = fields
        return cls(_enum(ResourceType, rt), name, _enum(PatternType, pt), principal, host,
                   _enum(AclOperation, op), _enum(AclPermissionType, perm))  # fmt: skip

    def to_tuple(self) -> tuple:
        """The binding with plain ints for its enums (for msgpack and the wire)."""
        return (int(self.resource_type), self.resource_name, int(self.pattern_type),
                self.principal, self.host, int(self.operation), int(self.permission))  # fmt: skip

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} on {self.resource_type.name} "
                f"{self.pattern_type.name} {self.resource_name!r}")  # fmt: skip


class AclBindingFilter(NamedTuple):
    """Selects bindings as Kafka's DescribeAcls and DeleteAcls do: ANY (or None for the
    strings) matches every value; otherwise a field must equal the binding's, except that a
    MATCH pattern type with a name selects every binding that applies to that name
    (literal of that name, literal ``*``, prefixed of a prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, *fields: Any) -> "AclBindingFilter":
        """A filter from seven fields or one tuple of them (None: the filter matching all)."""
        if len(fields) == 1:
            if fields[0] is None:
                return cls()
            fields = tuple(fields[0])
        if len(fields) != 7:
            raise InvalidRequest(f"an ACL filter has 7 fields, got {len(fields)}: {fields!r}")
        rt, name, pt, principal, host, op, perm = fields
        return cls(_enum(ResourceType, rt), name, _enum(PatternType, pt), principal, host,
                   _enum(AclOperation, op), _enum(AclPermissionType, perm))  # fmt: skip

    def to_tuple(self) -> tuple:
        return (int(self.resource_type), self.resource_name, int(self.pattern_type),
                self.principal, self.host, int(self.operation), int(self.permission))  # fmt: skip

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type != b.pattern_type
        ):
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:  # MATCH against a literal binding
                if b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(b.resource_name):  # MATCH, prefixed
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission in (AclPermissionType.ANY, b.permission)


def validate_filter(f: AclBindingFilter) -> None:
    """InvalidRequest for a filter with an UNKNOWN field (Kafka refuses those too)."""
    for field, value in (("resource type", f.resource_type), ("pattern type", f.pattern_type),
                         ("operation", f.operation), ("permission", f.permission)):  # fmt: skip
        if value == 0:
            raise InvalidRequest(f"the ACL filter's {field} is UNKNOWN: give a known one or ANY")


def validate_binding(b: AclBinding) -> None:
    """Refuse a binding that cannot be created: InvalidPrincipalType for a principal that is
    not ``User:<name>``, InvalidRequest for anything else, saying how to fix it."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequest(f"an ACL needs a resource type (topic, group, cluster, "
                             f"transactional_id, ...), not {b.resource_type.name}")  # fmt: skip
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequest(f"an ACL's pattern type must be LITERAL or PREFIXED, not "
                             f"{b.pattern_type.name} (ANY and MATCH are for filters)")  # fmt: skip
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequest(f"an ACL needs an operation (read, write, describe, all, ...), "
                             f"not {b.operation.name}")  # fmt: skip
    if b.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequest(f"an ACL's permission must be ALLOW or DENY, not "
                             f"{b.permission.name}")  # fmt: skip
    if not isinstance(b.resource_name, str) or not b.resource_name:
        raise InvalidRequest("an ACL's resource name is empty: name the resource, or give "
                             "'*' (literal) for every resource of its type")  # fmt: skip
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise InvalidRequest(f"the only name of the CLUSTER resource is {CLUSTER_NAME!r}, "
                             f"not {b.resource_name!r}")  # fmt: skip
    if b.resource_type == ResourceType.CLUSTER and b.pattern_type != PatternType.LITERAL:
        raise InvalidRequest(f"a CLUSTER ACL must be LITERAL {CLUSTER_NAME!r}")
    if not isinstance(b.principal, str) or ":" not in b.principal:
        raise InvalidRequest(f"ACL principal {b.principal!r} is not TYPE:NAME: give "
                             "User:<name>, or User:* for everyone")  # fmt: skip
    if not b.principal.startswith(USER_PREFIX) or len(b.principal) == len(USER_PREFIX):
        raise InvalidPrincipalType(f"ACL principal {b.principal!r} is not a user: give "
                                   "User:<name>, or User:* for everyone")  # fmt: skip
    if not isinstance(b.host, str) or not b.host:
        raise InvalidRequest("an ACL's host is empty: give a client IP address, or '*' for "
                             "any host")  # fmt: skip


def check_operation_supported(b: AclBinding) -> None:
    """InvalidRequest for an operation meaningless on the binding's resource type (the
    check kafka-acls.sh makes before sending; the controller accepts any)."""
    allowed = SUPPORTED_OPERATIONS.get(b.resource_type, frozenset())
    if b.operation not in allowed:
        names = ", ".join(sorted(o.name.lower() for o in allowed))
        raise InvalidRequest(f"{b.resource_type.name} ACLs support the operations {names}, "
                             f"not {b.operation.name.lower()}")  # fmt: skip


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users`` ("User:a;User:b") as a set of principals."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class Authorizer:
    """Kafka's StandardAuthorizer over a fixed set of bindings (see the module docstring).

    Indexed for per-request use: literal bindings by (type, name); prefixed ones by type
    and then by prefix, with the set of prefix lengths present, so a check costs one dict
    lookup per distinct prefix length rather than a scan of every prefixed binding."""

    def __init__(
        self, bindings: Iterable[AclBinding | tuple], allow_everyone_if_no_acl_found: bool = True,
        super_users: Iterable[str] | str = (),
    ) -> None:  # fmt: skip
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        if isinstance(super_users, str):
            super_users = parse_super_users(super_users)
        self.super_users = frozenset(super_users)
        self._literal: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[int, dict[str, list[AclBinding]]] = defaultdict(dict)
        self._prefix_lengths: dict[int, list[int]] = defaultdict(list)
        self._by_type: dict[int, list[AclBinding]] = defaultdict(list)
        for b in bindings:
            b = AclBinding.of(b)  # enum members, whatever the caller built it from
            self._by_type[b.resource_type].append(b)
            if b.pattern_type == PatternType.LITERAL:
                self._literal[(b.resource_type, b.resource_name)].append(b)
            elif b.pattern_type == PatternType.PREFIXED:
                self._prefixed[b.resource_type].setdefault(b.resource_name, []).append(b)
        for rt, by_prefix in self._prefixed.items():
            self._prefix_lengths[rt] = sorted({len(p) for p in by_prefix})

    def applicable(self, resource_type: ResourceType, resource_name: str) -> list[AclBinding]:
        """Every binding that applies to the resource, for any principal."""
        rt = int(resource_type)
        found = list(self._literal.get((rt, resource_name), ()))
        if resource_name != WILDCARD:
            found += self._literal.get((rt, WILDCARD), ())
        by_prefix = self._prefixed.get(rt)
        if by_prefix:
            for n in self._prefix_lengths[rt]:
                if n > len(resource_name):
                    break
                found += by_prefix.get(resource_name[:n], ())
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation | int,
        resource_type: ResourceType | int, resource_name: str,
    ) -> bool:  # fmt: skip
        """May ``principal`` (``User:<name>``, from client address ``host``) do
        ``operation`` to the resource?"""
        if principal in self.super_users:
            return True
        op = AclOperation(operation)
        bindings = self.applicable(ResourceType(resource_type), resource_name)
        allowed = False
        for b in bindings:
            verdict = _verdict(b, principal, host, op)
            if verdict == AclPermissionType.DENY:
                return False
            if verdict == AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return self.allow_everyone_if_no_acl_found and not bindings

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation | int,
        resource_type: ResourceType | int,
    ) -> bool:  # fmt: skip
        """May ``principal`` do ``operation`` to at least one resource of the type (Kafka's
        authorizeByResourceType, e.g. WRITE on any topic stands in for IDEMPOTENT_WRITE)?
        Yes when allowed on a resource no ACL names (and everyone is allowed then), or when
        an ALLOW of exactly that operation (or ALL) is not covered by a DENY of it: a
        literal ``*`` deny covers all, a literal deny its own name, a prefixed deny every
        name it starts."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True  # super users, and the no-ACL default (Kafka checks the same name)
        op = AclOperation(operation)
        deny_literal, deny_prefixed = set(), set()
        allow_literal, allow_prefixed = set(), set()
        for b in self._by_type.get(int(resource_type), ()):
            if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
                continue
            if b.operation not in (op, AclOperation.ALL):
                continue
            literal = b.pattern_type == PatternType.LITERAL
            if b.permission == AclPermissionType.DENY:
                if literal and b.resource_name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(b.resource_name)
            elif b.permission == AclPermissionType.ALLOW:
                (allow_literal if literal else allow_prefixed).add(b.resource_name)
        if WILDCARD in allow_literal:
            return True
        candidates = [n for n in allow_literal if n not in deny_literal] + list(allow_prefixed)
        return any(
            not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1))
            for name in candidates
        )


def _verdict(
    b: AclBinding, principal: str, host: str, op: AclOperation
) -> AclPermissionType | None:
    """ALLOW or DENY when binding ``b`` (already known to apply to the resource) matches the
    request, None when it does not."""
    if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
        return None
    if b.host != WILDCARD and b.host != host:
        return None
    if b.operation != AclOperation.ALL:
        if b.permission == AclPermissionType.ALLOW:
            if op == AclOperation.DESCRIBE:
                if b.operation not in IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if b.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != b.operation:
                return None
        elif op != b.operation:
            return None
    if b.permission in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return b.permission
    return None
