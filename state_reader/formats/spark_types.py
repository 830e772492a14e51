"""Spark SQL data types as written in schema JSON, and their Arrow equivalents.

State schemas are stored as Spark's ``StructType.json`` text. They are parsed
into the small type model below (no pyspark needed) which knows, for each type,
how it is stored in an UnsafeRow and which Arrow type represents it. The Arrow
mapping is the one PySpark uses (``to_arrow_schema`` with time zone UTC), so a
table built here has exactly the schema Spark's Arrow path expects.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pyarrow as pa

from state_reader.errors import SchemaReadError

# PySpark carries Spark field metadata on Arrow fields under this key.
ARROW_METADATA_KEY = b"SPARK::metadata::json"

# kind -> (UnsafeRow slot width in an array, Arrow type); None width = variable length
_ATOMIC: dict[str, tuple[int | None, pa.DataType]] = {
    "boolean": (1, pa.bool_()),
    "byte": (1, pa.int8()),
    "short": (2, pa.int16()),
    "integer": (4, pa.int32()),
    "long": (8, pa.int64()),
    "float": (4, pa.float32()),
    "double": (8, pa.float64()),
    "date": (4, pa.date32()),
    "timestamp": (8, pa.timestamp("us", tz="UTC")),
    "timestamp_ntz": (8, pa.timestamp("us")),
    "string": (None, pa.string()),
    "binary": (None, pa.binary()),
    "void": (8, pa.null()),
    # No Arrow/PySpark mapping exists for these two; an interval is the faithful choice.
    "interval": (None, pa.month_day_nano_interval()),
    "year_month_interval": (4, pa.month_day_nano_interval()),
    "day_time_interval": (8, pa.duration("us")),
    "time": (8, pa.time64("ns")),
    "variant": (
        None,
        pa.struct(
            [
                pa.field("value", pa.binary(), nullable=False),
                pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
            ]
        ),
    ),
}

_YM_UNITS = ("year", "month")
_DT_UNITS = ("day", "hour", "minute", "second")


@dataclass(frozen=True)
class DataType:
    """A Spark SQL type. ``kind`` is one of the atomic kinds, 'decimal', 'struct', 'array', 'map'."""

    kind: str
    precision: int = 0
    scale: int = 0
    json_name: str = ""

    @property
    def fixed_width(self) -> int | None:
        """Bytes per element inside an UnsafeArrayData; None for variable-length types."""
        if self.kind == "decimal":
            return 8 if self.precision <= 18 else None
        return _ATOMIC[self.kind][0]

    def to_arrow(self) -> pa.DataType:
        if self.kind == "decimal":
            return pa.decimal128(self.precision, self.scale)
        return _ATOMIC[self.kind][1]

    def to_json(self) -> Any:
        return self.json_name

    def kinds(self) -> list[str]:
        """Kinds of this type and of every type nested in it."""
        return [self.kind]


def _set_fields(obj: DataType, kind: str, json_name: str, precision: int = 0, scale: int = 0, **fields: Any) -> None:
    """Fill a frozen nested type's fields from its own ``__init__``: the base fields, then its own."""
    for name, value in (("kind", kind), ("precision", precision), ("scale", scale), ("json_name", json_name)):
        object.__setattr__(obj, name, value)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class StructField:
    name: str
    data_type: DataType
    nullable: bool = True
    metadata: dict = field(default_factory=dict, compare=False, hash=False)

    def to_arrow(self) -> pa.Field:
        md = {ARROW_METADATA_KEY: json.dumps(self.metadata, sort_keys=True).encode("utf-8")} if self.metadata else None
        return pa.field(self.name, self.data_type.to_arrow(), nullable=self.nullable, metadata=md)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "type": self.data_type.to_json(),
            "nullable": self.nullable,
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class StructType(DataType):
    fields: tuple[StructField, ...] = ()

    def __init__(self, fields: list[StructField] | tuple[StructField, ...]) -> None:
        _set_fields(self, "struct", "struct", fields=tuple(fields))

    @property
    def fixed_width(self) -> int | None:
        return None

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def kinds(self) -> list[str]:
        return ["struct", *(k for f in self.fields for k in f.data_type.kinds())]

    def to_arrow(self) -> pa.DataType:
        return pa.struct([f.to_arrow() for f in self.fields])

    def to_arrow_schema(self) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.fields])

    def to_json(self) -> dict:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}

    def json(self) -> str:
        """Compact JSON text, character for character as Spark's ``StructType.json``."""
        return spark_json(self.to_json())


@dataclass(frozen=True)
class ArrayType(DataType):
    element: DataType = None  # type: ignore[assignment]
    contains_null: bool = True

    def __init__(self, element: DataType, contains_null: bool = True) -> None:
        _set_fields(self, "array", "array", element=element, contains_null=contains_null)

    @property
    def fixed_width(self) -> int | None:
        return None

    def to_arrow(self) -> pa.DataType:
        return pa.list_(pa.field("element", self.element.to_arrow(), nullable=self.contains_null))

    def kinds(self) -> list[str]:
        return ["array", *self.element.kinds()]

    def to_json(self) -> dict:
        return {"type": "array", "elementType": self.element.to_json(), "containsNull": self.contains_null}


@dataclass(frozen=True)
class MapType(DataType):
    key: DataType = None  # type: ignore[assignment]
    value: DataType = None  # type: ignore[assignment]
    value_contains_null: bool = True

    def __init__(self, key: DataType, value: DataType, value_contains_null: bool = True) -> None:
        _set_fields(self, "map", "map", key=key, value=value, value_contains_null=value_contains_null)

    @property
    def fixed_width(self) -> int | None:
        return None

    def to_arrow(self) -> pa.DataType:
        return pa.map_(
            pa.field("key", self.key.to_arrow(), nullable=False),
            pa.field("value", self.value.to_arrow(), nullable=self.value_contains_null),
        )

    def kinds(self) -> list[str]:
        return ["map", *self.key.kinds(), *self.value.kinds()]

    def to_json(self) -> dict:
        return {
            "type": "map",
            "keyType": self.key.to_json(),
            "valueType": self.value.to_json(),
            "valueContainsNull": self.value_contains_null,
        }


@dataclass(frozen=True)
class UserDefinedType(DataType):
    """A UDT is stored as its ``sqlType``; the JSON is kept to hand back to Spark."""

    sql_type: DataType = None  # type: ignore[assignment]
    raw: str = ""
    # the JSON in the order it was written (``raw`` is sorted, for comparing types)
    ordered: str = field(default="", compare=False, hash=False)

    def __init__(self, sql_type: DataType, raw: dict) -> None:
        _set_fields(
            self,
            sql_type.kind,
            "udt",
            sql_type.precision,
            sql_type.scale,
            sql_type=sql_type,
            raw=json.dumps(raw, sort_keys=True),
            ordered=json.dumps(raw),
        )

    @property
    def fixed_width(self) -> int | None:
        return self.sql_type.fixed_width

    def to_arrow(self) -> pa.DataType:
        return self.sql_type.to_arrow()

    def to_json(self) -> Any:
        return json.loads(self.ordered or self.raw)


_Type = TypeVar("_Type", bound=DataType)


def as_nullable(data_type: _Type) -> _Type:
    """``data_type`` with every struct field, array element and map value nullable, at every depth (Spark's
    ``asNullable``); a user-defined type stays as it is, as in Spark. Field metadata is kept."""
    if isinstance(data_type, StructType):
        fields = [replace(f, data_type=as_nullable(f.data_type), nullable=True) for f in data_type.fields]
        return StructType(fields)  # type: ignore[return-value]
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable(data_type.element), True)  # type: ignore[return-value]
    if isinstance(data_type, MapType):
        return MapType(as_nullable(data_type.key), as_nullable(data_type.value), True)  # type: ignore[return-value]
    return data_type


# Jackson's short escapes; every other control character becomes \\u00XX (upper-case hex)
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_JSON_ESCAPE_RE = re.compile(r'["\\\x00-\x1f]')


def _java_double(value: float) -> str:
    """Java's ``Double.toString``: plain from 1e-3 up to 1e7, else ``d.dddE<exp>``; always a fraction digit.

    The digits are the shortest that read back as the same double (Python's ``repr``,
    and Java's since JDK 19; older JDKs sometimes print a digit more)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    parts = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    exponent = len(digits) + int(parts.exponent) - 1  # of the first digit
    if 1e-3 <= abs(value) < 1e7:
        if exponent < 0:
            return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
        whole = digits[: exponent + 1].ljust(exponent + 1, "0")
        return f"{sign}{whole}.{digits[exponent + 1 :] or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def spark_json(value: Any) -> str:
    """``value`` as compact JSON text, as Spark writes it (json4s rendered by Jackson).

    Keys keep their order, non-ASCII characters are written as they are, control
    characters get Jackson's escapes, and floats Java's ``Double.toString`` form.
    """
    if isinstance(value, str):
        return (
            '"' + _JSON_ESCAPE_RE.sub(lambda m: _JSON_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04X}"), value) + '"'
        )
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{spark_json(str(k))}:{spark_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(spark_json(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
_INTERVAL_RE = re.compile(r"^interval (\w+)(?: to (\w+))?$")
_CHAR_RE = re.compile(r"^(?:var)?char\(\d+\)$")
_TIME_RE = re.compile(r"^time\(\d+\)$")


def _atomic(name: str) -> DataType:
    lowered = name.strip().lower()
    if lowered in _ATOMIC and lowered not in ("year_month_interval", "day_time_interval", "time"):
        return DataType(lowered, json_name=name)
    if lowered == "decimal":
        return DataType("decimal", precision=10, scale=0, json_name=name)
    m = _DECIMAL_RE.match(lowered)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:  # Spark's DecimalType bounds
            raise ValueError(f"invalid decimal type {name!r}: precision must be 1..38 and scale at most precision")
        return DataType("decimal", precision=precision, scale=scale, json_name=name)
    m = _INTERVAL_RE.match(lowered)
    if m:
        units = {m.group(1), m.group(2) or m.group(1)}
        if units <= set(_YM_UNITS):
            return DataType("year_month_interval", json_name=name)
        if units <= set(_DT_UNITS):
            return DataType("day_time_interval", json_name=name)
    if _CHAR_RE.match(lowered) or lowered.startswith("string collate"):
        return DataType("string", json_name=name)
    if _TIME_RE.match(lowered):
        return DataType("time", json_name=name)
    raise ValueError(f"unknown Spark data type {name!r}")


def from_json_value(obj: Any) -> DataType:
    """Parse one type from its decoded Spark JSON form."""
    if isinstance(obj, str):
        return _atomic(obj)
    if not isinstance(obj, dict) or "type" not in obj:
        raise ValueError(f"not a Spark data type: {obj!r}")
    kind = obj["type"]
    if kind == "struct":
        return StructType(
            [
                StructField(
                    f["name"], from_json_value(f["type"]), bool(f.get("nullable", True)), dict(f.get("metadata") or {})
                )
                for f in obj.get("fields", [])
            ]
        )
    if kind == "array":
        return ArrayType(from_json_value(obj["elementType"]), bool(obj.get("containsNull", True)))
    if kind == "map":
        return MapType(
            from_json_value(obj["keyType"]), from_json_value(obj["valueType"]), bool(obj.get("valueContainsNull", True))
        )
    if kind == "udt":
        return UserDefinedType(from_json_value(obj["sqlType"]), obj)
    raise ValueError(f"unknown Spark data type {kind!r}")


def parse_struct(text: str, source: str) -> StructType:
    """Parse a ``StructType.json`` string; ``source`` names its file for errors."""
    try:
        parsed = from_json_value(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        raise SchemaReadError(f"{source}: cannot parse schema JSON: {exc!r}", path=source) from exc
    if not isinstance(parsed, StructType):
        raise SchemaReadError(f"{source}: schema is not a struct", path=source)
    return parsed


LONG = DataType("long", json_name="long")
INTEGER = DataType("integer", json_name="integer")
STRING = DataType("string", json_name="string")


# Arrow types -> the Spark type whose Arrow form they are (the inverse of ``to_arrow``, widened:
# any timestamp unit, large strings and binaries)
_FROM_ARROW_NAMES = {
    "boolean": "boolean",
    "byte": "byte",
    "short": "short",
    "integer": "integer",
    "long": "long",
    "float": "float",
    "double": "double",
    "date": "date",
    "string": "string",
    "binary": "binary",
    "void": "void",
    "day_time_interval": "interval day to second",
    "time": "time(6)",
}


def from_arrow(arrow_type: pa.DataType, path: str = "") -> DataType:
    """The Spark type an Arrow type stands for (timestamps with a time zone are ``timestamp``,
    without one ``timestamp_ntz``); a :class:`~state_reader.errors.SchemaReadError` for types
    Spark has no counterpart of."""
    t = arrow_type
    if pa.types.is_struct(t):
        return StructType(
            [
                StructField(
                    t.field(i).name, from_arrow(t.field(i).type, f"{path}.{t.field(i).name}"), t.field(i).nullable
                )
                for i in range(t.num_fields)
            ]
        )
    if pa.types.is_map(t):
        return MapType(
            from_arrow(t.key_type, path + ".key"), from_arrow(t.item_type, path + ".value"), t.item_field.nullable
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ArrayType(from_arrow(t.value_type, path + ".element"), t.value_field.nullable)
    if pa.types.is_decimal(t):
        return _atomic(f"decimal({t.precision},{t.scale})")
    if pa.types.is_timestamp(t):
        return _atomic("timestamp" if t.tz is not None else "timestamp_ntz")
    if pa.types.is_large_string(t):
        return _atomic("string")
    if pa.types.is_large_binary(t):
        return _atomic("binary")
    for kind, (_, atomic) in _ATOMIC.items():
        if t == atomic and kind in _FROM_ARROW_NAMES:
            return _atomic(_FROM_ARROW_NAMES[kind])
    where = f" (field {path.lstrip('.')})" if path else ""
    raise SchemaReadError(f"no Spark type stands for the Arrow type {t}{where}", path=path.lstrip(".") or None)


# --- DDL: "user STRING, window STRUCT<start: TIMESTAMP, end: TIMESTAMP>" ------------------------

# DDL type names -> the JSON names schema files write (Spark's SQL parser's aliases)
_DDL_NAMES = {
    "boolean": "boolean",
    "tinyint": "byte",
    "byte": "byte",
    "smallint": "short",
    "short": "short",
    "int": "integer",
    "integer": "integer",
    "bigint": "long",
    "long": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "string": "string",
    "binary": "binary",
    "void": "void",
    "variant": "variant",
}
_DDL_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|('(?:[^'\\]|\\.)*')|([,:<>()])|([^\s,:<>()`']+))")


class _DdlParser:
    """Recursive descent over the tokens of a DDL schema; errors say where, in the text's own words."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, int, str]] = []  # (kind, position, text)
        pos = 0
        while pos < len(text):
            m = _DDL_TOKEN.match(text, pos)
            if m is None:
                if text[pos:].strip() == "":
                    break
                at = len(text) - len(text[pos:].lstrip())
                raise self.error(at, f"unexpected {text[at]!r} (a quote or back quote that is not closed?)")
            quoted, literal, punct, word = m.groups()
            start = m.end() - len(quoted or literal or punct or word)
            if quoted is not None:
                self.tokens.append(("name", start, quoted[1:-1].replace("``", "`")))
            elif literal is not None:
                self.tokens.append(("literal", start, re.sub(r"\\(.)", r"\1", literal[1:-1])))
            elif punct is not None:
                self.tokens.append(("punct", start, punct))
            else:
                self.tokens.append(("word", start, word))
            pos = m.end()
        self.at = 0

    def error(self, pos: int, what: str) -> ValueError:
        return ValueError(f"{what} at character {pos + 1} of {self.text!r}")

    def peek(self, ahead: int = 0) -> tuple[str, int, str] | None:
        i = self.at + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def next(self, expected: str) -> tuple[str, int, str]:
        token = self.peek()
        if token is None:
            raise self.error(len(self.text), f"{expected} expected, the text ends")
        self.at += 1
        return token

    def punct(self, char: str) -> bool:
        """Take ``char`` when it comes next."""
        token = self.peek()
        if token is not None and token[0] == "punct" and token[2] == char:
            self.at += 1
            return True
        return False

    def expect(self, char: str) -> None:
        if not self.punct(char):
            token = self.peek()
            where = token[1] if token is not None else len(self.text)
            found = f"found {token[2]!r}" if token is not None else "the text ends"
            raise self.error(where, f"'{char}' expected, {found}")

    def keyword(self, *words: str) -> bool:
        """Take the words (case-insensitive) when they come next."""
        for i, word in enumerate(words):
            token = self.peek(i)
            if token is None or token[0] != "word" or token[2].lower() != word:
                return False
        self.at += len(words)
        return True

    def integer(self) -> int:
        kind, pos, text = self.next("a number")
        if kind != "word" or not text.isdigit():
            raise self.error(pos, f"a number expected, found {text!r}")
        return int(text)

    def fields(self, end: str | None) -> StructType:
        """Fields up to ``end`` (a closing '>'), or to the end of the text."""
        out: list[StructField] = []
        token = self.peek()
        empty = end is not None and token is not None and token[0] == "punct" and token[2] == end
        while not empty:  # STRUCT<> has no fields; a schema and a field list after a comma have one more
            out.append(self.field())
            if not self.punct(","):
                break
        if end is not None:
            self.expect(end)
        return StructType(out)

    def field(self) -> StructField:
        kind, pos, name = self.next("a field name")
        if kind not in ("word", "name"):
            raise self.error(pos, f"a field name expected, found {name!r}")
        self.punct(":")
        data_type = self.data_type()
        nullable, metadata = True, {}
        while True:
            if self.keyword("not", "null"):
                nullable = False
            elif self.keyword("comment"):
                kind, pos, text = self.next("a comment")
                if kind != "literal":
                    raise self.error(pos, f"a quoted comment expected, found {text!r}")
                metadata["comment"] = text
            else:
                return StructField(name, data_type, nullable, metadata)

    def data_type(self) -> DataType:
        kind, pos, word = self.next("a type")
        if kind != "word":
            raise self.error(pos, f"a type expected, found {word!r}")
        name = word.lower()
        if name == "struct":
            self.expect("<")
            return self.fields(">")
        if name == "array":
            self.expect("<")
            element = self.data_type()
            self.expect(">")
            return ArrayType(element)
        if name == "map":
            self.expect("<")
            key = self.data_type()
            self.expect(",")
            value = self.data_type()
            self.expect(">")
            return MapType(key, value)
        if name in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.punct("("):
                precision = self.integer()
                if self.punct(","):
                    scale = self.integer()
                self.expect(")")
            return self.atomic(f"decimal({precision},{scale})", pos)
        if name in ("char", "varchar"):  # kept as strings, as Spark keeps them in state
            self.expect("(")
            self.integer()
            self.expect(")")
            return _atomic("string")
        if name == "time":
            precision = 6
            if self.punct("("):
                precision = self.integer()
                self.expect(")")
            return self.atomic(f"time({precision})", pos)
        if name == "interval":  # alone: a calendar interval; with units: a year-month or day-time one
            first = self.unit()
            if first is None:
                return self.atomic("interval", pos)
            if not self.keyword("to"):
                return self.atomic(f"interval {first}", pos)
            last = self.unit()
            if last is None:
                token = self.peek()
                raise self.error(token[1] if token is not None else len(self.text), "an interval unit expected")
            return self.atomic(f"interval {first} to {last}", pos)
        if name == "string" and self.keyword("collate"):
            self.next("a collation")  # the bytes are UTF-8 whatever the collation
        if name not in _DDL_NAMES:
            raise self.error(pos, f"unknown type {word!r}")
        return _atomic(_DDL_NAMES[name])

    def unit(self) -> str | None:
        """Take the interval unit that comes next, if one does."""
        token = self.peek()
        if token is None or token[0] != "word" or token[2].lower() not in (*_YM_UNITS, *_DT_UNITS):
            return None
        self.at += 1
        return token[2].lower()

    def atomic(self, json_name: str, pos: int) -> DataType:
        try:
            return _atomic(json_name)
        except ValueError as exc:
            raise self.error(pos, str(exc)) from None


def parse_ddl(text: str) -> StructType:
    """A schema written as DDL, as Spark's ``StructType.toDDL`` writes it
    (``user STRING, window STRUCT<start: TIMESTAMP, end: TIMESTAMP>``), or as one struct type
    (``struct<user:string,n:bigint>``, its ``simpleString``). Type names are Spark SQL's, in any
    case; `back quotes` for names of other characters; ``NOT NULL`` and ``COMMENT '...'`` after a
    field's type. Raises ``ValueError`` saying where the text is wrong."""
    parser = _DdlParser(text)
    first, second = parser.peek(), parser.peek(1)
    whole_struct = (
        first is not None
        and first[0] == "word"
        and first[2].lower() == "struct"
        and second is not None
        and second[0] == "punct"
        and second[2] == "<"
    )
    schema = parser.data_type() if whole_struct else parser.fields(None)
    rest = parser.peek()
    if rest is not None:
        raise parser.error(rest[1], f"unexpected {rest[2]!r}")
    assert isinstance(schema, StructType)
    return schema
