"""The ``rafka`` command line against a running cluster, run in-process through ``main``.

Uses the session's ``cluster`` and the per-test ``topic`` (1 partition) from conftest.py, and
passes ``--namespace cluster.namespace`` to every command. ``up`` and ``down`` are never run
in-process here (``down`` would stop the shared cluster): the slow test runs them as
subprocesses in a namespace of their own, joined to the session's Ray by ``--address``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
import tqdm

from rafka.cli import main
from tests.cli_help import help_without_ray


def run(capsys, cluster, *argv: str) -> tuple[int, str, str]:
    """Run one command in the session's namespace; returns (status, stdout, stderr)."""
    status = main([*argv, "--namespace", cluster.namespace])
    out, err = capsys.readouterr()
    return status, out, err


def consume_json(capsys, cluster, topic: str, *extra: str) -> list[dict]:
    status, out, err = run(
        capsys, cluster, "consume", topic, "--from-beginning", "--format", "json", *extra
    )
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_topics_create_list_describe_alter_delete(cluster, capsys):
    """A topic made, grown, reconfigured and deleted through the CLI shows up as such in
    list and describe at every step."""
    name = f"cli-{uuid.uuid4().hex[:10]}"
    status, out, err = run(
        capsys, cluster, "topics", "create", name, "--partitions", "2",
        "--config", "retention.ms=3600000", "cleanup.policy=compact",
    )  # fmt: skip
    assert status == 0, err
    assert "2 partition(s)" in out and "retention.ms=3600000" in out

    status, out, _ = run(capsys, cluster, "topics", "list")
    assert status == 0 and name in out.splitlines()

    cluster.admin().wait_for_topic(name)  # its replicas start in the background
    status, out, err = run(capsys, cluster, "topics", "describe", name)
    assert status == 0, err
    header, *rows = out.splitlines()
    assert f"Topic: {name}" in header and "PartitionCount: 2" in header
    assert "cleanup.policy=compact" in header and "retention.ms=3600000" in header
    assert "segment.bytes" not in header  # defaults are not listed
    assert len(rows) == 2
    assert all("HighWatermark: 0" in row and "Isr: " in row for row in rows)

    status, out, err = run(
        capsys, cluster, "topics", "alter", name, "--config", "retention.ms=-", "segment.ms=60000"
    )
    assert status == 0, err
    status, out, _ = run(capsys, cluster, "topics", "add-partitions", name, "--total", "3")
    assert status == 0 and "3 partition(s)" in out
    cluster.admin().wait_for_topic(name)

    status, out, err = run(capsys, cluster, "topics", "describe", name, "--json")
    assert status == 0, err
    described = json.loads(out)
    assert described["config"] == {"cleanup.policy": "compact", "segment.ms": 60000}
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["high_watermark"] == 0 for p in described["partitions"])

    status, _, err = run(capsys, cluster, "topics", "create", name)
    assert status == 1 and "error: TopicAlreadyExists: " in err
    status, _, err = run(capsys, cluster, "topics", "create", name, "--if-not-exists")
    assert status == 0, err

    status, out, err = run(capsys, cluster, "topics", "delete", name)
    assert status == 0, err
    status, out, _ = run(capsys, cluster, "topics", "list")
    assert name not in out.splitlines()
    status, _, err = run(capsys, cluster, "topics", "delete", name, "--if-exists")
    assert status == 0, err


def test_describe_shows_leadership_fields_and_filters_find_nothing_on_a_healthy_topic(
    cluster, topic, capsys
):
    """describe lists leader, epoch, replicas and ISR (no reassignment, not offline); on a
    healthy single-disk cluster --under-replicated and --unavailable find nothing."""
    status, out, err = run(capsys, cluster, "topics", "describe", topic)
    assert status == 0, err
    row = out.splitlines()[1]
    assert "\tLeader: 0\tEpoch: " in row and "\tReplicas: 0\tIsr: 0" in row
    assert "Adding" not in row and "Offline" not in row

    status, out, err = run(capsys, cluster, "topics", "describe", topic, "--json")
    assert status == 0, err
    (p,) = json.loads(out)["partitions"]
    assert (p["adding"], p["removing"], p["offline"], p["under_replicated"]) == (
        [], [], False, False
    )

    for flag in ("--under-replicated", "--unavailable"):
        status, out, err = run(capsys, cluster, "topics", "describe", topic, flag)
        assert status == 0, err
        assert out == "" and "no " in err
    status, out, err = run(capsys, cluster, "topics", "describe", "--under-replicated",
                           "--json")  # fmt: skip
    assert status == 0, err
    assert topic not in {p["topic"] for p in json.loads(out)["partitions"]}


def test_admin_brokers_report_rack_and_fenced(cluster):
    """The session's one broker has no rack and is not fenced."""
    brokers = cluster.admin().brokers()
    assert [(b.rack, b.fenced, b.alive) for b in brokers] == [(None, False, True)]


def test_elect_leaders_on_a_topic_led_by_its_preferred_replica(cluster, topic, capsys):
    """A preferred election where the first replica leads already is "not needed" (exit 0);
    so is an unclean one for a partition with a live leader; an unknown partition fails
    with UnknownTopicOrPartition."""
    status, out, err = run(capsys, cluster, "topics", "elect-leaders", topic)
    assert status == 0, err
    (line,) = out.splitlines()
    assert line.startswith(f"Topic: {topic}\tPartition: 0\tLeader: 0\tnot needed: ")
    status, out, err = run(capsys, cluster, "topics", "elect-leaders", topic, "--type", "unclean",
                           "--partition", "0")  # fmt: skip
    assert status == 0, err
    assert "\tnot needed: " in out
    results = cluster.admin().elect_leaders(topic, [0])
    assert [(r.partition, r.leader, type(r.error).__name__) for r in results] == [
        (0, 0, "ElectionNotNeeded")
    ]
    status, _, err = run(capsys, cluster, "topics", "elect-leaders", topic, "--partition", "3")
    assert status == 1 and "error: UnknownTopicOrPartition: " in err


def test_reassign_to_the_same_replicas_changes_nothing_and_to_unknown_brokers_fails(
    cluster, topic, capsys, tmp_path
):
    """Reassigning a partition to the replicas it has is a no-op; naming a broker that does
    not exist fails with InvalidReplicaAssignment and leaves the topic as it was."""
    status, out, err = run(capsys, cluster, "topics", "reassign", topic, "--partition", "0",
                           "--replicas", "0")  # fmt: skip
    assert status == 0, err
    assert "\tPartition: 0\tLeader: 0\t" in out and "Adding" not in out

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 7]}]}
    ))  # fmt: skip
    status, _, err = run(capsys, cluster, "topics", "reassign", "--plan", str(plan))
    assert status == 1 and "error: InvalidReplicaAssignment: " in err
    described = cluster.admin().describe_topic(topic)
    assert described.partitions[0].replicas == [0] and not described.partitions[0].reassigning


def test_produce_file_with_key_separator_then_consume_json(cluster, topic, tmp_path, capsys):
    """Each line of a file becomes one record, split into key and value at the first
    separator, and consume --format json gives them back in order."""
    lines = [b"k0:v0", b"k1:value:with:colons", b"k2:", b":no key", b"k4:\xff\xfebytes"]
    path = tmp_path / "records.txt"
    path.write_bytes(b"\n".join(lines[:-1]) + b"\r\n" + lines[-1] + b"\n")

    status, _, err = run(
        capsys, cluster, "produce", topic, "--file", str(path), "--key-separator", ":",
        "--progress",
    )  # fmt: skip
    assert status == 0, err
    assert f"produced 5 records to {topic} in " in err and "records/s" in err
    bar = err.split("\r")[-1].splitlines()[0]  # the progress bar's (tqdm's) last state
    size = tqdm.tqdm.format_sizeof(path.stat().st_size, divisor=1024)
    assert re.match(r"100%\|[#\u2588]+\| ", bar), bar  # a full bar, in ASCII or in blocks
    assert f" {size}/{size} " in bar and " 5 records, " in bar, bar

    records = consume_json(capsys, cluster, topic, "--max-messages", "5")
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4]
    assert [r["key"] for r in records] == ["k0", "k1", "k2", "", "k4"]
    assert [r["value"] for r in records] == ["v0", "value:with:colons", "", "no key",
                                             "\\xff\\xfebytes"]  # fmt: skip
    assert {(r["topic"], r["partition"]) for r in records} == {(topic, 0)}
    assert all(isinstance(r["timestamp"], int) and r["headers"] == [] for r in records)


def test_produce_reports_lines_without_separator(cluster, topic, tmp_path, capsys):
    """Lines that lack the key separator are not sent, are counted, and make the exit
    status 1, while the other lines are produced."""
    path = tmp_path / "records.txt"
    path.write_bytes(b"a\tone\nno separator here\nb\ttwo\n")
    status, _, err = run(
        capsys, cluster, "produce", topic, "--file", str(path), "--key-separator", "\\t"
    )
    assert status == 1
    assert "produced 2 records" in err and "1 line(s) had no key separator" in err

    status, out, err = run(capsys, cluster, "consume", topic, "--from-beginning", "--format", "kv")
    assert status == 0, err
    assert out == "a\tone\nb\ttwo\n"


def test_produce_counts_records_that_fail(cluster, topic, tmp_path, capsys):
    """A record the producer rejects is counted and named, the others are still produced,
    and the exit status is 1."""
    path = tmp_path / "records.txt"
    path.write_bytes(b"small\n" + b"x" * (2 << 20) + b"\nlast\n")
    status, _, err = run(capsys, cluster, "produce", topic, "--file", str(path))
    assert status == 1
    assert "produced 2 records" in err
    assert "error: 1 record(s) failed: RecordTooLarge: " in err

    status, out, err = run(capsys, cluster, "consume", topic, "--from-beginning")
    assert status == 0, err
    assert out == "small\nlast\n"


def test_consume_value_format_and_partitions(cluster, capsys, tmp_path):
    """--partition reads only the partitions named, and --format value prints the values."""
    name = f"cli-{uuid.uuid4().hex[:10]}"
    assert run(capsys, cluster, "topics", "create", name, "--partitions", "2")[0] == 0
    try:
        for partition, text in ((0, b"zero\n"), (1, b"one-a\none-b\n")):
            path = tmp_path / f"p{partition}.txt"
            path.write_bytes(text)
            status, _, err = run(capsys, cluster, "produce", name, "--file", str(path),
                                 "--partition", str(partition), "--acks", "1")  # fmt: skip
            assert status == 0, err
        status, out, err = run(
            capsys, cluster, "consume", name, "--from-beginning", "--partition", "1"
        )
        assert status == 0, err
        assert out == "one-a\none-b\n"
        assert "consumed 2 records" in err
        records = consume_json(capsys, cluster, name)
        assert sorted((r["partition"], r["value"]) for r in records) == [
            (0, "zero"), (1, "one-a"), (1, "one-b")
        ]  # fmt: skip
    finally:
        run(capsys, cluster, "topics", "delete", name)


def test_invalid_topic_name_fails_with_error_name(cluster, capsys):
    """A rafka error ends the command with status 1 and its name on stderr, no traceback."""
    status, out, err = run(capsys, cluster, "topics", "create", "bad name!")
    assert status == 1
    assert err.startswith("error: InvalidTopic: ") and "Traceback" not in err
    assert out == ""

    status, _, err = run(capsys, cluster, "topics", "describe", f"missing-{uuid.uuid4().hex}")
    assert status == 1 and err.startswith("error: UnknownTopicOrPartition: ")


def test_produce_to_a_missing_partition_fails(cluster, topic, tmp_path, capsys):
    """Sending to a partition the topic does not have fails the command with status 1."""
    path = tmp_path / "records.txt"
    path.write_bytes(b"x\n")
    status, _, err = run(capsys, cluster, "produce", topic, "--file", str(path),
                         "--partition", "7")  # fmt: skip
    assert status == 1 and "error: UnknownTopicOrPartition: " in err


def test_consume_stops_after_timeout_without_records(cluster, topic, capsys):
    """Without --follow, consume ends after --timeout-ms without a new record."""
    started = time.monotonic()
    status, out, err = run(capsys, cluster, "consume", topic, "--timeout-ms", "700")
    elapsed = time.monotonic() - started
    assert status == 0, err
    assert out == "" and "consumed 0 records" in err
    assert 0.6 <= elapsed < 15


def test_consume_from_beginning_stops_at_the_end_of_the_log(cluster, topic, tmp_path, capsys):
    """--from-beginning without --follow stops once the records present at the start are
    printed, without waiting out --timeout-ms."""
    path = tmp_path / "records.txt"
    path.write_bytes(b"a\nb\nc\n")
    assert run(capsys, cluster, "produce", topic, "--file", str(path))[0] == 0
    started = time.monotonic()
    status, out, err = run(
        capsys, cluster, "consume", topic, "--from-beginning", "--timeout-ms", "60000"
    )
    assert status == 0, err
    assert out == "a\nb\nc\n"
    assert time.monotonic() - started < 30


def test_status_shows_brokers_and_counts(cluster, capsys):
    """status prints the brokers and topic counts; --json the controller's raw answer."""
    status, out, err = run(capsys, cluster, "status", "--json")
    assert status == 0, err
    described = json.loads(out)
    assert described["brokers"] and all(b["alive"] for b in described["brokers"])
    assert described["topics"] >= 0 and described["partitions"] >= described["topics"]

    status, out, err = run(capsys, cluster, "status")
    assert status == 0, err
    assert "BROKER" in out and "FREE DISK" in out and "topics: " in out


def test_status_of_a_namespace_without_services_fails(cluster, capsys):
    """status in a namespace where nothing runs exits 1 and says to run `rafka up`."""
    status = main(["status", "--namespace", f"empty-{uuid.uuid4().hex[:8]}"])
    _, err = capsys.readouterr()
    assert status == 1
    assert err.startswith("error: BrokerNotAvailable: ") and "rafka up" in err


def test_help_does_not_import_ray():
    """`rafka --help` and the subcommands' help start without importing Ray."""
    done = help_without_ray(["--help"], ["topics", "create", "--help"], ["consume", "--help"])
    assert done.returncode == 0, done.stderr


def _rafka_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "rafka")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "rafka.cli"]


@pytest.mark.slow
def test_up_status_produce_consume_down_as_subprocesses(cluster, tmp_path):
    """The console script brings up services in a namespace of its own on the session's Ray
    (`up --address`), reports them, moves records through stdin and stdout, and stops them
    (`down`) without touching the session's services."""
    import ray

    address = ray.get_runtime_context().gcs_address
    namespace = f"cli-up-{uuid.uuid4().hex[:8]}"
    common = ["--address", address, "--namespace", namespace]

    def rafka(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*_rafka_command(), *argv, *common], input=stdin, capture_output=True,
            cwd=tmp_path, timeout=300,
        )  # fmt: skip

    up = rafka("up", "--data-dir", str(tmp_path / "data"))
    assert up.returncode == 0, up.stderr.decode()
    assert b"controller: disk 'local'" in up.stdout and b"rafka.connect(" in up.stdout
    try:
        status = rafka("status", "--json")
        assert status.returncode == 0, status.stderr.decode()
        brokers = json.loads(status.stdout)["brokers"]
        assert [b["directory"] for b in brokers] == [str(tmp_path / "data" / "local")]

        assert rafka("topics", "create", "events").returncode == 0
        produced = rafka("produce", "events", stdin=b"one\ntwo\nthree\n")
        assert produced.returncode == 0, produced.stderr.decode()
        consumed = rafka("consume", "events", "--from-beginning")
        assert consumed.returncode == 0, consumed.stderr.decode()
        assert consumed.stdout == b"one\ntwo\nthree\n"
    finally:
        down = rafka("down")
    assert down.returncode == 0, down.stderr.decode()
    assert b"stopped 1 replica(s), 1 node agent(s), 0 group coordinator(s) and the controller" in (
        down.stdout
    )
    after = rafka("status")
    assert after.returncode == 1 and b"BrokerNotAvailable" in after.stderr
    assert cluster.admin().list_topics() is not None  # the session's services still answer
