"""``rafka acls add|list|remove`` (kafka-acls.sh): who may do what to which topics, groups,
transactional ids and the cluster, checked on every request of the Kafka listeners.

A resource is one of --topic, --group, --transactional-id (a name, ``*`` for every one;
with --prefixed every name starting with it) or --cluster. ``add`` creates one ACL per
principal and operation; ``list`` and ``remove`` take the same options as a filter, any
left out matching everything (``remove`` needs at least one, or --all).
"""

from __future__ import annotations

import argparse
import itertools
import json

from rafka.cli.connect import add_connection_options, connected
from rafka.cli.output import format_table
from rafka.cluster.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    check_operation_supported,
    validate_binding,
)
from rafka.errors import InvalidRequest

OPERATIONS = [o.name.lower().replace("_", "-") for o in AclOperation if o.value > 1]


def add_acls(commands: argparse._SubParsersAction) -> None:
    acls = commands.add_parser(
        "acls", help="add, list and remove Kafka ACLs",
        description="Kafka ACLs, checked on every request to the cluster's Kafka listeners: "
        "a DENY wins over any ALLOW, super.users pass every check, and a resource no ACL "
        "names is open to all while allow.everyone.if.no.acl.found is true (the default).",
    )  # fmt: skip
    actions = acls.add_subparsers(title="actions", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="allow or deny operations on a resource")
    _options(add, adding=True)
    add.set_defaults(handler=_add)
    listing = actions.add_parser(
        "list", help="ACLs matching the options (all without any)",
        description="List the ACLs the options match. --match with a resource lists every "
        "ACL that applies to that name: its literal ones, the '*' ones and the prefixed "
        "ones of a prefix of it.",
    )  # fmt: skip
    _options(listing, adding=False)
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(handler=_list)
    remove = actions.add_parser("remove", help="remove the ACLs matching the options")
    _options(remove, adding=False)
    remove.add_argument("--all", action="store_true", help="remove every ACL (no options)")
    remove.set_defaults(handler=_remove)
    for parser in (add, listing, remove):
        add_connection_options(parser)


def _options(parser: argparse.ArgumentParser, adding: bool) -> None:
    parser.add_argument("--principal", action="append", required=adding, metavar="P",
                        help="User:<name> or User:* (repeatable)")  # fmt: skip
    parser.add_argument("--host", action="append" if adding else None, metavar="H",
                        help="client IP address (default: any host, '*')")  # fmt: skip
    resource = parser.add_mutually_exclusive_group(required=adding)
    resource.add_argument("--topic", metavar="T")
    resource.add_argument("--group", metavar="G")
    resource.add_argument("--transactional-id", metavar="T")
    resource.add_argument("--cluster", action="store_true", help="the cluster itself")
    pattern = parser.add_mutually_exclusive_group()
    pattern.add_argument("--prefixed", action="store_true",
                         help="the name is a prefix: every resource starting with it")
    if not adding:
        pattern.add_argument("--literal", action="store_true",
                             help="only ACLs naming exactly the resource (default: literal "
                             "and prefixed ones of that name)")  # fmt: skip
        pattern.add_argument("--match", action="store_true",
                             help="every ACL that applies to the resource name")
    parser.add_argument("--operation", action="append", choices=OPERATIONS,
                        required=adding, metavar="OP",
                        help=f"repeatable; one of {', '.join(OPERATIONS)}")  # fmt: skip
    permission = parser.add_mutually_exclusive_group(required=adding)
    permission.add_argument("--allow", action="store_true")
    permission.add_argument("--deny", action="store_true")


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return ResourceType.ANY, None


def _operation(name: str) -> AclOperation:
    return AclOperation[name.upper().replace("-", "_")]


def bindings_of(args: argparse.Namespace) -> list[AclBinding]:
    """The ACLs ``rafka acls add`` creates: one per principal, host and operation, each
    checked (InvalidRequest, InvalidPrincipalType) as kafka-acls.sh checks them."""
    resource_type, name = _resource(args)
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    permission = AclPermissionType.ALLOW if args.allow else AclPermissionType.DENY
    out = []
    for principal, host, op in itertools.product(args.principal, args.host or ["*"],
                                                 args.operation):  # fmt: skip
        binding = AclBinding(resource_type, name, pattern, principal, host, _operation(op),
                             permission)  # fmt: skip
        validate_binding(binding)
        check_operation_supported(binding)
        out.append(binding)
    return list(dict.fromkeys(out))


def filters_of(args: argparse.Namespace) -> list[AclBindingFilter]:
    """The filters of ``rafka acls list|remove``: one per principal and operation given
    (a field not given matches anything)."""
    resource_type, name = _resource(args)
    if args.prefixed:
        pattern = PatternType.PREFIXED
    elif args.literal:
        pattern = PatternType.LITERAL
    elif args.match:
        pattern = PatternType.MATCH
    else:
        pattern = PatternType.ANY
    permission = (AclPermissionType.ALLOW if args.allow else
                  AclPermissionType.DENY if args.deny else AclPermissionType.ANY)  # fmt: skip
    operations = [_operation(o) for o in args.operation or ()] or [AclOperation.ANY]
    return [
        AclBindingFilter(resource_type, name, pattern, principal, args.host, op, permission)
        for principal, op in itertools.product(args.principal or [None], operations)
    ]


def _add(args: argparse.Namespace) -> int:
    bindings = bindings_of(args)
    with connected(args) as cluster:
        cluster.admin().create_acls(bindings)
    args.out.write(f"Added {len(bindings)} ACL(s):\n" + acls_text(bindings))
    return 0


def _list(args: argparse.Namespace) -> int:
    filters = filters_of(args)
    with connected(args) as cluster:
        admin = cluster.admin()
        found = list(dict.fromkeys(b for f in filters for b in admin.describe_acls(f)))
    if args.json:
        json.dump([acl_dict(b) for b in found], args.out)
        args.out.write("\n")
    elif not found:
        args.out.write("No ACLs match\n")
    else:
        args.out.write(acls_text(found))
    return 0


def _remove(args: argparse.Namespace) -> int:
    given = any(getattr(args, a) for a in ("principal", "host", "topic", "group",
                                           "transactional_id", "cluster", "operation",
                                           "allow", "deny"))  # fmt: skip
    if given == args.all:
        raise InvalidRequest("give options saying which ACLs to remove, or --all alone to "
                             "remove every ACL")  # fmt: skip
    with connected(args) as cluster:
        matched = cluster.admin().delete_acls(filters_of(args))
    removed = list(dict.fromkeys(b for per_filter in matched for b in per_filter))
    args.out.write(f"Removed {len(removed)} ACL(s)" + (":\n" + acls_text(removed) if removed
                                                        else "\n"))  # fmt: skip
    return 0


def acl_dict(b: AclBinding) -> dict:
    return {"permission": b.permission.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "resource_type": b.resource_type.name,
            "pattern_type": b.pattern_type.name, "resource_name": b.resource_name}  # fmt: skip


def acls_text(bindings: list[AclBinding]) -> str:
    rows = [["PERMISSION", "PRINCIPAL", "HOST", "OPERATION", "RESOURCE", "PATTERN", "NAME"]]
    rows += [[b.permission.name, b.principal, b.host, b.operation.name, b.resource_type.name,
              b.pattern_type.name, b.resource_name] for b in bindings]  # fmt: skip
    return format_table(rows, indent="  ")
