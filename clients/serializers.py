"""Key and value (de)serializers, as kafka-python takes them: any callable from the object to
bytes (and back). Records are bytes on the wire; without a serializer, ``send`` takes bytes,
bytearray, memoryview or None and refuses anything else with a TypeError saying what to pass.
"""

from __future__ import annotations

import json
from typing import Any, Callable

Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]

BYTES_LIKE = (bytes, bytearray, memoryview)


def str_serializer(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8")


def str_deserializer(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def json_serializer(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def json_deserializer(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


_NAMED = {"str": (str_serializer, str_deserializer), "json": (json_serializer, json_deserializer)}


def resolve(spec: Callable | str | None, which: int, what: str) -> Callable | None:
    """A (de)serializer from a callable, None, or the names "str" / "json"."""
    if spec is None or callable(spec):
        return spec
    if spec in _NAMED:
        return _NAMED[spec][which]
    raise TypeError(f"{what} must be a callable, None, 'str' or 'json'; got {spec!r}")


def check_bytes(data: object, what: str) -> None:
    """TypeError for a key or value that is not bytes-like (after serialization)."""
    if data is not None and not isinstance(data, BYTES_LIKE):
        raise TypeError(
            f"{what} must be bytes, bytearray, memoryview or None, got {type(data).__name__}; "
            f"encode it first or pass {what}_serializer= (for example "
            f"{what}_serializer=str.encode, or 'str' / 'json')"
        )
