"""``rafka groups`` without Ray: the parser on its own, and the commands run through ``main``
against a stub Admin, so what they ask for and print is checked in milliseconds. Usage
errors end in argparse's status 2."""

from __future__ import annotations

import argparse
import contextlib
import json
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from rafka.cli import build_parser, main
from rafka.cli import groups as groups_cli
from rafka.cli.groups import describe_text, reset_request, topic_partitions
from rafka.errors import NonEmptyGroup
from rafka.types import (
    GroupDescription,
    GroupListing,
    GroupPartitionOffsets,
    MemberDescription,
    TopicPartition,
)
from tests.cli_help import help_without_ray

TP = TopicPartition

DESCRIBED = GroupDescription(
    "billing", "Stable", "consumer", "range", 7, "m-1",
    [MemberDescription("m-1", None, "app", "/10.0.0.7", [TP("orders", 0), TP("orders", 1)])],
    [GroupPartitionOffsets("orders", 0, 40, 100, 60, "m-1"),
     GroupPartitionOffsets("orders", 1, None, 50, None, "m-1"),
     GroupPartitionOffsets("gone", 0, 3, -1, None, None)],
)  # fmt: skip


class StubAdmin:
    """Records each group call and answers with canned values (or raises ``error``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.error: Exception | None = None

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.error is not None:
            raise self.error

    def list_groups(self) -> list[GroupListing]:
        self._record("list_groups")
        return [GroupListing("audit", "Empty", "", 0), GroupListing("billing", "Stable",
                                                                     "consumer", 2)]

    def describe_group(self, group_id: str) -> GroupDescription:
        self._record("describe_group", group_id)
        return DESCRIBED

    def delete_group(self, group_id: str) -> None:
        self._record("delete_group", group_id)

    def reset_offsets(self, group_id: str, topics=None, partitions=None, **kwargs) -> dict:
        self._record("reset_offsets", group_id, topics, partitions, **kwargs)
        return {TP("orders", 0): 10, TP("orders", 2): 5}


@pytest.fixture
def admin(monkeypatch) -> StubAdmin:
    stub = StubAdmin()

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        yield SimpleNamespace(admin=lambda: stub)

    monkeypatch.setattr(groups_cli, "connected", connected)
    return stub


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["groups", *argv])


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["groups", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def usage_error(capsys, *argv: str) -> str:
    """Parse a command argparse must refuse; returns its stderr."""
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    return capsys.readouterr().err


# -- parsing ------------------------------------------------------------------------------------


def test_each_subcommand_parses_to_its_handler():
    """list, describe, delete and reset-offsets parse with their options and handlers."""
    assert parse("list").handler is groups_cli._groups_list
    assert parse("list", "--state", "--json").state
    described = parse("describe", "billing", "--json")
    assert (described.group, described.json, described.handler) == (
        "billing", True, groups_cli._groups_describe)
    assert parse("delete", "billing").handler is groups_cli._groups_delete
    reset = parse("reset-offsets", "billing", "--all-topics", "--to-latest", "--execute")
    assert (reset.all_topics, reset.to_latest, reset.execute, reset.handler) == (
        True, True, True, groups_cli._groups_reset)


def test_topic_option_takes_a_topic_or_some_of_its_partitions():
    """--topic t is every partition of t; t:0,2 those partitions; repeats accumulate."""
    args = parse("reset-offsets", "g", "--topic", "orders", "--topic", "audit:0,2,2",
                 "--to-earliest")  # fmt: skip
    assert args.topic == [("orders", None), ("audit", (0, 2))]
    assert reset_request(args) == {
        "topics": ["orders"], "partitions": [TP("audit", 0), TP("audit", 2)],
        "to": "earliest", "shift_by": None, "dry_run": True,
    }  # fmt: skip


@pytest.mark.parametrize("text", [":0", "orders:", "orders:1,,2", "orders:x", "orders:-1"])
def test_malformed_topic_partitions_are_refused_with_an_example(text):
    """Each malformed T:P,P value raises ArgumentTypeError saying the expected form."""
    with pytest.raises(argparse.ArgumentTypeError, match=r"T:P|orders:0,2"):
        topic_partitions(text)


@pytest.mark.parametrize(
    "options, expected",
    [(["--to-earliest"], {"to": "earliest"}),
     (["--to-latest"], {"to": "latest"}),
     (["--to-offset", "0"], {"to": 0}),
     (["--shift-by", "-3"], {"shift_by": -3, "to": None}),
     (["--to-datetime", "2024-05-01T10:00:00Z"],
      {"to": datetime(2024, 5, 1, 10, tzinfo=timezone.utc)}),
     (["--to-datetime", "2024-05-01T12:00:00.250"],
      {"to": datetime(2024, 5, 1, 12, 0, 0, 250000)}),
     (["--to-earliest", "--execute"], {"dry_run": False}),
     (["--to-earliest", "--dry-run"], {"dry_run": True})],
)  # fmt: skip
def test_reset_target_options_become_reset_offsets_arguments(options, expected):
    """Each target option (negative shifts and ISO 8601 times included) maps onto
    reset_offsets' to / shift_by / dry_run."""
    request = reset_request(parse("reset-offsets", "g", "--all-topics", *options))
    assert {k: request[k] for k in expected} == expected
    assert request["topics"] is None and request["partitions"] is None


@pytest.mark.parametrize(
    "argv, message",
    [(["g", "--to-earliest"], "one of the arguments --topic --all-topics is required"),
     (["g", "--all-topics"], "one of the arguments --to-earliest"),
     (["g", "--all-topics", "--topic", "t", "--to-earliest"], "not allowed with argument"),
     (["g", "--all-topics", "--to-earliest", "--to-latest"], "not allowed with argument"),
     (["g", "--all-topics", "--to-offset", "3", "--shift-by", "1"], "not allowed with"),
     (["g", "--all-topics", "--to-earliest", "--execute", "--dry-run"], "not allowed with"),
     (["g", "--all-topics", "--to-offset", "-1"], "negative"),
     (["g", "--all-topics", "--shift-by", "x"], "'x' is not an integer"),
     (["g", "--all-topics", "--to-datetime", "yesterday"], "not an ISO 8601 date-time"),
     (["--all-topics", "--to-earliest"], "GROUP")],
)  # fmt: skip
def test_reset_options_are_mutually_exclusive_and_required(capsys, argv, message):
    """One scope and one target are required, at most one of each; bad values are refused."""
    assert message in usage_error(capsys, "reset-offsets", *argv)


def test_describe_and_delete_need_a_group(capsys):
    """describe and delete without GROUP are usage errors."""
    assert "GROUP" in usage_error(capsys, "describe")
    assert "GROUP" in usage_error(capsys, "delete")


# -- commands -----------------------------------------------------------------------------------


def test_list_prints_ids_a_state_table_or_json(admin, capsys):
    """Plain list prints ids one a line; --state a table; --json every field."""
    assert run(capsys, "list")[1] == "audit\nbilling\n"
    out = run(capsys, "list", "--state")[1].splitlines()
    assert out[0].split() == ["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"]
    assert out[2].split() == ["billing", "Stable", "consumer", "2"]
    listed = json.loads(run(capsys, "list", "--json")[1])["groups"]
    assert listed[1] == {"group_id": "billing", "state": "Stable", "protocol_type": "consumer",
                         "members": 2}  # fmt: skip


def test_describe_prints_a_header_and_kafkas_offset_table(admin, capsys):
    """The header has state, protocol, generation and members; each row has the committed
    offset, log end offset, lag and member, '-' where unknown."""
    status, out, err = run(capsys, "describe", "billing")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == ("Group: billing\tState: Stable\tProtocolType: consumer\tProtocol: range"
                        "\tGeneration: 7\tMembers: 1\tTotalLag: 60")  # fmt: skip
    assert lines[2].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "MEMBER-ID"]  # fmt: skip
    assert [line.split() for line in lines[3:]] == [
        ["orders", "0", "40", "100", "60", "m-1"],
        ["orders", "1", "-", "50", "-", "m-1"],
        ["gone", "0", "3", "-", "-", "-"],
    ]
    assert admin.calls == [("describe_group", ("billing",), {})]


def test_describe_json_has_members_offsets_and_null_for_unknown_log_end(admin, capsys):
    """--json carries members with their assignment and offsets, log end null if unknown."""
    described = json.loads(run(capsys, "describe", "billing", "--json")[1])
    assert described["members"][0]["assignment"] == [{"topic": "orders", "partition": 0},
                                                     {"topic": "orders", "partition": 1}]
    assert described["offsets"][2]["log_end_offset"] is None
    assert described["total_lag"] == 60 and described["generation"] == 7


def test_describe_of_a_group_without_partitions_prints_only_the_header():
    """A group with nothing committed or assigned has a header line and no table."""
    empty = DESCRIBED._replace(state="Empty", members=[], offsets=[], protocol="")
    assert describe_text(empty).count("\n") == 1 and "Protocol: -" in describe_text(empty)


def test_delete_prints_what_it_deleted(admin, capsys):
    """delete calls Admin.delete_group and confirms on stdout."""
    status, out, _ = run(capsys, "delete", "billing")
    assert status == 0 and out == "deleted consumer group 'billing'\n"


def test_reset_without_execute_prints_the_plan_and_says_nothing_changed(admin, capsys):
    """Like Kafka's tool the default is a dry run: the plan is printed with a note."""
    status, out, err = run(capsys, "reset-offsets", "billing", "--topic", "orders",
                           "--shift-by", "-5")  # fmt: skip
    assert status == 0, err
    assert admin.calls == [("reset_offsets", ("billing", ["orders"], None),
                            {"to": None, "shift_by": -5, "dry_run": True})]  # fmt: skip
    assert [line.split() for line in out.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["billing", "orders", "0", "10"], ["billing", "orders", "2", "5"],
    ]  # fmt: skip
    assert "nothing was changed; add --execute" in err


def test_reset_execute_json_reports_the_committed_offsets(admin, capsys):
    """--execute commits (dry_run False) and --json lists the new offsets."""
    status, out, err = run(capsys, "reset-offsets", "billing", "--all-topics", "--to-latest",
                           "--execute", "--json")  # fmt: skip
    assert status == 0, err
    assert admin.calls[0][2]["dry_run"] is False
    assert json.loads(out) == {"group": "billing", "executed": True, "offsets": [
        {"topic": "orders", "partition": 0, "offset": 10},
        {"topic": "orders", "partition": 2, "offset": 5}]}  # fmt: skip
    assert "committed 2 offset(s)" in err


def test_reset_of_an_active_group_exits_1_with_the_error(admin, capsys):
    """NonEmptyGroup from Admin ends the command with status 1 and the error on stderr."""
    admin.error = NonEmptyGroup("consumer group 'billing' is Stable with 2 member(s)")
    status, out, err = run(capsys, "reset-offsets", "billing", "--all-topics", "--to-earliest",
                           "--execute")  # fmt: skip
    assert status == 1 and out == ""
    assert "error: NonEmptyGroup: consumer group 'billing' is Stable" in err


def test_groups_help_does_not_import_ray():
    """`rafka groups --help` and its actions' help load without importing Ray."""
    done = help_without_ray(["groups", "--help"], ["groups", "reset-offsets", "--help"])
    assert done.returncode == 0, done.stderr
    assert "reset-offsets" in done.stdout and "--to-datetime ISO8601" in done.stdout
