"""Cluster settings: Kafka's broker property names, checked before the services start."""

from __future__ import annotations

import pytest

from rafka.cluster.settings import BROKER_SETTINGS, validate_settings
from rafka.errors import InvalidConfig


def test_known_settings_are_parsed_from_strings_as_the_cli_gives_them():
    """`rafka up --set` passes strings; they become the setting's type."""
    parsed = validate_settings({
        "broker.session.timeout.ms": "2500", "auto.leader.rebalance.enable": "false",
    })  # fmt: skip
    assert parsed == {"broker.session.timeout.ms": 2500, "auto.leader.rebalance.enable": False}


def test_nothing_given_means_nothing_set():
    """Defaults are applied where a setting is used, not copied into the cluster's settings."""
    assert validate_settings(None) == {} and validate_settings({}) == {}


def test_unknown_setting_is_refused_with_the_list_of_known_ones():
    with pytest.raises(InvalidConfig, match="unknown cluster setting 'broker.sesion.timeout.ms'"
                       ) as raised:  # fmt: skip
        validate_settings({"broker.sesion.timeout.ms": 100})
    assert "broker.session.timeout.ms" in str(raised.value)


@pytest.mark.parametrize(
    "name, value",
    [("broker.session.timeout.ms", 5), ("replica.lag.time.max.ms", "soon"),
     ("auto.leader.rebalance.enable", "maybe"), ("num.partitions", 0)],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_setting(name, value):
    with pytest.raises(InvalidConfig, match=name):
        validate_settings({name: value})


def test_every_default_passes_its_own_check():
    """The table is consistent: each default is a valid value of its setting."""
    defaults = {name: spec[0] for name, spec in BROKER_SETTINGS.items()}
    assert validate_settings(defaults) == defaults


def test_packed_replicas_give_the_offsets_topic_kafkas_partition_count():
    from rafka.cluster.settings import offsets_topic_partitions

    assert offsets_topic_partitions({}) == 4
    assert offsets_topic_partitions({"replicas.per.actor": 100}) == 50
    given = {"replicas.per.actor": 100, "offsets.topic.num.partitions": 8}
    assert offsets_topic_partitions(given) == 8


def test_replicas_per_actor_out_of_range_is_refused_saying_the_range():
    import pytest

    from rafka.cluster.settings import validate_settings
    from rafka.errors import InvalidConfig

    for bad in (0, 1001, "many"):
        with pytest.raises(InvalidConfig, match="replicas.per.actor"):
            validate_settings({"replicas.per.actor": bad})
    assert validate_settings({"replicas.per.actor": "100"}) == {"replicas.per.actor": 100}
