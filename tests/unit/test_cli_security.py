"""``rafka users`` and ``rafka acls`` without Ray: the commands run through ``main`` against
the real SecurityAdmin over a controller stand-in, so parsing, what is stored and what is
printed are checked in milliseconds."""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

import pytest

from rafka.cli import acls as acls_cli
from rafka.cli import main
from rafka.cli import users as users_cli
from rafka.cluster.acls import AclBinding
from rafka.cluster.scram import verify_plain
from tests.cli_help import help_without_ray
from tests.cli_output import table_rows
from tests.unit.clients.security_fakes import SecurityGateway, SecurityOnlyAdmin


@pytest.fixture
def admin(monkeypatch) -> SecurityOnlyAdmin:
    stub = SecurityOnlyAdmin(SecurityGateway())

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        yield SimpleNamespace(admin=lambda: stub)

    monkeypatch.setattr(users_cli, "connected", connected)
    monkeypatch.setattr(acls_cli, "connected", connected)
    return stub


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def stored(admin) -> list[AclBinding]:
    return admin.describe_acls()


# -- users -------------------------------------------------------------------------------------


def test_users_add_with_password_stores_both_mechanisms(admin, capsys):
    """users add NAME --password P stores SCRAM credentials that check P."""
    status, out, _ = run(capsys, "users", "add", "alice", "--password", "pw")
    assert status == 0 and "SCRAM-SHA-256, SCRAM-SHA-512" in out
    users = admin._gateway.image.security.snapshot()["users"]
    assert verify_plain(b"\0alice\0pw", users.get) == "alice"


def test_users_add_from_password_file_and_one_mechanism(admin, capsys, tmp_path):
    """--password-file reads its first line (newline dropped); --mechanism limits storage."""
    secret = tmp_path / "pw"
    secret.write_text("from-file\nignored\n")
    status, _, _ = run(capsys, "users", "add", "bob", "--password-file", str(secret),
                       "--mechanism", "SCRAM-SHA-512", "--iterations", "5000")  # fmt: skip
    assert status == 0
    users = admin._gateway.image.security.snapshot()["users"]
    assert list(users["bob"]) == ["SCRAM-SHA-512"] and users["bob"]["SCRAM-SHA-512"][
        "iterations"] == 5000
    assert verify_plain(b"\0bob\0from-file", users.get) == "bob"


def test_users_add_prompts_twice_when_no_password_given(admin, capsys, monkeypatch):
    """Without a password option the password is asked for twice; a mismatch changes nothing."""
    monkeypatch.setattr(users_cli.sys, "stdin", SimpleNamespace(isatty=lambda: True))
    answers = iter(["typed", "typed", "one", "two"])
    monkeypatch.setattr(users_cli.getpass, "getpass", lambda prompt: next(answers))
    assert run(capsys, "users", "add", "carol")[0] == 0
    status, _, err = run(capsys, "users", "add", "dave")
    assert status == 1 and "differ" in err
    assert [u.name for u in admin.list_users()] == ["carol"]


def test_users_add_without_terminal_or_password_is_refused(admin, capsys, monkeypatch):
    """No password and no terminal: an error naming --password-file."""
    monkeypatch.setattr(users_cli.sys, "stdin", io.StringIO(""))
    status, _, err = run(capsys, "users", "add", "eve")
    assert status == 1 and "--password-file" in err


def test_users_add_bad_iterations_is_an_error(admin, capsys):
    """Iterations outside Kafka's range are refused with the range."""
    status, _, err = run(capsys, "users", "add", "a", "--password", "p", "--iterations", "10")
    assert status == 1 and "UnacceptableCredential" in err and "4096 to 16384" in err


def test_users_list_and_remove(admin, capsys):
    """list prints a table (or JSON); remove deletes; removing again is an error."""
    run(capsys, "users", "add", "alice", "--password", "pw")
    status, out, _ = run(capsys, "users", "list")
    assert status == 0 and out.splitlines()[0].split() == ["USER", "MECHANISMS"]
    assert out.splitlines()[1].startswith("alice")
    _, out, _ = run(capsys, "users", "list", "--json")
    assert json.loads(out) == [{"name": "alice", "mechanisms": {"SCRAM-SHA-256": 4096,
                                                                "SCRAM-SHA-512": 4096}}]
    assert run(capsys, "users", "remove", "alice")[0] == 0
    assert "No users" in run(capsys, "users", "list")[1]
    status, _, err = run(capsys, "users", "remove", "alice")
    assert status == 1 and "ResourceNotFound" in err


# -- ACLs --------------------------------------------------------------------------------------


def test_acls_add_one_per_principal_and_operation(admin, capsys):
    """add makes the product of principals and operations, and prints them."""
    status, out, _ = run(capsys, "acls", "add", "--principal", "User:alice", "--principal",
                         "User:bob", "--topic", "orders", "--operation", "read",
                         "--operation", "describe", "--allow")  # fmt: skip
    assert status == 0 and out.startswith("Added 4 ACL(s)")
    rows = table_rows(out, "Added")
    assert rows[0] == ["PERMISSION", "PRINCIPAL", "HOST", "OPERATION", "RESOURCE", "PATTERN",
                       "NAME"]  # fmt: skip
    assert ["ALLOW", "User:bob", "*", "DESCRIBE", "TOPIC", "LITERAL", "orders"] in rows
    assert len(stored(admin)) == 4


def test_acls_add_prefixed_group_cluster_and_host(admin, capsys):
    """--prefixed, --group, --cluster, --transactional-id and --host make those bindings."""
    run(capsys, "acls", "add", "--principal", "User:a", "--group", "app-", "--prefixed",
        "--operation", "read", "--deny", "--host", "10.0.0.1")  # fmt: skip
    run(capsys, "acls", "add", "--principal", "User:*", "--cluster", "--operation",
        "idempotent-write", "--allow")  # fmt: skip
    run(capsys, "acls", "add", "--principal", "User:a", "--transactional-id", "tx",
        "--operation", "write", "--allow")  # fmt: skip
    assert [b.to_tuple() for b in stored(admin)] == [
        (3, "app-", 4, "User:a", "10.0.0.1", 3, 2),
        (4, "kafka-cluster", 3, "User:*", "*", 12, 3),
        (5, "tx", 3, "User:a", "*", 4, 3),
    ]


@pytest.mark.parametrize("argv, words", [
    (["--principal", "alice", "--topic", "t", "--operation", "read", "--allow"], "TYPE:NAME"),
    (["--principal", "Group:x", "--topic", "t", "--operation", "read", "--allow"], "User:"),
    (["--principal", "User:a", "--group", "g", "--operation", "write", "--allow"],
     "GROUP ACLs support"),
    (["--principal", "User:a", "--cluster", "--prefixed", "--operation", "alter", "--allow"],
     "LITERAL"),
])  # fmt: skip
def test_acls_add_refuses_invalid_bindings(admin, capsys, argv, words):
    """Invalid ACLs are refused before anything is sent, saying what to fix."""
    status, _, err = run(capsys, "acls", "add", *argv)
    assert status == 1 and words in err
    assert admin._gateway.calls == []


def test_acls_add_requires_resource_operation_and_permission(admin, capsys):
    """argparse refuses an add without a resource, an operation, or allow/deny."""
    for argv in (["--principal", "User:a", "--operation", "read", "--allow"],
                 ["--principal", "User:a", "--topic", "t", "--allow"],
                 ["--principal", "User:a", "--topic", "t", "--operation", "read"]):  # fmt: skip
        with pytest.raises(SystemExit):
            main(["acls", "add", *argv])


def _three(capsys):
    run(capsys, "acls", "add", "--principal", "User:alice", "--topic", "orders", "--operation",
        "read", "--allow")  # fmt: skip
    run(capsys, "acls", "add", "--principal", "User:bob", "--topic", "ord", "--prefixed",
        "--operation", "write", "--deny")  # fmt: skip
    run(capsys, "acls", "add", "--principal", "User:alice", "--group", "g", "--operation",
        "read", "--allow")  # fmt: skip


def test_acls_list_filters(admin, capsys):
    """list: all, by principal, by resource name (exact), --match (what applies), JSON."""
    _three(capsys)
    assert len(table_rows("x\n" + run(capsys, "acls", "list")[1], "x")) == 4
    out = run(capsys, "acls", "list", "--principal", "User:alice")[1]
    assert [r[-1] for r in table_rows("x\n" + out, "x")[1:]] == ["orders", "g"]
    out = run(capsys, "acls", "list", "--topic", "orders")[1]
    assert [r[-1] for r in table_rows("x\n" + out, "x")[1:]] == ["orders"]
    out = run(capsys, "acls", "list", "--topic", "orders", "--match", "--json")[1]
    assert [(a["resource_name"], a["pattern_type"]) for a in json.loads(out)] == [
        ("orders", "LITERAL"), ("ord", "PREFIXED")]
    assert run(capsys, "acls", "list", "--principal", "User:zed")[1] == "No ACLs match\n"


def test_acls_remove_by_filter_and_all(admin, capsys):
    """remove deletes what the options match; without options it needs --all."""
    _three(capsys)
    status, out, _ = run(capsys, "acls", "remove", "--principal", "User:alice",
                         "--operation", "read")  # fmt: skip
    assert status == 0 and out.startswith("Removed 2 ACL(s)")
    assert [b.principal for b in stored(admin)] == ["User:bob"]
    status, _, err = run(capsys, "acls", "remove")
    assert status == 1 and "--all" in err
    left = AclBinding.of("topic", "ord", "prefixed", "User:bob", "*", "write", "deny")
    out = run(capsys, "acls", "remove", "--all")[1]
    assert out == "Removed 1 ACL(s):\n" + acls_cli.acls_text([left])
    assert stored(admin) == []


def test_help_screens_do_not_import_ray():
    """rafka users/acls help starts without Ray."""
    done = help_without_ray(["users", "--help"], ["users", "add", "--help"], ["acls", "--help"],
                            ["acls", "add", "--help"], ["acls", "list", "--help"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--password-file" in done.stdout and "--transactional-id" in done.stdout
