"""Consumer-group members for the integration tests: a polling thread, and the same loop in
a Ray actor (its own process, so a test can kill it the hard way)."""

from __future__ import annotations

import threading
import time
from typing import Any

import ray

from rafka import ConsumerRebalanceListener, TopicPartition


class RecordingListener(ConsumerRebalanceListener):
    """Remembers every revoked, assigned and lost set, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set]] = []

    def on_partitions_revoked(self, revoked: set) -> None:
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: set) -> None:
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost: set) -> None:
        self.events.append(("lost", set(lost)))

    def revoked(self) -> set:
        return set().union(*(s for kind, s in self.events if kind == "revoked"))

    def lost(self) -> set:
        return set().union(*(s for kind, s in self.events if kind == "lost"))


class Member:
    """A consumer polling in its own thread; it commits after every non-empty poll unless
    auto-commit is on, and records what it read as (partition, offset) pairs."""

    def __init__(self, cluster, topics, *, poll_pause_s: float = 0.0, commit: bool = True,
                 **settings: Any) -> None:  # fmt: skip
        settings.setdefault("auto_offset_reset", "earliest")
        settings.setdefault("enable_auto_commit", False)
        self.consumer = cluster.consumer(**settings)
        self.listener = RecordingListener()
        self.consumer.subscribe(topics, listener=self.listener)
        self.read: list[tuple[int, int]] = []
        self.poll_pause_s = poll_pause_s
        self.commit_each_poll = commit and not settings["enable_auto_commit"]
        self.paused = threading.Event()  # set: stop calling poll (max_poll_interval tests)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._owned: set = set()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.05)
                    continue
                records = self.consumer.poll(timeout_ms=100)
                self.read.extend((r.partition, r.offset) for r in records)
                self._owned = self.consumer.assignment()
                if records and self.commit_each_poll:
                    self.consumer.commit()
                if self.poll_pause_s:
                    time.sleep(self.poll_pause_s)
        except BaseException as e:  # the test reads it
            self.errors.append(e)

    def owned(self) -> set:
        return set(self._owned)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


@ray.remote(num_cpus=0, max_restarts=0)
class MemberProcess:
    """A Member in a process of its own."""

    def __init__(self, cluster, topic: str, settings: dict) -> None:
        self.member = Member(cluster, [topic], **settings)

    def owned(self) -> list[tuple[str, int]]:
        return sorted(self.member.owned())

    def read(self) -> list[tuple[int, int]]:
        return list(self.member.read)

    def errors(self) -> list[str]:
        return [repr(e) for e in self.member.errors]


def partitions(topic: str, n: int) -> set:
    return {TopicPartition(topic, p) for p in range(n)}
