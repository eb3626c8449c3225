"""One owner per partition on a real cluster: cooperative-sticky members that commit in
``on_partitions_revoked`` (Kafka's documented pattern) while members join and leave and a
producer keeps writing. Every record is processed once, by the one member that owns its
partition at the time, and the committed progress of a partition never goes backwards."""

from __future__ import annotations

import threading
import time
import uuid

from rafka import ConsumerRebalanceListener, TopicPartition
from rafka.actors.local_cluster import wait_for

PARTITIONS = 6
RECORDS = 6000
FAST = dict(session_timeout_ms=2_000, heartbeat_interval_ms=150, max_poll_interval_ms=20_000)


class Ledger:
    """What every member did, checked as it happens (under one lock): who owns each
    partition, which records were processed, and the commits acknowledged per partition."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.processed: dict[tuple[int, int], list[str]] = {}
        self.commits: dict[int, list[int]] = {}
        self.violations: list[str] = []

    def take(self, name: str, partitions) -> None:
        with self.lock:
            for tp in partitions:
                holder = self.owner.get(tp.partition)
                if holder is not None:
                    self.violations.append(f"{name} got {tp} while {holder} owns it")
                self.owner[tp.partition] = name

    def give_up(self, name: str, partitions) -> None:
        with self.lock:
            for tp in partitions:
                if self.owner.get(tp.partition) == name:
                    del self.owner[tp.partition]

    def process(self, name: str, partition: int, offset: int) -> None:
        with self.lock:
            if self.owner.get(partition) != name:
                self.violations.append(
                    f"{name} processed {partition}@{offset} owned by {self.owner.get(partition)}"
                )
            self.processed.setdefault((partition, offset), []).append(name)

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        with self.lock:
            for tp, offset in offsets.items():
                history = self.commits.setdefault(tp.partition, [])
                if history and offset < history[-1]:
                    self.violations.append(f"commit of {tp} went back: {history[-1]} -> {offset}")
                history.append(offset)


class Worker(ConsumerRebalanceListener):
    """A member polling in its own thread: it processes records, commits after each poll and
    commits what it gives up in on_partitions_revoked."""

    def __init__(self, cluster, topic: str, group: str, ledger: Ledger, name: str) -> None:
        self.name, self.ledger = name, ledger
        self.consumer = cluster.consumer(
            group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
            max_poll_records=50, partition_assignment_strategy=["cooperative-sticky"], **FAST,
        )  # fmt: skip
        self.consumer.subscribe([topic], listener=self)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _commit(self, partitions) -> None:
        offsets = {tp: self.consumer.position(tp) for tp in partitions}
        if offsets:
            self.consumer.commit(offsets)
            self.ledger.committed(offsets)

    def on_partitions_revoked(self, revoked: set) -> None:
        self._commit(revoked)
        self.ledger.give_up(self.name, revoked)

    def on_partitions_assigned(self, assigned: set) -> None:
        self.ledger.take(self.name, assigned)

    def on_partitions_lost(self, lost: set) -> None:
        self.ledger.give_up(self.name, lost)
        self.ledger.violations.append(f"{self.name} lost {sorted(lost)} (it was expelled)")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                records = self.consumer.poll(timeout_ms=100)
                for r in records:
                    self.ledger.process(self.name, r.partition, r.offset)
                if records:
                    time.sleep(0.01)  # the work
                    self._commit({TopicPartition(r.topic, r.partition) for r in records})
        except BaseException as e:  # the test reads it
            self.errors.append(e)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()  # revokes (and commits, in the listener) what it owns


def test_cooperative_members_committing_in_revoke_process_every_record_once(cluster, make_topic):
    topic = make_topic(partitions=PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    producer = cluster.producer(linger_ms=5)
    produced = threading.Event()

    def produce() -> None:
        for i in range(RECORDS):
            producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
            if i % 200 == 199:
                producer.flush()
                time.sleep(0.05)
        producer.flush()
        produced.set()

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    workers: list[Worker] = []
    everyone: list[Worker] = []
    names = iter(f"w{i}" for i in range(100))
    try:
        for _ in range(2):
            workers.append(Worker(cluster, topic, group, ledger, next(names)))
            everyone.append(workers[-1])
        # Members join and leave while records arrive: 2 -> 3 -> 4 -> 3 -> 4 -> 3 -> 2.
        for change in ("join", "join", "leave", "join", "leave", "leave"):
            time.sleep(1.5)
            if change == "join":
                workers.append(Worker(cluster, topic, group, ledger, next(names)))
                everyone.append(workers[-1])
            else:
                workers.pop(0).stop()
        writer.join(120)
        assert produced.is_set()
        try:
            wait_for(lambda: len(ledger.processed) >= RECORDS or any(w.errors for w in everyone),
                     120, "every record processed")  # fmt: skip
        except TimeoutError:
            per_partition = [sum(1 for p, _ in ledger.processed if p == q)
                             for q in range(PARTITIONS)]  # fmt: skip
            members = [(w.name, w.consumer._member.state, sorted(w.consumer.assignment()))
                       for w in workers]  # fmt: skip
            raise AssertionError(f"processed per partition {per_partition}, owners "
                                 f"{ledger.owner}, members {members}, violations "
                                 f"{ledger.violations[:5]}") from None  # fmt: skip
    finally:
        for w in workers:
            w.stop()
        producer.close()
    errors = [e for w in everyone for e in w.errors]
    assert not errors, errors
    assert not ledger.violations, ledger.violations[:10]
    twice = {k: v for k, v in ledger.processed.items() if len(v) > 1}
    assert not twice, sorted(twice.items())[:10]
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS)}
    assert set(ledger.processed) == expected
    final = cluster.admin().list_group_offsets(group)
    print(f"commits per partition: {[len(ledger.commits.get(p, [])) for p in range(PARTITIONS)]}")
    assert {tp.partition: o.offset for tp, o in final.items()} == {
        p: RECORDS // PARTITIONS for p in range(PARTITIONS)
    }
