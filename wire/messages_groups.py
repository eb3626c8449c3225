"""Schemas of the consumer-group APIs: offsets, the coordinator, membership and listings.

Field names are Kafka's (snake_case); version strings are Kafka's. Only fields that exist
in the versions rafka serves are listed.
"""

from __future__ import annotations

from rafka.wire.schema import (
    INT8, INT16, INT32, INT64, BOOL, STRING, BYTES, Api, F, Struct, array,
)

OFFSET_COMMIT = Api(
    8, "OffsetCommit", valid="2-7", flexible="8+",
    request=Struct("OffsetCommitRequest",
        F("group_id", STRING, "0+"),
        F("generation_id_or_member_epoch", INT32, "1+", default=-1),
        F("member_id", STRING, "1+"),
        F("group_instance_id", STRING, "7+", nullable="7+", default=None),
        F("retention_time_ms", INT64, "2-4", default=-1),
        F("topics", array(Struct("OffsetCommitRequestTopic",
            F("name", STRING, "0-9"),
            F("partitions", array(Struct("OffsetCommitRequestPartition",
                F("partition_index", INT32, "0+"),
                F("committed_offset", INT64, "0+"),
                F("committed_leader_epoch", INT32, "6+", default=-1),
                F("committed_metadata", STRING, "0+", nullable="0+"),
            )), "0+"),
        )), "0+"),
    ),
    response=Struct("OffsetCommitResponse",
        F("throttle_time_ms", INT32, "3+"),
        F("topics", array(Struct("OffsetCommitResponseTopic",
            F("name", STRING, "0-9"),
            F("partitions", array(Struct("OffsetCommitResponsePartition",
                F("partition_index", INT32, "0+"),
                F("error_code", INT16, "0+"),
            )), "0+"),
        )), "0+"),
    ),
)


OFFSET_FETCH = Api(
    9, "OffsetFetch", valid="1-7", flexible="6+",
    request=Struct("OffsetFetchRequest",
        F("group_id", STRING, "0-7"),
        F("topics", array(Struct("OffsetFetchRequestTopic",
            F("name", STRING, "0-7"),
            F("partition_indexes", array(INT32), "0-7"),
        )), "0-7", nullable="2-7"),
        F("require_stable", BOOL, "7+", default=False),
    ),
    response=Struct("OffsetFetchResponse",
        F("throttle_time_ms", INT32, "3+"),
        F("topics", array(Struct("OffsetFetchResponseTopic",
            F("name", STRING, "0-7"),
            F("partitions", array(Struct("OffsetFetchResponsePartition",
                F("partition_index", INT32, "0-7"),
                F("committed_offset", INT64, "0-7"),
                F("committed_leader_epoch", INT32, "5-7", default=-1),
                F("metadata", STRING, "0-7", nullable="0-7"),
                F("error_code", INT16, "0-7"),
            )), "0-7"),
        )), "0-7"),
        F("error_code", INT16, "2-7", default=0),
    ),
)


FIND_COORDINATOR = Api(
    10, "FindCoordinator", valid="0-2", flexible="3+",
    request=Struct("FindCoordinatorRequest",
        F("key", STRING, "0-3"),
        F("key_type", INT8, "1+", default=0),
    ),
    response=Struct("FindCoordinatorResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0-3"),
        F("error_message", STRING, "1-3", nullable="1-3"),
        F("node_id", INT32, "0-3"),
        F("host", STRING, "0-3"),
        F("port", INT32, "0-3"),
    ),
)


JOIN_GROUP = Api(
    11, "JoinGroup", valid="0-5", flexible="6+",
    request=Struct("JoinGroupRequest",
        F("group_id", STRING, "0+"),
        F("session_timeout_ms", INT32, "0+"),
        F("rebalance_timeout_ms", INT32, "1+", default=-1),
        F("member_id", STRING, "0+"),
        F("group_instance_id", STRING, "5+", nullable="5+", default=None),
        F("protocol_type", STRING, "0+"),
        F("protocols", array(Struct("JoinGroupRequestProtocol",
            F("name", STRING, "0+"),
            F("metadata", BYTES, "0+"),
        )), "0+"),
    ),
    response=Struct("JoinGroupResponse",
        F("throttle_time_ms", INT32, "2+"),
        F("error_code", INT16, "0+"),
        F("generation_id", INT32, "0+", default=-1),
        F("protocol_name", STRING, "0+"),
        F("leader", STRING, "0+"),
        F("member_id", STRING, "0+"),
        F("members", array(Struct("JoinGroupResponseMember",
            F("member_id", STRING, "0+"),
            F("group_instance_id", STRING, "5+", nullable="5+", default=None),
            F("metadata", BYTES, "0+"),
        )), "0+"),
    ),
)


HEARTBEAT = Api(
    12, "Heartbeat", valid="0-3", flexible="4+",
    request=Struct("HeartbeatRequest",
        F("group_id", STRING, "0+"),
        F("generation_id", INT32, "0+"),
        F("member_id", STRING, "0+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    ),
    response=Struct("HeartbeatResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0+"),
    ),
)


LEAVE_GROUP = Api(
    13, "LeaveGroup", valid="0-1", flexible="4+",
    request=Struct("LeaveGroupRequest",
        F("group_id", STRING, "0+"),
        F("member_id", STRING, "0-2"),
    ),
    response=Struct("LeaveGroupResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0+"),
    ),
)


SYNC_GROUP = Api(
    14, "SyncGroup", valid="0-3", flexible="4+",
    request=Struct("SyncGroupRequest",
        F("group_id", STRING, "0+"),
        F("generation_id", INT32, "0+"),
        F("member_id", STRING, "0+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("assignments", array(Struct("SyncGroupRequestAssignment",
            F("member_id", STRING, "0+"),
            F("assignment", BYTES, "0+"),
        )), "0+"),
    ),
    response=Struct("SyncGroupResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0+"),
        F("assignment", BYTES, "0+"),
    ),
)


DESCRIBE_GROUPS = Api(
    15, "DescribeGroups", valid="0-5", flexible="5+",
    request=Struct("DescribeGroupsRequest",
        F("groups", array(STRING), "0+"),
        F("include_authorized_operations", BOOL, "3+"),
    ),
    response=Struct("DescribeGroupsResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("groups", array(Struct("DescribedGroup",
            F("error_code", INT16, "0+"),
            F("group_id", STRING, "0+"),
            F("group_state", STRING, "0+"),
            F("protocol_type", STRING, "0+"),
            F("protocol_data", STRING, "0+"),
            F("members", array(Struct("DescribedGroupMember",
                F("member_id", STRING, "0+"),
                F("group_instance_id", STRING, "4+", nullable="4+", default=None),
                F("client_id", STRING, "0+"),
                F("client_host", STRING, "0+"),
                F("member_metadata", BYTES, "0+"),
                F("member_assignment", BYTES, "0+"),
            )), "0+"),
            F("authorized_operations", INT32, "3+", default=-2147483648),
        )), "0+"),
    ),
)


LIST_GROUPS = Api(
    16, "ListGroups", valid="0-4", flexible="3+",
    request=Struct("ListGroupsRequest",
        F("states_filter", array(STRING), "4+"),
    ),
    response=Struct("ListGroupsResponse",
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0+"),
        F("groups", array(Struct("ListedGroup",
            F("group_id", STRING, "0+"),
            F("protocol_type", STRING, "0+"),
            F("group_state", STRING, "4+"),
        )), "0+"),
    ),
)


DELETE_GROUPS = Api(
    42, "DeleteGroups", valid="0-1", flexible="2+",
    request=Struct("DeleteGroupsRequest",
        F("groups_names", array(STRING), "0+"),
    ),
    response=Struct("DeleteGroupsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("results", array(Struct("DeletableGroupResult",
            F("group_id", STRING, "0+"),
            F("error_code", INT16, "0+"),
        )), "0+"),
    ),
)
