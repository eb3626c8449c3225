"""Schemas of the security APIs: SASL handshake and authentication, and the ACL APIs.

Field names are Kafka's (snake_case); version strings are Kafka's. Only fields that exist
in the versions rafka serves are listed.
"""

from __future__ import annotations

from rafka.wire.schema import (
    INT8, INT16, INT32, INT64, STRING, BYTES, Api, F, Struct, array,
)

SASL_HANDSHAKE = Api(
    # v0 stays advertised though only v1 is served: librdkafka before 2.11 enables SASL only
    # when a broker lists SaslHandshake from version 0 (rdkafka_feature.c).
    17, "SaslHandshake", valid="0-1", flexible="none",
    request=Struct("SaslHandshakeRequest",
        F("mechanism", STRING, "0+"),
    ),
    response=Struct("SaslHandshakeResponse",
        F("error_code", INT16, "0+"),
        F("mechanisms", array(STRING), "0+"),
    ),
)


SASL_AUTHENTICATE = Api(
    36, "SaslAuthenticate", valid="0-1", flexible="2+",
    request=Struct("SaslAuthenticateRequest",
        F("auth_bytes", BYTES, "0+"),
    ),
    response=Struct("SaslAuthenticateResponse",
        F("error_code", INT16, "0+"),
        F("error_message", STRING, "0+", nullable="0+"),
        F("auth_bytes", BYTES, "0+"),
        F("session_lifetime_ms", INT64, "1+", default=0),
    ),
)


DESCRIBE_ACLS = Api(
    29, "DescribeAcls", valid="1-2", flexible="2+",
    request=Struct("DescribeAclsRequest",
        F("resource_type_filter", INT8, "0+"),
        F("resource_name_filter", STRING, "0+", nullable="0+"),
        F("pattern_type_filter", INT8, "1+", default=3),
        F("principal_filter", STRING, "0+", nullable="0+"),
        F("host_filter", STRING, "0+", nullable="0+"),
        F("operation", INT8, "0+"),
        F("permission_type", INT8, "0+"),
    ),
    response=Struct("DescribeAclsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("error_message", STRING, "0+", nullable="0+"),
        F("resources", array(Struct("DescribeAclsResource",
            F("resource_type", INT8, "0+"),
            F("resource_name", STRING, "0+"),
            F("pattern_type", INT8, "1+", default=3),
            F("acls", array(Struct("AclDescription",
                F("principal", STRING, "0+"),
                F("host", STRING, "0+"),
                F("operation", INT8, "0+"),
                F("permission_type", INT8, "0+"),
            )), "0+"),
        )), "0+"),
    ),
)


CREATE_ACLS = Api(
    30, "CreateAcls", valid="1-2", flexible="2+",
    request=Struct("CreateAclsRequest",
        F("creations", array(Struct("AclCreation",
            F("resource_type", INT8, "0+"),
            F("resource_name", STRING, "0+"),
            F("resource_pattern_type", INT8, "1+", default=3),
            F("principal", STRING, "0+"),
            F("host", STRING, "0+"),
            F("operation", INT8, "0+"),
            F("permission_type", INT8, "0+"),
        )), "0+"),
    ),
    response=Struct("CreateAclsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("results", array(Struct("AclCreationResult",
            F("error_code", INT16, "0+"),
            F("error_message", STRING, "0+", nullable="0+"),
        )), "0+"),
    ),
)


DELETE_ACLS = Api(
    31, "DeleteAcls", valid="1-2", flexible="2+",
    request=Struct("DeleteAclsRequest",
        F("filters", array(Struct("DeleteAclsFilter",
            F("resource_type_filter", INT8, "0+"),
            F("resource_name_filter", STRING, "0+", nullable="0+"),
            F("pattern_type_filter", INT8, "1+", default=3),
            F("principal_filter", STRING, "0+", nullable="0+"),
            F("host_filter", STRING, "0+", nullable="0+"),
            F("operation", INT8, "0+"),
            F("permission_type", INT8, "0+"),
        )), "0+"),
    ),
    response=Struct("DeleteAclsResponse",
        F("throttle_time_ms", INT32, "0+"),
        F("filter_results", array(Struct("DeleteAclsFilterResult",
            F("error_code", INT16, "0+"),
            F("error_message", STRING, "0+", nullable="0+"),
            F("matching_acls", array(Struct("DeleteAclsMatchingAcl",
                F("error_code", INT16, "0+"),
                F("error_message", STRING, "0+", nullable="0+"),
                F("resource_type", INT8, "0+"),
                F("resource_name", STRING, "0+"),
                F("pattern_type", INT8, "1+", default=3),
                F("principal", STRING, "0+"),
                F("host", STRING, "0+"),
                F("operation", INT8, "0+"),
                F("permission_type", INT8, "0+"),
            )), "0+"),
        )), "0+"),
    ),
)
