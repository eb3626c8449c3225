"""``rafka status`` without Ray: ``cluster_overview`` and the command run through ``main``
against a real Admin whose controller is a fake (and whose group calls are canned), so what
it gathers and prints is checked in milliseconds."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest
from rafka.clients.admin import Admin
from rafka.clients.cluster_status import cluster_overview

from rafka.cli import build_parser, main
from rafka.cli import cluster as cluster_cli
from rafka.errors import CoordinatorLoadInProgress, CoordinatorNotAvailable
from rafka.types import GroupDescription, GroupListing, GroupPartitionOffsets, MemberDescription
from rafka.types import TopicPartition as TP
from tests.cli_help import help_without_ray
from tests.cli_output import table_rows

GiB = 1 << 30


def partition(p, leader, replicas, isr, offline=False) -> dict:
    return {"partition": p, "leader": leader, "leader_epoch": 3, "partition_epoch": 5,
            "replicas": list(replicas), "isr": list(isr), "adding": [], "removing": [],
            "offline": offline}  # fmt: skip


def broker(broker_id, disk, alive=True, used_gib=25) -> dict:
    raw = {"broker_id": broker_id, "disk": disk, "rack": None, "alive": alive, "fenced": False}
    if alive:
        raw.update(node_ip=f"10.0.0.{broker_id + 1}", directory=f"/data/{disk}", pid=77,
                   disk_total_bytes=100 * GiB, disk_free_bytes=(100 - used_gib) * GiB)
    return raw


CLUSTER = {
    "controller_disk": "disk-0", "metadata_offset": 57,
    "brokers": [broker(0, "disk-0"), broker(1, "disk-1"), broker(2, "disk-2", alive=False)],
}  # fmt: skip
TOPICS = {
    "orders": [
        partition(0, 0, (0, 1), (0, 1)),
        partition(1, 1, (1, 2), (1,)),  # broker 2 is down: under-replicated
        partition(2, 0, (0, 1), (0, 1)),
    ],
    "audit": [partition(0, 2, (2,), (2,), offline=True)],  # its only replica is down
    "__consumer_offsets": [partition(0, 0, (0,), (0,)), partition(1, 1, (1,), (1,))],
}
INTERNAL = {"__consumer_offsets"}

BILLING = GroupDescription(
    "billing", "Stable", "consumer", "range", 4, "m-1",
    [MemberDescription("m-1", None, "app", "/10.0.0.9", [TP("orders", 0), TP("orders", 1)])],
    [GroupPartitionOffsets("orders", 0, 40, 100, 60, "m-1"),
     GroupPartitionOffsets("orders", 1, 45, 50, 5, "m-1"),
     GroupPartitionOffsets("orders", 2, None, 70, None, None),
     GroupPartitionOffsets("gone", 0, 3, -1, None, None)],
)  # fmt: skip
AUDIT = GroupDescription("audit", "Empty", "consumer", "", 2, None, [],
                         [GroupPartitionOffsets("audit", 0, 9, 9, 0, None)])  # fmt: skip
LISTINGS = [GroupListing("audit", "Empty", "consumer", 0),
            GroupListing("billing", "Stable", "consumer", 1)]  # fmt: skip


class FakeController:
    """The controller's describe_cluster and describe_topics answers; records the calls."""

    def __init__(self, cluster: dict, topics: dict) -> None:
        self.cluster, self.topics = cluster, topics
        self.calls: list[tuple[str, tuple]] = []

    def call_controller(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "describe_cluster":
            return self.cluster
        if method == "describe_topics":
            names = args[0] if args[0] is not None else sorted(self.topics)
            return [{"name": n, "topic_id": f"id-{n}", "internal": n in INTERNAL, "config": {},
                     "partitions": self.topics[n]} for n in names]  # fmt: skip
        raise AssertionError(f"unexpected controller call {method}")


class FakeAdmin(Admin):
    """A real Admin over the fake controller, with canned group calls: ``failing`` names
    groups whose description raises, ``list_error`` makes list_groups raise."""

    def __init__(self, controller: FakeController, listings=LISTINGS,
                 described=(AUDIT, BILLING)) -> None:  # fmt: skip
        super().__init__(controller, SimpleNamespace(invalidate=lambda name: None))
        self.listings = list(listings)
        self.described = {d.group_id: d for d in described}
        self.failing: dict[str, Exception] = {}
        self.list_error: Exception | None = None
        self.group_calls: list[tuple[str, tuple]] = []

    def list_groups(self) -> list[GroupListing]:
        self.group_calls.append(("list_groups", ()))
        if self.list_error is not None:
            raise self.list_error
        return self.listings

    def describe_groups(self, group_ids) -> list[GroupDescription]:
        ids = tuple(group_ids)
        self.group_calls.append(("describe_groups", ids))
        for g in ids:
            if g in self.failing:
                raise self.failing[g]
        return [self.described[g] for g in ids]


def serve(monkeypatch, fake: FakeAdmin, namespace: str = "prod") -> FakeAdmin:
    """Make the status command connect to a cluster whose admin is ``fake``."""

    @contextlib.contextmanager
    def connected(args, need_ray=False):
        assert need_ray  # status never starts an embedded cluster
        yield SimpleNamespace(admin=lambda: fake, namespace=namespace)

    monkeypatch.setattr(cluster_cli, "connected", connected)
    return fake


@pytest.fixture
def admin(monkeypatch) -> FakeAdmin:
    return serve(monkeypatch, FakeAdmin(FakeController(CLUSTER, TOPICS)))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["status", *argv])
    out, err = capsys.readouterr()
    return status, out, err




# -- cluster_overview ---------------------------------------------------------------------------


def test_overview_counts_replicas_and_leaders_per_broker_with_disk_usage(admin):
    """Each broker has its replica and leader counts over every topic (internal ones too;
    an offline partition's leader counts for nobody) and its disk use in bytes; a dead
    broker's unknown fields are None."""
    overview = cluster_overview(admin)
    counts = {b["broker_id"]: (b["replicas"], b["leaders"]) for b in overview["brokers"]}
    assert counts == {0: (3, 3), 1: (4, 2), 2: (2, 0)}
    b0, _, b2 = overview["brokers"]
    assert (b0["disk_used_bytes"], b0["disk_free_bytes"], b0["node_ip"]) == (
        25 * GiB, 75 * GiB, "10.0.0.1")
    assert (b2["alive"], b2["disk_used_bytes"], b2["node_ip"], b2["directory"]) == (
        False, None, None, None)  # fmt: skip


def test_overview_counts_internal_topics_apart_and_lists_problem_partitions(admin):
    """topics/partitions leave __consumer_offsets out (it has counts of its own and comes
    last in topic_list); the problem partitions are flagged under-replicated or offline."""
    overview = cluster_overview(admin)
    assert (overview["topics"], overview["partitions"]) == (2, 4)
    assert (overview["internal_topics"], overview["internal_partitions"]) == (1, 2)
    assert [t["name"] for t in overview["topic_list"]] == ["audit", "orders",
                                                           "__consumer_offsets"]
    orders = overview["topic_list"][1]
    assert orders["placement"] == [
        {"broker_id": 0, "replicas": [0, 2], "leaders": [0, 2]},
        {"broker_id": 1, "replicas": [0, 1, 2], "leaders": [1]},
        {"broker_id": 2, "replicas": [1], "leaders": []},
    ]
    assert (orders["replication_factor"], orders["under_replicated"], orders["offline"]) == (
        2, 1, 0)  # fmt: skip
    assert overview["problem_partitions"] == [
        {"topic": "audit", "partition": 0, "leader": 2, "replicas": [2], "isr": [2],
         "under_replicated": False, "offline": True},
        {"topic": "orders", "partition": 1, "leader": 1, "replicas": [1, 2], "isr": [1],
         "under_replicated": True, "offline": False},
    ]  # fmt: skip
    assert (overview["under_replicated_partitions"], overview["offline_partitions"]) == (1, 1)


def test_overview_sums_group_lag_in_one_describe_call(admin):
    """A group's total lag sums its known per-partition lags (no commit, or no log end
    offset: unknown, not counted); the topics take one describe_topics call and the groups
    one list_groups and one describe_groups."""
    overview = cluster_overview(admin)
    audit, billing = overview["groups"]
    assert (billing["state"], billing["members"], billing["total_lag"], billing["error"]) == (
        "Stable", 1, 65, None)  # fmt: skip
    assert billing["offsets"][2] == {"topic": "orders", "partition": 2, "committed": None,
                                     "log_end_offset": 70, "lag": None, "member_id": None}
    assert billing["offsets"][3]["log_end_offset"] is None  # -1 from the Admin: unknown
    assert audit["total_lag"] == 0
    assert admin.group_calls == [("list_groups", ()), ("describe_groups", ("audit", "billing"))]
    assert [m for m, _ in admin._gateway.calls] == ["describe_cluster", "describe_topics"]


def test_a_group_whose_description_fails_is_reported_with_its_error(admin):
    """When describe_groups fails, each group is described alone: the one that still fails
    keeps its listed state and member count and carries the error, the others their lag."""
    admin.failing["audit"] = CoordinatorLoadInProgress("the coordinator is loading offsets")
    audit, billing = cluster_overview(admin)["groups"]
    assert audit == {"group_id": "audit", "state": "Empty", "protocol_type": "consumer",
                     "members": 0, "total_lag": None, "offsets": [],
                     "error": "CoordinatorLoadInProgress: the coordinator is loading offsets"}
    assert billing["total_lag"] == 65 and billing["error"] is None


def test_without_consumer_offsets_the_coordinators_are_not_asked():
    """No __consumer_offsets means no group can exist: list_groups (which would create the
    topic) is not called."""
    topics = {n: p for n, p in TOPICS.items() if n not in INTERNAL}
    admin = FakeAdmin(FakeController(CLUSTER, topics))
    overview = cluster_overview(admin)
    assert overview["groups"] == [] and overview["groups_error"] is None
    assert admin.group_calls == []


# -- the command --------------------------------------------------------------------------------


def test_status_table_shows_each_broker_with_its_partition_and_leader_counts(admin, capsys):
    """The broker table has disk, node, alive, disk use and replica/leader counts per
    broker; the topics table the leaders/replicas of each topic per broker."""
    status, out, err = run(capsys)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[:3] == ["rafka in Ray namespace 'prod'",
                         "controller: disk 'disk-0', metadata offset 57",
                         "brokers: 3, 2 alive"]  # fmt: skip
    rows = table_rows(out, "brokers:")
    assert rows[0] == ["BROKER", "DISK", "NODE", "ALIVE", "USED", "FREE", "DISK", "REPLICAS",
                       "LEADERS", "DIRECTORY"]  # fmt: skip
    assert rows[1] == ["0", "disk-0", "10.0.0.1", "yes", "25%", "75.0", "GiB", "of", "100.0",
                       "GiB", "3", "3", "/data/disk-0"]  # fmt: skip
    assert rows[3] == ["2", "disk-2", "-", "NO", "-", "-", "2", "0", "-"]
    assert "topics: 2, partitions: 4; internal: __consumer_offsets (2 partitions)" in out
    topics = table_rows(out, "topics:")
    assert topics[0] == ["TOPIC", "PARTITIONS", "RF", "LEADERS/REPLICAS", "PER", "BROKER",
                         "UNDER-REPLICATED", "OFFLINE"]  # fmt: skip
    assert topics[2] == ["orders", "3", "2", "0:2/2", "1:1/3", "2:0/1", "1", "0"]
    assert topics[3] == ["__consumer_offsets", "2", "1", "0:1/1", "1:1/1", "0", "0"]


def test_status_lists_under_replicated_and_offline_partitions(admin, capsys):
    """Each problem partition is a row with its leader ('-': none), replicas, ISR and state."""
    out = run(capsys)[1]
    assert "under-replicated partitions: 1, offline partitions: 1" in out
    assert table_rows(out, "under-replicated partitions:") == [
        ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "STATE"],
        ["audit", "0", "2", "2", "2", "offline"],
        ["orders", "1", "1", "1,2", "1", "under-replicated"],
    ]


def test_status_sums_each_group_s_lag_and_details_it_on_request(admin, capsys):
    """A row per group with state, members, partitions and summed lag; --groups-detail
    adds the lag per partition."""
    out = run(capsys)[1]
    assert "consumer groups: 2, total lag: 65" in out
    assert table_rows(out, "consumer groups:") == [
        ["GROUP", "STATE", "MEMBERS", "PARTITIONS", "LAG"],
        ["audit", "Empty", "0", "1", "0"],
        ["billing", "Stable", "1", "4", "65"],
    ]
    assert "lag per partition" not in out
    detail = table_rows(run(capsys, "--groups-detail")[1], "lag per partition:")
    assert detail[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                         "LAG", "MEMBER-ID"]  # fmt: skip
    assert detail[1:] == [
        ["audit", "audit", "0", "9", "9", "0", "-"],
        ["billing", "orders", "0", "40", "100", "60", "m-1"],
        ["billing", "orders", "1", "45", "50", "5", "m-1"],
        ["billing", "orders", "2", "-", "70", "-", "-"],
        ["billing", "gone", "0", "3", "-", "-", "-"],
    ]


def test_status_shows_a_failing_group_description_with_its_error(admin, capsys):
    """A group that cannot be described gets an ERROR column entry; the command exits 0."""
    admin.failing["billing"] = CoordinatorNotAvailable("coordinator shard 1 is restarting")
    status, out, err = run(capsys)
    assert status == 0, err
    assert "consumer groups: 2, total lag: 0 (1 could not be described)" in out
    rows = table_rows(out, "consumer groups:")
    assert rows[0][-1] == "ERROR"
    assert rows[2][:5] == ["billing", "Stable", "1", "-", "-"]
    assert " ".join(rows[2][5:]) == "CoordinatorNotAvailable: coordinator shard 1 is restarting"


def test_status_says_when_the_groups_cannot_be_listed(admin, capsys):
    """A list_groups failure is one line; brokers and topics are still shown."""
    admin.list_error = CoordinatorNotAvailable("no coordinator")
    status, out, _ = run(capsys)
    assert status == 0 and "BROKER" in out and "orders" in out
    assert "consumer groups: could not be listed: CoordinatorNotAvailable: no coordinator" in out


def test_status_json_round_trips_the_overview(admin, capsys):
    """--json prints the overview (plus the namespace) as one JSON object that loads back
    equal to what cluster_overview returns."""
    status, out, err = run(capsys, "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document.pop("namespace") == "prod"
    assert document == json.loads(json.dumps(cluster_overview(admin)))
    assert document["brokers"][0]["replicas"] == 3 and document["groups"][1]["total_lag"] == 65


def test_status_of_an_empty_cluster(monkeypatch, capsys):
    """No brokers, topics or groups: one line each, no empty tables."""
    empty = {"controller_disk": "local", "metadata_offset": 0, "brokers": []}
    serve(monkeypatch, FakeAdmin(FakeController(empty, {}), listings=[]), namespace="x")
    status, out, err = run(capsys)
    assert status == 0, err
    assert out == (
        "rafka in Ray namespace 'x'\n"
        "controller: disk 'local', metadata offset 0\n"
        "brokers: none registered\n"
        "topics: 0, partitions: 0\n"
        "under-replicated partitions: 0, offline partitions: 0\n"
        "consumer groups: 0\n"
    )
    document = json.loads(run(capsys, "--json")[1])
    assert (document["brokers"], document["topic_list"], document["groups"]) == ([], [], [])


def test_long_tables_are_cut_unless_all(admin, capsys):
    """Past MAX_ROWS topics the table ends with a line saying how many more; --all lists all."""
    many = {f"t{i:03d}": [partition(0, 0, (0,), (0,))] for i in range(cluster_cli.MAX_ROWS + 5)}
    admin._gateway.topics = many
    out = run(capsys)[1]
    assert len(table_rows(out, "topics:")) == cluster_cli.MAX_ROWS + 2  # header + rows + "..."
    assert "  ... and 5 more topics (--all or --json: all)" in out
    assert len(table_rows(run(capsys, "--all")[1], "topics:")) == cluster_cli.MAX_ROWS + 6


def test_status_options_parse_and_help_does_not_import_ray():
    """--json, --groups-detail and --all parse; `rafka status --help` loads without Ray."""
    args = build_parser().parse_args(["status", "--groups-detail", "--all", "--json"])
    assert (args.groups_detail, args.all, args.json, args.handler) == (
        True, True, True, cluster_cli._status)  # fmt: skip
    done = help_without_ray(["status", "--help"])
    assert done.returncode == 0, done.stderr
    assert "--groups-detail" in done.stdout


def test_status_names_the_kafka_bootstrap_servers_when_listeners_are_open(monkeypatch, capsys):
    serve(monkeypatch, FakeAdmin(FakeController(
        {**CLUSTER, "bootstrap_servers": "10.0.0.1:9092,10.0.0.2:9092"}, TOPICS)))
    status, out, err = run(capsys)
    assert status == 0, err
    assert "Kafka clients: bootstrap.servers=10.0.0.1:9092,10.0.0.2:9092" in out.splitlines()
