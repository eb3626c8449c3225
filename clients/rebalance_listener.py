"""What a consumer tells the application when the group moves its partitions."""

from __future__ import annotations


class ConsumerRebalanceListener:
    """Override what you need. Each is called in the thread that polls, with a set of
    TopicPartition: ``on_partitions_revoked`` before partitions are taken away (commit their
    offsets here), ``on_partitions_assigned`` after new ones are given (positions are
    resolved lazily afterwards), and ``on_partitions_lost`` when the member was removed from
    the group, so its partitions may already belong to others (by default it calls
    ``on_partitions_revoked``, as Kafka does)."""

    def on_partitions_revoked(self, revoked: set) -> None:
        pass

    def on_partitions_assigned(self, assigned: set) -> None:
        pass

    def on_partitions_lost(self, lost: set) -> None:
        self.on_partitions_revoked(lost)
