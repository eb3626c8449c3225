"""The driver-side column check of a topic sink, without Spark: ``sink_columns`` reads only
``df.dtypes``, so a DataFrame is a stand-in holding (name, Spark type string) pairs as
pyspark gives them."""

from __future__ import annotations

import pytest

from rafka.clients.spark_writer import sink_columns

HEADERS = "array<struct<key:string,value:binary>>"


class FakeFrame:
    def __init__(self, *dtypes: tuple[str, str]) -> None:
        self.dtypes = list(dtypes)


def test_a_value_column_alone_is_a_sink():
    assert sink_columns(FakeFrame(("value", "binary"))) == ["value"]


def test_every_sink_column_is_found_in_a_fixed_order_whatever_the_frames_order():
    df = FakeFrame(("headers", HEADERS), ("partition", "int"), ("key", "binary"),
                   ("value", "binary"))  # fmt: skip
    assert sink_columns(df) == ["value", "key", "partition", "headers"]


def test_columns_a_sink_does_not_take_are_left_out():
    df = FakeFrame(("topic", "string"), ("value", "string"), ("offset", "bigint"),
                   ("timestamp", "timestamp"), ("key", "string"))  # fmt: skip
    assert sink_columns(df) == ["value", "key"]


@pytest.mark.parametrize("kind", ["binary", "string"])
def test_key_and_value_may_be_binary_or_string(kind):
    assert sink_columns(FakeFrame(("value", kind), ("key", kind))) == ["value", "key"]


@pytest.mark.parametrize("kind", ["int", "bigint", "smallint", "tinyint"])
def test_partition_may_be_any_spark_integer_type(kind):
    assert sink_columns(FakeFrame(("value", "binary"), ("partition", kind))) == [
        "value", "partition",
    ]  # fmt: skip


def test_a_frame_without_a_value_column_is_a_type_error_listing_its_columns():
    df = FakeFrame(("key", "binary"), ("payload", "binary"))
    with pytest.raises(TypeError, match="has no 'value' column") as info:
        sink_columns(df)
    message = str(info.value)
    assert "['key', 'payload']" in message
    assert "AS value" in message  # says how to get one


@pytest.mark.parametrize(
    "column, kind, accepted",
    [
        ("value", "int", "binary or string"),
        ("value", "array<tinyint>", "binary or string"),
        ("key", "double", "binary or string"),
        ("partition", "string", "int or bigint or smallint or tinyint"),
        ("partition", "double", "int or bigint or smallint or tinyint"),
        ("headers", "array<struct<key:string,value:string>>", HEADERS),
        ("headers", "map<string,binary>", HEADERS),
    ],
)
def test_a_sink_column_of_the_wrong_type_is_a_type_error_naming_column_type_and_fix(
    column, kind, accepted
):
    dtypes = {"value": "binary", column: kind}
    with pytest.raises(TypeError) as info:
        sink_columns(FakeFrame(*dtypes.items()))
    message = str(info.value)
    assert f"column {column!r} is {kind}" in message
    assert f"a topic sink takes {accepted}" in message
    assert "cast it first" in message
