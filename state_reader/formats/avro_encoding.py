"""Avro-encoded state (``spark.sql.streaming.stateStore.encodingFormat=avro``, Spark 4.0+).

Where the default encoding stores an UnsafeRow, Avro state stores Avro binary
data without a container: a single record per key or value, written with the
schema Spark's state store derives from the state schema (spark-avro's
"with defaults" conversion). Its rules, per Spark type (``docs/avro-state.md``):

* the key or value schema itself is a record, not a union;
* every record field is a union ``[null, T]``, whatever nullability the Spark
  field declares (nested records, arrays and maps are that union already);
* a nested record, array or map is ``[null, T]`` wherever it appears, so also
  as an array element or a map value;
* an atomic array element or map value is plain ``T``: no union, whatever
  ``containsNull`` says (Spark refuses to write a null there);
* atomic types: boolean; int (integer, date; byte and short would be too, but
  Spark refuses them in Avro state); long (long, timestamp, timestamp_ntz);
  float; double; string; bytes (binary); fixed (decimal: big-endian two's
  complement in the fewest bytes that hold its precision); null (void); maps
  have string keys. Intervals have no Avro form there: Spark refuses them.

Values and no-prefix keys carry a 2-byte schema id after the encoding version
byte (the schema generation; only the first is read here); prefix-scan keys
carry it on the remainder, not on the prefix. Records are decoded (and, for a
rewrite, encoded) a batch at a time by :mod:`~state_reader.formats.avro_columns`
where their schema has no array or map (:func:`decode_avro_rows`,
:func:`encode_avro_rows`), and one at a time with fastavro otherwise.
"""

from __future__ import annotations

import datetime
import decimal
import io
import itertools
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.errors import CodecUnavailableError, RowDecodeError, RowEncodeError, UnsupportedTypeError
from state_reader.formats.avro_columns import decimal_bytes, decode_records, encode_records
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType
from state_reader.formats.unsaferow import RowBuffer

SCHEMA_ID_BYTES = 2
# enough digits for any Spark decimal (precision <= 38): the default context rounds to 28
_EXACT = decimal.Context(prec=40)

_PRIMITIVES = {
    "boolean": "boolean",
    "byte": "int",
    "short": "int",
    "integer": "int",
    "date": "int",
    "long": "long",
    "timestamp": "long",
    "timestamp_ntz": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "bytes",
    "void": "null",
}


def avro_schema(schema: StructType) -> dict[str, Any]:
    """The Avro record schema Spark's state store writes ``schema`` with (logical types left out: raw values)."""
    names = itertools.count()

    def convert(dt: DataType, nested: bool) -> Any:
        if isinstance(dt, StructType):
            fields = []
            for i, f in enumerate(dt.fields):
                inner = convert(f.data_type, True)
                # a field already a union (record, array, map) or of the null type is not wrapped again
                fields.append(
                    {"name": f"f{i}", "type": inner if isinstance(inner, list) or inner == "null" else ["null", inner]}
                )
            record = {"type": "record", "name": f"r{next(names)}", "fields": fields}
            return ["null", record] if nested else record
        if isinstance(dt, ArrayType):
            return ["null", {"type": "array", "items": convert(dt.element, True)}]
        if isinstance(dt, MapType):
            if dt.key.kind != "string":
                raise UnsupportedTypeError(f"Avro state cannot hold a map with {dt.key.json_name} keys")
            return ["null", {"type": "map", "values": convert(dt.value, True)}]
        if dt.kind == "decimal":
            return {"type": "fixed", "name": f"d{next(names)}", "size": decimal_bytes(dt.precision)}
        if dt.kind in _PRIMITIVES:
            return _PRIMITIVES[dt.kind]
        raise UnsupportedTypeError(f"Avro state cannot hold {dt.json_name} fields (Spark does not write them)")

    return convert(schema, False)


# types the Avro conversion has a form for but Spark refuses in Avro state
_REFUSED_BY_SPARK = ("byte", "short")


def require_avro_state(schema: StructType, source: str) -> None:
    """Refuse (:class:`UnsupportedTypeError`) a schema Spark cannot keep as Avro state: a type with no Avro form
    there (intervals, non-string map keys) or one Spark refuses (tinyint, smallint)."""

    def refused(dt: DataType) -> str | None:
        if isinstance(dt, StructType):
            return next((r for f in dt.fields if (r := refused(f.data_type))), None)
        if isinstance(dt, ArrayType):
            return refused(dt.element)
        if isinstance(dt, MapType):
            return refused(dt.key) or refused(dt.value)
        return dt.json_name if dt.kind in _REFUSED_BY_SPARK else None

    try:
        avro_schema(schema)
    except UnsupportedTypeError as exc:
        raise UnsupportedTypeError(f"{source}: {exc.message}", path=source) from exc
    name = refused(schema)
    if name is not None:
        raise UnsupportedTypeError(f"{source}: Spark refuses {name} fields in Avro state", path=source)


def _to_arrow_value(dt: DataType, value: Any) -> Any:
    """fastavro's raw value -> what pyarrow accepts for the Spark type's Arrow type."""
    if value is None:
        return None
    if isinstance(dt, StructType):
        return {f.name: _to_arrow_value(f.data_type, value[f"f{i}"]) for i, f in enumerate(dt.fields)}
    if isinstance(dt, ArrayType):
        return [_to_arrow_value(dt.element, v) for v in value]
    if isinstance(dt, MapType):
        return [(k, _to_arrow_value(dt.value, v)) for k, v in value.items()]
    if dt.kind == "decimal":
        return decimal.Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-dt.scale, _EXACT)
    return value


def _has_repeated_names(dt: DataType) -> bool:
    if isinstance(dt, StructType):
        names = dt.names
        return len(set(names)) != len(names) or any(_has_repeated_names(f.data_type) for f in dt.fields)
    if isinstance(dt, ArrayType):
        return _has_repeated_names(dt.element)
    if isinstance(dt, MapType):
        return _has_repeated_names(dt.key) or _has_repeated_names(dt.value)
    return False


def _fastavro(schema: StructType, source: str, missing: str, done: str) -> ModuleType:
    """The ``fastavro`` module, for Avro state of ``schema`` (``missing``: the error without it), once
    it is known that ``schema`` can be ``done`` (decoded, encoded) at all: Avro records name fields."""
    try:
        import fastavro
    except ImportError as exc:
        raise CodecUnavailableError(missing, path=source) from exc
    if _has_repeated_names(schema):
        raise UnsupportedTypeError(f"{source}: Avro state with repeated field names cannot be {done}", path=source)
    return fastavro


def decode_avro(payloads: Sequence[bytes | None], schema: StructType, source: str) -> pa.StructArray:
    """Decode Avro records (None = a null row) into a StructArray of ``schema``, one at a time."""
    fastavro = _fastavro(
        schema, source, f"{source} holds Avro-encoded state; install the 'fastavro' package to read it", "decoded"
    )
    parsed = fastavro.parse_schema(_derived(schema, source))
    rows: list[Any] = []
    for i, payload in enumerate(payloads):
        if payload is None:
            rows.append(None)
            continue
        stream = io.BytesIO(payload)
        try:
            record = fastavro.schemaless_reader(stream, parsed, None)
        except Exception as exc:
            raise RowDecodeError(
                f"{source}: row {i} is not an Avro record of its schema: {exc!r}", path=source
            ) from exc
        if stream.tell() != len(payload):
            raise RowDecodeError(
                f"{source}: row {i} has {len(payload) - stream.tell()} bytes after its Avro record", path=source
            )
        rows.append(_to_arrow_value(schema, record))
    return pa.array(rows, type=schema.to_arrow())


def _derived(schema: StructType, source: str) -> dict[str, Any]:
    try:
        return avro_schema(schema)
    except UnsupportedTypeError as exc:
        raise UnsupportedTypeError(f"{source}: {exc.message}", path=source) from exc


def decode_avro_rows(
    rows: RowBuffer, schema: StructType, source: str, skip: int = 0, valid: np.ndarray | None = None
) -> pa.StructArray:
    """Decode the Avro records that follow the first ``skip`` bytes of each row (a row not ``valid`` is a null
    row) into a StructArray of ``schema``: a batch at a time where the schema allows, else one at a time."""
    _derived(schema, source)
    if _has_repeated_names(schema):
        raise UnsupportedTypeError(f"{source}: Avro state with repeated field names cannot be decoded", path=source)
    records = RowBuffer.wrap(rows.buf, rows.size, rows.starts + skip, rows.lengths - skip, rows.source)
    decoded = decode_records(records, schema, valid)
    if decoded is not None:
        return decoded
    checked = np.ones(len(rows.starts), dtype=bool) if valid is None else valid
    raw = rows.buf
    payloads = [
        raw[start : start + length].tobytes() if ok else None
        for start, length, ok in zip(records.starts.tolist(), records.lengths.tolist(), checked.tolist(), strict=True)
    ]
    return decode_avro(payloads, schema, source)


_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH_NTZ = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICRO = datetime.timedelta(microseconds=1)


def _to_avro_value(dt: DataType, value: Any) -> Any:
    """A Python value of the Spark type's Arrow type -> what fastavro writes for its Avro type."""
    if value is None:
        return None
    if isinstance(dt, StructType):
        return {f"f{i}": _to_avro_value(f.data_type, value[f.name]) for i, f in enumerate(dt.fields)}
    if isinstance(dt, ArrayType):
        return [_to_avro_value(dt.element, v) for v in value]
    if isinstance(dt, MapType):
        return {k: _to_avro_value(dt.value, v) for k, v in value}
    if dt.kind == "decimal":
        unscaled = int(value.scaleb(dt.scale, _EXACT))
        return unscaled.to_bytes(decimal_bytes(dt.precision), "big", signed=True)
    if dt.kind == "date":
        return (value - _EPOCH_DAY).days
    if dt.kind in ("timestamp", "timestamp_ntz"):
        return (value - (_EPOCH_NTZ if value.tzinfo is None else _EPOCH_UTC)) // _MICRO
    return value


def encode_avro(values: pa.StructArray, schema: StructType, source: str = "") -> list[bytes]:
    """Each row of ``values`` (not null) as the Avro record of ``schema`` Spark's state store writes:
    the inverse of :func:`decode_avro`, byte for byte."""
    fastavro = _fastavro(
        schema, source, f"{source}: writing Avro-encoded state needs the 'fastavro' package", "encoded"
    )
    parsed = fastavro.parse_schema(avro_schema(schema))
    out = []
    for i, row in enumerate(values.to_pylist()):
        if row is None:
            raise RowEncodeError(f"{source}: row {i} is null; an Avro state record cannot be", path=source)
        stream = io.BytesIO()
        try:
            fastavro.schemaless_writer(stream, parsed, _to_avro_value(schema, row))
        except (ValueError, TypeError, OverflowError) as exc:
            raise RowEncodeError(
                f"{source}: row {i} cannot be written as an Avro record of its schema: {exc!r}", path=source
            ) from exc
        out.append(stream.getvalue())
    return out


def encode_avro_rows(values: pa.StructArray, schema: StructType, head: bytes, source: str = "") -> RowBuffer:
    """Each row of ``values`` (not null) as ``head`` then the Avro record :func:`encode_avro` writes for it: a
    batch at a time where the schema allows, else one at a time."""
    avro_schema(schema)  # what encode_avro refuses, refused alike
    if _has_repeated_names(schema):
        raise UnsupportedTypeError(f"{source}: Avro state with repeated field names cannot be encoded", path=source)
    encoded = encode_records(values, schema, head, source)
    if encoded is not None:
        return encoded
    return RowBuffer.from_rows([head + record for record in encode_avro(values, schema, source)], source)
