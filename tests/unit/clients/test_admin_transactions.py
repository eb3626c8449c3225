"""Admin's transaction calls without Ray: coordinators are fakes answering with the real
admin views of ``rafka.cluster.transaction_admin`` over coordinator records, partition
leaders hold producer rows as ``describe_producers`` answers them and take markers by the
leaders' epoch rule, and the gateway resolves object-ref stand-ins, recording every call."""

from __future__ import annotations

from typing import Any

import pytest

from rafka.clients.admin import Admin
from rafka.clients.admin_transactions import (
    MARKER_TIMEOUT_MS,
    hanging,
    open_transactions,
)
from rafka.clients.metadata import PartitionLeader, TopicMetadata
from rafka.cluster import transaction_admin
from rafka.cluster.transaction_types import MAX_EPOCH, TxnMetadata, TxnState
from rafka.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    LeaderNotAvailable,
    NotLeaderOrFollower,
    TransactionalIdNotFound,
    TransactionCoordinatorFenced,
    UnknownTopicOrPartition,
)
from rafka.types import (
    HangingTransaction,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

TP = TopicPartition
NOW = 1_700_000_000_000
MINUTE = 60_000
#: Fifteen minutes and more without a write: past find_hanging's default threshold.
OLD = NOW - 20 * MINUTE


class Ref:
    """An object-ref stand-in: the answer, computed when the call was sent."""

    def __init__(self, value: Any) -> None:
        self.value = value


def record(transactional_id: str, producer_id: int, state: TxnState = TxnState.ONGOING,
           partitions=(), epoch: int = 3, start_ms: int = OLD) -> TxnMetadata:  # fmt: skip
    """A coordinator's record; partitions only in states that hold them."""
    holds = state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
    return TxnMetadata(transactional_id, producer_id, epoch, epoch - 1, -1, 60_000, state,
                       frozenset(partitions) if holds else frozenset(),
                       start_ms if holds else -1, NOW - 1000)  # fmt: skip


class FakeCoordinator:
    """A shard holding coordinator records, answering as the actor does."""

    def __init__(self, *records: TxnMetadata) -> None:
        self.records = {r.transactional_id: r for r in records}

    def list_transactions(self, states=None, producer_ids=None, min_duration_ms=-1) -> list:
        return transaction_admin.list_transactions(self.records.values(), NOW, states,
                                                   producer_ids, min_duration_ms)  # fmt: skip

    def describe_transactions(self, ids: list[str]) -> list[dict]:
        return [transaction_admin.describe(self.records[t]) for t in ids if t in self.records]


def row(producer_id: int, epoch: int = 3, start: int = -1, last_timestamp: int = OLD,
        coordinator_epoch: int = -1, last_sequence: int = 4) -> list:  # fmt: skip
    return [producer_id, epoch, last_sequence, last_timestamp, coordinator_epoch, start]


class FakeLeader:
    """A partition leader: its producers' rows, and markers taken only above a producer's
    epoch and from a coordinator epoch at least its last one (the replicas' rules)."""

    def __init__(self, *rows: list, replicas=(1,), errno: int = 0) -> None:
        self.rows = {r[0]: list(r) for r in rows}
        self.replicas, self.errno = list(replicas), errno
        self.markers: list[tuple] = []

    def describe_producers(self) -> tuple:
        if self.errno:
            return self.errno, "broker 1 is not the leader", []
        return 0, "", [list(r) for _, r in sorted(self.rows.items())]

    def write_marker(self, producer_id, producer_epoch, commit, coordinator_epoch, timeout_ms):
        self.markers.append((producer_id, producer_epoch, commit, coordinator_epoch, timeout_ms))
        found = self.rows.get(producer_id)
        if found is not None and producer_epoch <= found[1]:
            return InvalidProducerEpoch.errno, "not above its epoch: written already", -1
        if found is not None and coordinator_epoch < found[4]:
            return TransactionCoordinatorFenced.errno, "older coordinator epoch", -1
        self.rows[producer_id] = row(producer_id, producer_epoch, -1, NOW,
                                     max(coordinator_epoch, found[4] if found else -1))
        return 0, "", 100


class FakeMetadata:
    """Topics as lists of leaders (None: no leader now); never creates a topic."""

    def __init__(self, topics: dict[str, list[FakeLeader | None]]) -> None:
        self.topics = topics

    def partition_counts(self, names, refresh=False) -> dict[str, int]:
        assert refresh
        return {n: len(self.topics[n]) for n in names if n in self.topics}

    def cached(self, name: str) -> TopicMetadata | None:
        leaders = self.topics.get(name)
        if leaders is None:
            return None
        return TopicMetadata(name, f"id-{name}", [
            PartitionLeader(-1 if r is None else r.replicas[0], 0) for r in leaders
        ])  # fmt: skip

    def topic(self, name: str) -> TopicMetadata:
        raise AssertionError("partition_counts refreshed it; cached() answers")

    def replica(self, meta: TopicMetadata, partition: int) -> FakeLeader:
        leader = self.topics[meta.name][partition]
        if leader is None:
            raise LeaderNotAvailable(f"{meta.name}-{partition} has no leader")
        return leader


class FakeGateway:
    """Routes transactional ids to shards by their first letter (a-m: shard 0), answers the
    controller's describe_topics from the metadata, and records what is sent."""

    def __init__(self, shards: list[FakeCoordinator], metadata: FakeMetadata) -> None:
        self.shards, self.metadata = shards, metadata
        self.sent: list[tuple[str, tuple]] = []
        self.gets = 0

    def transaction_coordinator(self, transactional_id: str) -> FakeCoordinator:
        return self.shards[0 if transactional_id[0] <= "m" or len(self.shards) == 1 else 1]

    def transaction_coordinators(self) -> list[FakeCoordinator]:
        return list(self.shards)

    def call_controller(self, method: str, names) -> list[dict]:
        assert method == "describe_topics"
        names = sorted(self.metadata.topics) if names is None else names
        out = []
        for name in names:
            if name not in self.metadata.topics:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
            leaders = self.metadata.topics[name]
            out.append({
                "name": name, "topic_id": f"id-{name}", "internal": name.startswith("__"),
                "config": {}, "partitions": [
                    {"partition": p, "leader": -1 if r is None else r.replicas[0],
                     "leader_epoch": 0, "replicas": [1] if r is None else r.replicas,
                     "isr": [1] if r is None else r.replicas}
                    for p, r in enumerate(leaders)],
            })  # fmt: skip
        return out

    def send(self, handle, method: str, *args) -> Ref:
        self.sent.append((method, args))
        return Ref(getattr(handle, method)(*args))

    def get(self, refs, timeout_s=None, what=""):
        self.gets += 1
        if isinstance(refs, list):
            assert all(isinstance(r, Ref) for r in refs)
            return [r.value for r in refs]
        assert isinstance(refs, Ref)
        return refs.value

    def methods(self) -> list[str]:
        return [method for method, _ in self.sent]


def cluster(shards: list[FakeCoordinator] | None = None,
            topics: dict | None = None) -> tuple[Admin, FakeGateway]:  # fmt: skip
    """An Admin over ``shards`` (default: two empty ones) and ``topics`` (default: "orders"
    with two partitions and no producers), its clock at NOW."""
    metadata = FakeMetadata(topics or {"orders": [FakeLeader(), FakeLeader()]})
    gateway = FakeGateway(shards or [FakeCoordinator(), FakeCoordinator()], metadata)
    admin = Admin(gateway, metadata)
    admin._clock_ms = lambda: NOW
    return admin, gateway


# -- list and describe ------------------------------------------------------------------------


def test_list_asks_every_shard_once_and_merges_their_listings_by_id():
    """Both shards answer in one round; the filters reach each shard as given."""
    admin, gateway = cluster([
        FakeCoordinator(record("billing", 5), record("audit", 6, TxnState.COMPLETE_COMMIT)),
        FakeCoordinator(record("orders", 9, TxnState.EMPTY)),
    ])  # fmt: skip
    assert admin.list_transactions() == [
        TransactionListing("audit", 6, "CompleteCommit"),
        TransactionListing("billing", 5, "Ongoing"),
        TransactionListing("orders", 9, "Empty"),
    ]
    assert gateway.methods() == ["list_transactions"] * 2 and gateway.gets == 1
    assert admin.list_transactions(states=["Ongoing", "Empty"], producer_ids=[5, 9, 5]) == [
        TransactionListing("billing", 5, "Ongoing"), TransactionListing("orders", 9, "Empty"),
    ]  # fmt: skip
    assert gateway.sent[-1] == ("list_transactions", (["Ongoing", "Empty"], [5, 9], -1))


def test_list_keeps_transactions_running_at_least_the_minimum_duration():
    """min_duration_ms measures from the transaction's start; ids without one drop out."""
    admin, _ = cluster([FakeCoordinator(record("old", 1), record("new", 2, start_ms=NOW - 5),
                                        record("idle", 3, TxnState.EMPTY))])  # fmt: skip
    assert [t.transactional_id for t in admin.list_transactions(min_duration_ms=1000)] == ["old"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [({"states": ["Running"]}, ValueError, "not a transaction state: give one of Empty"),
     ({"states": "Ongoing"}, TypeError, "wrap a single one in a list"),
     ({"producer_ids": ["5"]}, TypeError, "a producer id must be an int"),
     ({"producer_ids": [-1]}, ValueError, "0 or more"),
     ({"min_duration_ms": -2}, ValueError, "min_duration_ms must be -1 or more")],
)  # fmt: skip
def test_list_refuses_bad_filters_before_asking_anyone(kwargs, error, message):
    """Each bad filter raises saying what to give, and nothing is sent."""
    admin, gateway = cluster()
    with pytest.raises(error, match=message):
        admin.list_transactions(**kwargs)
    assert gateway.sent == []


def test_describe_reads_each_ids_record_from_its_coordinator():
    """Ids of both shards are asked in one round; partitions become sorted TopicPartitions;
    an idle id holds none and has no start time."""
    admin, gateway = cluster([
        FakeCoordinator(record("billing", 5, partitions={("orders", 1), ("audit", 0)})),
        FakeCoordinator(record("shipping", 8, TxnState.COMPLETE_ABORT)),
    ])  # fmt: skip
    described = admin.describe_transactions(["shipping", "billing"])
    assert list(described) == ["shipping", "billing"] and gateway.gets == 1
    assert described["billing"] == TransactionDescription(
        "billing", 5, 3, "Ongoing", 60_000, [TP("audit", 0), TP("orders", 1)], OLD, NOW - 1000
    )
    assert described["shipping"].partitions == [] and described["shipping"].start_ms == -1


def test_describing_an_unknown_id_raises_transactional_id_not_found_naming_it():
    """TransactionalIdNotFound names every id no coordinator has and how to list them."""
    admin, _ = cluster([FakeCoordinator(record("billing", 5))])
    with pytest.raises(TransactionalIdNotFound, match=r"'ghost', 'nobody'.*transactions list"):
        admin.describe_transactions(["billing", "ghost", "nobody"])
    with pytest.raises(TypeError, match="wrap a single one in a list"):
        admin.describe_transactions("billing")
    with pytest.raises(TypeError, match="non-empty string"):
        admin.describe_transactions([""])


# -- producers ---------------------------------------------------------------------------------


def test_describe_producers_asks_each_leader_once_in_one_round():
    """Every partition (or those named) is asked of its leader; rows become ProducerStates."""
    admin, gateway = cluster(topics={"orders": [
        FakeLeader(row(5, start=40), row(2)), FakeLeader(),
    ]})  # fmt: skip
    assert admin.describe_producers("orders") == {
        0: [ProducerState(2, 3, 4, OLD, -1, -1), ProducerState(5, 3, 4, OLD, -1, 40)], 1: [],
    }  # fmt: skip
    assert gateway.methods() == ["describe_producers"] * 2 and gateway.gets == 1
    assert list(admin.describe_producers("orders", [1])) == [1]


def test_describe_producers_names_what_does_not_exist_or_does_not_answer():
    """An unknown topic or partition is refused before anything is sent; a leader's error
    is raised as its type, naming the partition."""
    admin, gateway = cluster(topics={"orders": [FakeLeader(), FakeLeader(errno=6)],
                                     "offline": [None]})  # fmt: skip
    with pytest.raises(UnknownTopicOrPartition, match="'ghost' does not exist"):
        admin.describe_producers("ghost")
    with pytest.raises(UnknownTopicOrPartition, match="no partition 7: it has 2"):
        admin.describe_producers("orders", [0, 7])
    assert gateway.sent == []
    with pytest.raises(NotLeaderOrFollower, match="producers of orders-1: broker 1 is not"):
        admin.describe_producers("orders")
    with pytest.raises(LeaderNotAvailable):
        admin.describe_producers("offline")
    with pytest.raises(TypeError, match="a partition must be an int"):
        admin.describe_producers("orders", ["0"])


# -- finding hanging transactions --------------------------------------------------------------


def state(producer_id: int, start: int = 10, last_timestamp: int = OLD) -> ProducerState:
    return ProducerState(producer_id, 3, 4, last_timestamp, -1, start)


def test_candidates_are_open_transactions_silent_for_longer_than_the_maximum():
    """Kafka's rule: an open transaction whose last write is strictly older than the
    maximum; closed ones and recent ones are not candidates."""
    producers = {TP("b", 0): [state(2, start=-1), state(1)],
                 TP("a", 0): [state(3, last_timestamp=NOW - MINUTE)]}  # fmt: skip
    assert open_transactions(producers, NOW, 15 * MINUTE) == [(TP("b", 0), state(1))]
    assert open_transactions(producers, NOW, MINUTE) == [(TP("b", 0), state(1))]
    assert [tp for tp, _ in open_transactions(producers, NOW, MINUTE - 1)] == [TP("a", 0),
                                                                                TP("b", 0)]


@pytest.mark.parametrize(
    "transactional_id, description, is_hanging",
    [(None, None, True),  # no transactional id lists the producer id
     ("t", None, True),  # its id is gone
     ("t", ("Ongoing", 1, [TP("orders", 0)]), False),  # the coordinator holds it
     ("t", ("PrepareCommit", 1, [TP("orders", 0)]), False),  # its marker is being written
     ("t", ("PrepareAbort", 1, [TP("orders", 0)]), False),
     ("t", ("Ongoing", 1, [TP("orders", 1)]), True),  # held, but not this partition
     ("t", ("Ongoing", 2, [TP("orders", 0)]), True),  # the id moved to another producer id
     ("t", ("CompleteCommit", 1, []), True)],  # the coordinator thinks it ended
)  # fmt: skip
def test_an_open_transaction_hangs_unless_its_coordinator_will_write_its_marker(
    transactional_id, description, is_hanging
):
    """Hanging: nothing will end it; not hanging: the id's record holds the partition for
    that producer id in a state that writes markers."""
    descriptions = {}
    if description is not None:
        name, producer_id, partitions = description
        descriptions["t"] = TransactionDescription("t", producer_id, 3, name, 60_000,
                                                   partitions, OLD, NOW)  # fmt: skip
    ids = {} if transactional_id is None else {1: transactional_id}
    found = hanging([(TP("orders", 0), state(1))], ids, descriptions)
    expected = [HangingTransaction("orders", 0, 1, 3, -1, 10, OLD)]
    assert found == (expected if is_hanging else [])


def two_topics(orders_leaders=None) -> tuple[Admin, FakeGateway]:
    """Producer 1 (id "billing", Ongoing holding orders-0) has transactions open in orders-0
    and orders-1; producer 2 (no id) in orders-1; producer 3 (id "audit", Empty) in
    audit-0; producer 4 in __consumer_offsets-0. Partition orders-1 has replicas on
    brokers 2 and 3, the others on broker 1."""
    shards = [FakeCoordinator(record("billing", 1, partitions={("orders", 0)}),
                              record("audit", 3, TxnState.EMPTY))]  # fmt: skip
    topics = {
        "orders": orders_leaders or [
            FakeLeader(row(1, start=5)),
            FakeLeader(row(1, start=7), row(2, start=3, coordinator_epoch=4), replicas=(2, 3)),
        ],
        "audit": [FakeLeader(row(3, start=0), row(9))],
        "__consumer_offsets": [FakeLeader(row(4, start=0))],
    }  # fmt: skip
    return cluster(shards, topics)


def test_find_hanging_reports_what_no_coordinator_holds_in_every_user_topic():
    """Across user topics: producer 1's orders-1 (its coordinator holds only orders-0),
    producer 2 (no id) and producer 3 (its id is Empty) hang; internal topics are not
    searched unless named."""
    admin, gateway = two_topics()
    found = admin.find_hanging_transactions()
    assert found == [
        HangingTransaction("audit", 0, 3, 3, -1, 0, OLD),
        HangingTransaction("orders", 1, 1, 3, -1, 7, OLD),
        HangingTransaction("orders", 1, 2, 3, 4, 3, OLD),
    ]
    assert gateway.methods() == ["describe_producers"] * 3 + ["list_transactions"] + [
        "describe_transactions"] * 2
    assert gateway.sent[3] == ("list_transactions", (None, [1, 2, 3], -1))
    assert ("describe_transactions", (["audit"],)) in gateway.sent
    assert ("describe_transactions", (["billing"],)) in gateway.sent
    internal = admin.find_hanging_transactions(topic="__consumer_offsets")
    assert [h.producer_id for h in internal] == [4]


def test_find_hanging_limits_the_search_to_a_topic_or_a_broker():
    """topic= searches its partitions only; broker_id= only partitions with a replica on
    that broker (leaders are asked either way)."""
    admin, gateway = two_topics()
    assert [(h.topic, h.producer_id) for h in admin.find_hanging_transactions("audit")] == [
        ("audit", 3)]
    asked = len(gateway.sent)
    on_broker_3 = admin.find_hanging_transactions(broker_id=3)
    assert [(h.topic, h.partition) for h in on_broker_3] == [("orders", 1), ("orders", 1)]
    assert gateway.methods()[asked:].count("describe_producers") == 1
    assert admin.find_hanging_transactions(broker_id=7) == []
    with pytest.raises(UnknownTopicOrPartition):
        admin.find_hanging_transactions("ghost")


def test_find_hanging_asks_no_coordinator_when_no_transaction_is_old_enough():
    """With the threshold above every producer's silence there are no candidates, and no
    coordinator is asked."""
    admin, gateway = two_topics()
    assert admin.find_hanging_transactions(max_transaction_timeout_ms=30 * MINUTE) == []
    assert set(gateway.methods()) == {"describe_producers"}
    with pytest.raises(ValueError, match="max_transaction_timeout_ms must be 0 or more"):
        admin.find_hanging_transactions(max_transaction_timeout_ms=-1)


# -- aborting ----------------------------------------------------------------------------------


def test_abort_writes_an_abort_marker_one_epoch_above_the_producers():
    """The marker goes to the partition's leader with epoch + 1 (the leaders take only
    markers above the producer's epoch), the coordinator epoch given and acks=all's
    timeout; the transaction is then closed there, and find_hanging no longer lists it."""
    admin, _ = two_topics()
    leader = admin._metadata.topics["orders"][1]
    hung = [h for h in admin.find_hanging_transactions("orders") if h.producer_id == 2][0]
    admin.abort_transaction(hung.topic, hung.partition, hung.producer_id, hung.producer_epoch,
                            hung.coordinator_epoch)  # fmt: skip
    assert leader.markers == [(2, 4, False, 4, MARKER_TIMEOUT_MS)]
    assert admin.describe_producers("orders", [1])[1][1].current_transaction_start_offset == -1
    assert [h.producer_id for h in admin.find_hanging_transactions("orders")] == [1]


@pytest.mark.parametrize(
    "producer_id, epoch, coordinator_epoch, error, message",
    [(9, 3, -1, InvalidTxnState, "producer 9 has no open transaction in orders-1"),
     (1, 2, -1, InvalidProducerEpoch, "has epoch 3 in orders-1, not 2"),
     (2, 3, 1, TransactionCoordinatorFenced, "coordinator epoch 1 is below 4")],
)  # fmt: skip
def test_abort_refuses_what_does_not_match_the_leaders_state_and_writes_nothing(
    producer_id, epoch, coordinator_epoch, error, message
):
    """No open transaction, another epoch, or an older coordinator epoch than the
    producer's markers carried: refused before any marker is sent."""
    admin, _ = two_topics()
    with pytest.raises(error, match=message):
        admin.abort_transaction("orders", 1, producer_id, epoch, coordinator_epoch)
    assert admin._metadata.topics["orders"][1].markers == []


def test_an_abort_that_loses_the_race_to_the_coordinators_marker_is_refused():
    """When the transaction ends between the check and the marker, the leader refuses the
    admin's marker (not above the epoch any more): InvalidProducerEpoch, nothing changed."""
    admin, _ = two_topics()
    leader = admin._metadata.topics["orders"][1]
    describe = leader.describe_producers

    def describe_then_end():
        answer = describe()
        leader.write_marker(1, 4, True, 0, 1000)  # the coordinator's commit marker
        return answer

    leader.describe_producers = describe_then_end
    with pytest.raises(InvalidProducerEpoch, match="producer 1 .* in orders-1 was refused"):
        admin.abort_transaction("orders", 1, 1, 3, -1)
    assert leader.rows[1][1] == 4 and len(leader.markers) == 2


def test_an_abort_answered_as_a_marker_written_already_raises_as_nothing_was_written():
    """A leader may answer a marker of an epoch already in as done without appending it
    (offset -1): the transaction ended before the abort, which says so."""
    admin, _ = two_topics()
    leader = admin._metadata.topics["orders"][1]
    leader.write_marker = lambda *args: (0, "", -1)
    with pytest.raises(InvalidTxnState, match="ended before the abort marker was written"):
        admin.abort_transaction("orders", 1, 1, 3, -1)


@pytest.mark.parametrize(
    "args, error, message",
    [(("orders", True, 1, 3, -1), TypeError, "partition must be an int"),
     (("orders", -1, 1, 3, -1), ValueError, "partition must be 0 or more"),
     (("", 0, 1, 3, -1), TypeError, "topic name"),
     (("orders", 0, 1, MAX_EPOCH, -1), ValueError, "above the epochs producers get"),
     (("orders", 0, 1, 3, -2), ValueError, "coordinator_epoch must be -1 or more"),
     (("orders", 5, 1, 3, -1), UnknownTopicOrPartition, "no partition 5")],
)  # fmt: skip
def test_abort_checks_its_arguments_before_sending(args, error, message):
    """Bad arguments raise saying what to give; nothing reaches a leader."""
    admin, gateway = two_topics()
    with pytest.raises(error, match=message):
        admin.abort_transaction(*args)
    assert gateway.sent == []
