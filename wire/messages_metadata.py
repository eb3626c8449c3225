"""Schemas of ApiVersions and Metadata, the first two requests every client sends.

Field names are Kafka's (snake_case); version strings are Kafka's. Only fields that exist
in the versions rafka serves are listed.
"""

from __future__ import annotations

from rafka.wire.schema import (
    INT16, INT32, INT64, BOOL, STRING, Api, F, Struct, array,
)

API_VERSIONS = Api(
    18, "ApiVersions", valid="0-3", flexible="3+",
    request=Struct("ApiVersionsRequest",
        F("client_software_name", STRING, "3+"),
        F("client_software_version", STRING, "3+"),
    ),
    response=Struct("ApiVersionsResponse",
        F("error_code", INT16, "0+"),
        F("api_keys", array(Struct("ApiVersion",
            F("api_key", INT16, "0+"),
            F("min_version", INT16, "0+"),
            F("max_version", INT16, "0+"),
        )), "0+"),
        F("throttle_time_ms", INT32, "1+"),
        F("supported_features", array(Struct("SupportedFeatureKey",
            F("name", STRING, "3+"),
            F("min_version", INT16, "3+"),
            F("max_version", INT16, "3+"),
        )), "3+", tag=0, tagged="3+"),
        F("finalized_features_epoch", INT64, "3+", default=-1, tag=1, tagged="3+"),
        F("finalized_features", array(Struct("FinalizedFeatureKey",
            F("name", STRING, "3+"),
            F("max_version_level", INT16, "3+"),
            F("min_version_level", INT16, "3+"),
        )), "3+", tag=2, tagged="3+"),
        F("zk_migration_ready", BOOL, "3+", default=False, tag=3, tagged="3+"),
    ),
)


METADATA = Api(
    3, "Metadata", valid="1-8", flexible="9+",
    request=Struct("MetadataRequest",
        F("topics", array(Struct("MetadataRequestTopic",
            F("name", STRING, "0+"),
        )), "0+", nullable="1+"),
        F("allow_auto_topic_creation", BOOL, "4+", default=True),
        F("include_cluster_authorized_operations", BOOL, "8-10"),
        F("include_topic_authorized_operations", BOOL, "8+"),
    ),
    response=Struct("MetadataResponse",
        F("throttle_time_ms", INT32, "3+"),
        F("brokers", array(Struct("MetadataResponseBroker",
            F("node_id", INT32, "0+"),
            F("host", STRING, "0+"),
            F("port", INT32, "0+"),
            F("rack", STRING, "1+", nullable="1+", default=None),
        )), "0+"),
        F("cluster_id", STRING, "2+", nullable="2+", default=None),
        F("controller_id", INT32, "1+", default=-1),
        F("topics", array(Struct("MetadataResponseTopic",
            F("error_code", INT16, "0+"),
            F("name", STRING, "0+"),
            F("is_internal", BOOL, "1+", default=False),
            F("partitions", array(Struct("MetadataResponsePartition",
                F("error_code", INT16, "0+"),
                F("partition_index", INT32, "0+"),
                F("leader_id", INT32, "0+"),
                F("leader_epoch", INT32, "7+", default=-1),
                F("replica_nodes", array(INT32), "0+"),
                F("isr_nodes", array(INT32), "0+"),
                F("offline_replicas", array(INT32), "5+"),
            )), "0+"),
            F("topic_authorized_operations", INT32, "8+", default=-2147483648),
        )), "0+"),
        F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
    ),
)
