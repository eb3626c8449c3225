"""Producer settings: Kafka's names and rules, checked before any record is sent."""

from __future__ import annotations

import pytest

from rafka.clients.producer_config import make_config
from rafka.errors import InvalidConfig
from rafka.storage.record_batch import Codec

# setting -> the smallest value it allows
NUMERIC = {
    "linger_ms": 0, "batch_size": 1, "buffer_memory": 1, "max_block_ms": 0,
    "max_request_size": 1, "retries": 0, "retry_backoff_ms": 0, "request_timeout_ms": 1,
    "delivery_timeout_ms": 1, "max_in_flight": 1,
}  # fmt: skip


def test_defaults_are_kafkas_with_acks_all_and_idempotence_on():
    """make_config() is acks=all, idempotent, uncompressed."""
    config = make_config()
    assert config.acks == -1
    assert config.enable_idempotence is True
    assert config.compression is Codec.NONE
    assert config.max_in_flight == 5


@pytest.mark.parametrize(
    "acks, expected",
    [("all", -1), (-1, -1), ("-1", -1), (1, 1), ("1", 1), (0, 0), ("0", 0)],
)
def test_acks_accepts_kafkas_spellings(acks, expected):
    """acks is 0, 1 or all (-1), as int or string."""
    assert make_config(acks=acks).acks == expected


@pytest.mark.parametrize("acks", [2, -2, "ALL", "any", None, "", 0.5])
def test_other_acks_values_raise_invalid_config_naming_acks(acks):
    with pytest.raises(InvalidConfig, match="acks="):
        make_config(acks=acks)


@pytest.mark.parametrize("acks", [True, False])
def test_acks_as_a_bool_is_refused(acks):
    with pytest.raises(InvalidConfig, match="acks="):
        make_config(acks=acks)


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_numeric_settings_accept_their_lowest_value(name):
    """Each numeric setting accepts its documented minimum (and floats)."""
    config = make_config(**{name: NUMERIC[name]})
    assert getattr(config, name) == NUMERIC[name]


@pytest.mark.parametrize("name", sorted(NUMERIC))
@pytest.mark.parametrize("bad", ["below", "5", None, True, [1]])
def test_bad_numbers_raise_invalid_config_naming_the_setting(name, bad):
    """Below the minimum, strings, None, bools and other non-numbers raise InvalidConfig
    whose message starts with the setting's name."""
    value = NUMERIC[name] - 1 if bad == "below" else bad
    with pytest.raises(InvalidConfig, match=f"^{name}="):
        make_config(**{name: value})


@pytest.mark.parametrize("name", ["linger_ms", "batch_size", "request_timeout_ms"])
def test_nan_is_a_bad_number(name):
    with pytest.raises(InvalidConfig, match=f"^{name}="):
        make_config(**{name: float("nan")})


@pytest.mark.parametrize(
    "name, codec",
    [("none", Codec.NONE), ("uncompressed", Codec.NONE), (None, Codec.NONE),
     ("gzip", Codec.GZIP), ("lz4", Codec.LZ4), ("zstd", Codec.ZSTD), ("ZSTD", Codec.ZSTD)],
)  # fmt: skip
def test_compression_takes_kafkas_codec_names(name, codec):
    assert make_config(compression=name).compression is codec


@pytest.mark.parametrize("name", ["snappy", "zip", "lz5", "gzip ", b"gzip"])
def test_unknown_compression_raises_invalid_config_naming_it(name):
    """Unknown codecs (snappy included) raise InvalidConfig listing the supported ones."""
    with pytest.raises(InvalidConfig, match="compression=.*none, gzip, lz4 or zstd"):
        make_config(compression=name)


@pytest.mark.parametrize("name", [1, 4, 3.0])
def test_compression_that_is_not_a_string_raises_invalid_config(name):
    with pytest.raises(InvalidConfig, match="compression="):
        make_config(compression=name)


@pytest.mark.parametrize(
    "settings, expected",
    [({}, True), ({"acks": 1}, False), ({"acks": 0}, False), ({"acks": "all"}, True),
     ({"retries": 0}, False), ({"max_in_flight": 6}, False), ({"max_in_flight": 5}, True)],
)  # fmt: skip
def test_idempotence_defaults_on_only_when_no_setting_conflicts(settings, expected):
    """Kafka's rule: idempotence is on by default with acks=all, retries > 0 and at most five
    requests in flight; otherwise it quietly defaults off."""
    assert make_config(**settings).enable_idempotence is expected


@pytest.mark.parametrize("acks", [1, 0, "1", "0"])
def test_explicit_idempotence_with_acks_below_all_raises_invalid_config(acks):
    """Asking for idempotence with acks=0/1 is a contradiction, and the error says how to
    resolve it."""
    with pytest.raises(InvalidConfig, match="acks='all'"):
        make_config(acks=acks, enable_idempotence=True)


@pytest.mark.parametrize("in_flight", [6, 100])
def test_explicit_idempotence_with_more_than_five_in_flight_raises_invalid_config(in_flight):
    with pytest.raises(InvalidConfig, match="max_in_flight <= 5"):
        make_config(max_in_flight=in_flight, enable_idempotence=True)


def test_explicit_idempotence_with_zero_retries_raises_invalid_config():
    with pytest.raises(InvalidConfig, match="retries"):
        make_config(retries=0, enable_idempotence=True)


def test_explicit_idempotence_off_is_respected_with_acks_all():
    assert make_config(enable_idempotence=False).enable_idempotence is False


def test_explicit_idempotence_on_with_compatible_settings_is_kept():
    config = make_config(acks="-1", max_in_flight=1, enable_idempotence=True)
    assert (config.acks, config.max_in_flight, config.enable_idempotence) == (-1, 1, True)


def test_every_setting_is_carried_into_the_config():
    """Values given come back under the same names."""
    given = dict(
        linger_ms=2.5, batch_size=100, buffer_memory=1000, max_block_ms=7, max_request_size=99,
        retries=3, retry_backoff_ms=4, request_timeout_ms=5, delivery_timeout_ms=6,
        max_in_flight=2,
    )
    config = make_config(**given)
    assert {name: getattr(config, name) for name in given} == given
