"""``rafka topics`` describe, elect-leaders and reassign without Ray: the commands run
through ``main`` against a real Admin whose controller is a fake, so what they send, print
and exit with is checked in milliseconds. Usage errors end in argparse's status 2."""

from __future__ import annotations

import contextlib
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from rafka.clients.admin import Admin

from rafka.cli import main
from rafka.cli import replicas as replicas_cli
from rafka.cli import topics as topics_cli
from rafka.cli.replicas import broker_ids, election_report, parse_plan, partition_line
from rafka.errors import ElectionNotNeeded, NoReassignmentInProgress, PreferredLeaderNotAvailable
from rafka.types import ElectionResult
from tests.cli_help import help_without_ray


def partition(p, leader, replicas, isr, adding=(), removing=(), offline=False) -> dict:
    return {"partition": p, "leader": leader, "leader_epoch": 4, "partition_epoch": 9,
            "replicas": list(replicas), "isr": list(isr), "adding": list(adding),
            "removing": list(removing), "offline": offline}  # fmt: skip


TOPICS = {
    "orders": [
        partition(0, 1, (1, 2, 3), (1, 2, 3)),
        partition(1, 2, (2, 3, 1), (2,)),
        partition(2, 3, (3, 1, 2, 4), (3, 1, 2), adding=(4,), removing=(2,)),
    ],
    "audit": [
        partition(0, -1, (2,), (2,), offline=True),
        partition(1, 1, (1,), (1,)),
    ],
}


class FakeController:
    """The controller's answers for a fixed set of topics; records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.elections: list[dict] = []

    def call_controller(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "describe_topics":
            names = args[0] if args[0] is not None else sorted(TOPICS)
            return [self._topic(n) for n in names]
        if method == "elect_leaders":
            return self.elections
        if method == "reassign_partitions":
            name, plan = args
            moved = [
                partition(p, plan[p][0], sorted(set(plan[p]) | {1}), [1],
                          adding=[b for b in plan[p] if b != 1], removing=[1] if 1 not in plan[p]
                          else [])
                for p in sorted(plan)
            ]  # fmt: skip
            return {**self._topic(name), "partitions": moved}
        if method == "cancel_reassignment":
            name, partitions = args
            moving = [p["partition"] for p in TOPICS[name] if p["adding"] or p["removing"]]
            for p in partitions or ():
                if p not in moving:
                    raise NoReassignmentInProgress(
                        f"partition {p} of topic {name!r} is not being reassigned"
                    )
            cancelled = [
                partition(p["partition"], p["leader"], [b for b in p["replicas"]
                          if b not in p["adding"]], [b for b in p["isr"] if b not in
                          p["adding"]])
                if p["partition"] in (partitions or moving) else p
                for p in TOPICS[name]
            ]  # fmt: skip
            return {**self._topic(name), "partitions": cancelled}
        raise AssertionError(f"unexpected controller call {method}")

    @staticmethod
    def _topic(name: str) -> dict:
        return {"name": name, "topic_id": f"id-{name}", "internal": False,
                "config": {"retention.ms": 604800000}, "partitions": TOPICS[name]}  # fmt: skip


class FakeAdmin(Admin):
    def partition_offsets(self, name: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        return [
            {"partition": p["partition"], "log_start_offset": 0, "high_watermark": 5,
             "log_end_offset": 6, "size_bytes": 2048}
            for p in TOPICS[name]
        ]  # fmt: skip


@pytest.fixture
def controller(monkeypatch) -> FakeController:
    fake = FakeController()
    metadata = SimpleNamespace(invalidate=lambda name: None)

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        yield SimpleNamespace(admin=lambda: FakeAdmin(fake, metadata))

    monkeypatch.setattr(topics_cli, "connected", connected)
    monkeypatch.setattr(replicas_cli, "connected", connected)
    return fake


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def usage_error(capsys, *argv: str) -> str:
    """Run a command that argparse must refuse; returns its stderr."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err


# -- describe ----------------------------------------------------------------------------------


def test_describe_prints_leader_epoch_replicas_isr_and_a_reassignment(controller, capsys):
    """Each partition line has Leader, Epoch, Replicas and Isr; Adding/Removing Replicas
    appear only on a partition being reassigned; the replication factor leaves out the
    replicas being added."""
    status, out, err = run(capsys, "topics", "describe", "orders")
    assert status == 0, err
    header, *rows = out.splitlines()
    assert "Topic: orders\tTopicId: id-orders\tPartitionCount: 3\tReplicationFactor: 3" in header
    assert rows[0] == (
        "\tPartition: 0\tLeader: 1\tEpoch: 4\tReplicas: 1,2,3\tIsr: 1,2,3\tLogStartOffset: 0"
        "\tHighWatermark: 5\tLogEndOffset: 6\tSize: 2.0 KiB"
    )
    assert "Adding" not in rows[0] + rows[1] and "Offline" not in out
    assert "\tReplicas: 3,1,2,4\tIsr: 3,1,2\tAdding Replicas: 4\tRemoving Replicas: 2\t" in rows[2]


def test_describe_marks_a_partition_without_leader_offline(controller, capsys):
    status, out, _ = run(capsys, "topics", "describe", "audit")
    assert status == 0
    rows = out.splitlines()[1:]
    assert "\tLeader: none\tEpoch: 4\tReplicas: 2\tIsr: 2\tOffline: yes" in rows[0]
    assert "Offline" not in rows[1]


def test_describe_json_has_the_new_fields_and_offsets(controller, capsys):
    status, out, _ = run(capsys, "topics", "describe", "orders", "--json")
    assert status == 0
    described = json.loads(out)
    moving = described["partitions"][2]
    assert {k: moving[k] for k in ("leader", "leader_epoch", "replicas", "isr", "adding",
                                   "removing", "offline", "under_replicated")} == {
        "leader": 3, "leader_epoch": 4, "replicas": [3, 1, 2, 4], "isr": [3, 1, 2],
        "adding": [4], "removing": [2], "offline": False, "under_replicated": False,
    }  # fmt: skip
    assert described["partitions"][1]["under_replicated"] is True
    assert moving["high_watermark"] == 5


def test_describe_needs_a_name_unless_filtering(controller, capsys):
    """Without NAME and without a filter, argparse refuses and says how to fix it."""
    err = usage_error(capsys, "topics", "describe")
    assert "NAME" in err and "--under-replicated" in err
    assert controller.calls == []


def test_describe_under_replicated_lists_those_partitions_of_every_topic(controller, capsys):
    """Only partitions with fewer in-sync replicas than replicas, one line each with its
    topic, from every topic; the reassigning partition with its added replica behind is not
    under-replicated."""
    status, out, err = run(capsys, "topics", "describe", "--under-replicated")
    assert status == 0, err
    assert controller.calls == [("describe_topics", (None,))]
    assert out.splitlines() == [
        "\tTopic: orders\tPartition: 1\tLeader: 2\tEpoch: 4\tReplicas: 2,3,1\tIsr: 2"
    ]


def test_describe_unavailable_lists_partitions_without_a_live_leader(controller, capsys):
    status, out, _ = run(capsys, "topics", "describe", "--unavailable")
    assert status == 0
    assert out.splitlines() == [
        "\tTopic: audit\tPartition: 0\tLeader: none\tEpoch: 4\tReplicas: 2\tIsr: 2\tOffline: yes"
    ]


def test_describe_filters_combine_and_take_a_topic(controller, capsys):
    """Both filters list partitions in either state; NAME limits them to that topic."""
    status, out, _ = run(capsys, "topics", "describe", "--unavailable", "--under-replicated")
    assert status == 0
    assert [line.split("\t")[1:3] for line in out.splitlines()] == [
        ["Topic: audit", "Partition: 0"], ["Topic: orders", "Partition: 1"],
    ]  # fmt: skip
    status, out, err = run(capsys, "topics", "describe", "orders", "--unavailable")
    assert status == 0 and out == ""
    assert controller.calls[-1] == ("describe_topics", (["orders"],))
    assert "no unavailable partitions in topic 'orders'" in err


def test_describe_filtered_json_lists_partitions_with_their_topic(controller, capsys):
    status, out, _ = run(capsys, "topics", "describe", "--under-replicated", "--json")
    assert status == 0
    listed = json.loads(out)["partitions"]
    assert [(p["topic"], p["partition"], p["isr"]) for p in listed] == [("orders", 1, [2])]


# -- elect-leaders -----------------------------------------------------------------------------


def test_elect_leaders_prints_one_line_per_partition_and_succeeds(controller, capsys):
    """Elected and not-needed partitions are both fine: exit 0; the arguments reach the
    controller as (type, topic, partitions)."""
    controller.elections = [
        {"topic": "orders", "partition": 1, "leader": 2, "errno": 84,
         "message": "broker 2 leads already"},
        {"topic": "orders", "partition": 0, "leader": 1, "errno": 0, "message": ""},
    ]  # fmt: skip
    status, out, err = run(capsys, "topics", "elect-leaders", "orders", "--partition", "0",
                           "--partition", "1")  # fmt: skip
    assert status == 0, err
    assert controller.calls == [("elect_leaders", ("preferred", "orders", [0, 1]))]
    assert out.splitlines() == [
        "Topic: orders\tPartition: 0\tLeader: 1\telected",
        "Topic: orders\tPartition: 1\tLeader: 2\tnot needed: broker 2 leads already",
    ]


def test_elect_leaders_exits_1_when_an_election_failed(controller, capsys):
    controller.elections = [
        {"topic": "audit", "partition": 0, "leader": -1, "errno": 80,
         "message": "preferred replica 2 is not in sync"},
        {"topic": "orders", "partition": 0, "leader": 1, "errno": 0, "message": ""},
    ]  # fmt: skip
    status, out, err = run(capsys, "topics", "elect-leaders", "--type", "unclean")
    assert status == 1
    assert controller.calls == [("elect_leaders", ("unclean", None, None))]
    assert out.splitlines()[0] == (
        "Topic: audit\tPartition: 0\tLeader: none\tfailed: PreferredLeaderNotAvailable: "
        "preferred replica 2 is not in sync"
    )
    assert "error: the unclean election failed for 1 partition(s)" in err


def test_elect_leaders_usage_errors(controller, capsys):
    """--partition without a topic and an unknown --type are refused by argparse."""
    assert "--partition needs NAME" in usage_error(
        capsys, "topics", "elect-leaders", "--partition", "0"
    )
    assert "invalid choice: 'clean'" in usage_error(
        capsys, "topics", "elect-leaders", "--type", "clean"
    )
    assert controller.calls == []


def test_election_report_counts_failures_but_not_election_not_needed():
    lines, failed = election_report([
        ElectionResult("t", 0, 1, None),
        ElectionResult("t", 1, 2, ElectionNotNeeded("x")),
        ElectionResult("t", 2, -1, PreferredLeaderNotAvailable("y")),
    ])  # fmt: skip
    assert failed == 1 and len(lines) == 3


# -- reassign ----------------------------------------------------------------------------------


def test_reassign_pairs_send_the_plan_and_print_the_moving_partitions(controller, capsys):
    """--partition/--replicas pairs, in order, become one plan for NAME; the partitions
    moved are printed with their Adding/Removing Replicas."""
    status, out, err = run(capsys, "topics", "reassign", "orders", "--partition", "0",
                           "--replicas", "2,3,4", "--partition", "2", "--replicas", "1,3")
    assert status == 0, err
    assert controller.calls == [("reassign_partitions", ("orders", {0: [2, 3, 4], 2: [1, 3]}))]
    lines = out.splitlines()
    assert lines[0] == "reassigning 2 partition(s) of topic 'orders':"
    assert "\tPartition: 0\tLeader: 2" in lines[1]
    assert "Adding Replicas: 2,3,4\tRemoving Replicas: 1" in lines[1]
    assert "rafka topics describe orders" in err


def test_reassign_plan_file_in_kafka_format(controller, capsys, tmp_path):
    """A Kafka reassignment JSON (log_dirs "any" allowed) moves the partitions of every
    topic it names, one call per topic."""
    plan = {"version": 1, "partitions": [
        {"topic": "orders", "partition": 1, "replicas": [3, 2], "log_dirs": ["any", "any"]},
        {"topic": "audit", "partition": 0, "replicas": [1]},
        {"topic": "orders", "partition": 0, "replicas": [2, 3]},
    ]}  # fmt: skip
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    status, out, err = run(capsys, "topics", "reassign", "--plan", str(path))
    assert status == 0, err
    assert controller.calls == [
        ("reassign_partitions", ("orders", {1: [3, 2], 0: [2, 3]})),
        ("reassign_partitions", ("audit", {0: [1]})),
    ]
    assert "reassigning 2 partition(s) of topic 'orders':" in out
    err = usage_error(capsys, "topics", "reassign", "orders", "--plan", str(path))
    assert "moves partitions of 'audit', not of 'orders' only: leave NAME out" in err
    assert len(controller.calls) == 2


def test_reassign_plan_from_stdin_limited_to_name(controller, capsys, monkeypatch):
    """'--plan -' reads the plan from stdin; NAME may be given when the plan moves only
    that topic."""
    import io

    plan = {"version": 1, "partitions": [{"topic": "orders", "partition": 2, "replicas": [4]}]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(plan)))
    status, _, err = run(capsys, "topics", "reassign", "orders", "--plan", "-")
    assert status == 0, err
    assert controller.calls == [("reassign_partitions", ("orders", {2: [4]}))]


@pytest.mark.parametrize(
    "argv, message",
    [([], "--partition P --replicas B1,B2"),
     (["--partition", "0", "--replicas", "1"], "NAME"),
     (["orders", "--partition", "0"], "got 1 --partition and 0 --replicas"),
     (["orders", "--partition", "0", "--partition", "1", "--replicas", "1"],
      "got 2 --partition and 1 --replicas"),
     (["orders", "--partition", "0", "--replicas", "1", "--partition", "0", "--replicas", "2"],
      "partition 0 is given twice"),
     (["orders", "--partition", "0", "--replicas", "1,,2"], "comma-separated"),
     (["orders", "--partition", "0", "--replicas", "1,x"], "'x' in '1,x' is not a broker id"),
     (["orders", "--partition", "0", "--replicas", "1,2,1"], "broker 1 appears twice"),
     (["orders", "--partition", "-1", "--replicas", "1"], "negative"),
     (["orders", "--plan", "/nonexistent/plan.json"], "cannot read"),
     (["orders", "--plan", "-", "--partition", "0", "--replicas", "1"], "not both")],
)  # fmt: skip
def test_reassign_usage_errors(controller, capsys, monkeypatch, argv, message):
    """Every malformed reassign command is refused by argparse with a message saying what
    was wrong, before the controller is called."""
    import io

    plan = {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1]}]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(plan)))
    assert message in usage_error(capsys, "topics", "reassign", *argv)
    assert controller.calls == []


@pytest.mark.parametrize(
    "plan, message",
    [([], "a reassignment plan is an object"),
     ({"version": 1}, "a reassignment plan is an object"),
     ({"version": 2, "partitions": []}, "version 2 is unknown"),
     ({"version": 1, "partitions": []}, "non-empty list"),
     ({"version": 1, "partitions": ["orders-0"]}, "partitions[0] must be an object"),
     ({"version": 1, "partitions": [{"topic": "t", "replicas": [1]}]}, "lacks partition"),
     ({"version": 1, "partitions": [{"topic": "", "partition": 0, "replicas": [1]}]},
      "topic must be a topic name"),
     ({"version": 1, "partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]},
      "partition must be an integer"),
     ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]},
      "non-empty list of broker ids"),
     ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, -2]}]},
      "non-empty list of broker ids"),
     ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
      "name a broker twice"),
     ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1],
                                     "log_dirs": ["/data/a"]}]}, 'every entry "any"'),
     ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]},
                                    {"topic": "t", "partition": 0, "replicas": [2]}]},
      "partitions[1]: t partition 0 appears twice")],
)  # fmt: skip
def test_parse_plan_refuses_malformed_plans_naming_the_entry(plan, message):
    """Each malformed plan raises ValueError saying which entry and what is wrong."""
    with pytest.raises(ValueError) as info:
        parse_plan(plan)
    assert message in str(info.value)


def test_plan_file_that_is_not_json_is_a_usage_error(controller, capsys, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{version: 1")
    err = usage_error(capsys, "topics", "reassign", "--plan", str(path))
    assert "argument --plan" in err and "is not JSON" in err


def test_reassign_cancel_of_every_partition_sends_none_and_prints_the_topic(controller, capsys):
    """NAME --cancel without --partition cancels every reassignment of the topic; the
    partitions are printed back on their original replicas."""
    status, out, err = run(capsys, "topics", "reassign", "orders", "--cancel")
    assert status == 0, err
    assert controller.calls == [("cancel_reassignment", ("orders", None))]
    lines = out.splitlines()
    assert lines[0] == "cancelled the reassignments of topic 'orders'; its partitions:"
    assert len(lines) == 4
    assert lines[3] == "\tPartition: 2\tLeader: 3\tEpoch: 4\tReplicas: 3,1,2\tIsr: 3,1,2"
    assert "original replicas" in err and "added are deleted" in err


def test_reassign_cancel_of_one_partition_prints_only_it(controller, capsys):
    status, out, err = run(capsys, "topics", "reassign", "orders", "--cancel", "--partition", "2")
    assert status == 0, err
    assert controller.calls == [("cancel_reassignment", ("orders", [2]))]
    assert out.splitlines() == [
        "cancelled the reassignment of 1 partition(s) of topic 'orders':",
        "\tPartition: 2\tLeader: 3\tEpoch: 4\tReplicas: 3,1,2\tIsr: 3,1,2",
    ]


def test_reassign_cancel_of_a_partition_not_being_reassigned_is_a_clean_error(controller, capsys):
    """NoReassignmentInProgress from the controller ends the command with status 1 and the
    error's name and message, like every typed error, without a traceback."""
    status, out, err = run(capsys, "topics", "reassign", "orders", "--cancel", "--partition", "0")
    assert status == 1 and out == ""
    assert err.strip() == (
        "error: NoReassignmentInProgress: partition 0 of topic 'orders' is not being reassigned"
    )
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [(["orders", "--cancel", "--partition", "2", "--replicas", "1,2"],
      "--cancel takes no --replicas: a cancelled reassignment goes back to the replicas"),
     (["orders", "--cancel", "--plan", "-"], "--cancel takes no --plan"),
     (["--cancel"], "required with --cancel: NAME"),
     (["--cancel", "--partition", "2"], "required with --cancel: NAME"),
     (["orders", "--cancel", "--partition", "2", "--partition", "2"],
      "partition 2 is given twice")],
)  # fmt: skip
def test_reassign_cancel_usage_errors(controller, capsys, monkeypatch, argv, message):
    """--cancel with a new assignment (--replicas or --plan), or without the topic, is
    refused by argparse saying why, before the controller is called."""
    import io

    plan = {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1]}]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(plan)))
    assert message in usage_error(capsys, "topics", "reassign", *argv)
    assert controller.calls == []


def test_broker_ids_parses_a_comma_separated_list_in_order():
    assert broker_ids("3, 1,2") == [3, 1, 2]
    assert broker_ids("0") == [0]


def test_partition_line_shows_reassignment_and_offline_only_when_set():
    base = partition(0, 1, (1, 2), (1,))
    assert partition_line(base) == "\tPartition: 0\tLeader: 1\tEpoch: 4\tReplicas: 1,2\tIsr: 1"
    empty_isr = partition(0, -1, (1, 2), (), removing=(2,), offline=True)
    assert partition_line({**empty_isr, "topic": "t"}, with_topic=True) == (
        "\tTopic: t\tPartition: 0\tLeader: none\tEpoch: 4\tReplicas: 1,2\tIsr: -"
        "\tRemoving Replicas: 2\tOffline: yes"
    )


def test_topics_help_lists_the_new_actions_without_importing_ray():
    """`rafka topics --help` names elect-leaders and reassign, and loading their module
    does not import Ray."""
    done = help_without_ray(
        ["topics", "--help"], ["topics", "reassign", "--help"],
        ["topics", "elect-leaders", "--help"],
    )
    assert done.returncode == 0, done.stderr
    assert "elect-leaders" in done.stdout and "reassign" in done.stdout
    assert "kafka-reassign-partitions.sh" in done.stdout
    assert "--type {preferred,unclean}" in done.stdout
    assert "--cancel" in done.stdout
