"""State schema files: v1/v2 (``state/<op>/0/[<store>/]_metadata/schema``) and v3
(``state/<op>/_stateSchema/<store>/<batch>_<uuid>``), read and written.

Both are Java ``DataOutputStream`` output: ``writeUTF`` strings (2-byte big-endian
length + modified UTF-8) and big-endian ints. JSON documents longer than 65535
characters (UTF-16 code units, as Java counts them) are split into chunks,
preceded by an int32 chunk count.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, replace
from typing import Any

from state_reader.errors import SchemaReadError, StateReaderError
from state_reader.formats.spark_types import StructType, as_nullable, from_json_value, parse_struct, spark_json

# The user-key schema of a column family without one is written as this literal.
_EMPTY_USER_KEY = "{    }"


def decode_modified_utf8(raw: bytes) -> str:
    """Java modified UTF-8: NUL as C0 80, supplementary characters as surrogate pairs."""
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return text


class _JavaReader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data = data
        self.pos = 0
        self.path = path

    def _take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise SchemaReadError(
                f"{self.path}: file ends at byte {len(self.data)} while reading {what} ({n} bytes at byte {self.pos})",
                path=self.path,
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def utf(self, what: str) -> str:
        (n,) = struct.unpack(">H", self._take(2, what))
        try:
            return decode_modified_utf8(self._take(n, what))
        except UnicodeDecodeError as exc:
            raise SchemaReadError(f"{self.path}: {what} is not valid UTF-8: {exc}", path=self.path) from exc

    def int32(self, what: str) -> int:
        return struct.unpack(">i", self._take(4, what))[0]

    def int16(self, what: str) -> int:
        return struct.unpack(">h", self._take(2, what))[0]

    def chunked(self, what: str) -> str:
        count = self.int32(what + " chunk count")
        if count < 0 or count > len(self.data):
            raise SchemaReadError(f"{self.path}: {what} has an impossible chunk count {count}", path=self.path)
        return "".join(self.utf(what) for _ in range(count))

    def at_end(self) -> bool:
        return self.pos == len(self.data)


def read_schema_v1v2(data: bytes, path: str) -> tuple[StructType, StructType]:
    """(key schema, value schema) of a v1/v2 schema file."""
    reader = _JavaReader(data, path)
    version = reader.utf("version")
    if version == "v1":
        key, value = reader.utf("key schema"), reader.utf("value schema")
    elif version == "v2":
        key, value = reader.chunked("key schema"), reader.chunked("value schema")
    elif version == "v3":
        families = read_schema_v3(data, path)
        default = [f for f in families if f.name == "default"] or families
        return default[0].key_schema, default[0].value_schema
    else:
        raise SchemaReadError(f"{path}: unsupported schema file version {version!r}", path=path)
    return parse_struct(key, path), parse_struct(value, path)


@dataclass(frozen=True)
class ColumnFamilySchema:
    """One column family of a v3 schema file."""

    name: str
    key_schema: StructType
    value_schema: StructType
    key_encoder: dict[str, Any]
    user_key_schema: StructType | None
    key_schema_id: int = 0
    value_schema_id: int = 0


def _read_v3(data: bytes, path: str, with_ids: bool) -> list[ColumnFamilySchema]:
    reader = _JavaReader(data, path)
    version = reader.utf("version")
    if version != "v3":
        raise SchemaReadError(f"{path}: expected schema file version v3, found {version!r}", path=path)
    count = reader.int32("column family count")
    if count < 0 or count > len(data):
        raise SchemaReadError(f"{path}: impossible column family count {count}", path=path)
    families = []
    for _ in range(count):
        name = reader.utf("column family name")
        key_id = reader.int16("key schema id") if with_ids else 0
        key = reader.chunked(f"key schema of {name}")
        value_id = reader.int16("value schema id") if with_ids else 0
        value = reader.chunked(f"value schema of {name}")
        spec_text = reader.chunked(f"key encoder spec of {name}")
        user_key = reader.chunked(f"user key schema of {name}")
        try:
            spec = json.loads(spec_text)
        except ValueError as exc:
            raise SchemaReadError(f"{path}: key encoder spec of {name} is not JSON", path=path) from exc
        user_key_schema = None if user_key.strip() in (_EMPTY_USER_KEY, "{}", "") else parse_struct(user_key, path)
        families.append(
            ColumnFamilySchema(
                name, parse_struct(key, path), parse_struct(value, path), spec, user_key_schema, key_id, value_id
            )
        )
    if not reader.at_end():
        raise SchemaReadError(
            f"{path}: {len(data) - reader.pos} unexpected bytes after the last column family", path=path
        )
    return families


def read_schema_v3(data: bytes, path: str) -> list[ColumnFamilySchema]:
    """Column families of a v3 schema file.

    Released writers (4.0+) put an int16 schema id before the key and the value
    schema; pre-release 4.0 code did not. Try the released layout first.
    """
    return _read_v3_layout(data, path)[0]


def _read_v3_layout(data: bytes, path: str) -> tuple[list[ColumnFamilySchema], bool]:
    """Column families of a v3 schema file, and whether it has the released layout's schema ids."""
    try:
        return _read_v3(data, path, with_ids=True), True
    except SchemaReadError as first:
        try:
            return _read_v3(data, path, with_ids=False), False
        except SchemaReadError:
            raise first from None


# --- writing ----------------------------------------------------------------------------

# Spark's schema writers cut JSON into chunks of this many UTF-16 code units (SchemaHelper.MAX_UTF_CHUNK_SIZE)
_CHUNK = 65535


def encode_modified_utf8(text: str) -> bytes:
    """Java modified UTF-8 (``DataOutputStream.writeUTF``'s bytes): NUL as C0 80, characters
    beyond U+FFFF as two 3-byte surrogates; lone surrogates (a pair cut by a chunk) as themselves."""
    # one character per UTF-16 code unit, so that a surrogate pair becomes two 3-byte sequences
    raw = _utf16_units(text).encode("utf-8", "surrogatepass")
    return raw.replace(b"\x00", b"\xc0\x80") if b"\x00" in raw else raw


def _utf16_units(text: str) -> str:
    """``text`` with every character beyond U+FFFF as its two surrogates: Java's string indices."""
    if all(ord(ch) < 0x10000 for ch in text):
        return text
    units = text.encode("utf-16-le", "surrogatepass")
    return "".join(chr(int.from_bytes(units[i : i + 2], "little")) for i in range(0, len(units), 2))


class _JavaWriter:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def utf(self, text: str, what: str) -> None:
        raw = encode_modified_utf8(text)
        if len(raw) > 0xFFFF:
            # Java's writeUTF throws UTFDataFormatException here, so Spark cannot write such a file either
            raise StateReaderError(f"{what} takes {len(raw)} bytes in modified UTF-8; writeUTF holds at most 65535")
        self.parts.append(struct.pack(">H", len(raw)) + raw)

    def int32(self, value: int) -> None:
        self.parts.append(struct.pack(">i", value))

    def int16(self, value: int) -> None:
        self.parts.append(struct.pack(">h", value))

    def chunked(self, text: str, what: str) -> None:
        """A JSON document as Spark's ``writeJsonSchema``: chunk count, then each chunk by ``writeUTF``."""
        units = _utf16_units(text)
        count = (len(units) - 1) // _CHUNK + 1 if units else 1  # Java's division: one empty chunk
        self.int32(count)
        for i in range(count):
            self.utf(units[i * _CHUNK : (i + 1) * _CHUNK], what)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def write_schema_v2(key_schema: StructType, value_schema: StructType) -> bytes:
    """The bytes of a schema v2 file (``state/<op>/0/[<store>/]_metadata/schema``) as Spark 3.3+ writes them.

    ``writeUTF("v2")``, then the key and the value schema as chunked ``StructType.json``.
    """
    out = _JavaWriter()
    out.utf("v2", "version")
    out.chunked(key_schema.json(), "key schema")
    out.chunked(value_schema.json(), "value schema")
    return out.bytes()


def write_schema_v3(families: list[ColumnFamilySchema], *, with_ids: bool = True) -> bytes:
    """The bytes of a schema v3 file (``state/<op>/_stateSchema/<store>/<batch>_<uuid>``) listing ``families``.

    Families are written in the order given (Spark sorts them by name). ``with_ids``: the int16 key and
    value schema ids of released writers (4.0+); without them, the layout of pre-release 4.0 code. A family
    without a user key schema gets Spark's ``"{    }"`` placeholder.
    """
    out = _JavaWriter()
    out.utf("v3", "version")
    out.int32(len(families))
    for family in families:
        out.utf(family.name, "column family name")
        if with_ids:
            out.int16(family.key_schema_id)
        out.chunked(family.key_schema.json(), f"key schema of {family.name}")
        if with_ids:
            out.int16(family.value_schema_id)
        out.chunked(family.value_schema.json(), f"value schema of {family.name}")
        out.chunked(spark_json(family.key_encoder), f"key encoder spec of {family.name}")
        user_key = family.user_key_schema.json() if family.user_key_schema is not None else _EMPTY_USER_KEY
        out.chunked(user_key, f"user key schema of {family.name}")
    return out.bytes()


def nullable_schema_file(data: bytes, path: str) -> bytes:
    """Schema file ``data`` (any version) with every schema in it made nullable throughout
    (:func:`~state_reader.formats.spark_types.as_nullable`), as Spark 4.3 writes it for a query whose
    stateful operators always have nullable output: v1 and v2 files as v2, v3 files in their own layout,
    with the user key schema and any schema in the key encoder spec widened too."""
    if _JavaReader(data, path).utf("version") != "v3":
        key, value = read_schema_v1v2(data, path)
        return write_schema_v2(as_nullable(key), as_nullable(value))
    families, with_ids = _read_v3_layout(data, path)
    widened = [
        replace(
            family,
            key_schema=as_nullable(family.key_schema),
            value_schema=as_nullable(family.value_schema),
            user_key_schema=None if family.user_key_schema is None else as_nullable(family.user_key_schema),
            key_encoder=_nullable_spec(family.key_encoder),
        )
        for family in families
    ]
    return write_schema_v3(widened, with_ids=with_ids)


def _nullable_spec(spec: Any) -> Any:
    """A key encoder spec (JSON) with each struct schema inside it made nullable."""
    if isinstance(spec, dict):
        if spec.get("type") == "struct" and isinstance(spec.get("fields"), list):
            return as_nullable(from_json_value(spec)).to_json()
        return {k: _nullable_spec(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_nullable_spec(v) for v in spec]
    return spec
