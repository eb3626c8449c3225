"""Representative bodies built from rafka's own schemas, and a bridge to kafka-python's
message classes (the test oracle)."""

from __future__ import annotations

import itertools
import uuid

from rafka.wire import schema as s
from rafka.wire.messages import APIS

_INT_RANGE = {"int8": 100, "int16": 30000, "int32": 2_000_000_000, "int64": 2**62,
              "uint16": 60000, "uint32": 4_000_000_000}


def sample_value(t, name: str, version: int, compact: bool, counter) -> object:
    """A non-default value of type ``t`` (so tagged fields are written and checked)."""
    if isinstance(t, s.Array):
        return [sample_value(t.elem, name, version, compact, counter) for _ in range(2)]
    if isinstance(t, s.Struct):
        return sample_struct(t, version, compact, counter)
    n = next(counter)
    if t.name in _INT_RANGE:
        return (n * 7919) % _INT_RANGE[t.name] + 1
    return {
        "bool": True,
        "float64": n + 0.5,
        "string": f"{name}-{n}-é",  # a non-ASCII character checks UTF-8 lengths
        "bytes": bytes([n % 256]) * 3,
        "records": b"records-%d" % n,
        "uuid": uuid.UUID(int=n + 1).bytes,
    }[t.name]


def sample_struct(struct: s.Struct, version: int, compact: bool, counter=None) -> dict:
    counter = counter if counter is not None else itertools.count(1)
    plain, tagged = s._split(struct, version, compact)
    return {f.name: sample_value(f.type, f.name, version, compact, counter)
            for f in plain + tagged}


def sample_body(api_key: int, version: int, request: bool) -> dict:
    api = APIS[api_key]
    struct = api.request if request else api.response
    return sample_struct(struct, version, api.is_flexible(version))


def every_api_version():
    return [(k, v) for k, api in sorted(APIS.items())
            for v in range(api.min_version, api.max_version + 1)]


# -- kafka-python bridge ---------------------------------------------------------------------

def kp_class(api_key: int, request: bool):
    import kafka.protocol.admin  # noqa: F401 - registers the classes
    import kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.metadata  # noqa: F401
    import kafka.protocol.producer  # noqa: F401
    from kafka.protocol.api_message import ApiMessage

    kind = "request" if request else "response"
    todo = list(ApiMessage.__subclasses__())
    while todo:
        c = todo.pop()
        todo.extend(c.__subclasses__())
        if (getattr(c, "_class_version", None) is None and c.API_KEY == api_key
                and c.type == kind):
            return c
    raise LookupError(f"kafka-python has no {kind} class for api key {api_key}")


def to_kp(cls, d: dict, version: int):
    """Builds a kafka-python container of class ``cls`` from a plain dict."""
    kwargs = {}
    for name, val in d.items():
        field = cls._struct.fields[name]
        if field.is_struct_array():
            val = None if val is None else [to_kp(field.data_class, x, version) for x in val]
        elif field.is_struct():
            val = to_kp(field.data_class, val, version)
        elif field.type_str == "uuid" and val is not None:
            val = uuid.UUID(bytes=val)
        elif field.type_str == "[]uuid" and val is not None:
            val = [uuid.UUID(bytes=x) for x in val]
        kwargs[name] = val
    return cls(version=version, **kwargs)


def plain(value):
    """Normalizes decoded values for comparison: views and UUIDs become bytes."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def undo_kp_quirks(api_key: int, decoded: dict) -> dict:
    """kafka-python renames Metadata's authorized-operations fields and turns bit fields into
    sets; rafka keeps Kafka's names and the int32 bit field."""
    def bits(value):
        return sum(1 << b for b in value) if isinstance(value, set) else value

    if api_key == 3 and "authorized_operations" in decoded:
        decoded["cluster_authorized_operations"] = bits(decoded.pop("authorized_operations"))
        for topic in decoded["topics"]:
            topic["topic_authorized_operations"] = bits(topic.pop("authorized_operations"))
    if api_key == 15:
        for group in decoded["groups"]:
            if "authorized_operations" in group:
                group["authorized_operations"] = bits(group["authorized_operations"])
    return decoded
