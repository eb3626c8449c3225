"""Kafka's listeners syntax: parsing, what is advertised, the bootstrap string."""

import pytest

from rafka.errors import InvalidConfig
from rafka.wire.listeners import Endpoint, advertised, bootstrap_string, parse_listeners


def test_listeners_parse_protocol_host_and_port():
    assert parse_listeners("PLAINTEXT://0.0.0.0:9092, sasl_ssl://broker-1:9094") == [
        Endpoint("PLAINTEXT", "0.0.0.0", 9092), Endpoint("SASL_SSL", "broker-1", 9094)]
    assert parse_listeners("PLAINTEXT://:0") == [Endpoint("PLAINTEXT", "", 0)]
    assert parse_listeners("SSL://[::1]:9093") == [Endpoint("SSL", "::1", 9093)]
    assert parse_listeners("") == []


@pytest.mark.parametrize("text", ["9092", "HTTP://h:1", "PLAINTEXT://h", "PLAINTEXT://h:70000",
                                  "PLAINTEXT://h:1,PLAINTEXT://h:2"])
def test_bad_listeners_name_the_problem(text):
    with pytest.raises(InvalidConfig, match="listeners"):
        parse_listeners(text)


def test_advertised_fills_in_the_node_address_and_the_bound_port():
    listeners = parse_listeners("PLAINTEXT://0.0.0.0:0,SSL://10.0.0.5:9093")
    shown = advertised(listeners, {"PLAINTEXT": 41234, "SSL": 9093}, "", "10.0.0.5")
    assert shown == [Endpoint("PLAINTEXT", "10.0.0.5", 41234), Endpoint("SSL", "10.0.0.5", 9093)]


def test_advertised_listeners_override_per_protocol_and_must_be_opened():
    listeners = parse_listeners("PLAINTEXT://0.0.0.0:9092")
    shown = advertised(listeners, {"PLAINTEXT": 9092}, "PLAINTEXT://kafka.example.com:19092",
                       "10.0.0.5")
    assert shown == [Endpoint("PLAINTEXT", "kafka.example.com", 19092)]
    with pytest.raises(InvalidConfig, match="SSL"):
        advertised(listeners, {"PLAINTEXT": 9092}, "SSL://x:1", "10.0.0.5")


def test_bootstrap_string_lists_each_address_once():
    endpoints = [Endpoint("PLAINTEXT", "a", 1), Endpoint("PLAINTEXT", "b", 2),
                 Endpoint("PLAINTEXT", "a", 1)]
    assert bootstrap_string(endpoints) == "a:1,b:2"
