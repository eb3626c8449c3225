"""Schemas of the topic administration APIs: CreateTopics, DeleteTopics, CreatePartitions
and DescribeConfigs.

Field names are Kafka's (snake_case); version strings are Kafka's. Only fields that exist
in the versions rafka serves are listed.
"""

from __future__ import annotations

from rafka.wire.schema import (
    INT8, INT16, INT32, BOOL, STRING, Api, F, Struct, array,
)

CREATE_TOPICS = Api(
    19, "CreateTopics", valid="2-4", flexible="5+",
    request=Struct("CreateTopicsRequest",
        F("topics", array(Struct("CreatableTopic",
            F("name", STRING, "0+"),
            F("num_partitions", INT32, "0+"),
            F("replication_factor", INT16, "0+"),
            F("assignments", array(Struct("CreatableReplicaAssignment",
                F("partition_index", INT32, "0+"),
                F("broker_ids", array(INT32), "0+"),
            )), "0+"),
            F("configs", array(Struct("CreatableTopicConfig",
                F("name", STRING, "0+"),
                F("value", STRING, "0+", nullable="0+"),
            )), "0+"),
        )), "0+"),
        F("timeout_ms", INT32, "0+", default=60000),
        F("validate_only", BOOL, "1+", default=False),
    ),
    response=Struct("CreateTopicsResponse",
        F("throttle_time_ms", INT32, "2+"),
        F("topics", array(Struct("CreatableTopicResult",
            F("name", STRING, "0+"),
            F("error_code", INT16, "0+"),
            F("error_message", STRING, "1+", nullable="0+"),
        )), "0+"),
    ),
)


DELETE_TOPICS = Api(
    20, "DeleteTopics", valid="1-4", flexible="4+",
    request=Struct("DeleteTopicsRequest",
        F("topic_names", array(STRING), "0-5"),
        F("timeout_ms", INT32, "0+"),
    ),
    response=Struct("DeleteTopicsResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("responses", array(Struct("DeletableTopicResult",
            F("name", STRING, "0+"),
            F("error_code", INT16, "0+"),
        )), "0+"),
    ),
)


CREATE_PARTITIONS = Api(
    37, "CreatePartitions", valid="0-2", flexible="2+",
    request=Struct("CreatePartitionsRequest",
        F("topics", array(Struct("CreatePartitionsTopic",
            F("name", STRING, "0+"),
            F("count", INT32, "0+"),
            F("assignments", array(Struct("CreatePartitionsAssignment",
                F("broker_ids", array(INT32), "0+"),
            )), "0+", nullable="0+"),
        )), "0+"),
        F("timeout_ms", INT32, "0+"),
        F("validate_only", BOOL, "0+"),
    ),
    response=Struct("CreatePartitionsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("results", array(Struct("CreatePartitionsTopicResult",
            F("name", STRING, "0+"),
            F("error_code", INT16, "0+"),
            F("error_message", STRING, "0+", nullable="0+", default=None),
        )), "0+"),
    ),
)


DESCRIBE_CONFIGS = Api(
    32, "DescribeConfigs", valid="1-2", flexible="4+",
    request=Struct("DescribeConfigsRequest",
        F("resources", array(Struct("DescribeConfigsResource",
            F("resource_type", INT8, "0+"),
            F("resource_name", STRING, "0+"),
            F("configuration_keys", array(STRING), "0+", nullable="0+"),
        )), "0+"),
        F("include_synonyms", BOOL, "1+", default=False),
    ),
    response=Struct("DescribeConfigsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("results", array(Struct("DescribeConfigsResult",
            F("error_code", INT16, "0+"),
            F("error_message", STRING, "0+", nullable="0+"),
            F("resource_type", INT8, "0+"),
            F("resource_name", STRING, "0+"),
            F("configs", array(Struct("DescribeConfigsResourceResult",
                F("name", STRING, "0+"),
                F("value", STRING, "0+", nullable="0+"),
                F("read_only", BOOL, "0+"),
                F("config_source", INT8, "1+", default=-1),
                F("is_sensitive", BOOL, "0+"),
                F("synonyms", array(Struct("DescribeConfigsSynonym",
                    F("name", STRING, "1+"),
                    F("value", STRING, "1+", nullable="0+"),
                    F("source", INT8, "1+"),
                )), "1+"),
            )), "0+"),
        )), "0+"),
    ),
)
