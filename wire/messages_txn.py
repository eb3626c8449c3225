"""Schemas of the transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn and TxnOffsetCommit.

Field names are Kafka's (snake_case); version strings are Kafka's. Only fields that exist
in the versions rafka serves are listed.
"""

from __future__ import annotations

from rafka.wire.schema import (
    INT16, INT32, INT64, BOOL, STRING, Api, F, Struct, array,
)

INIT_PRODUCER_ID = Api(
    22, "InitProducerId", valid="0-4", flexible="2+",
    request=Struct("InitProducerIdRequest",
        F("transactional_id", STRING, "0+", nullable="0+"),
        F("transaction_timeout_ms", INT32, "0+"),
        F("producer_id", INT64, "3+", default=-1),
        F("producer_epoch", INT16, "3+", default=-1),
    ),
    response=Struct("InitProducerIdResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("producer_id", INT64, "0+", default=-1),
        F("producer_epoch", INT16, "0+"),
    ),
)


_ADD_PARTITIONS_TO_TXN_TOPIC = Struct("AddPartitionsToTxnTopic",
    F("name", STRING, "0+"),
    F("partitions", array(INT32), "0+"),
)
_ADD_PARTITIONS_TO_TXN_PARTITION_RESULT = Struct("AddPartitionsToTxnPartitionResult",
    F("partition_index", INT32, "0+"),
    F("partition_error_code", INT16, "0+"),
)
_ADD_PARTITIONS_TO_TXN_TOPIC_RESULT = Struct("AddPartitionsToTxnTopicResult",
    F("name", STRING, "0+"),
    F("results_by_partition", array(_ADD_PARTITIONS_TO_TXN_PARTITION_RESULT), "0+"),
)
ADD_PARTITIONS_TO_TXN = Api(
    24, "AddPartitionsToTxn", valid="0-3", flexible="3+",
    request=Struct("AddPartitionsToTxnRequest",
        F("v3_and_below_transactional_id", STRING, "0-3"),
        F("v3_and_below_producer_id", INT64, "0-3"),
        F("v3_and_below_producer_epoch", INT16, "0-3"),
        F("v3_and_below_topics", array(_ADD_PARTITIONS_TO_TXN_TOPIC), "0-3"),
    ),
    response=Struct("AddPartitionsToTxnResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("results_by_topic_v3_and_below", array(_ADD_PARTITIONS_TO_TXN_TOPIC_RESULT), "0-3"),
    ),
)


ADD_OFFSETS_TO_TXN = Api(
    25, "AddOffsetsToTxn", valid="0-3", flexible="3+",
    request=Struct("AddOffsetsToTxnRequest",
        F("transactional_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("group_id", STRING, "0+"),
    ),
    response=Struct("AddOffsetsToTxnResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
    ),
)


END_TXN = Api(
    26, "EndTxn", valid="0-3", flexible="3+",
    request=Struct("EndTxnRequest",
        F("transactional_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("committed", BOOL, "0+"),
    ),
    response=Struct("EndTxnResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
    ),
)


TXN_OFFSET_COMMIT = Api(
    28, "TxnOffsetCommit", valid="0-3", flexible="3+",
    request=Struct("TxnOffsetCommitRequest",
        F("transactional_id", STRING, "0+"),
        F("group_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("generation_id", INT32, "3+", default=-1),
        F("member_id", STRING, "3+", default=""),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("topics", array(Struct("TxnOffsetCommitRequestTopic",
            F("name", STRING, "0+"),
            F("partitions", array(Struct("TxnOffsetCommitRequestPartition",
                F("partition_index", INT32, "0+"),
                F("committed_offset", INT64, "0+"),
                F("committed_leader_epoch", INT32, "2+", default=-1),
                F("committed_metadata", STRING, "0+", nullable="0+"),
            )), "0+"),
        )), "0+"),
    ),
    response=Struct("TxnOffsetCommitResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("topics", array(Struct("TxnOffsetCommitResponseTopic",
            F("name", STRING, "0+"),
            F("partitions", array(Struct("TxnOffsetCommitResponsePartition",
                F("partition_index", INT32, "0+"),
                F("error_code", INT16, "0+"),
            )), "0+"),
        )), "0+"),
    ),
)
