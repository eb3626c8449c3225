"""Admin: topics and cluster status, through the controller."""

from __future__ import annotations

from typing import Any

from rafka.types import BrokerDescription, PartitionDescription, TopicDescription


def _description(d: dict[str, Any]) -> TopicDescription:
    return TopicDescription(
        d["name"], d["topic_id"], d["internal"],
        [PartitionDescription(p["partition"], p["leader"], p["leader_epoch"], p["replicas"],
                              p["isr"]) for p in d["partitions"]],
        d["config"],
    )  # fmt: skip


class Admin:
    def __init__(self, gateway, metadata) -> None:
        self._gateway = gateway
        self._metadata = metadata

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: dict[str, Any] | None = None,
    ) -> TopicDescription:
        """Create a topic; raises InvalidTopic, TopicAlreadyExists, InvalidPartitions,
        InvalidReplicationFactor or InvalidConfig naming the rule broken."""
        return _description(self._gateway.call_controller(
            "create_topic", name, partitions, replication_factor, config
        ))  # fmt: skip

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data on every disk."""
        self._gateway.call_controller("delete_topic", name)
        self._metadata.invalidate(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._gateway.call_controller("list_topics", include_internal)

    def describe_topic(self, name: str) -> TopicDescription:
        return _description(self._gateway.call_controller("describe_topics", [name])[0])

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        return [_description(d) for d in self._gateway.call_controller("describe_topics", names)]

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow topic ``name`` to ``total`` partitions (never shrinks: InvalidPartitions)."""
        described = self._gateway.call_controller("create_partitions", name, total)
        self._metadata.invalidate(name)
        return _description(described)

    def alter_topic_config(self, name: str, changes: dict[str, Any]) -> TopicDescription:
        """Set topic properties (Kafka names); a value of None resets one to its default."""
        return _description(self._gateway.call_controller("alter_topic_config", name, changes))

    def describe_cluster(self) -> dict[str, Any]:
        """The controller's disk, the brokers (one per data disk) and topic counts."""
        return self._gateway.call_controller("describe_cluster")

    def brokers(self) -> list[BrokerDescription]:
        return [
            BrokerDescription(b["broker_id"], b["disk"], b["alive"])
            for b in self.describe_cluster()["brokers"]
        ]

    def partition_offsets(self, name: str) -> list[dict[str, Any]]:
        """Per partition: log start offset, high watermark, log end offset and size on disk."""
        meta = self._metadata.refresh([name])[name]
        refs = [
            self._gateway.describe(self._metadata.replica(meta, p)) for p in range(len(meta))
        ]
        return self._gateway.get(refs, 60.0)
