"""Topic config validation: Kafka's names and defaults, typed errors naming the rule."""

import pytest

from rafka.errors import InvalidConfig
from rafka.storage import LogConfig


def test_defaults_are_kafkas():
    """An empty config has Kafka's defaults."""
    c = LogConfig.from_dict({})
    assert (c.segment_bytes, c.retention_ms, c.retention_bytes, c.max_message_bytes) == (
        1073741824, 604800000, -1, 1048588)
    assert c.cleanup_policy == {"delete"} and c.index_interval_bytes == 4096


def test_string_values_are_parsed_like_kafka_properties():
    """Values may be strings, as in a properties file."""
    c = LogConfig.from_dict({"retention.ms": "3600000", "cleanup.policy": "compact,delete",
                             "unclean.leader.election.enable": "true"})
    assert c.retention_ms == 3600000 and c.compact and c.delete
    assert c.unclean_leader_election_enable is True
    assert LogConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("name,value,message", [
    ("segment.bytes", 10, r"segment.bytes=10 is out of range; allowed: \[128, 2147483647\] bytes"),
    ("retention.ms", -2, r"retention.ms=-2 is out of range; allowed: \[-1, "),
    ("retention.ms", "soon", r"retention.ms='soon' is not an integer"),
    ("flush.messages", 0, r"flush.messages=0 is out of range"),
    ("cleanup.policy", "archive", r"cleanup.policy='archive' is not allowed; allowed: delete"),
    ("compression.type", "snappy", r"compression.type='snappy' is not allowed"),
    ("min.cleanable.dirty.ratio", 1.5, r"allowed: \[0, 1\]"),
    ("max.message.bytes", True, r"is a bool"),
    ("retention.msec", 1, r"unknown topic config 'retention.msec'; known configs: .*retention.ms"),
])
def test_invalid_values_name_the_config_the_value_and_the_allowed_range(name, value, message):
    """Each bad value raises InvalidConfig that says which config, what value and what is
    allowed."""
    with pytest.raises(InvalidConfig, match=message):
        LogConfig.from_dict({name: value})
