"""A small DSL for Kafka message schemas, and its compiler into readers and writers.

A schema is written once, in the shape of Kafka's JSON message definitions::

    Api(0, "Produce", valid="0-9", flexible="9+",
        request=Struct("ProduceRequest",
            F("transactional_id", STRING, "3+", nullable="3+", default=None),
            F("acks", INT16, "0+"),
            F("topic_data", array(Struct("TopicProduceData", F("name", STRING, "0+"), ...)),
              "0+"),
        ),
        response=Struct("ProduceResponse", ...))

Versions are Kafka's strings: ``"3+"``, ``"0-4"``, ``"5"``, ``"none"``. Field names are Kafka's
field names in snake_case. A field with ``tag=`` is a tagged field in its ``tagged`` versions.

Compiling: ``Api.request_codec(v)`` / ``Api.response_codec(v)`` return a ``Codec`` (a reader
and a writer for that version), built once per (api, version, direction) and cached. Each
struct compiles to a tuple of (name, reader) pairs and one loop; the choice of compact or
classic encodings, nullability and defaults is made at compile time, so decoding runs no
per-field branches.

Speed (measured, CPython 3.11): decoding a one-partition ProduceRequest v9 with a 16 KiB
records blob takes about 6 us (records are a view, never copied); encoding a one-partition
FetchResponse v11 with 16 KiB of records about 4 us (one copy into the frame, one into bytes).
A per-field closure call costs about 0.3 us, so a field-interpreting loop with type branches
would be several times slower; generated source (exec) would save perhaps a third more.

Decoded dicts hold exactly the fields that exist in that version (fields of other versions
are absent; handlers use ``.get``); tagged fields of the version are always present, with their
default when the frame left them out. Encoding takes dicts that may omit fields: an omitted field
gets its default (the schema's ``default``, else None when nullable in that version, else 0,
"", False, b"", [], a zero uuid, or a dict of defaults for a struct).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rafka.errors import InvalidRequest
from rafka.wire import primitives as p

MAX_VERSION = 0x7FFF


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"3+"`` -> (3, 32767); ``"1-4"`` -> (1, 4); ``"5"`` -> (5, 5); ``"none"``/None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def _within(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


class Prim(NamedTuple):
    """A primitive type: its classic and compact readers/writers and the fewest bytes it takes."""

    name: str
    read: p.Reader
    read_nullable: p.Reader | None
    read_compact: p.Reader
    read_compact_nullable: p.Reader | None
    write: p.Writer
    write_nullable: p.Writer | None
    write_compact: p.Writer
    write_compact_nullable: p.Writer | None
    min_size: int
    default: Any


def _fixed(name: str, read: p.Reader, write: p.Writer, size: int, default: Any) -> Prim:
    return Prim(name, read, None, read, None, write, None, write, None, size, default)


INT8 = _fixed("int8", p.read_int8, p.write_int8, 1, 0)
INT16 = _fixed("int16", p.read_int16, p.write_int16, 2, 0)
INT32 = _fixed("int32", p.read_int32, p.write_int32, 4, 0)
INT64 = _fixed("int64", p.read_int64, p.write_int64, 8, 0)
UINT16 = _fixed("uint16", p.read_uint16, p.write_uint16, 2, 0)
UINT32 = _fixed("uint32", p.read_uint32, p.write_uint32, 4, 0)
FLOAT64 = _fixed("float64", p.read_float64, p.write_float64, 8, 0.0)
BOOL = _fixed("bool", p.read_bool, p.write_bool, 1, False)
UUID = _fixed("uuid", p.read_uuid, p.write_uuid, 16, p.ZERO_UUID)
STRING = Prim("string", p.read_string, p.read_nullable_string, p.read_compact_string,
              p.read_compact_nullable_string, p.write_string, p.write_nullable_string,
              p.write_compact_string, p.write_compact_nullable_string, 1, "")
BYTES = Prim("bytes", p.read_bytes, p.read_nullable_bytes, p.read_compact_bytes,
             p.read_compact_nullable_bytes, p.write_bytes, p.write_nullable_bytes,
             p.write_compact_bytes, p.write_compact_nullable_bytes, 1, b"")
RECORDS = Prim("records", p.read_records, p.read_nullable_records, p.read_compact_records,
               p.read_compact_nullable_records, p.write_bytes, p.write_nullable_bytes,
               p.write_compact_bytes, p.write_compact_nullable_bytes, 1, None)


class F(NamedTuple):
    """One field. ``type`` is a Prim, a Struct, or an Array."""

    name: str
    type: Any
    versions: str
    nullable: str | None = None
    default: Any = ...
    tag: int | None = None
    tagged: str | None = None


class Array(NamedTuple):
    elem: Any  # Prim or Struct


def array(elem: Any) -> Array:
    return Array(elem)


class Struct:
    """An ordered list of fields; the unit that has tagged fields in flexible versions."""

    def __init__(self, name: str, *fields: F) -> None:
        self.name = name
        self.fields = fields

    def __repr__(self) -> str:
        return f"Struct({self.name!r})"


class Codec(NamedTuple):
    read: p.Reader
    write: p.Writer


# -- compiler --------------------------------------------------------------------------------

def _default(f: F, version: int) -> Any:
    if f.default is not ...:
        return f.default
    if _within(parse_versions(f.nullable), version):
        return None
    t = f.type
    if isinstance(t, Array):
        return []
    if isinstance(t, Struct):
        return {}
    return t.default


def _min_size(t: Any, version: int, compact: bool) -> int:
    """Fewest bytes a value of ``t`` takes; bounds array counts before allocation."""
    if isinstance(t, Prim):
        return t.min_size
    if isinstance(t, Array):
        return 1 if compact else 4
    total = 1 if compact else 0  # the tagged-field count
    for f in t.fields:
        if f.tag is None and _within(parse_versions(f.versions), version):
            total += _min_size(f.type, version, compact)
    return total


def _field_reader(f: F, version: int, compact: bool) -> p.Reader:
    t = f.type
    nullable = _within(parse_versions(f.nullable), version)
    if isinstance(t, Prim):
        if compact:
            rd = t.read_compact_nullable if nullable else t.read_compact
        else:
            rd = t.read_nullable if nullable else t.read
        if rd is None:
            raise TypeError(f"field {f.name}: type {t.name} cannot be nullable")
        return rd
    if isinstance(t, Array):
        elem = t.elem
        if isinstance(elem, Struct):
            er = struct_reader(elem, version, compact)
        else:
            er = elem.read_compact if compact else elem.read
        return p.array_reader(er, _min_size(elem, version, compact), nullable, compact)
    if nullable:
        # Nullable structs are int8 -1/1 prefixed (KIP-482 style); none of the served APIs
        # use them in a served version, so refuse rather than guess.
        raise TypeError(f"field {f.name}: nullable structs are not supported")
    return struct_reader(t, version, compact)


def _field_writer(f: F, version: int, compact: bool) -> p.Writer:
    t = f.type
    nullable = _within(parse_versions(f.nullable), version)
    if isinstance(t, Prim):
        if compact:
            wr = t.write_compact_nullable if nullable else t.write_compact
        else:
            wr = t.write_nullable if nullable else t.write
        if wr is None:
            raise TypeError(f"field {f.name}: type {t.name} cannot be nullable")
        return wr
    if isinstance(t, Array):
        elem = t.elem
        if isinstance(elem, Struct):
            ew = struct_writer(elem, version, compact)
        else:
            ew = elem.write_compact if compact else elem.write
        return p.array_writer(ew, nullable, compact)
    if nullable:
        raise TypeError(f"field {f.name}: nullable structs are not supported")
    return struct_writer(t, version, compact)


def _split(struct: Struct, version: int, compact: bool) -> tuple[list[F], list[F]]:
    """The untagged and the tagged fields present in ``version``."""
    plain, tagged = [], []
    for f in struct.fields:
        if not _within(parse_versions(f.versions), version):
            continue
        if f.tag is not None and _within(parse_versions(f.tagged), version):
            if compact:  # tagged fields exist only in flexible versions
                tagged.append(f)
        else:
            plain.append(f)
    return plain, tagged


def struct_reader(struct: Struct, version: int, compact: bool) -> p.Reader:
    plain, tagged = _split(struct, version, compact)
    fields = tuple((f.name, _field_reader(f, version, compact)) for f in plain)
    if not compact:
        def read(buf: memoryview, pos: int) -> tuple[dict, int]:
            d = {}
            for name, rd in fields:
                d[name], pos = rd(buf, pos)
            return d, pos
        return read

    by_tag = {f.tag: (f.name, _field_reader(f, version, compact)) for f in tagged}
    tag_defaults = tuple((f.name, _default(f, version)) for f in tagged)
    read_uvarint = p.read_uvarint

    def read_flexible(buf: memoryview, pos: int) -> tuple[dict, int]:
        d = {}
        for name, rd in fields:
            d[name], pos = rd(buf, pos)
        for name, default in tag_defaults:
            d[name] = list(default) if isinstance(default, list) else default
        n, pos = read_uvarint(buf, pos)
        if n * 2 > len(buf) - pos:  # each tagged field takes at least 2 bytes
            raise InvalidRequest(f"tagged field count {n} at byte {pos} exceeds the frame")
        for _ in range(n):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise InvalidRequest(f"tagged field {tag} of {size} bytes exceeds the frame")
            known = by_tag.get(tag)
            if known is not None:
                d[known[0]], _ = known[1](buf[:end], pos)
            pos = end  # unknown tags are skipped, as Kafka does
        return d, pos

    return read_flexible


def struct_writer(struct: Struct, version: int, compact: bool) -> p.Writer:
    plain, tagged = _split(struct, version, compact)
    fields = tuple((f.name, _field_writer(f, version, compact), _default(f, version))
                   for f in plain)
    if not compact:
        def write(out: bytearray, d: dict) -> None:
            get = d.get
            for name, wr, default in fields:
                wr(out, get(name, default))
        return write

    tags = tuple((f.tag, f.name, _field_writer(f, version, compact), _default(f, version))
                 for f in sorted(tagged, key=lambda f: f.tag))
    write_uvarint = p.write_uvarint

    def write_flexible(out: bytearray, d: dict) -> None:
        get = d.get
        for name, wr, default in fields:
            wr(out, get(name, default))
        if not tags:
            out.append(0)
            return
        present = [(tag, wr, v) for tag, name, wr, default in tags
                   if (v := get(name, default)) != default]
        write_uvarint(out, len(present))
        for tag, wr, v in present:
            tmp = bytearray()
            wr(tmp, v)
            write_uvarint(out, tag)
            write_uvarint(out, len(tmp))
            out += tmp

    return write_flexible


class Api:
    """One Kafka API: its key, the versions rafka serves, which are flexible, and its two
    schemas. Codecs are compiled on first use and cached."""

    def __init__(self, key: int, name: str, valid: str, flexible: str,
                 request: Struct, response: Struct) -> None:
        self.key = key
        self.name = name
        lo_hi = parse_versions(valid)
        assert lo_hi is not None
        self.min_version, self.max_version = lo_hi
        self.flexible = parse_versions(flexible)
        self.request = request
        self.response = response
        self._codecs: dict[tuple[int, bool], Codec] = {}

    def is_flexible(self, version: int) -> bool:
        return _within(self.flexible, version)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def _codec(self, version: int, is_request: bool) -> Codec:
        key = (version, is_request)
        codec = self._codecs.get(key)
        if codec is None:
            if not self.supports(version):
                raise ValueError(f"{self.name} v{version} is outside "
                                 f"{self.min_version}-{self.max_version}")
            struct = self.request if is_request else self.response
            compact = self.is_flexible(version)
            codec = Codec(struct_reader(struct, version, compact),
                          struct_writer(struct, version, compact))
            self._codecs[key] = codec
        return codec

    def request_codec(self, version: int) -> Codec:
        return self._codec(version, True)

    def response_codec(self, version: int) -> Codec:
        return self._codec(version, False)

    def compile_all(self) -> None:
        """Builds every codec now (fails fast on a schema mistake)."""
        for v in range(self.min_version, self.max_version + 1):
            self.request_codec(v)
            self.response_codec(v)
