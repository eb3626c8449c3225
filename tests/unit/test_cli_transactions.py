"""``rafka transactions`` without Ray: the parser on its own, and the commands run through
``main`` against a stub Admin, so what they ask for and print is checked in milliseconds.
Usage errors end in argparse's status 2."""

from __future__ import annotations

import argparse
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from rafka.cli import build_parser, main
from rafka.cli import transactions as txn_cli
from rafka.errors import InvalidTxnState, TransactionalIdNotFound
from rafka.types import (
    HangingTransaction,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from tests.cli_help import help_without_ray

NOW = 1_700_000_000_000
TP = TopicPartition

DESCRIBED = TransactionDescription("billing", 5, 3, "Ongoing", 60_000,
                                   [TP("orders", 0), TP("audit", 2)], NOW - 4_000,
                                   NOW - 1_000)  # fmt: skip
PRODUCERS = {0: [ProducerState(5, 3, 7, NOW - 500, 2, 40), ProducerState(6, 1, 0, NOW - 9, -1, -1)],
             1: []}  # fmt: skip
HANGING = [HangingTransaction("orders", 0, 5, 3, 2, 40, NOW - 1_200_000)]


class StubAdmin:
    """Records each transaction call and answers with canned values (or raises ``error``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.error: Exception | None = None

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.error is not None:
            raise self.error

    def list_transactions(self, **kwargs) -> list[TransactionListing]:
        self._record("list_transactions", **kwargs)
        return [TransactionListing("audit", 6, "CompleteCommit"),
                TransactionListing("billing", 5, "Ongoing")]  # fmt: skip

    def describe_transactions(self, ids) -> dict[str, TransactionDescription]:
        self._record("describe_transactions", ids)
        return {"billing": DESCRIBED}

    def describe_producers(self, topic, partitions=None) -> dict[int, list[ProducerState]]:
        self._record("describe_producers", topic, partitions)
        return PRODUCERS if partitions is None else {p: PRODUCERS[p] for p in partitions}

    def find_hanging_transactions(self, **kwargs) -> list[HangingTransaction]:
        self._record("find_hanging_transactions", **kwargs)
        return HANGING

    def abort_transaction(self, *args) -> None:
        self._record("abort_transaction", *args)


@pytest.fixture
def admin(monkeypatch) -> StubAdmin:
    stub = StubAdmin()

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        yield SimpleNamespace(admin=lambda: stub)

    monkeypatch.setattr(txn_cli, "connected", connected)
    monkeypatch.setattr(txn_cli, "_now_ms", lambda: NOW)
    return stub


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", *argv])


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["transactions", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def usage_error(capsys, *argv: str) -> str:
    """Run a command argparse (or its handler) must refuse as a usage error; its stderr."""
    with pytest.raises(SystemExit) as info:
        main(["transactions", *argv])
    assert info.value.code == 2
    return capsys.readouterr().err


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


# -- parsing ------------------------------------------------------------------------------------


def test_each_action_parses_to_its_handler():
    """list, describe, describe-producers, find-hanging and abort parse with their options."""
    listed = parse("list", "--state", "Ongoing", "--state", "Empty", "--producer-id", "5")
    assert (listed.state, listed.producer_id, listed.handler) == (
        ["Ongoing", "Empty"], [5], txn_cli._list)
    assert parse("describe", "--transactional-id", "b").handler is txn_cli._describe
    producers = parse("describe-producers", "--topic", "orders", "--partition", "1")
    assert (producers.topic, producers.partition) == ("orders", 1)
    found = parse("find-hanging", "--broker-id", "2")
    assert (found.topic, found.broker_id, found.max_transaction_timeout) == (None, 2, 900_000)
    aborted = parse("abort", "--topic", "t", "--partition", "0", "--start-offset", "40")
    assert (aborted.start_offset, aborted.handler) == (40, txn_cli._abort)


@pytest.mark.parametrize(
    "argv, message",
    [(["describe"], "--transactional-id"),
     (["describe-producers"], "--topic"),
     (["describe-producers", "--topic", "t", "--partition", "-1"], "negative"),
     (["find-hanging", "--max-transaction-timeout", "x"], "'x' is not an integer"),
     (["abort", "--topic", "t"], "--partition"),
     (["abort", "--topic", "t", "--partition", "0"], "name the transaction with --start-offset"),
     (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch",
       "3"], "all of --producer-id, --producer-epoch and --coordinator-epoch"),
     (["abort", "--topic", "t", "--partition", "0", "--start-offset", "4", "--producer-id",
       "5"], "not both")],
)  # fmt: skip
def test_missing_or_bad_options_are_usage_errors(admin, capsys, argv, message):
    """Required options, bad numbers and an abort named neither way (or both) end in 2."""
    assert message in usage_error(capsys, *argv)
    assert admin.calls == []


# -- commands -----------------------------------------------------------------------------------


def test_list_prints_a_table_or_json_and_passes_the_filters(admin, capsys):
    """One row per id; --state, --producer-id and --min-duration-ms reach the Admin."""
    status, out, _ = run(capsys, "list")
    assert status == 0
    assert table(out) == [["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
                          ["audit", "6", "CompleteCommit"], ["billing", "5", "Ongoing"]]
    assert admin.calls[0] == ("list_transactions", (), {"states": None, "producer_ids": None,
                                                        "min_duration_ms": -1})  # fmt: skip
    listed = json.loads(run(capsys, "list", "--state", "Ongoing", "--min-duration-ms", "10",
                            "--json")[1])  # fmt: skip
    assert listed["transactions"][1] == {"transactional_id": "billing", "producer_id": 5,
                                         "state": "Ongoing"}  # fmt: skip
    assert admin.calls[1][2] == {"states": ["Ongoing"], "producer_ids": None,
                                 "min_duration_ms": 10}  # fmt: skip


def test_describe_prints_kafkas_row_with_the_duration_and_partitions(admin, capsys):
    """The row holds epoch, state, timeout, start, duration (now - start) and partitions."""
    status, out, _ = run(capsys, "describe", "--transactional-id", "billing")
    assert status == 0 and admin.calls == [("describe_transactions", (["billing"],), {})]
    assert table(out) == [
        ["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS", "START-MS",
         "DURATION-MS", "PARTITIONS"],
        ["billing", "5", "3", "Ongoing", "60000", str(NOW - 4_000), "4000",
         "orders-0,audit-2"],
    ]  # fmt: skip
    described = json.loads(run(capsys, "describe", "--transactional-id", "billing", "--json")[1])
    assert described["partitions"] == [{"topic": "orders", "partition": 0},
                                       {"topic": "audit", "partition": 2}]  # fmt: skip


def test_describe_of_an_idle_id_prints_dashes_for_its_start_and_partitions():
    """An id with no transaction running has '-' for start, duration and partitions."""
    idle = DESCRIBED._replace(state="CompleteCommit", partitions=[], start_ms=-1)
    assert table(txn_cli.description_text(idle, NOW))[1][-3:] == ["-", "-", "-"]


def test_describing_an_unknown_id_exits_1_with_the_error(admin, capsys):
    """TransactionalIdNotFound ends the command with status 1 and the error on stderr."""
    admin.error = TransactionalIdNotFound("no transaction coordinator has 'ghost'")
    status, out, err = run(capsys, "describe", "--transactional-id", "ghost")
    assert status == 1 and out == ""
    assert "error: TransactionalIdNotFound: no transaction coordinator has 'ghost'" in err


def test_describe_producers_prints_a_row_per_producer_of_each_partition(admin, capsys):
    """'-' marks a producer with no open transaction; --partition asks for that one only."""
    status, out, _ = run(capsys, "describe-producers", "--topic", "orders")
    assert status == 0
    assert table(out) == [
        ["PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
         "LAST-TIMESTAMP", "TXN-START-OFFSET"],
        ["0", "5", "3", "2", "7", str(NOW - 500), "40"],
        ["0", "6", "1", "-1", "0", str(NOW - 9), "-"],
    ]  # fmt: skip
    assert admin.calls[0] == ("describe_producers", ("orders", None), {})
    answer = json.loads(run(capsys, "describe-producers", "--topic", "orders", "--partition",
                            "1", "--json")[1])  # fmt: skip
    assert answer == {"topic": "orders", "partitions": [{"partition": 1, "producers": []}]}
    assert admin.calls[1] == ("describe_producers", ("orders", [1]), {})


def test_find_hanging_prints_each_with_how_long_its_producer_has_been_silent(admin, capsys):
    """Each row has the producer, epochs, start offset, last timestamp and duration; the
    options reach the Admin."""
    status, out, _ = run(capsys, "find-hanging", "--topic", "orders",
                         "--max-transaction-timeout", "60000")  # fmt: skip
    assert status == 0
    assert table(out) == [
        ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
         "START-OFFSET", "LAST-TIMESTAMP", "DURATION-MS"],
        ["orders", "0", "5", "3", "2", "40", str(NOW - 1_200_000), "1200000"],
    ]  # fmt: skip
    assert admin.calls[0][2] == {"topic": "orders", "broker_id": None,
                                 "max_transaction_timeout_ms": 60000}  # fmt: skip
    hanging = json.loads(run(capsys, "find-hanging", "--json")[1])["hanging"]
    assert hanging[0]["start_offset"] == 40 and hanging[0]["producer_id"] == 5


def test_find_hanging_with_nothing_found_prints_the_header_and_says_so(admin, capsys, monkeypatch):
    """An empty search prints the header on stdout and a note on stderr."""
    monkeypatch.setattr(admin, "find_hanging_transactions", lambda **kwargs: [])
    status, out, err = run(capsys, "find-hanging")
    assert status == 0 and len(out.splitlines()) == 1
    assert "no hanging transactions found" in err


def test_abort_by_producer_id_passes_the_three_numbers(admin, capsys):
    """--producer-id, --producer-epoch and --coordinator-epoch (-1 allowed) go to the Admin."""
    status, out, _ = run(capsys, "abort", "--topic", "orders", "--partition", "0",
                         "--producer-id", "5", "--producer-epoch", "3",
                         "--coordinator-epoch", "-1")  # fmt: skip
    assert status == 0
    assert admin.calls == [("abort_transaction", ("orders", 0, 5, 3, -1), {})]
    assert out == "aborted the transaction of producer 5 (epoch 3) in orders-0\n"


def test_abort_by_start_offset_looks_the_producer_up_as_kafkas_tool_does(admin, capsys):
    """--start-offset finds the producer whose open transaction starts there and aborts it
    with its epoch and coordinator epoch; an offset no transaction starts at exits 1."""
    status, _, _ = run(capsys, "abort", "--topic", "orders", "--partition", "0",
                       "--start-offset", "40")  # fmt: skip
    assert status == 0
    assert admin.calls == [("describe_producers", ("orders", [0]), {}),
                           ("abort_transaction", ("orders", 0, 5, 3, 2), {})]  # fmt: skip
    status, out, err = run(capsys, "abort", "--topic", "orders", "--partition", "0",
                           "--start-offset", "41")  # fmt: skip
    assert status == 1 and out == ""
    assert "no open transaction starts at offset 41 in orders-0" in err


def test_a_refused_abort_exits_1_with_the_error(admin, capsys):
    """The Admin's refusal (here: nothing open) ends the command with status 1."""
    admin.error = InvalidTxnState("producer 5 has no open transaction in orders-0")
    status, _, err = run(capsys, "abort", "--topic", "orders", "--partition", "0",
                         "--producer-id", "5", "--producer-epoch", "3",
                         "--coordinator-epoch", "0")  # fmt: skip
    assert status == 1 and "error: InvalidTxnState: producer 5 has no open" in err


def test_transactions_help_does_not_import_ray():
    """`rafka transactions --help` and its actions' help load without importing Ray."""
    done = help_without_ray(["transactions", "--help"], ["transactions", "abort", "--help"])
    assert done.returncode == 0, done.stderr
    assert "find-hanging" in done.stdout and "--start-offset O" in done.stdout
